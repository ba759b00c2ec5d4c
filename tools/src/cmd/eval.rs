//! `ferrite eval`: bits per byte of a text, or MQAR recall.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ferrite::Model;
use ferrite_tools::{eval, mqar};

use super::args::{progress_bar, ImageArg, MqarShape};

/// `--text`'s chunk when none is given.
const DEFAULT_CHUNK: usize = 512;

/// Evaluate: bits per byte on a text file, or MQAR accuracy (docs/mqar.md).
/// Progress goes to stderr; the last stdout line is `bits_per_byte=..` or `accuracy=..`.
///
/// The text and its token ids are held in memory (about 5 bytes per byte
/// of text); MQAR sequences are drawn and scored one token at a time, in
/// constant memory for any -n and --seq-len. The options of one mode are
/// refused with the other.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArg,
    /// Text file to score, in the image's tokenizer (bits per byte of the text).
    #[arg(
        long,
        conflicts_with_all = ["mqar", "pairs", "seq_len", "queries"],
        required_unless_present = "mqar"
    )]
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
    #[command(flatten)]
    shape: MqarShape,
}

/// Scores the text or the MQAR sequences; the summary lines go to stdout.
pub fn run(args: Args) -> Result<()> {
    let image = args.image.read()?;
    let model = image.model()?;
    match &args.text {
        Some(path) => text(model, path, args.chunk),
        None => mqar_recall(model, args.seed, args.n, &args.shape),
    }
}

/// Bits per byte of the text at `path`, the state reset every `chunk` tokens.
fn text(model: Model<'_>, path: &Path, chunk: Option<usize>) -> Result<()> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let ids = eval::encode(&model, &text)?;
    let tokens = ids.len();
    let given = chunk.is_some();
    let chunk = chunk.unwrap_or(DEFAULT_CHUNK);
    if given && chunk > tokens && tokens >= 2 {
        eprintln!(
            "warning: --chunk {chunk} is longer than the text ({tokens} tokens): the state is never reset"
        );
    }
    let tokenizer = model.tokenizer().kind_name();
    let bar = progress_bar(tokens as u64, "tokens");
    let score = eval::tokens_score(model, &ids, chunk, |done| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    let mut out = std::io::stdout().lock();
    // nats: shortest round-trip text, so it parses back to the exact f64.
    writeln!(
        out,
        "bytes={} tokens={tokens} tokenizer={tokenizer} chunk={chunk} predicted_bytes={} nats={:?}",
        text.len(),
        score.bytes,
        score.nats
    )?;
    clamps_line(&mut out, &score.clamps)?;
    writeln!(out, "bits_per_byte={:.4}", score.bits_per_byte())?;
    Ok(())
}

/// MQAR recall accuracy on `n` sequences of `seed`.
fn mqar_recall(model: Model<'_>, seed: u64, n: usize, shape: &MqarShape) -> Result<()> {
    let params = shape.params();
    let stream = mqar::MqarStream::new(seed, n, params)?;
    let bar = progress_bar(n as u64, "sequences");
    let (correct, total, clamps) =
        eval::mqar_stream_counts(model, stream, |done| bar.set_position(done))?;
    bar.finish_and_clear();
    // `end` keeps the line it always had; other layouts say so.
    let layout = match params.queries {
        mqar::Queries::End => String::new(),
        q => format!(" queries={q}"),
    };
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "sequences={n} pairs={} seq_len={}{layout} seed={seed} correct={correct} total={total}",
        params.pairs, params.seq_len
    )?;
    clamps_line(&mut out, &clamps)?;
    writeln!(out, "accuracy={:.4}", correct as f64 / total as f64)?;
    Ok(())
}

/// On the integer token path, a line with the values each layer clamped
/// (docs/integer-path.md, "Saturation"); nothing for an f32-path image.
fn clamps_line(out: &mut impl Write, clamps: &[u32]) -> Result<()> {
    if !clamps.is_empty() {
        let list: Vec<String> = clamps.iter().map(u32::to_string).collect();
        writeln!(out, "clamps_per_layer={}", list.join(","))?;
    }
    Ok(())
}
