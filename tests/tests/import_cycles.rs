//! No two files of a Rust crate of the repository import each other, directly
//! or through other files (issue 30: "no import cycle between files").
//!
//! Every package of the repository (each directory with a `Cargo.toml`
//! holding a `[package]`, whichever workspace it is in) is split into its
//! crates (library, binaries, build script, integration tests, benches,
//! examples: Cargo's conventions and the paths its `Cargo.toml` names), and
//! each crate into its module files by following the `mod` declarations
//! (`#[path]` and `#[cfg_attr(.., path)]` included) from the crate root.
//!
//! A file depends on another when its code needs what the other defines:
//! its `use crate::..` / `use super::..` / `use self::..` / `use child::..`
//! items and the same paths in expressions, types and macro arguments,
//! including a path through a name a `use` binds (`use crate::a;` then
//! `a::f()`). A path is charged to the file of the deepest module it names
//! (`crate::a::b::C` to `a::b`'s, or `a`'s when `b` is an item), except where
//! it goes through a re-export (`pub use`, any visibility): a re-export is a
//! pass-through, so `crate::Model` is charged to the file that defines
//! `Model`, and a `pub use` is no dependency of the file that has it (a
//! `mixers/mod.rs` re-exporting its children while they use its helpers is
//! not a cycle). Declaring a module (`mod child;`) is not a dependency;
//! comments, doc comments and string literals are not code (the files are
//! read with `proc-macro2`'s lexer, not searched as text). Not seen: a
//! re-exported name used bare in its own file (`pub use b::X;` then `X`), and
//! a child module named from an inline module of its parent's file.
//!
//! The test fails on every group of files that depend on each other in a
//! cycle (there is no list of exceptions), naming one cycle of the group with
//! the path each step uses, and on a `.rs` file that no crate root reaches
//! (so a file the scan misses cannot hide a cycle).
//! `tests/tests/module_order.rs` checks the stricter layer order of
//! the runtime's modules (between modules, not between the files of one).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Where the source files come from: the repository, or a synthetic set.
trait Sources {
    /// The text of `path` (repository-relative, `/`-separated), if it exists.
    fn read(&self, path: &str) -> Option<String>;
}

struct Disk(PathBuf);

impl Sources for Disk {
    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.0.join(path)).ok()
    }
}

impl Sources for BTreeMap<String, String> {
    fn read(&self, path: &str) -> Option<String> {
        self.get(path).cloned()
    }
}

// ---------------------------------------------------------------------------
// Packages and their crate roots.

/// Every directory under `dir` (symbolic links and `target`/hidden
/// directories skipped) and every `.rs` file, repository-relative.
fn walk(root: &Path, dir: &Path, dirs: &mut Vec<String>, files: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry"))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let kind = entry.file_type().expect("file type");
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let rel = rel(root, &path);
        if kind.is_symlink() {
            continue; // boards/runtime -> ../runtime and the like: scanned where they live
        }
        if kind.is_dir() {
            if name == "target" || name.starts_with('.') {
                continue;
            }
            dirs.push(rel);
            walk(root, &path, dirs, files);
        } else if name.ends_with(".rs") {
            files.push(rel);
        }
    }
}

fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .expect("under the root")
        .to_string_lossy()
        .replace('\\', "/")
}

/// `dir/name`, or `name` for the root directory.
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `a/b/../c` -> `a/c`.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

/// The directory part of a repository-relative path.
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// The crate roots of the package in `dir` (its `Cargo.toml` is `manifest`):
/// the targets its manifest names, plus Cargo's conventional ones.
fn crate_roots(dir: &str, manifest: &toml::Table, files: &BTreeSet<String>) -> Vec<String> {
    let mut roots = BTreeSet::new();
    let mut named = |t: &toml::Value| {
        if let Some(p) = t.get("path").and_then(toml::Value::as_str) {
            roots.insert(join(dir, p.trim_start_matches("./")));
        }
    };
    if let Some(lib) = manifest.get("lib") {
        named(lib);
    }
    for kind in ["bin", "test", "bench", "example"] {
        for target in manifest
            .get(kind)
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
        {
            named(target);
        }
    }
    let build = manifest
        .get("package")
        .and_then(|p| p.get("build"))
        .and_then(toml::Value::as_str)
        .unwrap_or("build.rs");
    for conventional in [build, "src/lib.rs", "src/main.rs"] {
        roots.insert(join(dir, conventional));
    }
    // src/bin/*.rs, src/bin/*/main.rs, tests/*.rs, tests/*/main.rs, ...
    for folder in ["src/bin", "tests", "benches", "examples"] {
        let folder = join(dir, folder);
        for f in files {
            let Some(rest) = f.strip_prefix(&format!("{folder}/")) else {
                continue;
            };
            let parts: Vec<&str> = rest.split('/').collect();
            if parts.len() == 1 || (parts.len() == 2 && parts[1] == "main.rs") {
                roots.insert(f.clone());
            }
        }
    }
    roots.into_iter().filter(|r| files.contains(r)).collect()
}

// ---------------------------------------------------------------------------
// Scanning one file.

/// A path found in a file, before it is resolved against the module tree.
#[derive(Clone, Debug)]
enum Raw {
    /// `crate::a::b` (or `$crate::..`): the segments after `crate`.
    Crate(Vec<String>),
    /// `super::super::a`: how many `super`s, then the rest.
    Super(usize, Vec<String>),
    /// `self::a`: the rest.
    SelfRel(Vec<String>),
    /// `a::b` with no prefix: a module declared beside the code, an extern
    /// crate, an imported name or a type (only the first resolves).
    Bare(Vec<String>),
}

/// A path as written, in the module it is written in.
#[derive(Clone, Debug)]
struct Ref {
    /// The module of the code (inline modules included), from the crate root.
    module: Vec<String>,
    path: Raw,
    /// The path as written, for messages.
    shown: String,
}

/// A `mod name;` declaration (its file is found later).
#[derive(Clone, Debug)]
struct ModDecl {
    /// The inline modules between the file's module and the declaration.
    inline: Vec<String>,
    name: String,
    /// The values of its `#[path = ".."]` attributes (several when each
    /// is a `cfg_attr` of another target: each file is a version of it).
    paths: Vec<String>,
}

/// A name a `use` brings into a module (`use a::b::C;` binds `C`,
/// `use a::b as d;` binds `d`), and what it stands for.
#[derive(Clone, Debug)]
struct Import {
    module: Vec<String>,
    name: String,
    path: Raw,
}

/// What one file declares and names.
#[derive(Default, Debug)]
struct Scan {
    decls: Vec<ModDecl>,
    /// Inline modules (`mod name { .. }`), as paths below the file's module.
    inline: Vec<Vec<String>>,
    /// The paths the file's code depends on: its private `use`s and the
    /// paths in its code (not its `pub use` re-exports).
    refs: Vec<Ref>,
    /// Every name a `use` binds, re-exports included.
    imports: Vec<Import>,
}

fn is_punct(t: Option<&TokenTree>, c: char) -> bool {
    matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

fn ident(t: Option<&TokenTree>) -> Option<String> {
    match t {
        Some(TokenTree::Ident(i)) => Some(i.to_string()),
        _ => None,
    }
}

/// Whether `toks[i..]` starts with `::`.
fn colons(toks: &[TokenTree], i: usize) -> bool {
    matches!(toks.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
        && is_punct(toks.get(i + 1), ':')
}

/// A path's segments as written, classified by its first.
fn classify(segs: Vec<String>) -> Option<Raw> {
    let first = segs.first()?.as_str();
    Some(match first {
        "crate" => Raw::Crate(segs[1..].to_vec()),
        "super" => {
            let n = segs.iter().take_while(|s| *s == "super").count();
            Raw::Super(n, segs[n..].to_vec())
        }
        "self" => Raw::SelfRel(segs[1..].to_vec()),
        "" => return None, // `::std::..`: an extern crate
        _ => Raw::Bare(segs),
    })
}

/// The paths of a `use` tree (`a::{b::C, d as e, self}`, `a::*`), each as
/// its segments (a `self` in a group dropped: it names its prefix) and the
/// name it binds (none for a glob or `as _`).
fn use_paths(toks: &[TokenTree], prefix: &[String], out: &mut Vec<(Vec<String>, Option<String>)>) {
    let mut segs = prefix.to_vec();
    let mut i = 0;
    if colons(toks, 0) {
        segs.push(String::new()); // `use ::name` is an extern crate
        i = 2;
    }
    let mut glob = false;
    let mut alias = None;
    while i < toks.len() {
        match &toks[i] {
            TokenTree::Ident(id) if id == "as" => {
                alias = ident(toks.get(i + 1));
                break;
            }
            TokenTree::Ident(id) => {
                if id != "self" || segs.is_empty() {
                    segs.push(id.to_string());
                }
                if colons(toks, i + 1) {
                    i += 3;
                    continue;
                }
                i += 1;
            }
            TokenTree::Punct(p) if p.as_char() == '*' => {
                glob = true;
                break;
            }
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => {
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                for part in inner.split(|t| is_punct(Some(t), ',')) {
                    if !part.is_empty() {
                        use_paths(part, &segs, out);
                    }
                }
                return;
            }
            _ => break,
        }
    }
    let name = match (glob, alias) {
        (true, _) => None,
        (false, Some(a)) => Some(a).filter(|a| a != "_"),
        (false, None) => segs.last().cloned(),
    };
    out.push((segs, name));
}

/// The value of a `#[path = "x"]` or `#[cfg_attr(cond, path = "x")]` attribute.
fn path_attribute(toks: &[TokenTree]) -> Option<String> {
    match toks {
        [TokenTree::Ident(name), TokenTree::Punct(eq), TokenTree::Literal(lit)]
            if name == "path" && eq.as_char() == '=' =>
        {
            Some(lit.to_string().trim_matches('"').to_string())
        }
        [TokenTree::Ident(name), TokenTree::Group(args)] if name == "cfg_attr" => {
            let args: Vec<TokenTree> = args.stream().into_iter().collect();
            args.split(|t| is_punct(Some(t), ','))
                .skip(1)
                .find_map(path_attribute)
        }
        _ => None,
    }
}

/// Scans `toks`, code of module `module` (`inline`: its inline modules below
/// the file's own), into `out`.
fn scan(toks: &[TokenTree], module: &[String], inline: &[String], out: &mut Scan) {
    let mut paths = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let tok = &toks[i];
        // Attributes (`#[..]`, `#![..]`, doc comments among them) are skipped;
        // a `#[path]` is kept for the `mod` it precedes.
        if is_punct(Some(tok), '#') {
            let at = if is_punct(toks.get(i + 1), '!') {
                i + 2
            } else {
                i + 1
            };
            if let Some(TokenTree::Group(g)) = toks.get(at) {
                if g.delimiter() == Delimiter::Bracket {
                    let attr: Vec<TokenTree> = g.stream().into_iter().collect();
                    paths.extend(path_attribute(&attr));
                    i = at + 1;
                    continue;
                }
            }
        }
        match tok {
            TokenTree::Ident(id) if id == "mod" => {
                if let Some(name) = ident(toks.get(i + 1)) {
                    match toks.get(i + 2) {
                        Some(TokenTree::Punct(p)) if p.as_char() == ';' => {
                            out.decls.push(ModDecl {
                                inline: inline.to_vec(),
                                name,
                                paths: std::mem::take(&mut paths),
                            });
                            i += 3;
                            continue;
                        }
                        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
                            let body: Vec<TokenTree> = g.stream().into_iter().collect();
                            let (mut m, mut n) = (module.to_vec(), inline.to_vec());
                            m.push(name.clone());
                            n.push(name);
                            out.inline.push(n.clone());
                            scan(&body, &m, &n, out);
                            paths.clear();
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            // A `use` item (not `use<'a>` bounds): the tree up to its `;`.
            // A `pub use` (any visibility) is a re-export: it binds names
            // but is no dependency of its own file.
            TokenTree::Ident(id) if id == "use" && !is_punct(toks.get(i + 1), '<') => {
                let public = (i >= 1 && ident(toks.get(i - 1)).as_deref() == Some("pub"))
                    || (i >= 2
                        && matches!(&toks[i - 1], TokenTree::Group(g) if g.delimiter() == Delimiter::Parenthesis)
                        && ident(toks.get(i - 2)).as_deref() == Some("pub"));
                let end = (i + 1..toks.len())
                    .find(|&j| is_punct(toks.get(j), ';'))
                    .unwrap_or(toks.len());
                let mut paths = Vec::new();
                use_paths(&toks[i + 1..end], &[], &mut paths);
                for (segs, name) in paths {
                    let shown = format!("use {}", segs.join("::"));
                    let Some(path) = classify(segs) else {
                        continue;
                    };
                    if let Some(name) = name {
                        out.imports.push(Import {
                            module: module.to_vec(),
                            name,
                            path: path.clone(),
                        });
                    }
                    if !public {
                        out.refs.push(Ref {
                            module: module.to_vec(),
                            path,
                            shown,
                        });
                    }
                }
                i = end + 1;
                continue;
            }
            // The start of a path (not a segment after `::`, not a method
            // after `.`): `a::b::C`.
            TokenTree::Ident(id) if colons(toks, i + 1) => {
                let after_path = i >= 2 && colons(toks, i - 2);
                let after_dot = i >= 1 && is_punct(toks.get(i - 1), '.');
                if !after_path && !after_dot {
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while colons(toks, j) {
                        match ident(toks.get(j + 2)) {
                            Some(s) => segs.push(s),
                            None => break,
                        }
                        j += 3;
                    }
                    let shown = segs.join("::");
                    if let Some(path) = classify(segs) {
                        out.refs.push(Ref {
                            module: module.to_vec(),
                            path,
                            shown,
                        });
                    }
                    i = j;
                    continue;
                }
            }
            TokenTree::Group(g) => {
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                scan(&inner, module, inline, out);
                if g.delimiter() == Delimiter::Brace {
                    paths.clear(); // an item's body: the attributes were not a `mod`'s
                }
            }
            TokenTree::Punct(p) if p.as_char() == ';' => paths.clear(),
            _ => {}
        }
        i += 1;
    }
}

// ---------------------------------------------------------------------------
// One crate: its module tree and its file graph.

/// A crate's modules (inline ones included) and the files holding each (one,
/// or one per target where `cfg_attr(.., path)` picks the file).
struct Crate {
    root: String,
    modules: BTreeMap<Vec<String>, Vec<String>>,
    /// Per module, the names its `use`s bind and what each stands for (one
    /// path per `use` that binds it: `#[cfg]` alternatives bind one name
    /// several times, and each is some target's code).
    imports: BTreeMap<Vec<String>, BTreeMap<String, Vec<Raw>>>,
    /// Per file, the module it holds and what it declares and names.
    files: BTreeMap<String, (Vec<String>, Scan)>,
}

/// Reads the crate rooted at `root`, following its `mod` declarations.
fn load_crate(src: &dyn Sources, root: &str) -> Result<Crate, String> {
    let mut krate = Crate {
        root: root.to_string(),
        modules: BTreeMap::new(),
        imports: BTreeMap::new(),
        files: BTreeMap::new(),
    };
    let mut queue = VecDeque::from([(root.to_string(), Vec::<String>::new())]);
    while let Some((file, module)) = queue.pop_front() {
        let text = src
            .read(&file)
            .ok_or_else(|| format!("{file}: cannot read"))?;
        let tokens: TokenStream = text
            .parse()
            .map_err(|e| format!("{file}: not Rust tokens: {e:?}"))?;
        let toks: Vec<TokenTree> = tokens.into_iter().collect();
        let mut s = Scan::default();
        scan(&toks, &module, &[], &mut s);
        krate
            .modules
            .entry(module.clone())
            .or_default()
            .push(file.clone());
        for inline in &s.inline {
            let mut m = module.clone();
            m.extend(inline.iter().cloned());
            krate.modules.entry(m).or_default().push(file.clone());
        }
        for imp in &s.imports {
            krate
                .imports
                .entry(imp.module.clone())
                .or_default()
                .entry(imp.name.clone())
                .or_default()
                .push(imp.path.clone());
        }
        // Children of a root or a mod.rs live beside it; of `a.rs`, in `a/`.
        let dir = parent(&file);
        let name = file.rsplit('/').next().unwrap_or(&file);
        let base = if file == root || name == "mod.rs" {
            dir.to_string()
        } else {
            join(dir, name.trim_end_matches(".rs"))
        };
        for d in &s.decls {
            let mut m = module.clone();
            m.extend(d.inline.iter().cloned());
            m.push(d.name.clone());
            let here = d.inline.iter().fold(base.clone(), |b, n| join(&b, n));
            let children = if d.paths.is_empty() {
                let candidates = [
                    join(&here, &format!("{}.rs", d.name)),
                    join(&here, &format!("{}/mod.rs", d.name)),
                ];
                let found = candidates.iter().find(|c| src.read(c).is_some());
                vec![found
                    .ok_or_else(|| {
                        format!("{file}: `mod {}` has no file ({candidates:?})", d.name)
                    })?
                    .clone()]
            } else {
                // Relative to the declaring file's directory (what rustc does
                // outside inline modules; this repository has no other case).
                d.paths.iter().map(|p| normalize(&join(dir, p))).collect()
            };
            for child in children {
                queue.push_back((child, m.clone()));
            }
        }
        krate.files.insert(file, (module, s));
    }
    Ok(krate)
}

impl Crate {
    /// The absolute paths (segments from the crate root) that `path`,
    /// written in `module`, stands for (several where it goes through a
    /// name that `#[cfg]` alternatives bind); none outside this crate (an
    /// extern crate, the standard library, a type's associated item).
    /// `depth` bounds the chase through imports (`use serde_json;` binds a
    /// name to itself).
    fn absolute(&self, module: &[String], path: &Raw, depth: usize) -> Vec<Vec<String>> {
        let (start, rest): (Vec<String>, &[String]) = match path {
            Raw::Crate(rest) => (Vec::new(), rest),
            Raw::Super(n, rest) => match module.len().checked_sub(*n) {
                Some(keep) => (module[..keep].to_vec(), rest),
                None => return Vec::new(),
            },
            Raw::SelfRel(rest) => (module.to_vec(), rest),
            Raw::Bare(segs) => {
                let mut child = module.to_vec();
                child.push(segs[0].clone());
                if self.modules.contains_key(&child) {
                    (module.to_vec(), &segs[..])
                } else {
                    // A name a `use` of this module binds (`use crate::a;`
                    // then `a::f()`), or nothing of this crate.
                    let bound = self.imports.get(module).and_then(|m| m.get(&segs[0]));
                    if depth >= 16 {
                        return Vec::new();
                    }
                    return bound
                        .into_iter()
                        .flatten()
                        .flat_map(|b| self.absolute(module, b, depth + 1))
                        .map(|mut abs| {
                            abs.extend(segs[1..].iter().cloned());
                            abs
                        })
                        .collect();
                }
            }
        };
        // `self::super::a`, `a::super::b`: each `super` leaves a module.
        let mut abs = start;
        for seg in rest {
            match seg.as_str() {
                "super" => {
                    if abs.pop().is_none() {
                        return Vec::new();
                    }
                }
                "self" => {}
                _ => abs.push(seg.clone()),
            }
        }
        vec![abs]
    }

    /// The files holding what the absolute path `abs` names: the deepest
    /// module it names, or, where the next segment is a name that module
    /// imports (a re-export, `pub use b::X`), what that name stands for.
    fn files_of(&self, abs: &[String], depth: usize) -> BTreeSet<&String> {
        let k = (0..=abs.len())
            .rev()
            .find(|&k| self.modules.contains_key(&abs[..k]))
            .unwrap_or(0);
        let module = &abs[..k];
        let bound = abs
            .get(k)
            .and_then(|name| self.imports.get(module)?.get(name));
        match bound {
            Some(bound) if depth < 16 => bound
                .iter()
                .flat_map(|b| self.absolute(module, b, 0))
                .flat_map(|mut through| {
                    through.extend(abs[k + 1..].iter().cloned());
                    self.files_of(&through, depth + 1)
                })
                .collect(),
            _ => self.modules.get(module).into_iter().flatten().collect(),
        }
    }

    /// file -> (file it depends on -> the first path that says so).
    fn graph(&self) -> BTreeMap<&str, BTreeMap<&str, &str>> {
        let mut g: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
        for (file, (_, scan)) in &self.files {
            let edges = g.entry(file).or_default();
            for r in &scan.refs {
                let targets = self.absolute(&r.module, &r.path, 0);
                for to in targets.iter().flat_map(|abs| self.files_of(abs, 0)) {
                    if to != file {
                        edges.entry(to).or_insert(&r.shown);
                    }
                }
            }
        }
        g
    }
}

/// The groups of files of `g` that reach each other (Tarjan's strongly
/// connected components), those of two or more files, each sorted.
fn cycles<'a>(g: &BTreeMap<&'a str, BTreeMap<&'a str, &'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a, 'g> {
        g: &'g BTreeMap<&'a str, BTreeMap<&'a str, &'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(s: &mut State<'a, '_>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let next: Vec<&'a str> =
            s.g.get(v)
                .map(|e| e.keys().copied().collect())
                .unwrap_or_default();
        for w in next {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                group.push(w);
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

/// One cycle through the group's first file, as
/// `a.rs -> b.rs (use crate::b::X) -> a.rs (use crate::a::Y)`.
fn describe(g: &BTreeMap<&str, BTreeMap<&str, &str>>, group: &[&str]) -> String {
    let start = group[0];
    let members: BTreeSet<&str> = group.iter().copied().collect();
    // Breadth-first from start's successors back to start, inside the group.
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    let mut seen = BTreeSet::new();
    'search: while let Some(v) = queue.pop_front() {
        for &w in g[v].keys() {
            if !members.contains(w) {
                continue;
            }
            if w == start {
                came_from.insert(start, v);
                break 'search;
            }
            if seen.insert(w) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    let mut back = Vec::new();
    let mut at = came_from[start];
    while at != start {
        back.push(at);
        at = came_from[at];
    }
    back.reverse();
    let steps: Vec<&str> = [start].into_iter().chain(back).chain([start]).collect();
    let mut text = start.to_string();
    for pair in steps.windows(2) {
        text.push_str(&format!(" -> {} ({})", pair[1], g[pair[0]][pair[1]]));
    }
    let others: Vec<&str> = group
        .iter()
        .filter(|f| !steps.contains(f))
        .copied()
        .collect();
    if !others.is_empty() {
        text.push_str(&format!("; in the same cycle group: {}", others.join(", ")));
    }
    text
}

/// A group of files of one crate that depend on each other.
struct Cycle {
    root: String,
    /// One cycle through them, with the path of each step.
    text: String,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "crate {}: {}", self.root, self.text)
    }
}

/// Every cycle group of the crates rooted at `roots`.
fn find_cycles(src: &dyn Sources, roots: &[String]) -> Result<Vec<Cycle>, String> {
    let mut out = Vec::new();
    for root in roots {
        let krate = load_crate(src, root)?;
        let g = krate.graph();
        for group in cycles(&g) {
            out.push(Cycle {
                root: krate.root.clone(),
                text: describe(&g, &group),
            });
        }
    }
    Ok(out)
}

/// `find_cycles`, as text.
fn cycle_texts(src: &dyn Sources, roots: &[String]) -> Result<Vec<String>, String> {
    Ok(find_cycles(src, roots)?
        .iter()
        .map(Cycle::to_string)
        .collect())
}

// ---------------------------------------------------------------------------

#[test]
fn no_file_of_any_crate_imports_itself_through_others() {
    let root = repo();
    let (mut dirs, mut files) = (Vec::new(), Vec::new());
    walk(&root, &root, &mut dirs, &mut files);
    let file_set: BTreeSet<String> = files.iter().cloned().collect();
    dirs.insert(0, String::new());
    let mut roots = Vec::new();
    let mut packages = Vec::new();
    for dir in &dirs {
        let Ok(text) = std::fs::read_to_string(root.join(dir).join("Cargo.toml")) else {
            continue;
        };
        let manifest: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("{dir}/Cargo.toml: {e}"));
        if manifest.contains_key("package") {
            packages.push(dir.clone());
            roots.extend(crate_roots(dir, &manifest, &file_set));
        }
    }
    // The packages the issue names are all found (the list may grow).
    for must in [
        "runtime",
        "runtime/asm",
        "tools",
        "common",
        "xtask",
        "tests",
        "fuzz",
    ] {
        assert!(
            packages.iter().any(|p| p == must),
            "package {must} not found: {packages:?}"
        );
    }
    assert!(
        roots.len() >= 30,
        "only {} crate roots: {roots:?}",
        roots.len()
    );

    let src = Disk(root.clone());
    let mut reached = BTreeSet::new();
    for r in &roots {
        let krate = load_crate(&src, r).unwrap_or_else(|e| panic!("{e}"));
        reached.extend(krate.files.into_keys());
    }
    let missed: Vec<&String> = files.iter().filter(|f| !reached.contains(*f)).collect();
    assert!(
        missed.is_empty(),
        "no crate root reaches these files (a root this test does not know, or a stray file): {missed:?}"
    );

    let found: Vec<String> = find_cycles(&src, &roots)
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(Cycle::to_string)
        .collect();
    assert!(
        found.is_empty(),
        "files that import each other in a cycle (move what both need to a file both import):\n{}",
        found.join("\n")
    );
}

fn synthetic(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

/// The check finds what it is for: a three-file cycle through a `use`, a
/// `super::` path in an expression and an inline module's `super::super`,
/// named with the path each step uses; what is not a dependency (a `mod`
/// declaration, comments, doc comments, strings, a test module's
/// `use super::*`, another crate's paths) adds none.
#[test]
fn the_check_names_a_cycle_and_only_a_cycle() {
    let src = synthetic(&[
        (
            "src/lib.rs",
            "//! [`crate::a::A`]\nmod a;\nmod b;\nmod c;\nmod d;\npub use d::D;\n",
        ),
        (
            "src/a.rs",
            "use crate::b::B;\npub struct A;\n#[cfg(test)]\nmod tests { use super::*; }\n",
        ),
        (
            "src/b.rs",
            "pub struct B;\nfn f() -> u32 { super::c::g() }\n// use crate::d::D;\n",
        ),
        (
            "src/c.rs",
            "pub fn g() -> u32 { let _ = \"crate::d::D\"; 1 }\n/* crate::d */\n\
             mod inner { use super::super::a::A; use other_crate::d::D; }\n",
        ),
        (
            "src/d.rs",
            "/// Uses [`crate::a::A`].\npub struct D(crate::a::A);\n",
        ),
    ]);
    let found = cycle_texts(&src, &["src/lib.rs".to_string()]).unwrap();
    assert_eq!(
        found,
        [
            "crate src/lib.rs: src/a.rs -> src/b.rs (use crate::b::B) -> src/c.rs (super::c::g) \
          -> src/a.rs (use super::super::a::A)"
        ]
    );

    // Without c's path back to a, nothing: d uses a, and the root uses d,
    // but no file is used by what it uses.
    let mut acyclic = src.clone();
    acyclic.insert(
        "src/c.rs".to_string(),
        "pub fn g() -> u32 { 1 }\nmod inner { use super::g; }\n".to_string(),
    );
    assert_eq!(
        cycle_texts(&acyclic, &["src/lib.rs".to_string()]).unwrap(),
        Vec::<String>::new()
    );
}

/// Modules in directories (`a/mod.rs`, `a.rs` + `a/b.rs`), `self::` and
/// group imports; a re-export is a pass-through: a parent that re-exports
/// its child (`pub use b::X`) while the child uses the parent is no cycle,
/// but a path through the crate root's re-export (`crate::M`) depends on the
/// file that defines `M`, and a parent that uses its child in its own code
/// does depend on it.
#[test]
fn the_check_follows_module_files_and_reexports() {
    let src = synthetic(&[
        (
            "src/main.rs",
            "mod a;\nmod e;\nmod m;\nmod n;\npub use m::M;\nfn main() { a::run() }\n",
        ),
        (
            "src/a.rs",
            "mod b;\npub use b::X;\npub struct Shared;\npub fn run() {}\n",
        ),
        (
            "src/a/b.rs",
            "use super::Shared;\npub struct X(Shared);\npub fn helper() {}\n",
        ),
        ("src/e/mod.rs", "mod f;\nmod g;\n"),
        ("src/e/f.rs", "use crate::e::{g::G, self};\npub struct F;\n"),
        ("src/e/g.rs", "pub struct G(self::super::f::F);\n"),
        ("src/m.rs", "use crate::n::N;\npub struct M;\n"),
        ("src/n.rs", "pub struct N(crate::M);\n"),
    ]);
    let roots = ["src/main.rs".to_string()];
    let found = cycle_texts(&src, &roots).unwrap();
    let cycles = [
        "crate src/main.rs: src/e/f.rs -> src/e/g.rs (use crate::e::g::G) -> src/e/f.rs (self::super::f::F)",
        "crate src/main.rs: src/m.rs -> src/n.rs (use crate::n::N) -> src/m.rs (crate::M)",
    ];
    assert_eq!(found, cycles);

    let mut uses_child = src.clone();
    uses_child.insert(
        "src/a.rs".to_string(),
        "mod b;\npub use b::X;\npub struct Shared;\npub fn run() { b::helper() }\n".to_string(),
    );
    let found = cycle_texts(&uses_child, &roots).unwrap();
    assert_eq!(
        found[0],
        "crate src/main.rs: src/a.rs -> src/a/b.rs (b::helper) -> src/a.rs (use super::Shared)"
    );
    assert_eq!(found[1..], cycles);

    // A declared module without its file is an error, not a silent skip.
    let mut missing = src.clone();
    missing.remove("src/e/g.rs");
    let err = find_cycles(&missing, &roots).err().expect("an error");
    assert!(err.contains("src/e/mod.rs: `mod g` has no file"), "{err}");
}
