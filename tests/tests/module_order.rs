//! The runtime's modules depend on each other in one declared order, without
//! cycles: [`ORDER`], lowest first, which `docs/adding-a-mixer.md` draws.
//!
//! Every `crate::<module>` path in the code of `runtime/src` (imports and
//! paths in expressions alike; comments do not count) must name a module that
//! comes earlier in [`ORDER`] than the file's own module, or that module
//! itself. A path through the crate root (`crate::Model`,
//! `crate::session_len`) hides which module it reaches, so it is refused too;
//! `lib.rs`, the root, may use every module. A new module must be placed in
//! [`ORDER`] (and in the document) before this test passes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The runtime's modules, lowest first: each may use only those before it.
const ORDER: &[&str] = &[
    // Format pieces: byte readers, `Role`, the config records' layout.
    "format",
    // Why a snapshot was refused (wrapped by `Error`).
    "snapshot_error",
    "error",
    "image",
    "math",
    // The integer token path's fixed-point primitives (format 6).
    "fixed",
    "kernels",
    "probe",
    // The `roofline` feature's timing of the products (the products call it).
    "roofline",
    "tensor",
    // The integer token path's products and lookups.
    "tensor_int",
    // The view of a layer's tensors that the mixers read.
    "weights",
    "sampler",
    // Each mixer: its config record, sizes, tensors and step.
    "mixers",
    // The block around each mixer: norms, MLP (format 8's options).
    "block",
    // `LayerConfig` (one variant per mixer), `ModelConfig`.
    "config",
    "tokenizer",
    // `session_len` and the buffer's parts.
    "sizes",
    "model",
    // `Model::macs_per_token`: the products' cost, from the model's specs.
    "macs",
    // Caller-owned memories of `cross` layers: `memory_len`, `Memory`.
    "memory",
    // One token on the integer token path.
    "int_token",
    // The memory encoder's writes of keys and values (both token paths).
    "encoder",
    // Snapshot bytes: header, hash, checks (the session calls them).
    "snapshot",
    "session",
    // Signed images (format 7): the section, the refusals; with `verify`
    // the checks before `Model::load`.
    "signature",
    "update",
    // Two flash slots of snapshot bytes (image's CRC only).
    "snapshot_slots",
    // The rollback counter: a record of the snapshot slots.
    "rollback",
];

fn runtime_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .join("runtime/src")
}

/// Every `.rs` file under `dir`, recursively, as (path relative to `root`, text).
fn sources(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let rel = path.strip_prefix(root).unwrap();
            let rel = rel.to_string_lossy().replace('\\', "/");
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// The top-level module a file belongs to (`mixers/swa.rs` -> `mixers`), or
/// `None` for the crate root.
fn module_of(path: &str) -> Option<&str> {
    let first = path.split('/').next().unwrap_or(path);
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then_some(name)
}

/// `text` without its comments (line comments, doc comments included, and
/// block comments).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = &rest[l..];
                rest = &rest[rest.find('\n').unwrap_or(rest.len())..];
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = &rest[b + 2..];
                rest = &rest[rest.find("*/").map_or(rest.len(), |e| e + 2)..];
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segments after each `crate::` in `code`: `crate::a::X` gives
/// `a`, `crate::{a::X, b}` gives `a` and `b`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("crate::") {
        let start = at + found;
        at = start + "crate::".len();
        if code[..start].chars().next_back().is_some_and(is_ident) {
            continue; // `foo_crate::`, not a path of this crate
        }
        let rest = &code[at..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group, up to its closing brace.
            let (mut depth, mut item_start) = (0usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        names.push(first_segment(&group[item_start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(first_segment(&group[item_start..i]));
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(first_segment(rest));
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

fn first_segment(item: &str) -> String {
    item.trim_start()
        .chars()
        .take_while(|&c| is_ident(c))
        .collect()
}

/// Every dependency of `files` that goes against `order`, as readable lines.
fn violations(files: &[(String, String)], order: &[&str]) -> Vec<String> {
    let rank = |m: &str| order.iter().position(|&o| o == m);
    let mut out = Vec::new();
    for (path, text) in files {
        let Some(module) = module_of(path) else {
            continue; // the crate root may use every module
        };
        let Some(own) = rank(module) else {
            out.push(format!(
                "{path}: module `{module}` is not in ORDER (place it, and in docs/adding-a-mixer.md)"
            ));
            continue;
        };
        let deps: BTreeSet<String> = crate_paths(&strip_comments(text)).into_iter().collect();
        for dep in deps {
            match rank(&dep) {
                Some(r) if r <= own => {}
                Some(_) => out.push(format!(
                    "{path}: `{module}` uses `crate::{dep}`, which comes after it in ORDER"
                )),
                None => out.push(format!(
                    "{path}: `crate::{dep}` goes through the crate root: name its module"
                )),
            }
        }
    }
    out
}

#[test]
fn runtime_modules_follow_the_declared_order() {
    let root = runtime_src();
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    assert!(
        files.len() > 20,
        "only {} files under runtime/src",
        files.len()
    );

    let found: BTreeSet<&str> = files.iter().filter_map(|(p, _)| module_of(p)).collect();
    let stale: Vec<_> = ORDER.iter().filter(|m| !found.contains(*m)).collect();
    assert!(
        stale.is_empty(),
        "ORDER names modules that do not exist: {stale:?}"
    );

    let bad = violations(&files, ORDER);
    assert!(
        bad.is_empty(),
        "the runtime's module order (docs/adding-a-mixer.md) is broken:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_document_draws_the_same_order() {
    let doc_path = runtime_src().join("../../docs/adding-a-mixer.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/adding-a-mixer.md exists");
    let section = doc
        .split("## Module order")
        .nth(1)
        .expect("docs/adding-a-mixer.md has a `## Module order` section");
    let block = section
        .split("```text")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section draws the order in a ```text block, a module a line");
    // One module per line, its name first.
    let drawn: Vec<&str> = block
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(drawn, ORDER, "the drawing in docs/adding-a-mixer.md");
}

/// The check itself finds what it is for: a cycle through a plain import, a
/// group import and a path in an expression, and a path through the root;
/// comments and other crates' paths do not count.
#[test]
fn the_check_catches_a_cycle() {
    let order = ["format", "error", "mixers", "config", "model"];
    let file = |path: &str, text: &str| (path.to_string(), text.to_string());
    let files = [
        file("lib.rs", "pub mod config;\nuse crate::model::Model;\n"),
        file(
            "mixers/swa.rs",
            "use crate::error::Error;\nuse crate::format::{Role, MAX_DIM};\n\
             // use crate::model::Model;\n/// see [`crate::config::LayerConfig`]\n\
             use ferrite_crate::x;\nfn f() { crate::config::MAX_LAYERS }\n",
        ),
        file(
            "error.rs",
            "use crate::{format::Role, mixers::Specs};\n/* crate::model */\n",
        ),
        file(
            "config.rs",
            "use crate::Model;\nuse crate::mixers::SwaConfig;\n",
        ),
        file("weights.rs", "use crate::error::Error;\n"),
    ];
    let got = violations(&files, &order);
    assert_eq!(
        got,
        [
            "mixers/swa.rs: `mixers` uses `crate::config`, which comes after it in ORDER",
            "error.rs: `error` uses `crate::mixers`, which comes after it in ORDER",
            "config.rs: `crate::Model` goes through the crate root: name its module",
            "weights.rs: module `weights` is not in ORDER (place it, and in docs/adding-a-mixer.md)",
        ]
    );
}
