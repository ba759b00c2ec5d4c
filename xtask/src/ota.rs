//! `cargo xtask ota <name> [--image A] [--update B [--corrupt | --cut-at K]]
//! [--trust KEY.pub]`: the A/B update example (boards/ota.rs runs it): the
//! board serves A (`--image`, default the board's model) and is offered B;
//! with `--trust` the firmware runs only updates signed by those keys
//! (docs/signing.md). Exits with the firmware's status.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use ferrite::image::DType;

use crate::args::{self, ImageArgs};
use crate::boards::{self, Board, Delivery};
use crate::host;

/// `ota <name>`.
#[derive(ClapArgs, Debug, Clone, PartialEq)]
pub struct Args {
    /// The board
    #[arg(value_name = "NAME", value_parser = args::board())]
    pub board: &'static Board,
    #[command(flatten)]
    pub image: ImageArgs,
    /// The image offered as the update, B (a file, or a model directory quantized to int8);
    /// without it no update is offered
    #[arg(long, value_name = "B")]
    pub update: Option<PathBuf>,
    /// Flip a byte in the middle of the update
    #[arg(long, requires = "update", conflicts_with = "cut_at")]
    pub corrupt: bool,
    /// Stop the transfer after K bytes
    #[arg(long, value_name = "K", requires = "update")]
    pub cut_at: Option<usize>,
    /// The prompt
    #[arg(long, default_value = boards::DEFAULT_PROMPT, value_parser = args::prompt())]
    pub prompt: String,
    /// Tokens to generate
    #[arg(short = 'n', long = "tokens", alias = "n", default_value_t = boards::DEFAULT_N,
          value_parser = args::at_least::<1>)]
    pub n: usize,
    /// A public key (64 hex digits, `ferrite keygen`'s .pub) the firmware trusts; repeat for
    /// several. The firmware is then built with signature verification and a rollback counter
    #[arg(long, value_name = "KEY")]
    pub trust: Vec<PathBuf>,
}

/// Runs the example; its exit status is the firmware's.
pub fn run(args: &Args) -> Result<ExitCode> {
    let board = args.board;
    let image = args.image.resolve(|| host::default_image(board))?;
    let update = args
        .update
        .as_deref()
        .map(|u| crate::args::image(u, DType::I8))
        .transpose()?;
    let delivery = match (&update, args.corrupt, args.cut_at) {
        (None, _, _) => Delivery::None,
        (Some(_), true, _) => Delivery::FlipByte,
        (Some(_), false, Some(k)) => Delivery::CutAt(k),
        (Some(_), false, None) => Delivery::Intact,
    };
    let mut keys = Vec::new();
    for path in &args.trust {
        let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
        keys.push(text.trim().to_string());
    }
    let keys = (!keys.is_empty()).then(|| keys.join(","));
    let plan = boards::OtaPlan::new(update.as_deref(), delivery, keys);
    let run = boards::run_ota(board, &image, &plan, &args.prompt, args.n, true)?;
    Ok(match run.status {
        0 => ExitCode::SUCCESS,
        s => ExitCode::from(s.clamp(1, 255) as u8),
    })
}
