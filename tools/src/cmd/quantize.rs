//! `ferrite quantize`: a model directory to a flash image.

use std::path::PathBuf;
use std::sync::LazyLock;

use anyhow::{bail, Context, Result};
use clap::builder::PossibleValue;
use clap::ValueEnum;
use ferrite::image::{DType, Layout};
use ferrite::mixers::BlaPhiSource;
use ferrite::{StateFormat, TokenPath};
use ferrite_tools::calibrate::{self, Source};
use ferrite_tools::fla::{FlaOptions, Mamba2Groups};
use ferrite_tools::memory::{self, MemoryText};
use ferrite_tools::model_dir::ModelDir;
use ferrite_tools::mqar::{MqarParams, Queries};
use ferrite_tools::quant::Scales;
use ferrite_tools::run::AlignedImage;
use ferrite_tools::writer::{self, WriteOptions};
use indicatif::{ProgressBar, ProgressStyle};

/// Turn a model directory (config.json + model.safetensors) into a flash image.
///
/// Options that would change nothing are refused: --group-size when no
/// tensor is quantized, a --rule that decides no tensor, --dtype when rules
/// decide every weight matrix, --window when no attention layer lacks a window.
#[derive(clap::Args)]
pub struct Args {
    /// Directory with config.json and model.safetensors.
    model_dir: PathBuf,
    /// Output image.
    #[arg(short, long)]
    output: PathBuf,
    /// dtype of weight matrices and embeddings [default: f32]. An error
    /// when given and a --rule decides every weight matrix.
    #[arg(long, value_enum)]
    dtype: Option<DTypeArg>,
    /// Group size along the input dim for int8/int4 (e.g. 32, 64, 128); it
    /// must divide every quantized tensor's input dim (1..=65535, even for
    /// int4). Default: per tensor, the largest of 64, 32, 16, 8 that divides
    /// it. An error when no tensor is quantized (f32/f16 and no int rule).
    #[arg(long, allow_negative_numbers = true)]
    group_size: Option<usize>,
    /// Per-tensor override GLOB=DTYPE (repeatable; first match wins), e.g.
    /// lm_head.weight=int8; names as `ferrite inspect` prints them. An error
    /// when a rule decides no tensor (matches none, or only tensors an
    /// earlier rule decides).
    #[arg(long = "rule")]
    rules: Vec<String>,
    /// Layout of int8/int4 matrices: `tiled` (the integer kernels, format
    /// 3; matrices whose input width is not a multiple of 16 stay row-major)
    /// or `rows` (row-major with f32 group scales, f32 activations, format 1-2).
    #[arg(long, value_enum, default_value_t = LayoutArg::Tiled)]
    layout: LayoutArg,
    /// Scales of tiled int4 matrices: `search` (per group, the scale with
    /// the least squared weight error, values -8..7) or `absmax` (max|w|/7,
    /// values -7..7: the scheme before search). An error when no tensor is
    /// tiled int4.
    #[arg(long, value_enum)]
    scales: Option<ScalesArg>,
    #[command(flatten)]
    calibration: Calibration,
    /// fla checkpoints: run attention layers that have no window_size as
    /// sliding-window attention with this window (changes their outputs).
    /// An error when no layer lacks a window_size.
    #[arg(long, allow_negative_numbers = true)]
    window: Option<u32>,
    /// fla `mamba2` checkpoints with n_groups > 1: how heads read the
    /// groups of B and C, `interleaved` (head h reads group h mod G: fla's
    /// PyTorch forward, trained without mamba_ssm) or `blocked` (group
    /// h / (H/G): mamba_ssm's kernels). fla 0.6.0 has both and a checkpoint
    /// does not record which; such a checkpoint is refused without it.
    #[arg(long, value_enum)]
    mamba2_groups: Option<Mamba2GroupsArg>,
    /// BLA layers' write weights phi: `computed` (no table in the image;
    /// the runtime computes each token's row: format 5) or `table` (the
    /// f32 [P, N] table `attn.phi`, P*N*4 bytes per layer, and the lowest
    /// format version otherwise possible, for runtimes that read formats
    /// 1-4) [default: computed]. A warning, not an error, for a model
    /// without a bla layer (scripts pass it to every model).
    #[arg(long, value_enum)]
    bla_phi: Option<BlaPhiArg>,
    /// How a token is computed: `f32`, or `int`, the integer token path
    /// (format 6, docs/integer-path.md: no f32 arithmetic, the same bits on
    /// every target; needs --dtype int8 or int4 in the tiled layout).
    #[arg(long, value_enum, default_value_t = PathArg::F32)]
    path: PathArg,
    /// State format of the layers whose mixer has an integer step: `int16`
    /// (each takes its integer state: GDN int16, about half the bytes; SWA
    /// an int8 KV cache, about a quarter; GSA int16 slot memories, about
    /// 0.56-0.75) or `f32` (their f32 step); other
    /// layers keep f32 states. Only with --path int [default: int16 with
    /// --path int].
    #[arg(long, value_enum)]
    state: Option<StateArg>,
    /// A memory text to bake into every cross layer (repeatable, up to 8;
    /// memory i is the i-th given): tokenized with the image's tokenizer
    /// and encoded by the model's memory encoder (its first
    /// `memory_encoder_layers` layers, then each cross layer's norm,
    /// k_proj and v_proj; docs/cross-attention.md), one key and value
    /// slot per token. Every memory must have the same number of tokens;
    /// it replaces the config's `memories` and `memory_slots`. An error for
    /// a model without a cross layer.
    #[arg(long = "memory", value_name = "FILE")]
    memories: Vec<PathBuf>,
}

/// What tiled int4 matrices are quantized for: a text, or MQAR sequences of
/// the shape given.
#[derive(clap::Args)]
struct Calibration {
    /// Calibration text: the f32 model is run over it (512-token chunks)
    /// and tiled int4 matrices are quantized for the error of their
    /// products on its activations (GPTQ) instead of their weights'. Use
    /// text like the model's (never the evaluation text). An error when no
    /// tensor is tiled int4.
    #[arg(long, value_name = "FILE", conflicts_with = "calibrate_mqar")]
    calibrate: Option<PathBuf>,
    /// Calibrate (as --calibrate) on N MQAR sequences of seed 1
    /// (docs/mqar.md; the evaluation uses seed 0), for MQAR models; their
    /// shape is --calibrate-pairs, --calibrate-seq-len, --calibrate-queries.
    #[arg(long, value_name = "N")]
    calibrate_mqar: Option<usize>,
    /// Key-value pairs per calibration sequence (1..=64); needs --calibrate-mqar.
    #[arg(
        long,
        value_name = "P",
        default_value_t = 8,
        requires = "calibrate_mqar",
        allow_negative_numbers = true
    )]
    calibrate_pairs: usize,
    /// Calibration sequence length (at least 4 * pairs; even with spread
    /// queries); needs --calibrate-mqar.
    #[arg(
        long,
        value_name = "L",
        default_value_t = 64,
        requires = "calibrate_mqar",
        allow_negative_numbers = true
    )]
    calibrate_seq_len: usize,
    /// Calibration query layout (docs/mqar.md): `end` or `spread`; needs
    /// --calibrate-mqar. Calibrate on the layout the model was trained on.
    #[arg(long, value_enum, default_value_t = Queries::End, requires = "calibrate_mqar")]
    calibrate_queries: Queries,
}

impl Calibration {
    /// What to run the f32 model over, if anything (reads the text).
    fn source(&self) -> Result<Option<Source>> {
        Ok(match (&self.calibrate, self.calibrate_mqar) {
            (Some(path), _) => {
                Some(Source::Text(std::fs::read(path).with_context(|| {
                    format!("cannot read {}", path.display())
                })?))
            }
            (None, Some(n)) => Some(Source::Mqar {
                n,
                params: MqarParams {
                    pairs: self.calibrate_pairs,
                    seq_len: self.calibrate_seq_len,
                    queries: self.calibrate_queries,
                },
            }),
            (None, None) => None,
        })
    }
}

/// `--dtype`: every dtype the runtime decodes, by its runtime name
/// ([`writer::dtypes`], as `--rule` takes them; no second list here).
#[derive(Clone, Copy)]
struct DTypeArg(DType);

impl ValueEnum for DTypeArg {
    fn value_variants<'a>() -> &'a [Self] {
        static ALL: LazyLock<Vec<DTypeArg>> =
            LazyLock::new(|| writer::dtypes().map(DTypeArg).collect());
        &ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.name()).aliases(writer::dtype_alias(self.0)))
    }
}

// The variants of the enums below have no doc comments on purpose: the
// option's own help describes each value, and clap would otherwise repeat
// them as a list under it.

/// `--layout`.
#[derive(Clone, Copy, ValueEnum)]
enum LayoutArg {
    Tiled,
    Rows,
}

impl From<LayoutArg> for Layout {
    fn from(l: LayoutArg) -> Layout {
        match l {
            LayoutArg::Tiled => Layout::Tiled,
            LayoutArg::Rows => Layout::RowMajor,
        }
    }
}

/// `--scales`.
#[derive(Clone, Copy, ValueEnum)]
enum ScalesArg {
    Search,
    Absmax,
}

impl From<ScalesArg> for Scales {
    fn from(s: ScalesArg) -> Scales {
        match s {
            ScalesArg::Search => Scales::Search,
            ScalesArg::Absmax => Scales::Absmax,
        }
    }
}

/// `--bla-phi`.
#[derive(Clone, Copy, ValueEnum)]
enum BlaPhiArg {
    Computed,
    Table,
}

impl From<BlaPhiArg> for BlaPhiSource {
    fn from(b: BlaPhiArg) -> BlaPhiSource {
        match b {
            BlaPhiArg::Computed => BlaPhiSource::Computed,
            BlaPhiArg::Table => BlaPhiSource::Table,
        }
    }
}

/// `--mamba2-groups`.
#[derive(Clone, Copy, ValueEnum)]
enum Mamba2GroupsArg {
    Blocked,
    Interleaved,
}

impl From<Mamba2GroupsArg> for Mamba2Groups {
    fn from(g: Mamba2GroupsArg) -> Mamba2Groups {
        match g {
            Mamba2GroupsArg::Blocked => Mamba2Groups::Blocked,
            Mamba2GroupsArg::Interleaved => Mamba2Groups::Interleaved,
        }
    }
}

/// `--path`.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum PathArg {
    F32,
    Int,
}

/// `--state`.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum StateArg {
    F32,
    Int16,
}

/// Checks the options against the model, quantizes, validates the image
/// with the runtime and writes it; the summary goes to stderr.
pub fn run(args: Args) -> Result<()> {
    let calibration = args.calibration.source()?;
    let token_path = match args.path {
        PathArg::Int => TokenPath::Int,
        PathArg::F32 => TokenPath::F32,
    };
    let state = match (args.state, token_path) {
        (Some(StateArg::Int16), TokenPath::F32) => {
            bail!("--state int16 needs --path int (integer states run on the integer token path)")
        }
        (Some(StateArg::F32), _) | (None, TokenPath::F32) => StateFormat::F32,
        _ => StateFormat::Int16,
    };
    let mut opts = WriteOptions {
        dtype: args.dtype.map_or(DType::F32, |d| d.0),
        group_size: args.group_size,
        rules: args
            .rules
            .iter()
            .map(|r| writer::parse_rule(r))
            .collect::<Result<_>>()?,
        layout: args.layout.into(),
        scales: args.scales.map_or(Scales::Search, Scales::from),
        calibration: None,
        bla_phi: args
            .bla_phi
            .map_or(BlaPhiSource::Computed, BlaPhiSource::from),
        token_path,
        state,
    };
    let dir = ModelDir::open_with(
        &args.model_dir,
        &FlaOptions {
            window: args.window,
            mamba2_groups: args.mamba2_groups.map(Mamba2Groups::from),
        },
    )?;
    let mut dir = dir;
    if !args.memories.is_empty() {
        let texts = args
            .memories
            .iter()
            .map(|p| {
                Ok(MemoryText {
                    name: p.display().to_string(),
                    text: std::fs::read(p)
                        .with_context(|| format!("--memory: cannot read {}", p.display()))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let baked = memory::bake(&mut dir, &texts)?;
        eprintln!(
            "memories: {} of {} slots (tokens) each, encoded by the model's memory encoder",
            baked.tokens.len(),
            baked.slots
        );
    }
    let dir = dir;
    writer::check_options(&dir, &opts, args.dtype.is_some())?;
    if writer::tiled_int4_count(&dir, &opts)? == 0 {
        if args.scales.is_some() {
            bail!("--scales does nothing: no tensor is stored as tiled int4");
        }
        if calibration.is_some() {
            bail!("--calibrate does nothing: no tensor is stored as tiled int4");
        }
    }
    for warning in &dir.warnings {
        eprintln!("warning: {warning}");
    }
    if token_path == TokenPath::Int {
        if !opts.dtype.is_quantized() || opts.layout != Layout::Tiled {
            bail!("--path int needs --dtype int8 or int4 in the tiled layout (the integer token path multiplies tiled matrices)");
        }
        let f32_layers = writer::f32_step_layers(&dir.config, &opts);
        if !f32_layers.is_empty() {
            eprintln!(
                "note: layers {f32_layers:?} have no integer step yet: they keep f32 states and run their f32 step inside the integer token path"
            );
        }
    }
    let bla_layers = writer::bla_layer_count(&dir.config);
    if args.bla_phi.is_some() && bla_layers == 0 {
        eprintln!("warning: --bla-phi does nothing: the model has no bla layer");
    }
    let defaults = writer::apply_int4_defaults(&dir, &mut opts)?;
    if let Some(source) = &calibration {
        let start = std::time::Instant::now();
        let h = calibrate::hessians(&dir, source)?;
        let vectors = h.values().map(|h| h.count).max().unwrap_or(0);
        eprintln!(
            "calibrated: {} input vectors per matrix, {} matrices, {:.1} s",
            vectors,
            h.len(),
            start.elapsed().as_secs_f64()
        );
        opts.calibration = Some(h);
    }
    if let Some(line) = defaults {
        eprintln!("{line}");
    }
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} tensors")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message("quantizing");
    let image = writer::build_image(&dir, &opts, |i, n| {
        bar.set_length(n as u64);
        bar.set_position(i as u64);
    })?;
    bar.finish_and_clear();
    // Validate with the runtime before writing anything.
    let aligned = AlignedImage::new(&image.bytes);
    let model = aligned
        .model()
        .context("the written image does not load (bug)")?;
    let output = &args.output;
    std::fs::write(output, &image.bytes)
        .with_context(|| format!("cannot write {}", output.display()))?;
    let worst = image
        .tensors
        .iter()
        .map(|t| t.rel_rms_error)
        .fold(0.0f32, f32::max);
    // Where BLA's write weights are (only for a model with bla layers).
    let bla = match (bla_layers, opts.bla_phi) {
        (0, _) => String::new(),
        (_, BlaPhiSource::Computed) => ", bla phi computed by the runtime (no table)".into(),
        (_, BlaPhiSource::Table) => ", bla phi stored as a table".into(),
    };
    eprintln!(
        "wrote {}: format v{}, {} tensors ({}), {} params, {} bytes flash, {} bytes RAM ({} state){bla}, worst rel. RMS error {:.2e}",
        output.display(),
        image.version,
        image.tensors.len(),
        image.dtype_summary(),
        image.params,
        image.bytes.len(),
        model.session_bytes(0).map_err(anyhow::Error::msg)?,
        model.state_bytes(0).map_err(anyhow::Error::msg)?,
        worst
    );
    Ok(())
}
