//! Shared helpers for the integration tests: fixture discovery and loading.

use std::path::{Path, PathBuf};

pub mod sim_flash;

use ferrite_tools::model_dir::ModelDir;
use ferrite_tools::mqar::SplitMix64;
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

/// Deterministic splitmix64 stream for test data (weights, tokens): the
/// MQAR generator's stream (`ferrite_tools::mqar::SplitMix64`).
pub struct TestRng(SplitMix64);

impl TestRng {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> TestRng {
        TestRng(SplitMix64::new(seed))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [-1, 1).
    pub fn symmetric(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Uniform integer in `0..n`.
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % n as u64) as u32
    }
}

/// A model directory with random weights for `config` (uniform, scaled by
/// 1/sqrt(fan_in) for matrices; norms near 1).
pub fn random_model(config: ferrite_tools::config_json::Config, seed: u64) -> ModelDir {
    use ferrite::image::Role;
    use ferrite_tools::model_dir::SourceTensor;
    use ferrite_tools::writer::{expected_specs, tensor_name};
    let mut rng = TestRng::new(seed);
    let mut tensors = std::collections::BTreeMap::new();
    for spec in expected_specs(&config) {
        if spec.role == Role::BlaPhi {
            continue;
        }
        let shape: Vec<usize> = spec.dims[..spec.ndim()]
            .iter()
            .map(|&d| d as usize)
            .collect();
        let n = spec.numel();
        let fan_in = if shape.len() > 1 { n / shape[0] } else { 1 };
        let values = (0..n)
            .map(|_| match spec.role {
                Role::AttnNorm | Role::MlpNorm | Role::FinalNorm | Role::ONorm | Role::GNorm => {
                    1.0 + 0.1 * rng.symmetric()
                }
                Role::Embeddings => rng.symmetric() * 1.7,
                _ => rng.symmetric() * 1.7 / (fan_in as f32).sqrt(),
            })
            .collect();
        tensors.insert(
            tensor_name(spec.layer, spec.role),
            SourceTensor { shape, values },
        );
    }
    ModelDir {
        config,
        tensors,
        source_dtype: "f32".into(),
        warnings: Vec::new(),
        tokenizer: None,
    }
}

/// An aligned image of an in-memory model directory (f32 weights).
pub fn image_of_model(dir: &ModelDir) -> AlignedImage {
    let image = build_image(dir, &WriteOptions::default(), |_, _| {}).expect("image builds");
    AlignedImage::new(&image.bytes)
}
