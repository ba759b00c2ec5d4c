//! `ferrite mqar-sample`: MQAR sequences as token ids, for cross-checks.

use std::io::Write;

use anyhow::Result;
use ferrite_tools::mqar::MqarStream;

use super::args::MqarShape;

/// Print MQAR sequences (one per line, comma-separated ids), for cross-checks;
/// streamed in constant memory.
#[derive(clap::Args)]
pub struct Args {
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
    #[command(flatten)]
    shape: MqarShape,
}

/// Streams the sequences, one line each.
pub fn run(args: Args) -> Result<()> {
    let mut stream = MqarStream::new(args.seed, args.n, args.shape.params())?;
    let mut out = std::io::stdout().lock();
    while let Some(seq) = stream.next_sequence() {
        for (i, t) in seq.enumerate() {
            write!(out, "{}{}", if i == 0 { "" } else { "," }, t.token)?;
        }
        writeln!(out)?;
    }
    Ok(())
}
