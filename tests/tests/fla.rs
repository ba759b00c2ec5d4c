//! Checkpoints written by the real flash-linear-attention library (fla 0.6.0,
//! `save_pretrained`), with fla's own logits: `tests/fla/` (made by
//! `ferrite-fla-fixtures`, tools/python, on a GPU; see tests/fla/README.md).
//!
//! f32 checkpoints: ferrite's logits within 1e-4 relative (to the largest
//! logit) of fla's. bf16 checkpoints (sharded, with an index): within 1e-4
//! relative of fla's f32 logits on the bf16-rounded weights.

use std::path::PathBuf;

use ferrite_tests::{expected, image_of, max_abs_diff};
use ferrite_tools::run::logits;
use ferrite_tools::writer::WriteOptions;

const RELATIVE_TOLERANCE: f32 = 1e-4;

fn fla_dirs() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fla");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("tests/fla exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("expected.safetensors").exists())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn fla_checkpoints_match_fla_logits() {
    let dirs = fla_dirs();
    assert_eq!(dirs.len(), 16, "8 cases x (f32, bf16)");
    let mut failures = Vec::new();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let exp = expected(&dir);
        let image = image_of(&dir, &WriteOptions::default());
        let got = logits(image.model().unwrap(), &exp.tokens, 0).unwrap();
        let scale = exp
            .logits
            .iter()
            .flatten()
            .fold(0.0f32, |m, v| m.max(v.abs()));
        let rel = max_abs_diff(&got, &exp.logits) / scale;
        println!("{name:<24} max|diff| / max|logit| = {rel:.2e}");
        if rel.is_nan() || rel > RELATIVE_TOLERANCE {
            failures.push(format!("{name}: {rel:e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "over {RELATIVE_TOLERANCE:e}: {failures:?}"
    );
}

#[test]
fn sharded_bf16_checkpoints_record_their_source() {
    for dir in fla_dirs()
        .into_iter()
        .filter(|d| d.to_string_lossy().ends_with("_bf16"))
    {
        assert!(
            dir.join("model.safetensors.index.json").exists(),
            "{} is sharded",
            dir.display()
        );
        let image = image_of(&dir, &WriteOptions::default());
        let provenance = image.model().unwrap().config().provenance;
        assert_eq!(provenance >> 8, 2, "{}: source dtype bf16", dir.display());
        assert!(
            matches!(provenance & 0xFF, 1..=3),
            "{}: an fla model_type",
            dir.display()
        );
    }
}
