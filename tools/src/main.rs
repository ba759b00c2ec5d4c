//! `ferrite`: quantize model directories into flash images, inspect and run them.
//!
//! Every command runs the `ferrite` runtime crate itself (the code the boards
//! run) and exits non-zero with a one-line reason on bad input.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use ferrite::{Sampler, SamplerConfig, Session, Tokenizer};
use ferrite_tools::fla::{self, FlaOptions};
use ferrite_tools::model_dir::ModelDir;
use ferrite_tools::run::{self, AlignedImage};
use ferrite_tools::writer::{self, WriteOptions};
use ferrite_tools::{eval, mqar};
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
    Quantize {
        /// Directory with config.json and model.safetensors.
        model_dir: PathBuf,
        /// Output image.
        #[arg(short, long)]
        output: PathBuf,
        /// dtype of weight matrices and embeddings: f32, f16, int8, int4.
        #[arg(long, default_value = "f32")]
        dtype: String,
        /// Group size along the input dim for int8/int4 (e.g. 32, 64, 128); it
        /// must divide every quantized tensor's input dim. Default: per tensor,
        /// the largest of 64, 32, 16, 8 that divides it.
        #[arg(long)]
        group_size: Option<usize>,
        /// Per-tensor override GLOB=DTYPE (repeatable; first match wins), e.g. lm_head.weight=int8.
        #[arg(long = "rule")]
        rules: Vec<String>,
        /// Layout of int8/int4 matrices: `tiled` (the integer kernels, format
        /// 3; matrices whose input width is not a multiple of 16 stay row-major)
        /// or `rows` (row-major with f32 group scales, f32 activations, format 1-2).
        #[arg(long, default_value = "tiled", value_parser = ["tiled", "rows"])]
        layout: String,
        /// fla checkpoints: run attention layers that have no window_size as
        /// sliding-window attention with this window (changes their outputs).
        #[arg(long)]
        window: Option<u32>,
    },
    /// Show an image's config, tensors, sizes and the RAM it needs.
    Inspect {
        /// The image.
        image: PathBuf,
    },
    /// Print the logits of every position as JSON (one array per input token).
    Logits {
        /// The image.
        image: PathBuf,
        /// Comma-separated token ids.
        #[arg(long)]
        tokens: String,
        /// Pin the first N tokens (after the sinks) in SWA layers.
        #[arg(long, default_value_t = 0)]
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
    /// Generate text from a prompt.
    Generate {
        /// The image.
        image: PathBuf,
        /// Prompt text.
        #[arg(long)]
        prompt: String,
        /// Tokens to generate.
        #[arg(short = 'n', long = "tokens", default_value_t = 64)]
        n: usize,
        /// Sampling temperature (0 = greedy).
        #[arg(long, default_value_t = 0.0)]
        temperature: f32,
        /// Keep the k most likely tokens (0 = off).
        #[arg(long, default_value_t = 0)]
        top_k: usize,
        /// Nucleus sampling mass (1 = off).
        #[arg(long, default_value_t = 1.0)]
        top_p: f32,
        /// PRNG seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Print the generated token ids (comma-separated) instead of text.
        #[arg(long)]
        ids: bool,
        /// Pin the first N prompt tokens (after the sinks) in SWA layers.
        #[arg(long, default_value_t = 0)]
        pin: usize,
    },
    /// Evaluate: bits per byte on a text file, or MQAR accuracy (docs/mqar.md).
    /// Progress goes to stderr; the last stdout line is `bits_per_byte=..` or `accuracy=..`.
    Eval {
        /// The image.
        image: PathBuf,
        /// Text file to score, in the image's tokenizer (bits per byte of the text).
        #[arg(long, conflicts_with = "mqar", required_unless_present = "mqar")]
        text: Option<PathBuf>,
        /// Reset the state every N tokens (each chunk predicts its tokens after the first).
        #[arg(long, default_value_t = 512)]
        chunk: usize,
        /// Score MQAR recall on generated sequences.
        #[arg(long)]
        mqar: bool,
        /// MQAR seed (0 = the held-out evaluation set).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// MQAR sequences.
        #[arg(short = 'n', long = "n", default_value_t = 1000)]
        n: usize,
        /// MQAR key-value pairs per sequence.
        #[arg(long, default_value_t = 8)]
        pairs: usize,
        /// MQAR sequence length.
        #[arg(long, default_value_t = 64)]
        seq_len: usize,
    },
    /// Print MQAR sequences (one per line, comma-separated ids), for cross-checks.
    MqarSample {
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Sequences.
        #[arg(short = 'n', long = "n", default_value_t = 1)]
        n: usize,
        /// Key-value pairs per sequence.
        #[arg(long, default_value_t = 8)]
        pairs: usize,
        /// Sequence length.
        #[arg(long, default_value_t = 64)]
        seq_len: usize,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            eprintln!("{first} (see ferrite --help)");
            return ExitCode::from(2);
        }
    };
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
            window,
        } => {
            let opts = WriteOptions {
                dtype: writer::parse_dtype(&dtype)?,
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
            };
            quantize(&model_dir, &output, &opts, &FlaOptions { window })
        }
        Command::Inspect { image } => inspect(&AlignedImage::read(&image)?),
        Command::Tokenize { image, text } => {
            let image = AlignedImage::read(&image)?;
            let ids = eval::encode(&image.model()?, text.as_bytes())?;
            let list: Vec<String> = ids.iter().map(u32::to_string).collect();
            writeln!(out, "{}", list.join(","))?;
            Ok(())
        }
        Command::Logits { image, tokens, pin } => {
            let image = AlignedImage::read(&image)?;
            let tokens = parse_tokens(&tokens)?;
            let logits = run::logits(image.model()?, &tokens, pin)?;
            writeln!(out, "{}", serde_json::to_string(&logits)?)?;
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
        } => {
            let image = AlignedImage::read(&image)?;
            let model = image.model()?;
            match text {
                Some(path) => {
                    let text = std::fs::read(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    let tokens = eval::encode(&model, &text)?.len();
                    let bar = progress_bar(tokens, "tokens");
                    let score = eval::text_score(model, &text, chunk, |done| {
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
                    let seqs = mqar::generate(seed, n, mqar::MqarParams { pairs, seq_len })?;
                    let bar = progress_bar(n, "sequences");
                    let (correct, total) =
                        eval::mqar_counts(model, &seqs, |done| bar.set_position(done as u64))?;
                    bar.finish_and_clear();
                    writeln!(
                        out,
                        "sequences={n} pairs={pairs} seq_len={seq_len} seed={seed} correct={correct} total={total}"
                    )?;
                    writeln!(out, "accuracy={:.4}", correct as f64 / total as f64)?;
                }
            }
            Ok(())
        }
        Command::MqarSample {
            seed,
            n,
            pairs,
            seq_len,
        } => {
            for seq in mqar::generate(seed, n, mqar::MqarParams { pairs, seq_len })? {
                let ids: Vec<String> = seq.tokens.iter().map(u32::to_string).collect();
                writeln!(out, "{}", ids.join(","))?;
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
            let sampler = Sampler::new(SamplerConfig {
                temperature,
                top_k,
                top_p,
                seed,
            })
            .map_err(anyhow::Error::msg)?;
            generate(&image, prompt.as_bytes(), n, sampler, ids, pin)
        }
    }
}

/// Human-readable `ModelConfig::provenance`.
fn provenance_text(p: u32) -> String {
    let format = match p & 0xFF {
        fla::source::FERRITE => "ferrite model dir".to_string(),
        fla::source::FLA_GATED_DELTANET => "fla checkpoint, model_type gated_deltanet".to_string(),
        fla::source::FLA_GSA => "fla checkpoint, model_type gsa".to_string(),
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

fn progress_bar(len: usize, unit: &str) -> ProgressBar {
    ProgressBar::new(len as u64).with_style(
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

fn quantize(
    model_dir: &std::path::Path,
    output: &std::path::Path,
    opts: &WriteOptions,
    fla_options: &FlaOptions,
) -> Result<()> {
    let dir = ModelDir::open_with(model_dir, fla_options)?;
    for warning in &dir.warnings {
        eprintln!("warning: {warning}");
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
    eprintln!(
        "wrote {}: {} tensors ({}), {} params, {} bytes flash, {} bytes RAM ({} state), worst rel. RMS error {:.2e}",
        output.display(),
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
    for i in 0..c.num_layers as usize {
        let layer = model.layer(i).map_err(anyhow::Error::msg)?;
        writeln!(
            out,
            "layer {i}: {} state {} bytes  {:?}",
            layer.kind_name(),
            4 * layer.state_len(0),
            layer
        )?;
    }
    writeln!(
        out,
        "{:<44} {:>6} {:>5} {:>16} {:>9} {:>10}",
        "tensor", "dtype", "group", "shape", "bytes", "rel_err"
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
            "{:<44} {:>6} {:>5} {:>16} {:>9} {:>10.3e}",
            writer::tensor_name(e.layer_index(), e.role),
            e.dtype.name(),
            e.group_size,
            dims.join("x"),
            e.data_len + e.scale_len,
            e.quant_error
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

fn generate(
    image: &AlignedImage,
    prompt: &[u8],
    n: usize,
    mut sampler: Sampler,
    ids: bool,
    pin: usize,
) -> Result<()> {
    let model = image.model()?;
    let tokenizer = model.tokenizer();
    let prompt_ids = eval::encode(&model, prompt)?;
    let mut buf = run::session_buffer(&model, pin)?;
    let mut session =
        Session::with_pinned_capacity(model, &mut buf, pin).map_err(anyhow::Error::msg)?;
    session.reset_pinned(pin).map_err(anyhow::Error::msg)?;
    let mut out = std::io::stdout().lock();
    let mut generated = Vec::with_capacity(n);
    let mut io_error = None;
    session
        .generate(&prompt_ids, n, &mut sampler, |token| {
            generated.push(token);
            if !ids {
                if let Err(e) = out
                    .write_all(tokenizer.decode(token))
                    .and_then(|_| out.flush())
                {
                    io_error = Some(e);
                    return false;
                }
            }
            true
        })
        .map_err(anyhow::Error::msg)?;
    if let Some(e) = io_error {
        return Err(e.into());
    }
    if ids {
        let list: Vec<String> = generated.iter().map(u32::to_string).collect();
        writeln!(out, "{}", list.join(","))?;
    } else {
        writeln!(out)?;
    }
    Ok(())
}
