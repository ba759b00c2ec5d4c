//! `ferrite generate`: text from a prompt, streamed in constant memory.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
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
    /// Prompt text (at least one token; with --load-state optional: what
    /// is fed after the snapshot before generating).
    #[arg(long, required_unless_present = "load_state")]
    prompt: Option<String>,
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
    /// After generating, feed the last token and write a snapshot of the
    /// stream to F (docs/snapshot-format.md), to go on with --load-state.
    /// When the sampler draws (--temperature above 0, --top-k not 1) the
    /// snapshot carries it too (format version 2: options, seed and the
    /// number of draws); greedy runs write version 1.
    #[arg(long, value_name = "F")]
    save_state: Option<PathBuf>,
    /// Start from the snapshot in F (of this image, made by --save-state)
    /// instead of an empty stream: feed --prompt if given, then generate
    /// from the snapshot's last logits. Greedy decoding, and sampling from
    /// a snapshot that carries its sampler (--save-state of a sampling
    /// run), then go on with exactly the tokens of one uninterrupted run:
    /// the snapshot's sampler replaces the sampling options (a warning
    /// says so when options other than the defaults differ from it). From a snapshot without a sampler
    /// (a greedy run's, `bake`) a sampling run draws from a fresh generator
    /// of --seed. The pinned count is the snapshot's (no --pin).
    #[arg(long, value_name = "F", conflicts_with = "pin")]
    load_state: Option<PathBuf>,
    /// Attend to baked memory N in every `cross` layer (docs/cross-attention.md;
    /// default 0). A snapshot keeps its own choice (no --memory with --load-state).
    #[arg(long, value_name = "N", conflicts_with = "load_state")]
    memory: Option<u32>,
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
    let states = States {
        load: args.load_state.as_deref(),
        save: args.save_state.as_deref(),
        memory: args.memory,
    };
    generate(
        model,
        args.prompt.as_deref().unwrap_or("").as_bytes(),
        args.n,
        sampler,
        args.ids,
        args.pin,
        states,
    )
}

/// The snapshot files of one run (`--load-state`, `--save-state`).
struct States<'p> {
    load: Option<&'p Path>,
    save: Option<&'p Path>,
    /// The baked memory a new stream's `cross` layers attend to (`--memory`).
    memory: Option<u32>,
}

/// Reads the snapshot file at `path` and checks its header (not yet what
/// it belongs to: `Session::restore` does).
fn read_state(path: &Path) -> Result<(Vec<u8>, usize)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let header = ferrite::snapshot::parse_header(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((bytes, header.pinned_max as usize))
}

/// Writes `session`'s snapshot to `path`: with `sampler` (version 2) when
/// it draws, so that a sampling run goes on as it would have; version 1
/// for greedy decoding (the bytes a board and `bake` write).
fn write_state(session: &Session<'_, '_>, sampler: &Sampler, path: &Path) -> Result<()> {
    let bytes = if sampler.state().draws_numbers() {
        let mut b = vec![0u8; session.snapshot_with_sampler_len()];
        session
            .snapshot_with_sampler(sampler, &mut b)
            .map_err(anyhow::Error::msg)?;
        b
    } else {
        let mut b = vec![0u8; session.snapshot_len()];
        session.snapshot(&mut b).map_err(anyhow::Error::msg)?;
        b
    };
    std::fs::write(path, &bytes).with_context(|| format!("cannot write {}", path.display()))
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
    states: States<'_>,
) -> Result<()> {
    let tokenizer = model.tokenizer();
    let prompt_ids = if prompt.is_empty() {
        Vec::new()
    } else {
        eval::encode(&model, prompt)?
    };
    let loaded = states.load.map(read_state).transpose()?;
    let pin = match &loaded {
        Some((_, pinned_max)) => *pinned_max,
        None => {
            check_pin(&model, pin, prompt_ids.len(), "the prompt")?;
            pin
        }
    };
    let mut buf = run::session_buffer(&model, pin)?;
    let mut session =
        Session::with_pinned_capacity(model, &mut buf, pin).map_err(anyhow::Error::msg)?;
    match (&loaded, states.load) {
        (Some((bytes, _)), Some(path)) => {
            let given = sampler.config();
            let restored = session
                .restore_with_sampler(bytes, &mut sampler)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            let c = sampler.config();
            // Options left at their defaults are not "given".
            if restored && c != given && given != SamplerConfig::default() {
                eprintln!(
                    "warning: {} carries its sampler (--temperature {} --top-k {} --top-p {} --seed {}, {} draws): the sampling options given are not used",
                    path.display(),
                    c.temperature,
                    c.top_k,
                    c.top_p,
                    c.seed,
                    sampler.state().draws
                );
            }
        }
        _ => {
            session.reset_pinned(pin).map_err(anyhow::Error::msg)?;
            if let Some(m) = states.memory {
                session.select_memory(m).map_err(anyhow::Error::msg)?;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let mut first = true;
    let mut io_error = None;
    // The token sampled last and not yet fed (the prompt's last before any).
    // After a snapshot the prompt is fed whole before generating.
    let mut pending = match loaded {
        Some(_) => None,
        None => prompt_ids.last().copied(),
    };
    let mut on_step = |step: ferrite::session::Step<'_>| {
        pending = Some(step.token);
        let token = step.token;
        {
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
        }
    };
    if loaded.is_some() {
        for &t in &prompt_ids {
            session.feed(t).map_err(anyhow::Error::msg)?;
        }
        session
            .resume_with(n, &mut sampler, &mut on_step)
            .map_err(anyhow::Error::msg)?;
    } else {
        session
            .generate_with(&prompt_ids, n, &mut sampler, &mut on_step)
            .map_err(anyhow::Error::msg)?;
    }
    if let Some(e) = io_error {
        return Err(e.into());
    }
    writeln!(out)?;
    if let Some(path) = states.save {
        if let Some(token) = pending {
            session.feed(token).map_err(anyhow::Error::msg)?;
        }
        write_state(&session, &sampler, path)?;
    }
    Ok(())
}
