//! Shared helpers for the integration tests: fixture discovery and loading.

use std::path::{Path, PathBuf};

use ferrite_tools::model_dir::ModelDir;
use ferrite_tools::run::AlignedImage;
use ferrite_tools::writer::{build_image, WriteOptions};
use safetensors::SafeTensors;

/// `tests/fixtures` of the repository.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Every fixture directory (sorted), each with config.json, model.safetensors, expected.safetensors.
pub fn fixture_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("tests/fixtures exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.join("expected.safetensors").exists())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no fixtures found");
    dirs
}

/// What the f64 reference produced for a fixture.
pub struct Expected {
    /// Input tokens.
    pub tokens: Vec<u32>,
    /// Logits `[T][vocab]` (f32-rounded from the f64 reference).
    pub logits: Vec<Vec<f32>>,
    /// Pinned-prefix length the reference used.
    pub pinned: usize,
}

/// Reads `expected.safetensors` of a fixture.
pub fn expected(dir: &Path) -> Expected {
    let bytes = std::fs::read(dir.join("expected.safetensors")).expect("expected.safetensors");
    let (_, meta) = SafeTensors::read_metadata(&bytes).expect("metadata");
    let pinned = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("pinned"))
        .map_or(0, |p| p.parse().expect("pinned is an integer"));
    let st = SafeTensors::deserialize(&bytes).expect("valid safetensors");
    let tokens_view = st.tensor("tokens").expect("tokens");
    let tokens: Vec<u32> = tokens_view
        .data()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u32)
        .collect();
    let logits_view = st.tensor("logits").expect("logits");
    let vocab = logits_view.shape()[1];
    let flat: Vec<f32> = logits_view
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Expected {
        tokens,
        logits: flat.chunks(vocab).map(<[f32]>::to_vec).collect(),
        pinned,
    }
}

/// Builds an image of a model directory with the given options.
pub fn image_of(dir: &Path, opts: &WriteOptions) -> AlignedImage {
    let model_dir = ModelDir::open(dir).unwrap_or_else(|e| panic!("{}: {e:#}", dir.display()));
    let image = build_image(&model_dir, opts, |_, _| {})
        .unwrap_or_else(|e| panic!("{}: {e:#}", dir.display()));
    AlignedImage::new(&image.bytes)
}

/// Largest absolute difference between two logit tables.
pub fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}
