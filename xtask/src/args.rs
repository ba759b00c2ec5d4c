//! What several commands share: the option groups of the firmware commands
//! (image, math, generate), their value checks (one line each, refusing
//! before anything builds what a firmware's build script would reject) and
//! the demo's settings. No command module needs `cli.rs` (the commands) or
//! `main.rs`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::builder::{NonEmptyStringValueParser, PossibleValuesParser, TypedValueParser};
use clap::Args;
use ferrite::image::DType;

use crate::boards::{self, Board, BuildOpts, BOARDS, CHIPS};
use crate::host;

/// The demo: the trained English byte-level LM (1.8M params; its int8 image,
/// 1.9 MB, fits the M4F's 4 MB flash where the f32 one would not), sampled with
/// a fixed seed so that the text is the same on every run and equals
/// `ferrite generate`'s.
pub const DEMO_MODEL: &str = "models/lm/en-m4f";
/// The demo's storage type.
pub const DEMO_DTYPE: DType = DType::I8;
/// The demo's prompt.
pub const DEMO_PROMPT: &str = "A man ";
/// The demo's tokens.
pub const DEMO_N: usize = 200;
/// The demo's sampling temperature.
pub const DEMO_TEMPERATURE: f32 = 0.6;
/// The demo's sampler seed.
pub const DEMO_SEED: u64 = 1;

/// A board of the table, by name.
pub fn board() -> impl TypedValueParser<Value = &'static Board> {
    row_of(BOARDS)
}

/// A chip of the table, by name.
pub fn chip() -> impl TypedValueParser<Value = &'static Board> {
    row_of(CHIPS)
}

/// A row of `rows`, by name (clap lists the names).
fn row_of(rows: &'static [Board]) -> impl TypedValueParser<Value = &'static Board> {
    let names = PossibleValuesParser::new(rows.iter().map(|b| b.name));
    names.map(move |s| rows.iter().find(|t| t.name == s).expect("a possible value"))
}

/// A count of at least `MIN` (`-n`: a firmware needs at least one token or MQAR sequence).
pub fn at_least<const MIN: usize>(s: &str) -> Result<usize, String> {
    match s.parse() {
        Ok(n) if n >= MIN => Ok(n),
        Ok(_) => Err(format!("must be at least {MIN}")),
        Err(e) => Err(format!("{e}")),
    }
}

/// `--prompt`: not empty.
pub fn prompt() -> NonEmptyStringValueParser {
    NonEmptyStringValueParser::new()
}

/// `--dtype`: a storage type of the runtime, by its name (`ferrite quantize --dtype`).
fn dtype(s: &str) -> Result<DType, String> {
    let all = || (0..).map_while(DType::from_code);
    all().find(|d| d.name() == s).ok_or_else(|| {
        let names: Vec<_> = all().map(DType::name).collect();
        format!("use {}", names.join(", "))
    })
}

/// `--temperature`: a finite number >= 0.
fn temperature(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if t >= 0.0 && t.is_finite() => Ok(t),
        _ => Err("must be a finite number >= 0".into()),
    }
}

/// `--top-p`: in (0, 1].
fn top_p(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err("must be in (0, 1]".into()),
    }
}

/// `--image F|DIR [--dtype D]`: the model a firmware embeds.
#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct ImageArgs {
    /// An image file, or a model directory (quantized to --dtype)
    #[arg(long, value_name = "F|DIR")]
    pub image: Option<PathBuf>,
    /// The storage type a model directory is quantized to: f32, f16, int8, int4 [default: int8]
    #[arg(long, value_name = "D", value_parser = dtype)]
    pub dtype: Option<DType>,
}

impl ImageArgs {
    /// The image of `--image`, or without it `default()`.
    pub fn resolve(&self, default: impl FnOnce() -> Result<PathBuf>) -> Result<PathBuf> {
        match &self.image {
            Some(p) => image(p, self.dtype.unwrap_or(DType::I8)),
            None => default(),
        }
    }
}

/// An image file as it is, or a model directory quantized to `dtype`.
pub fn image(path: &Path, dtype: DType) -> Result<PathBuf> {
    let path =
        std::fs::canonicalize(path).with_context(|| format!("--image {}", path.display()))?;
    if !path.is_dir() {
        return Ok(path);
    }
    let rel = path.strip_prefix(boards::root_dir()).unwrap_or(&path);
    host::shipped_image(&rel.to_string_lossy(), dtype.name())
}

/// `--math fast|libm`: the runtime's `fast-math` feature on or off (default the target's).
#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct MathArgs {
    /// The runtime's fast-math feature on (fast) or off (libm) [default: the target's]
    #[arg(long = "math", value_name = "fast|libm",
          value_parser = PossibleValuesParser::new(["fast", "libm"]).map(|s| s == "fast"))]
    pub fast_math: Option<bool>,
}

/// What the `generate` firmware runs: image, prompt, length, sampler, math.
#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// The prompt [default: "Once upon a time"]
    #[arg(long, value_parser = prompt())]
    pub prompt: Option<String>,
    /// Tokens to generate [default: 32]
    #[arg(short = 'n', long = "tokens", alias = "n", value_parser = at_least::<1>)]
    pub n: Option<usize>,
    /// Sampling temperature; 0 is greedy [default: 0]
    #[arg(long, value_parser = temperature, allow_negative_numbers = true)]
    pub temperature: Option<f32>,
    /// Sample among the K most likely tokens; 0: all [default: 0]
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Sample among the most likely tokens that together have probability P [default: 1]
    #[arg(long, value_name = "P", value_parser = top_p)]
    pub top_p: Option<f32>,
    /// The sampler's seed [default: 0]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Attend to baked memory N in every `cross` layer (`ferrite generate
    /// --memory`; docs/cross-attention.md) [default: 0]
    #[arg(long, value_name = "N")]
    pub memory: Option<u32>,
    #[command(flatten)]
    pub math: MathArgs,
}

impl GenerateArgs {
    /// The prompt, or the default one.
    pub fn prompt(&self) -> &str {
        self.prompt.as_deref().unwrap_or(boards::DEFAULT_PROMPT)
    }

    /// The number of tokens, or the default.
    pub fn n(&self) -> usize {
        self.n.unwrap_or(boards::DEFAULT_N)
    }

    /// The firmware's build settings: the sampler (defaults where not given) and the math.
    pub fn build_opts(&self) -> BuildOpts {
        let d = BuildOpts::default();
        BuildOpts {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k: self.top_k.unwrap_or(d.top_k),
            top_p: self.top_p.unwrap_or(d.top_p),
            seed: self.seed.unwrap_or(d.seed),
            memory: self.memory.unwrap_or(d.memory),
            fast_math: self.math.fast_math,
            ..d
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_file_is_taken_as_it_is_and_defaults_apply() {
        let file = boards::root_dir().join("Cargo.toml");
        assert_eq!(
            image(&file, DType::I8).unwrap(),
            file.canonicalize().unwrap()
        );
        let e = image(Path::new("no/such.fer"), DType::I8).unwrap_err();
        assert!(
            format!("{e:#}").starts_with("--image no/such.fer: "),
            "{e:#}"
        );
        let none = ImageArgs::default().resolve(|| Ok("default.fer".into()));
        assert_eq!(none.unwrap(), PathBuf::from("default.fer"));
        let g = GenerateArgs::default();
        let (o, d) = (g.build_opts(), BuildOpts::default());
        assert_eq!(
            (g.prompt(), g.n()),
            (boards::DEFAULT_PROMPT, boards::DEFAULT_N)
        );
        assert_eq!(
            (o.temperature, o.top_k, o.top_p, o.seed),
            (d.temperature, d.top_k, d.top_p, d.seed)
        );
    }
}
