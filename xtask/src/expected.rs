//! How a board's output is compared with its recorded one in
//! `boards/expected/`.
//!
//! What the firmware computes must be identical: the text, the token ids,
//! the checksums, accuracies, the state and session bytes. What it costs is
//! a measurement of this build: any change to the runtime's code moves the
//! instruction count by a few tokens' worth and the flash by a few bytes, and
//! those must not fail every check until someone re-records 50 files. So on
//! `run:` and `stats:` lines the cost fields ([`COST_FIELDS`]) may sit within
//! [`COST_REL_TOL`] of the recorded value; a change beyond that fails (a
//! regression, or a gain to record with `--overwrite`). docs/testing.md
//! states the same rule.

/// `key=value` fields of `run:` / `stats:` lines that measure cost.
pub const COST_FIELDS: &[&str] = &[
    "instructions",
    "instructions_per_token",
    "stack_bytes",
    "flash_bytes",
    "ram_bytes",
];

/// How far a cost field may sit from the recorded one, relative (2%).
pub const COST_REL_TOL: f64 = 0.02;

/// The lines of `actual` that differ from `want` under the rule above, as
/// `(expected, actual)` pairs (an absent line is the empty string).
pub fn differences<'a>(want: &'a str, actual: &'a str) -> Vec<(&'a str, &'a str)> {
    let (w, a): (Vec<&str>, Vec<&str>) = (want.lines().collect(), actual.lines().collect());
    (0..w.len().max(a.len()))
        .map(|i| {
            (
                w.get(i).copied().unwrap_or(""),
                a.get(i).copied().unwrap_or(""),
            )
        })
        .filter(|(x, y)| !same_line(x, y))
        .collect()
}

/// Whether two lines agree: equal, or both `run:` / `stats:` (or the OTA
/// firmware's `ota: validated`) lines with the
/// same fields in the same order, equal except for costs within tolerance.
fn same_line(want: &str, actual: &str) -> bool {
    if want == actual {
        return true;
    }
    let is_stats = |l: &str| {
        ["run: ", "stats: ", "ota: validated "]
            .iter()
            .any(|p| l.starts_with(p))
    };
    if !is_stats(want) || !is_stats(actual) {
        return false;
    }
    let (w, a): (Vec<&str>, Vec<&str>) = (
        want.split_whitespace().collect(),
        actual.split_whitespace().collect(),
    );
    w.len() == a.len() && w.iter().zip(&a).all(|(x, y)| same_field(x, y))
}

fn same_field(want: &str, actual: &str) -> bool {
    if want == actual {
        return true;
    }
    let (Some((wk, wv)), Some((ak, av))) = (want.split_once('='), actual.split_once('=')) else {
        return false;
    };
    if wk != ak || !COST_FIELDS.contains(&wk) {
        return false;
    }
    match (wv.parse::<f64>(), av.parse::<f64>()) {
        (Ok(w), Ok(a)) => (a - w).abs() <= COST_REL_TOL * w.abs(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "run: board=m4f prompt_tokens=16 tokens=32 instructions=14132800 \
                       instructions_per_token=300697 stack_bytes=3292 state_bytes=6784";

    #[test]
    fn costs_within_two_percent_pass_and_beyond_fail() {
        let near = RUN.replace("300697", "305000").replace("3292", "3340");
        assert!(differences(RUN, &near).is_empty());
        let far = RUN.replace("300697", "310000");
        assert_eq!(differences(RUN, &far), vec![(RUN, far.as_str())]);
        let far_stack = RUN.replace("3292", "3400");
        assert_eq!(differences(RUN, &far_stack).len(), 1);
    }

    #[test]
    fn what_the_model_computes_is_exact() {
        for (from, to) in [
            ("state_bytes=6784", "state_bytes=6785"),
            ("tokens=32", "tokens=31"),
            ("board=m4f", "board=m7"),
        ] {
            let changed = RUN.replace(from, to);
            assert_eq!(differences(RUN, &changed).len(), 1, "{to}");
        }
        let tokens = "tokens: 1,2,3\nchecksum: fnv1a=0x1";
        assert_eq!(
            differences(tokens, "tokens: 1,2,4\nchecksum: fnv1a=0x1").len(),
            1
        );
        // A cost-like field on a line that is not a run or stats line is text.
        assert_eq!(
            differences("note: instructions=100", "note: instructions=101").len(),
            1
        );
    }

    #[test]
    fn missing_extra_and_reordered_lines_or_fields_fail() {
        assert_eq!(differences("a\nb", "a"), vec![("b", "")]);
        assert_eq!(differences("a", "a\nb"), vec![("", "b")]);
        let dropped = RUN.replace(" state_bytes=6784", "");
        assert_eq!(differences(RUN, &dropped).len(), 1);
        let renamed = RUN.replace("stack_bytes", "heap_bytes");
        assert_eq!(differences(RUN, &renamed).len(), 1);
    }
}
