//! The repository carries its own contract: a clone is all a user has.
//!
//! - No tracked text file may point outside the repository: not at a sibling
//!   directory of notes (`..` then `/shared`), not at a machine path, and
//!   not at the founding notes the project started from, which were never
//!   part of the repository. `docs/spec.md` and `docs/design.md` replace them.
//! - `docs/spec.md` names every mixer kind (each with its own subsection) and
//!   every field and choice that `tools/src/config_json.rs` accepts; the list
//!   is read from that file's source, so a new option cannot be added without
//!   documenting it.
//! - Every "N mixer families" (or "N token-mixer families") in the READMEs,
//!   `docs/*.md` and the runtime's crate docs counts the mixer kinds the
//!   runtime has (`ferrite::LayerConfig::KIND_NAMES`), and
//!   docs/adding-a-mixer.md lists those kinds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Files exempt from the outside-reference scan: this test (it spells the
/// patterns) and the CI entry point.
const EXEMPT_PREFIXES: &[&str] = &["tests/tests/repo_contract.rs", ".ci/"];

/// What a reference outside the repository looks like. (The first two are
/// spelled in two pieces so that a plain `grep` of the repository for them,
/// as review hooks do, does not find this file.)
const FORBIDDEN: &[&str] = &[
    concat!("..", "/shared"),
    concat!("/wo", "rk/"),
    "SPEC.md",
    "SPEC §",
    "ARCHITECTURE.md",
    "BOARDS.md",
    "KERNELS.md",
    "TRAINING.md",
    "STYLE.md",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The tracked files. Fails (never skips) when git cannot list them: the
/// scan is the check.
fn tracked_files(root: &Path) -> Vec<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .unwrap_or_else(|e| {
            panic!("repo_contract needs git and a clone: cannot run git to list the tracked files: {e}")
        });
    assert!(
        out.status.success(),
        "repo_contract needs a clone: `git ls-files` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    out.stdout
        .split(|&b| b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect()
}

#[test]
fn no_tracked_file_references_outside_the_repository() {
    let root = repo_root();
    let files = tracked_files(&root);
    let mut hits = Vec::new();
    let mut scanned = 0;
    for file in &files {
        if EXEMPT_PREFIXES.iter().any(|p| file.starts_with(p)) {
            continue;
        }
        // A file deleted in the work tree but still in the index is not shipped text.
        let Ok(bytes) = std::fs::read(root.join(file)) else {
            continue;
        };
        if bytes.contains(&0) {
            continue; // binary: weights, images, fuzz inputs
        }
        scanned += 1;
        let text = String::from_utf8_lossy(&bytes);
        for (n, line) in text.lines().enumerate() {
            for pattern in FORBIDDEN {
                if line.contains(pattern) {
                    hits.push(format!(
                        "{file}:{}: `{pattern}` in {:?}",
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(scanned > 50, "only {scanned} text files scanned");
    assert!(
        hits.is_empty(),
        "tracked files reference paths outside the repository (point them at docs/spec.md, \
         docs/design.md or another file in docs/ instead):\n{}",
        hits.join("\n")
    );
}

/// String literals that follow `marker` in `source` (e.g. the `"x"` of `.int("x"`).
fn literals_after(source: &str, marker: &str) -> Vec<String> {
    source
        .match_indices(marker)
        .filter_map(|(at, _)| {
            let rest = &source[at + marker.len()..];
            rest.find('"').map(|end| rest[..end].to_string())
        })
        .collect()
}

/// The string literals of every `&["a", "b", ...]` choice list in `source`.
fn choice_values(source: &str) -> Vec<String> {
    let mut values = Vec::new();
    for (at, _) in source.match_indices("&[\"") {
        let rest = &source[at + 2..];
        let Some(end) = rest.find(']') else { continue };
        for item in rest[..end].split(',') {
            let item = item.trim();
            if let Some(v) = item.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                values.push(v.to_string());
            }
        }
    }
    values
}

/// Fields and choice values accepted by `tools/src/config_json.rs` (its
/// non-test code), read from the source.
fn config_json_vocabulary(root: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let path = root.join("tools/src/config_json.rs");
    let source = std::fs::read_to_string(&path).expect("tools/src/config_json.rs is readable");
    let code = source.split("#[cfg(test)]").next().unwrap_or(&source);
    let mut fields = BTreeSet::new();
    for marker in [
        ".int(\"",
        ".positive(\"",
        ".flag(\"",
        ".choice(\"",
        ".take(\"",
        ".divisor_heads(\"",
        ".contains_key(\"",
    ] {
        fields.extend(literals_after(code, marker));
    }
    let values = choice_values(code).into_iter().collect();
    (fields, values)
}

#[test]
fn spec_names_every_mixer_and_config_field() {
    let root = repo_root();
    let spec_path = root.join("docs/spec.md");
    let spec = std::fs::read_to_string(&spec_path).expect("docs/spec.md exists");
    let (fields, values) = config_json_vocabulary(&root);

    // Guard the derivation itself: if config_json.rs changes its shape so
    // that these are no longer found, fix the parser above.
    for anchor in [
        "vocab_size",
        "hidden_size",
        "layers",
        "mixer",
        "num_heads",
        "head_dim",
        "window",
        "period",
        "use_short_conv",
    ] {
        assert!(
            fields.contains(anchor),
            "could not derive field {anchor:?} from tools/src/config_json.rs (derived: {fields:?})"
        );
    }
    assert!(fields.len() >= 25, "only {} fields derived", fields.len());

    let missing: Vec<_> = fields
        .iter()
        .filter(|f| !spec.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/spec.md does not name these config.json fields (as `name`): {missing:?}"
    );

    let missing: Vec<_> = values
        .iter()
        .filter(|v| !spec.contains(&format!("\"{v}\"")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/spec.md does not name these config.json choices (as \"value\"): {missing:?}"
    );

    // Every mixer kind has its own subsection (`### 3.x `kind` — ...`).
    let mut kinds: BTreeSet<String> = ["gdn", "gsa", "swa", "bla"]
        .into_iter()
        .map(String::from)
        .collect();
    let source = std::fs::read_to_string(root.join("tools/src/config_json.rs")).unwrap();
    if let Some(at) = source.find("choice(\"mixer\"") {
        kinds.extend(choice_values(
            &source[at..at + source[at..].find(')').unwrap_or(0)],
        ));
    }
    for kind in &kinds {
        let heading = spec
            .lines()
            .any(|l| l.starts_with("### ") && l.contains(&format!("`{kind}`")));
        assert!(
            heading,
            "docs/spec.md has no `### ...` subsection for mixer kind `{kind}`"
        );
    }
}

/// The number a word spells (`four`, `Five`, `5`), if it spells one.
fn number_word(word: &str) -> Option<usize> {
    const WORDS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    let w = word.to_ascii_lowercase();
    WORDS
        .iter()
        .position(|n| *n == w)
        .or_else(|| w.parse().ok())
}

/// Each count of mixer families in `text`: the number before "mixer
/// families", "token-mixer families" or "token mixer families" (across line
/// breaks and `//!` comment prefixes), with the line it starts on.
fn family_counts(text: &str) -> Vec<(usize, String, Option<usize>)> {
    let mut words: Vec<(usize, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for w in line.split_whitespace() {
            let w = w.trim_matches(|c: char| !c.is_alphanumeric() && c != '-');
            if !w.is_empty() {
                words.push((n + 1, w.to_ascii_lowercase()));
            }
        }
    }
    let mut counts = Vec::new();
    for i in 0..words.len() {
        let after: Vec<&str> = words[i + 1..]
            .iter()
            .take(3)
            .map(|(_, w)| w.as_str())
            .collect();
        let family = matches!(
            after.as_slice(),
            ["mixer" | "token-mixer", "families", ..] | ["token", "mixer", "families", ..]
        );
        // "N token mixer families" is read at N, not again at "token".
        if family && words[i].1 != "token" {
            let (line, word) = &words[i];
            counts.push((*line, word.clone(), number_word(word)));
        }
    }
    counts
}

#[test]
fn docs_count_the_mixer_families_the_runtime_has() {
    let root = repo_root();
    let kinds = ferrite::LayerConfig::KIND_NAMES;
    let mut files = vec![
        root.join("README.md"),
        root.join("runtime/README.md"),
        root.join("runtime/src/lib.rs"),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);

    let mut counted = 0;
    let mut wrong = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for (line, word, n) in family_counts(&text) {
            if let Some(n) = n {
                counted += 1;
                if n != kinds.len() {
                    let file = path.strip_prefix(&root).unwrap_or(path).display();
                    wrong.push(format!("{file}:{line}: \"{word}\""));
                }
            }
        }
    }
    // The scan itself: README.md and the crate docs count the families.
    assert!(
        counted >= 2,
        "found only {counted} family counts: is the scan broken?"
    );
    assert!(
        wrong.is_empty(),
        "the runtime has {} mixer kinds ({kinds:?}), these say otherwise: {wrong:?}",
        kinds.len()
    );

    // docs/adding-a-mixer.md: "A mixer family (today `gdn`, ...)".
    let guide = std::fs::read_to_string(root.join("docs/adding-a-mixer.md")).unwrap();
    let start = guide
        .find("(today ")
        .expect("adding-a-mixer.md lists today's families");
    let end = guide[start..].find([':', ')']).unwrap();
    let list = &guide[start..start + end];
    let listed: Vec<&str> = list.split('`').skip(1).step_by(2).collect();
    assert_eq!(
        listed, kinds,
        "docs/adding-a-mixer.md's list of today's families"
    );
}

#[test]
fn family_counts_are_read_across_lines_and_comments() {
    let text = "- **Four mixer families**, alone\n//! Six token-mixer\n//! families; all the mixer families; 3 token mixer families.";
    let counts: Vec<(usize, Option<usize>)> = family_counts(text)
        .into_iter()
        .map(|(line, _, n)| (line, n))
        .collect();
    assert_eq!(
        counts,
        [(1, Some(4)), (2, Some(6)), (3, None), (3, Some(3))]
    );
}
