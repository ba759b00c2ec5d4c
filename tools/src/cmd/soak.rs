//! `ferrite soak`: many tokens through one session with no reset.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use ferrite_tools::soak;

use super::args::{progress_bar, ImageArg, MqarShape};

/// Stream many tokens through one session with no reset (a soak run): counts
/// non-finite logits, tracks the largest state magnitude and scores the
/// first and last windows. The last stdout line is `soak: tokens=..`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArg,
    /// Byte-level text to repeat; the stream's last window scores the same
    /// bytes as its first (bits per byte).
    #[arg(
        long,
        conflicts_with_all = ["mqar", "pairs", "seq_len", "queries"],
        required_unless_present = "mqar"
    )]
    text: Option<PathBuf>,
    /// Stream MQAR sequences back to back instead (--pairs, --seq-len,
    /// --queries; 8 pairs, 64 tokens, `end` by default); windows score
    /// recall accuracy.
    #[arg(long)]
    mqar: bool,
    #[command(flatten)]
    shape: MqarShape,
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
}

/// Runs the soak and prints its report line.
pub fn run(args: Args) -> Result<()> {
    let image = args.image.read()?;
    let model = image.model()?;
    let bytes = match &args.text {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?)
        }
        None => None,
    };
    let source = match &bytes {
        Some(b) => soak::SoakSource::Text(b),
        None => soak::SoakSource::Mqar {
            seed: args.seed,
            params: args.shape.params(),
        },
    };
    let opts = soak::SoakOptions {
        tokens: args.tokens,
        window: args.window,
        scan_every: args.scan_every,
    };
    let bar = progress_bar(args.tokens, "tokens");
    let report = soak::soak(model, source, opts, |done| bar.set_position(done))?;
    bar.finish_and_clear();
    writeln!(std::io::stdout().lock(), "{}", report.line())?;
    Ok(())
}
