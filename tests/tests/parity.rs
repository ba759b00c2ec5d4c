//! The runtime against the independent f64 numpy reference (docs/spec.md §5):
//! max |logit difference| <= 1e-4 on every committed fixture (80 tokens each).

use ferrite_tests::{expected, fixture_dirs, image_of, max_abs_diff};
use ferrite_tools::run::logits;
use ferrite_tools::writer::WriteOptions;

const TOLERANCE: f32 = 1e-4;

#[test]
fn every_fixture_matches_the_reference() {
    let mut failures = Vec::new();
    for dir in fixture_dirs() {
        let exp = expected(&dir);
        assert!(
            exp.tokens.len() >= 64,
            "fixtures must cover at least 64 tokens"
        );
        let image = image_of(&dir, &WriteOptions::default());
        let got = logits(image.model().unwrap(), &exp.tokens, exp.pinned).unwrap();
        let diff = max_abs_diff(&got, &exp.logits);
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        println!("{name:<36} max|diff| = {diff:.3e}");
        if diff.is_nan() || diff > TOLERANCE {
            failures.push(format!("{name}: {diff:e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "fixtures over {TOLERANCE:e}: {failures:?}"
    );
}
