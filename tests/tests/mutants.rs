//! The mutation-testing figures of docs/testing.md ("Mutation testing")
//! are the ones derived from the recorded outcomes, `tests/mutants/outcomes.tsv`
//! (written by `tests/mutants/record.py` from cargo-mutants' output).

use std::collections::BTreeMap;
use std::path::Path;

/// Caught, missed, unviable, timeout.
type Counts = [usize; 4];

const KINDS: [&str; 4] = ["caught", "missed", "unviable", "timeout"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn score(c: &Counts) -> String {
    let (caught, viable) = (c[0], c[0] + c[1]);
    format!(
        "{caught}/{viable} = {:.1}%",
        100.0 * caught as f64 / viable as f64
    )
}

fn row(name: &str, first: &Counts, last: &Counts) -> String {
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} |",
        last.iter().sum::<usize>(),
        last[0],
        last[1],
        last[2],
        last[3],
        score(first),
        score(last)
    )
}

#[test]
fn the_docs_table_and_survivors_are_the_recorded_outcomes() {
    let tsv = std::fs::read_to_string(root().join("tests/mutants/outcomes.tsv")).unwrap();
    let doc = std::fs::read_to_string(root().join("docs/testing.md")).unwrap();
    let mut files: BTreeMap<&str, (Counts, Counts)> = BTreeMap::new();
    let mut survivors = Vec::new();
    for line in tsv.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "{line}");
        let file = f[0].split(':').next().unwrap();
        let kind = |s: &str| KINDS.iter().position(|k| *k == s).expect(line);
        let entry = files.entry(file).or_default();
        entry.0[kind(f[1])] += 1;
        entry.1[kind(f[2])] += 1;
        if f[2] == "missed" {
            survivors.push(f[0].trim_start_matches("runtime/src/").to_string());
        }
    }
    assert!(files.len() >= 5, "{files:?}");
    let mut total = (Counts::default(), Counts::default());
    let mut expected = Vec::new();
    for (file, (first, last)) in &files {
        expected.push(row(&format!("`{file}`"), first, last));
        for i in 0..4 {
            total.0[i] += first[i];
            total.1[i] += last[i];
        }
    }
    expected.push(row("**all**", &total.0, &total.1));
    let section = &doc[doc.find("## Mutation testing").unwrap()..];
    for line in &expected {
        assert!(
            section.contains(line.as_str()),
            "docs/testing.md lacks the row\n{line}\n(every row:\n{})",
            expected.join("\n")
        );
    }
    // Each surviving mutant is named, with its line and column.
    for s in &survivors {
        let (file, at) = s.split_once(':').unwrap();
        assert!(
            section.contains(&format!("`{file}:{at}`")) || section.contains(&format!(":{at}`")),
            "survivor {s} is not listed in docs/testing.md"
        );
    }
}
