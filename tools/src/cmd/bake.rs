//! `ferrite bake`: the state after a prompt, computed once on the host, as
//! a snapshot a board starts from (docs/snapshot-format.md, "Baked prompts").

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use ferrite::Session;
use ferrite_common::target::Target;
use ferrite_tools::{eval, run};

use super::args::{check_pin, ImageArg};

/// Feed a prompt and write the stream's snapshot: what a board's `generate`
/// starts from (FERRITE_SNAPSHOT) without feeding the prompt itself.
///
/// The state is computed with this CLI's math module (`libm`, or `int` /
/// `float` in a build with the `fast-math-int` / `fast-math` feature); a
/// board continues it bit for bit only when its firmware runs the same
/// module, and refuses the snapshot otherwise. `--math` or `--board` names
/// the module the snapshot is for: when this CLI does not run it, bake
/// fails and says which build does.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArg,
    /// Prompt text (at least one token).
    #[arg(
        long,
        required_unless_present = "prompt_file",
        conflicts_with = "prompt_file"
    )]
    prompt: Option<String>,
    /// Read the prompt from this file (its bytes, as they are).
    #[arg(long, value_name = "FILE")]
    prompt_file: Option<PathBuf>,
    /// Where to write the snapshot.
    #[arg(short = 'o', long, value_name = "F")]
    output: PathBuf,
    /// The math module the snapshot is for: libm, int or float.
    #[arg(long, value_parser = ["libm", "int", "float"], conflicts_with = "board")]
    math: Option<String>,
    /// The board or chip the snapshot is for (a target of `cargo xtask
    /// board|chip`): its firmware's module, built with `fast-math` as xtask
    /// builds it (`int` without hardware f32, `float` with it).
    #[arg(long, value_name = "NAME")]
    board: Option<String>,
    /// Pin the first N prompt tokens (after the sinks) in SWA layers, as
    /// `generate --pin` (the board's session must have the same capacity).
    #[arg(long, default_value_t = 0)]
    pin: usize,
}

/// The cargo features that build a CLI running `math`.
fn build_for(math: &str) -> &'static str {
    match math {
        "int" => "cargo build --release -p ferrite-tools --features fast-math-int",
        "float" => "cargo build --release -p ferrite-tools --features fast-math",
        _ => "cargo build --release -p ferrite-tools (no fast-math feature)",
    }
}

/// The math module `args` asks for (`None`: whatever this CLI runs).
fn wanted_math(args: &Args) -> Result<Option<String>> {
    if let Some(m) = &args.math {
        return Ok(Some(m.clone()));
    }
    let Some(name) = &args.board else {
        return Ok(None);
    };
    let Some(t) = Target::named(name) else {
        let names: Vec<_> = ferrite_common::target::names().collect();
        bail!("--board {name}: no such target ({})", names.join(", "));
    };
    Ok(Some(if t.hard_float() { "float" } else { "int" }.into()))
}

/// Feeds the prompt and writes the snapshot; prints what it wrote.
pub fn run(args: Args) -> Result<()> {
    let this = ferrite::math::FAST_MATH;
    if let Some(want) = wanted_math(&args)? {
        if want != this {
            let target = args.board.as_deref().map_or_else(
                || format!("math module {want}"),
                |b| format!("{b} (math module {want})"),
            );
            bail!(
                "this ferrite computes with the {this} math module, not {target}: bake with a CLI built by `{}`",
                build_for(&want)
            );
        }
    }
    let prompt = match (&args.prompt, &args.prompt_file) {
        (Some(p), _) => p.as_bytes().to_vec(),
        (None, Some(f)) => {
            std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?
        }
        (None, None) => bail!("give --prompt or --prompt-file"),
    };
    if prompt.is_empty() {
        bail!("the prompt is empty: a snapshot needs at least one token fed");
    }
    let image = args.image.read()?;
    let model = image.model()?;
    let ids = eval::encode(&model, &prompt)?;
    check_pin(&model, args.pin, ids.len(), "the prompt")?;
    let mut buf = run::session_buffer(&model, args.pin)?;
    let mut session =
        Session::with_pinned_capacity(model, &mut buf, args.pin).map_err(anyhow::Error::msg)?;
    session.reset_pinned(args.pin).map_err(anyhow::Error::msg)?;
    for &t in &ids {
        session.feed(t).map_err(anyhow::Error::msg)?;
    }
    let mut bytes = vec![0u8; session.snapshot_len()];
    session.snapshot(&mut bytes).map_err(anyhow::Error::msg)?;
    std::fs::write(&args.output, &bytes)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    println!(
        "{}: {} bytes, {} prompt tokens fed, math {this}, pinned {}",
        args.output.display(),
        bytes.len(),
        ids.len(),
        args.pin
    );
    Ok(())
}
