//! `ferrite tokenize`: a text in the image's tokenizer.

use std::io::Write;

use anyhow::Result;
use ferrite_tools::eval;

use super::args::ImageArg;

/// Print the token ids of a text in the image's tokenizer (comma-separated).
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArg,
    /// The text.
    #[arg(long)]
    text: String,
}

/// Prints the ids on one line.
pub fn run(args: Args) -> Result<()> {
    let image = args.image.read()?;
    let ids = eval::encode(&image.model()?, args.text.as_bytes())?;
    let mut out = std::io::stdout().lock();
    for (i, id) in ids.iter().enumerate() {
        write!(out, "{}{id}", if i == 0 { "" } else { "," })?;
    }
    writeln!(out)?;
    Ok(())
}
