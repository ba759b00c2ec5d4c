//! `ferrite generate`: text from a prompt, streamed in constant memory.

use std::io::Write;

use anyhow::Result;
use ferrite::{Model, Sampler, SamplerConfig, Session};
use ferrite_tools::{eval, run};

use super::args::{check_pin, ImageArg, SamplerArgs};

/// Generate text from a prompt, streamed token by token in constant memory.
///
/// Sampling options that greedy decoding ignores (--top-k, --top-p, --seed
/// with --temperature 0; --temperature, --top-p, --seed with --top-k 1) and
/// a --top-k that keeps the whole vocabulary are warnings on stderr, not
/// errors: scripts pass the full sampler to every run.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArg,
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
    #[command(flatten)]
    sampler: SamplerArgs,
    /// Print the generated token ids (comma-separated, one line) instead of
    /// text; streamed as they come.
    #[arg(long)]
    ids: bool,
    /// Pin the first N prompt tokens (after the sinks) in SWA layers; at
    /// most the prompt's token count, and only for a model with an SWA layer.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pin: usize,
}

/// Checks the sampler, warns about its idle options and streams the tokens.
pub fn run(args: Args) -> Result<()> {
    let image = args.image.read()?;
    let config = args.sampler.config();
    let sampler = Sampler::new(config).map_err(anyhow::Error::msg)?;
    let model = image.model()?;
    for warning in sampler_warnings(&config, model.config().vocab_size) {
        eprintln!("warning: {warning}");
    }
    generate(
        model,
        args.prompt.as_bytes(),
        args.n,
        sampler,
        args.ids,
        args.pin,
    )
}

/// The sampling options of `c` that change nothing (see `generate --help`).
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
