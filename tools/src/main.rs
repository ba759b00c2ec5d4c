//! `ferrite`: quantize model directories into flash images, inspect and run them.
//!
//! Every command runs the `ferrite` runtime crate itself (the code the boards
//! run) and exits non-zero with a one-line reason on bad input (clap's whole
//! message, exit status 2, for argument errors); none panics or aborts.
//! What a command streams (generated tokens, logits, MQAR sequences) is
//! written as it is made, never held, so memory stays constant however many.
//! An option that would change nothing is refused, or warned about where a
//! script may reasonably pass it regardless (each `--help` says which).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use ferrite::mixers::BlaPhiSource;
use ferrite::{LayerConfig, Model, Sampler, SamplerConfig, Session, Tokenizer};
use ferrite_tools::calibrate::{self, Source};
use ferrite_tools::fla::{self, FlaOptions};
use ferrite_tools::model_dir::ModelDir;
use ferrite_tools::quant::Scales;
use ferrite_tools::run::{self, AlignedImage};
use ferrite_tools::writer::{self, WriteOptions};
use ferrite_tools::{eval, mqar, soak};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(
    name = "ferrite",
    version,
    about = "Fixed-state language models for microcontrollers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Turn a model directory (config.json + model.safetensors) into a flash image.
    ///
    /// Options that would change nothing are refused: --group-size when no
    /// tensor is quantized, a --rule that decides no tensor, --dtype when rules
    /// decide every weight matrix, --window when no attention layer lacks a window.
    Quantize {
        /// Directory with config.json and model.safetensors.
        model_dir: PathBuf,
        /// Output image.
        #[arg(short, long)]
        output: PathBuf,
        /// dtype of weight matrices and embeddings: f32, f16, int8, int4
        /// [default: f32]. An error when given and a --rule decides every
        /// weight matrix.
        #[arg(long)]
        dtype: Option<String>,
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
        #[arg(long, default_value = "tiled", value_parser = ["tiled", "rows"])]
        layout: String,
        /// Scales of tiled int4 matrices: `search` (per group, the scale with
        /// the least squared weight error, values -8..7) or `absmax` (max|w|/7,
        /// values -7..7: the scheme before search). An error when no tensor is
        /// tiled int4.
        #[arg(long, value_parser = ["search", "absmax"])]
        scales: Option<String>,
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
        #[arg(long, value_enum, default_value_t = mqar::Queries::End, requires = "calibrate_mqar")]
        calibrate_queries: mqar::Queries,
        /// fla checkpoints: run attention layers that have no window_size as
        /// sliding-window attention with this window (changes their outputs).
        /// An error when no layer lacks a window_size.
        #[arg(long, allow_negative_numbers = true)]
        window: Option<u32>,
        /// BLA layers' write weights phi: `computed` (no table in the image;
        /// the runtime computes each token's row: format 5) or `table` (the
        /// f32 [P, N] table `attn.phi`, P*N*4 bytes per layer, and the lowest
        /// format version otherwise possible, for runtimes that read formats
        /// 1-4) [default: computed]. A warning, not an error, for a model
        /// without a bla layer (scripts pass it to every model).
        #[arg(long, value_parser = ["computed", "table"])]
        bla_phi: Option<String>,
        /// How a token is computed: `f32`, or `int`, the integer token path
        /// (format 6, docs/integer-path.md: no f32 arithmetic, the same bits
        /// on every target; needs --dtype int8 or int4 in the tiled layout).
        #[arg(long, default_value = "f32", value_parser = ["f32", "int"])]
        path: String,
        /// State format of the layers whose mixer has an integer step
        /// (GDN): `int16` (about half the bytes) or `f32` (their f32 step);
        /// other layers keep f32 states. Only with --path int
        /// [default: int16 with --path int].
        #[arg(long, value_parser = ["f32", "int16"])]
        state: Option<String>,
    },
    /// Show an image's config, tensors, sizes and the RAM it needs.
    Inspect {
        /// The image.
        image: PathBuf,
    },
    /// Print the logits of every position as JSON (one array per input token),
    /// streamed as they are computed.
    Logits {
        /// The image.
        image: PathBuf,
        /// Comma-separated token ids (each below the vocabulary size).
        #[arg(long)]
        tokens: String,
        /// Pin the first N tokens (after the sinks) in SWA layers; at most the
        /// number of tokens, and only for a model with an SWA layer.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        pin: usize,
    },
    /// Print the token ids of a text in the image's tokenizer (comma-separated).
    Tokenize {
        /// The image.
        image: PathBuf,
        /// The text.
        #[arg(long)]
        text: String,
    },
    /// Generate text from a prompt, streamed token by token in constant memory.
    ///
    /// Sampling options that greedy decoding ignores (--top-k, --top-p, --seed
    /// with --temperature 0; --temperature, --top-p, --seed with --top-k 1) and
    /// a --top-k that keeps the whole vocabulary are warnings on stderr, not
    /// errors: scripts pass the full sampler to every run.
    Generate {
        /// The image.
        image: PathBuf,
        /// Prompt text (at least one token).
        #[arg(long)]
        prompt: String,
        /// Tokens to generate: any number up to 2^64 - 1 (output streams and
        /// memory stays constant, so a huge N runs until stopped).
        #[arg(
            short = 'n',
            long = "tokens",
            default_value_t = 64,
            allow_negative_numbers = true
        )]
        n: usize,
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
        /// Print the generated token ids (comma-separated, one line) instead of
        /// text; streamed as they come.
        #[arg(long)]
        ids: bool,
        /// Pin the first N prompt tokens (after the sinks) in SWA layers; at
        /// most the prompt's token count, and only for a model with an SWA layer.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        pin: usize,
    },
    /// Evaluate: bits per byte on a text file, or MQAR accuracy (docs/mqar.md).
    /// Progress goes to stderr; the last stdout line is `bits_per_byte=..` or `accuracy=..`.
    ///
    /// The text and its token ids are held in memory (about 5 bytes per byte
    /// of text); MQAR sequences are drawn and scored one token at a time, in
    /// constant memory for any -n and --seq-len. The options of one mode are
    /// refused with the other.
    Eval {
        /// The image.
        image: PathBuf,
        /// Text file to score, in the image's tokenizer (bits per byte of the text).
        #[arg(long, conflicts_with = "mqar", required_unless_present = "mqar")]
        text: Option<PathBuf>,
        /// With --text: reset the state every N tokens (each chunk predicts its
        /// tokens after the first) [default: 512]; at least 2. A chunk longer
        /// than the text is a warning (the state is never reset).
        #[arg(long, conflicts_with = "mqar", allow_negative_numbers = true)]
        chunk: Option<usize>,
        /// Score MQAR recall on generated sequences.
        #[arg(long)]
        mqar: bool,
        /// MQAR seed (0 = the held-out evaluation set).
        #[arg(
            long,
            default_value_t = 0,
            conflicts_with = "text",
            allow_negative_numbers = true
        )]
        seed: u64,
        /// MQAR sequences: any number up to 2^64 - 1.
        #[arg(
            short = 'n',
            long = "n",
            default_value_t = 1000,
            conflicts_with = "text",
            allow_negative_numbers = true
        )]
        n: usize,
        /// MQAR key-value pairs per sequence (1..=64).
        #[arg(
            long,
            default_value_t = 8,
            conflicts_with = "text",
            allow_negative_numbers = true
        )]
        pairs: usize,
        /// MQAR sequence length: at least 4 * pairs, up to 2^64 - 1 (even
        /// with --queries spread).
        #[arg(
            long,
            default_value_t = 64,
            conflicts_with = "text",
            allow_negative_numbers = true
        )]
        seq_len: usize,
        /// MQAR query layout (docs/mqar.md): `end` (all queries after the
        /// noise) or `spread` (queries at random two-token slots after the
        /// pairs, as in Zoology's MQAR).
        #[arg(
            long,
            value_enum,
            default_value_t = mqar::Queries::End,
            conflicts_with = "text"
        )]
        queries: mqar::Queries,
    },
    /// Stream many tokens through one session with no reset (a soak run): counts
    /// non-finite logits, tracks the largest state magnitude and scores the
    /// first and last windows. The last stdout line is `soak: tokens=..`.
    Soak {
        /// The image.
        image: PathBuf,
        /// Byte-level text to repeat; the stream's last window scores the same
        /// bytes as its first (bits per byte).
        #[arg(long, conflicts_with = "mqar", required_unless_present = "mqar")]
        text: Option<PathBuf>,
        /// Stream MQAR sequences back to back instead (--pairs, --seq-len,
        /// --queries; 8 pairs, 64 tokens, `end` by default); windows score
        /// recall accuracy.
        #[arg(long)]
        mqar: bool,
        /// MQAR key-value pairs per sequence (1..=64); with --mqar.
        #[arg(
            long,
            default_value_t = 8,
            conflicts_with = "text",
            allow_negative_numbers = true
        )]
        pairs: usize,
        /// MQAR sequence length: at least 4 * pairs (even with --queries
        /// spread); with --mqar.
        #[arg(
            long,
            default_value_t = 64,
            conflicts_with = "text",
            allow_negative_numbers = true
        )]
        seq_len: usize,
        /// MQAR query layout (docs/mqar.md): `end` or `spread`; with --mqar.
        #[arg(long, value_enum, default_value_t = mqar::Queries::End, conflicts_with = "text")]
        queries: mqar::Queries,
        /// MQAR seed.
        #[arg(long, default_value_t = 0, conflicts_with = "text")]
        seed: u64,
        /// Tokens to stream (text rounds up to end on a whole repeat).
        #[arg(long, default_value_t = 1_000_000)]
        tokens: u64,
        /// Tokens in the first and last windows.
        #[arg(long, default_value_t = 10_000)]
        window: u64,
        /// Scan the state for its largest magnitude every N tokens.
        #[arg(long, default_value_t = 1000)]
        scan_every: u64,
    },
    /// Print MQAR sequences (one per line, comma-separated ids), for cross-checks;
    /// streamed in constant memory.
    MqarSample {
        /// Seed.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        seed: u64,
        /// Sequences: any number up to 2^64 - 1.
        #[arg(
            short = 'n',
            long = "n",
            default_value_t = 1,
            allow_negative_numbers = true
        )]
        n: usize,
        /// Key-value pairs per sequence (1..=64).
        #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
        pairs: usize,
        /// Sequence length: at least 4 * pairs, up to 2^64 - 1 (even with
        /// --queries spread).
        #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
        seq_len: usize,
        /// Query layout (docs/mqar.md): `end` or `spread`.
        #[arg(long, value_enum, default_value_t = mqar::Queries::End)]
        queries: mqar::Queries,
    },
}

fn main() -> ExitCode {
    // clap's whole message (usage and tips) and its exit status: 2 for
    // argument errors, 0 for --help and --version.
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// Whether an error is the reader of stdout going away (`ferrite inspect x | head`).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

fn run(command: Command) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        Command::Quantize {
            model_dir,
            output,
            dtype,
            group_size,
            rules,
            layout,
            scales,
            calibrate,
            calibrate_mqar,
            calibrate_pairs,
            calibrate_seq_len,
            calibrate_queries,
            window,
            bla_phi,
            path,
            state,
        } => {
            let dtype_given = dtype.is_some();
            let token_path = if path == "int" {
                ferrite::TokenPath::Int
            } else {
                ferrite::TokenPath::F32
            };
            let state = match (state.as_deref(), token_path) {
                (Some("int16"), ferrite::TokenPath::F32) => {
                    bail!("--state int16 needs --path int (integer states run on the integer token path)")
                }
                (Some("f32"), _) | (None, ferrite::TokenPath::F32) => ferrite::StateFormat::F32,
                _ => ferrite::StateFormat::Int16,
            };
            let calibration = match (calibrate, calibrate_mqar) {
                (Some(path), _) => {
                    Some(Source::Text(std::fs::read(&path).with_context(|| {
                        format!("cannot read {}", path.display())
                    })?))
                }
                (None, Some(n)) => Some(Source::Mqar {
                    n,
                    params: mqar::MqarParams {
                        pairs: calibrate_pairs,
                        seq_len: calibrate_seq_len,
                        queries: calibrate_queries,
                    },
                }),
                (None, None) => None,
            };
            let opts = WriteOptions {
                dtype: writer::parse_dtype(dtype.as_deref().unwrap_or("f32"))?,
                group_size,
                rules: rules
                    .iter()
                    .map(|r| writer::parse_rule(r))
                    .collect::<Result<_>>()?,
                layout: if layout == "rows" {
                    ferrite::image::Layout::RowMajor
                } else {
                    ferrite::image::Layout::Tiled
                },
                scales: if scales.as_deref() == Some("absmax") {
                    Scales::Absmax
                } else {
                    Scales::Search
                },
                calibration: None,
                bla_phi: if bla_phi.as_deref() == Some("table") {
                    BlaPhiSource::Table
                } else {
                    BlaPhiSource::Computed
                },
                token_path,
                state,
            };
            quantize(
                &model_dir,
                &output,
                opts,
                QuantizeExtras {
                    dtype_given,
                    scales_given: scales.is_some(),
                    bla_phi_given: bla_phi.is_some(),
                    calibration,
                },
                &FlaOptions { window },
            )
        }
        Command::Inspect { image } => inspect(&AlignedImage::read(&image)?),
        Command::Tokenize { image, text } => {
            let image = AlignedImage::read(&image)?;
            let ids = eval::encode(&image.model()?, text.as_bytes())?;
            for (i, id) in ids.iter().enumerate() {
                write!(out, "{}{id}", if i == 0 { "" } else { "," })?;
            }
            writeln!(out)?;
            Ok(())
        }
        Command::Logits { image, tokens, pin } => {
            let image = AlignedImage::read(&image)?;
            let model = image.model()?;
            let tokens = parse_tokens(&tokens)?;
            let vocab = model.config().vocab_size;
            if let Some(&token) = tokens.iter().find(|&&t| t >= vocab) {
                bail!("{}", ferrite::Error::TokenOutOfRange { token, vocab });
            }
            check_pin(&model, pin, tokens.len(), "--tokens")?;
            // `[[..],[..]]` as serde_json writes a Vec<Vec<f32>>, one row at a time.
            out.write_all(b"[")?;
            let mut first = true;
            run::for_each_logits(model, &tokens, pin, |row| {
                if !std::mem::take(&mut first) {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut out, row)?;
                Ok(())
            })?;
            out.write_all(b"]\n")?;
            Ok(())
        }
        Command::Eval {
            image,
            text,
            chunk,
            mqar,
            seed,
            n,
            pairs,
            seq_len,
            queries,
        } => {
            let image = AlignedImage::read(&image)?;
            let model = image.model()?;
            match text {
                Some(path) => {
                    let text = std::fs::read(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    let ids = eval::encode(&model, &text)?;
                    let tokens = ids.len();
                    let given = chunk.is_some();
                    let chunk = chunk.unwrap_or(DEFAULT_CHUNK);
                    if given && chunk > tokens && tokens >= 2 {
                        eprintln!(
                            "warning: --chunk {chunk} is longer than the text ({tokens} tokens): the state is never reset"
                        );
                    }
                    let bar = progress_bar(tokens as u64, "tokens");
                    let score = eval::tokens_score(model, &ids, chunk, |done| {
                        bar.set_position(done as u64)
                    })?;
                    bar.finish_and_clear();
                    // nats: shortest round-trip text, so it parses back to the exact f64.
                    writeln!(
                        out,
                        "bytes={} tokens={tokens} tokenizer={} chunk={chunk} predicted_bytes={} nats={:?}",
                        text.len(),
                        model.tokenizer().kind_name(),
                        score.bytes,
                        score.nats
                    )?;
                    writeln!(out, "bits_per_byte={:.4}", score.bits_per_byte())?;
                }
                None => {
                    debug_assert!(mqar);
                    let params = mqar::MqarParams {
                        pairs,
                        seq_len,
                        queries,
                    };
                    let stream = mqar::MqarStream::new(seed, n, params)?;
                    let bar = progress_bar(n as u64, "sequences");
                    let (correct, total) =
                        eval::mqar_stream_counts(model, stream, |done| bar.set_position(done))?;
                    bar.finish_and_clear();
                    // `end` keeps the line it always had; other layouts say so.
                    let layout = match queries {
                        mqar::Queries::End => String::new(),
                        q => format!(" queries={q}"),
                    };
                    writeln!(
                        out,
                        "sequences={n} pairs={pairs} seq_len={seq_len}{layout} seed={seed} correct={correct} total={total}"
                    )?;
                    writeln!(out, "accuracy={:.4}", correct as f64 / total as f64)?;
                }
            }
            Ok(())
        }
        Command::Soak {
            image,
            text,
            mqar: _,
            pairs,
            seq_len,
            queries,
            seed,
            tokens,
            window,
            scan_every,
        } => {
            let image = AlignedImage::read(&image)?;
            let model = image.model()?;
            let bytes = match &text {
                Some(path) => Some(
                    std::fs::read(path)
                        .with_context(|| format!("cannot read {}", path.display()))?,
                ),
                None => None,
            };
            let source = match &bytes {
                Some(b) => soak::SoakSource::Text(b),
                None => soak::SoakSource::Mqar {
                    seed,
                    params: mqar::MqarParams {
                        pairs,
                        seq_len,
                        queries,
                    },
                },
            };
            let opts = soak::SoakOptions {
                tokens,
                window,
                scan_every,
            };
            let bar = progress_bar(tokens, "tokens");
            let report = soak::soak(model, source, opts, |done| bar.set_position(done))?;
            bar.finish_and_clear();
            writeln!(out, "{}", report.line())?;
            Ok(())
        }
        Command::MqarSample {
            seed,
            n,
            pairs,
            seq_len,
            queries,
        } => {
            let params = mqar::MqarParams {
                pairs,
                seq_len,
                queries,
            };
            let mut stream = mqar::MqarStream::new(seed, n, params)?;
            while let Some(seq) = stream.next_sequence() {
                for (i, t) in seq.enumerate() {
                    write!(out, "{}{}", if i == 0 { "" } else { "," }, t.token)?;
                }
                writeln!(out)?;
            }
            Ok(())
        }
        Command::Generate {
            image,
            prompt,
            n,
            temperature,
            top_k,
            top_p,
            seed,
            ids,
            pin,
        } => {
            let image = AlignedImage::read(&image)?;
            let config = SamplerConfig {
                temperature,
                top_k,
                top_p,
                seed,
            };
            let sampler = Sampler::new(config).map_err(anyhow::Error::msg)?;
            let model = image.model()?;
            for warning in sampler_warnings(&config, model.config().vocab_size) {
                eprintln!("warning: {warning}");
            }
            generate(model, prompt.as_bytes(), n, sampler, ids, pin)
        }
    }
}

/// `eval --text`'s chunk when none is given.
const DEFAULT_CHUNK: usize = 512;

/// The sampling options of `config` that change nothing (see `generate --help`).
fn sampler_warnings(c: &SamplerConfig, vocab: u32) -> Vec<String> {
    let mut idle = Vec::new();
    let why = if c.temperature == 0.0 {
        if c.top_k != 0 {
            idle.push("--top-k");
        }
        if c.top_p != 1.0 {
            idle.push("--top-p");
        }
        if c.seed != 0 {
            idle.push("--seed");
        }
        "--temperature 0 is greedy decoding"
    } else if c.top_k == 1 {
        idle.push("--temperature");
        if c.top_p != 1.0 {
            idle.push("--top-p");
        }
        if c.seed != 0 {
            idle.push("--seed");
        }
        "--top-k 1 is greedy decoding"
    } else {
        ""
    };
    let mut warnings = Vec::new();
    match idle.as_slice() {
        [] => {}
        [one] => warnings.push(format!("{why}: {one} does nothing")),
        [init @ .., last] => {
            warnings.push(format!("{why}: {} and {last} do nothing", init.join(", ")))
        }
    }
    if c.temperature != 0.0 && c.top_k > 1 && c.top_k >= vocab as usize {
        warnings.push(format!(
            "--top-k {} keeps the whole vocabulary ({vocab} tokens): it does nothing",
            c.top_k
        ));
    }
    warnings
}

/// Refuses a `--pin` that would do nothing, or pin more than the `tokens` given.
fn check_pin(model: &Model<'_>, pin: usize, tokens: usize, what: &str) -> Result<()> {
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

/// Human-readable `ModelConfig::provenance`.
fn provenance_text(p: u32) -> String {
    let format = match p & 0xFF {
        fla::source::FERRITE => "ferrite model dir".to_string(),
        fla::source::FLA_GATED_DELTANET => "fla checkpoint, model_type gated_deltanet".to_string(),
        fla::source::FLA_GSA => "fla checkpoint, model_type gsa".to_string(),
        fla::source::FLA_DELTA_NET => "fla checkpoint, model_type delta_net".to_string(),
        other => format!("unknown source format {other}"),
    };
    let dtype = match (p >> 8) & 0xFF {
        0 => "f32",
        1 => "f16",
        2 => "bf16",
        _ => "unknown",
    };
    format!("{format}, weights {dtype}")
}

/// `bytes (vocab 256)` or `bpe (vocab N, M merges)`.
fn tokenizer_text(t: &Tokenizer<'_>) -> String {
    match t {
        Tokenizer::Bytes(_) => "bytes (vocab 256)".to_string(),
        Tokenizer::Bpe(b) => format!(
            "bpe (vocab {}, {} merges, GPT-2 pre-tokenizer)",
            b.vocab_len(),
            b.merge_count()
        ),
    }
}

fn progress_bar(len: u64, unit: &str) -> ProgressBar {
    ProgressBar::new(len).with_style(
        ProgressStyle::with_template(&format!("{{msg}} [{{bar:30}}] {{pos}}/{{len}} {unit}"))
            .expect("static template")
            .progress_chars("=> "),
    )
}

fn parse_tokens(s: &str) -> Result<Vec<u32>> {
    let tokens: Vec<u32> = s
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<u32>()
                .with_context(|| format!("bad token id {t:?}"))
        })
        .collect::<Result<_>>()?;
    if tokens.is_empty() {
        bail!("no tokens given");
    }
    Ok(tokens)
}

/// Quantize options the CLI checks before building.
struct QuantizeExtras {
    dtype_given: bool,
    scales_given: bool,
    bla_phi_given: bool,
    calibration: Option<Source>,
}

fn quantize(
    model_dir: &std::path::Path,
    output: &std::path::Path,
    mut opts: WriteOptions,
    extras: QuantizeExtras,
    fla_options: &FlaOptions,
) -> Result<()> {
    let dir = ModelDir::open_with(model_dir, fla_options)?;
    writer::check_options(&dir, &opts, extras.dtype_given)?;
    let int4_tiled = writer::tiled_int4_count(&dir, &opts)?;
    if int4_tiled == 0 {
        if extras.scales_given {
            bail!("--scales does nothing: no tensor is stored as tiled int4");
        }
        if extras.calibration.is_some() {
            bail!("--calibrate does nothing: no tensor is stored as tiled int4");
        }
    }
    for warning in &dir.warnings {
        eprintln!("warning: {warning}");
    }
    if opts.token_path == ferrite::TokenPath::Int {
        if !opts.dtype.is_quantized() || opts.layout != ferrite::image::Layout::Tiled {
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
    if extras.bla_phi_given && bla_layers == 0 {
        eprintln!("warning: --bla-phi does nothing: the model has no bla layer");
    }
    let defaults = writer::apply_int4_defaults(&dir, &mut opts)?;
    if let Some(source) = &extras.calibration {
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
    let opts = &opts;
    if let Some(line) = defaults {
        eprintln!("{line}");
    }
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} tensors")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message("quantizing");
    let image = writer::build_image(&dir, opts, |i, n| {
        bar.set_length(n as u64);
        bar.set_position(i as u64);
    })?;
    bar.finish_and_clear();
    // Validate with the runtime before writing anything.
    let aligned = AlignedImage::new(&image.bytes);
    let model = aligned
        .model()
        .context("the written image does not load (bug)")?;
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

fn inspect(image: &AlignedImage) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let model = image.model()?;
    let c = model.config();
    writeln!(
        out,
        "ferrite image v{}: vocab {} hidden {} intermediate {} layers {} norm_eps {:e} tied_head {} tokenizer {}",
        model.header().version,
        c.vocab_size,
        c.hidden_size,
        c.intermediate_size,
        c.num_layers,
        c.norm_eps,
        c.tie_word_embeddings,
        tokenizer_text(&model.tokenizer())
    )?;
    writeln!(out, "source: {}", provenance_text(c.provenance))?;
    writeln!(out, "token path: {}", c.token_path.name())?;
    for i in 0..c.num_layers as usize {
        let layer = model.layer(i).map_err(anyhow::Error::msg)?;
        writeln!(
            out,
            "layer {i}: {} state {} {} bytes  {:?}",
            layer.kind_name(),
            layer.state_format().name(),
            4 * layer.state_len(0),
            layer
        )?;
    }
    writeln!(
        out,
        "{:<44} {:>6} {:>5} {:>16} {:>9} {:>10} {:>6}",
        "tensor", "dtype", "group", "shape", "bytes", "rel_err", "layout"
    )?;
    for index in 0..model.tensor_count() {
        let e = model.entry(index).map_err(anyhow::Error::msg)?;
        let dims: Vec<String> = e
            .dims
            .iter()
            .filter(|&&d| d != 0)
            .map(u32::to_string)
            .collect();
        writeln!(
            out,
            "{:<44} {:>6} {:>5} {:>16} {:>9} {:>10.3e} {:>6}",
            writer::tensor_name(e.layer_index(), e.role),
            e.dtype.name(),
            e.group_size,
            dims.join("x"),
            u64::from(e.data_len) + u64::from(e.scale_len),
            e.quant_error,
            e.layout.name()
        )?;
    }
    writeln!(
        out,
        "flash_bytes={} ram_bytes={} state_bytes={}",
        image.bytes().len(),
        model.session_bytes(0).map_err(anyhow::Error::msg)?,
        model.state_bytes(0).map_err(anyhow::Error::msg)?
    )?;
    Ok(())
}

/// Streams `n` tokens after `prompt`: text, or `--ids` as one comma-separated
/// line, each token written (and flushed) as it is sampled.
fn generate(
    model: Model<'_>,
    prompt: &[u8],
    n: usize,
    mut sampler: Sampler,
    ids: bool,
    pin: usize,
) -> Result<()> {
    let tokenizer = model.tokenizer();
    let prompt_ids = eval::encode(&model, prompt)?;
    check_pin(&model, pin, prompt_ids.len(), "the prompt")?;
    let mut buf = run::session_buffer(&model, pin)?;
    let mut session =
        Session::with_pinned_capacity(model, &mut buf, pin).map_err(anyhow::Error::msg)?;
    session.reset_pinned(pin).map_err(anyhow::Error::msg)?;
    let mut out = std::io::stdout().lock();
    let mut first = true;
    let mut io_error = None;
    session
        .generate(&prompt_ids, n, &mut sampler, |token| {
            let written = if ids {
                let sep = if std::mem::take(&mut first) { "" } else { "," };
                write!(out, "{sep}{token}")
            } else {
                out.write_all(tokenizer.decode(token))
            };
            match written.and_then(|()| out.flush()) {
                Ok(()) => true,
                Err(e) => {
                    io_error = Some(e);
                    false
                }
            }
        })
        .map_err(anyhow::Error::msg)?;
    if let Some(e) = io_error {
        return Err(e.into());
    }
    writeln!(out)?;
    Ok(())
}
