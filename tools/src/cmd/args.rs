//! Option groups that several subcommands share (`#[command(flatten)]`),
//! and the checks and progress bars their handlers have in common.

use std::path::PathBuf;

use anyhow::{bail, Result};
use ferrite::{LayerConfig, Model, SamplerConfig};
use ferrite_tools::mqar::{MqarParams, Queries};
use ferrite_tools::run::AlignedImage;
use indicatif::{ProgressBar, ProgressStyle};

/// The image a command runs or reads (the first positional argument).
#[derive(clap::Args)]
pub struct ImageArg {
    /// The image.
    image: PathBuf,
}

impl ImageArg {
    /// Reads the image into aligned memory.
    pub fn read(&self) -> Result<AlignedImage> {
        AlignedImage::read(&self.image)
    }
}

/// The shape of MQAR sequences (docs/mqar.md): `eval --mqar`, `soak --mqar`
/// and `mqar-sample`. (`quantize --calibrate-mqar` has its own, prefixed
/// options: clap's flattening cannot rename.) A command with another mode
/// names the fields (`pairs`, `seq_len`, `queries`) in its conflicts.
#[derive(clap::Args)]
pub struct MqarShape {
    /// MQAR key-value pairs per sequence (1..=64).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    pairs: usize,
    /// MQAR sequence length: at least 4 * pairs, up to 2^64 - 1 (even
    /// with --queries spread).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    seq_len: usize,
    /// MQAR query layout (docs/mqar.md): `end` (all queries after the
    /// noise) or `spread` (queries at uniformly random two-token slots
    /// after the pairs; not Zoology's power-law placement).
    #[arg(long, value_enum, default_value_t = Queries::End)]
    queries: Queries,
}

impl MqarShape {
    /// The generator's parameters (checked by the generator).
    pub fn params(&self) -> MqarParams {
        MqarParams {
            pairs: self.pairs,
            seq_len: self.seq_len,
            queries: self.queries,
        }
    }
}

/// The sampler of `generate` (the runtime's `SamplerConfig`, checked by
/// `Sampler::new`).
#[derive(clap::Args)]
pub struct SamplerArgs {
    /// Sampling temperature (0 = greedy; finite, >= 0).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    temperature: f32,
    /// Keep the k most likely tokens (0 = off; at most 64).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    top_k: usize,
    /// Nucleus sampling mass (1 = off; in (0, 1]).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    top_p: f32,
    /// PRNG seed.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    seed: u64,
}

impl SamplerArgs {
    /// The runtime's sampler configuration.
    pub fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

/// Refuses a `--pin` that would do nothing, or pin more than the `tokens`
/// given (`what` names them in the message).
pub fn check_pin(model: &Model<'_>, pin: usize, tokens: usize, what: &str) -> Result<()> {
    if pin == 0 {
        return Ok(());
    }
    let swa = (0..model.config().num_layers as usize)
        .any(|i| matches!(model.layer(i), Ok(LayerConfig::Swa(_))));
    if !swa {
        bail!("--pin {pin} does nothing: the model has no sliding-window attention (swa) layer");
    }
    if pin > tokens {
        bail!(
            "--pin {pin} is larger than {what} ({tokens} tokens): only tokens given can be pinned"
        );
    }
    Ok(())
}

/// A progress bar on stderr counting `len` of `unit`.
pub fn progress_bar(len: u64, unit: &str) -> ProgressBar {
    ProgressBar::new(len).with_style(
        ProgressStyle::with_template(&format!("{{msg}} [{{bar:30}}] {{pos}}/{{len}} {unit}"))
            .expect("static template")
            .progress_chars("=> "),
    )
}
