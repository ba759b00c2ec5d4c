//! `ferrite logits`: the logits of every position, as JSON.

use std::io::Write;

use anyhow::{bail, Context, Result};
use ferrite_tools::run;

use super::args::{check_pin, ImageArg};

/// Print the logits of every position as JSON (one array per input token),
/// streamed as they are computed.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArg,
    /// Comma-separated token ids (each below the vocabulary size).
    #[arg(long)]
    tokens: String,
    /// Pin the first N tokens (after the sinks) in SWA layers; at most the
    /// number of tokens, and only for a model with an SWA layer.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pin: usize,
    /// Attend to baked memory N in every `cross` layer
    /// (docs/cross-attention.md; default 0).
    #[arg(long, value_name = "N")]
    memory: Option<u32>,
}

/// Streams `[[..],[..]]`, one row per token, as serde_json writes a
/// `Vec<Vec<f32>>`.
pub fn run(args: Args) -> Result<()> {
    let image = args.image.read()?;
    let model = image.model()?;
    let tokens = parse_tokens(&args.tokens)?;
    let vocab = model.config().vocab_size;
    if let Some(&token) = tokens.iter().find(|&&t| t >= vocab) {
        bail!("{}", ferrite::Error::TokenOutOfRange { token, vocab });
    }
    check_pin(&model, args.pin, tokens.len(), "--tokens")?;
    let mut out = std::io::stdout().lock();
    out.write_all(b"[")?;
    let mut first = true;
    run::for_each_logits_with_memory(model, &tokens, args.pin, args.memory, |row| {
        if !std::mem::take(&mut first) {
            out.write_all(b",")?;
        }
        // As an io::Error, so that a reader going away (`| head`) is the
        // clean exit it is for the other writes, not an error.
        serde_json::to_writer(&mut out, row).map_err(std::io::Error::from)?;
        Ok(())
    })?;
    out.write_all(b"]\n")?;
    Ok(())
}

/// `1,2, 3` -> `[1, 2, 3]`; at least one id.
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
