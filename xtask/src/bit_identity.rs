//! Where the boards' final-step logits are the same bits, read from the
//! suite's recorded transcripts (`boards/expected/<board>.out`, built with
//! the board's `fast-math` module, and `<board>-libm.out`, built without).
//!
//! The suite compares each live run with its host CLI running the same
//! math module, bit for bit, and with its transcript, checksums exact; so
//! what the transcripts show is what every run shows. The statement the
//! README and docs/testing.md make, and the tests below assert:
//! - one image and one math module give one set of bits on every board;
//! - the `fast-math` integer and float modules give different bits for the
//!   same f32 or int8 image (their `exp`/`sigmoid`/`silu` round
//!   differently, within their stated ulp bounds), so boards agree with
//!   each other only within a module; `libm` builds agree across all of
//!   them;
//! - on the integer token path (format 6) the module does not matter:
//!   the suite's integer-path checks compare every module with the `libm`
//!   host (`suite::INT_PATH_RUNS`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use ferrite_common::report::Checksum;
use ferrite_common::target::{Target, BOARDS};

use crate::options::Math;

/// The boards whose transcripts record one `(image, module)` pair, and the
/// logits checksum each recorded.
pub type Groups = BTreeMap<(String, &'static str), Vec<(&'static str, u32)>>;

/// Every QEMU board's two `generate` transcripts in `dir`, grouped by the
/// default image (model and dtype) and the math module they ran.
pub fn recorded_groups(dir: &Path) -> Result<Groups> {
    let mut groups = Groups::new();
    for board in BOARDS {
        for (suffix, math) in [("", Math::of(board, true)), ("-libm", Math::Libm)] {
            let file = dir.join(format!("{}{suffix}.out", board.name));
            let fnv = recorded_checksum(&file)?;
            groups
                .entry((image_of(board), math.name()))
                .or_default()
                .push((board.name, fnv));
        }
    }
    Ok(groups)
}

fn image_of(board: &Target) -> String {
    format!("{} {}", board.model.0, board.model.1)
}

/// The `fnv1a` of a transcript's `checksum:` line.
fn recorded_checksum(file: &Path) -> Result<u32> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("checksum: "))
        .with_context(|| format!("{}: no `checksum: ` line", file.display()))?;
    let ck = Checksum::parse(rest).with_context(|| format!("{}: bad checksum", file.display()))?;
    Ok(ck.fnv)
}

/// The groups whose boards recorded more than one checksum: empty when one
/// image and one module give one set of bits.
pub fn disagreements(groups: &Groups) -> Vec<String> {
    groups
        .iter()
        .filter(|(_, runs)| runs.iter().any(|r| r.1 != runs[0].1))
        .map(|((image, math), runs)| format!("{image}, math {math}: {runs:x?}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups() -> Groups {
        recorded_groups(&crate::paths::expected_dir()).unwrap()
    }

    #[test]
    fn one_image_and_one_module_give_one_set_of_bits_on_every_board() {
        let g = groups();
        assert_eq!(disagreements(&g), Vec::<String>::new());
        // The statement covers boards of both ISAs in one group, not only
        // boards that happen to be alone with their image.
        let libm = g
            .iter()
            .filter(|((_, m), _)| *m == "libm")
            .map(|(_, runs)| runs.len())
            .max();
        assert!(libm >= Some(6), "{g:?}");
    }

    #[test]
    fn the_integer_and_float_modules_differ_on_the_same_image() {
        // docs/testing.md and the README say so; if they ever agree, say so there.
        let g = groups();
        let both: Vec<_> = g
            .keys()
            .filter(|(image, m)| *m == "int" && g.contains_key(&(image.clone(), "float")))
            .collect();
        assert!(!both.is_empty(), "no image ran with both modules: {g:?}");
        for (image, _) in both {
            let (int, float) = (&g[&(image.clone(), "int")], &g[&(image.clone(), "float")]);
            assert_ne!(int[0].1, float[0].1, "{image}: {int:?} {float:?}");
        }
    }

    #[test]
    fn a_board_that_disagrees_is_named() {
        let mut g = groups();
        let runs = g.values_mut().find(|r| r.len() > 1).unwrap();
        runs[1].1 ^= 1;
        let name = runs[1].0;
        let d = disagreements(&g);
        assert_eq!(d.len(), 1);
        assert!(d[0].contains(name), "{d:?}");
    }
}
