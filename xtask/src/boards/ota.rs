//! The A/B update firmware (`src/bin/ota.rs`): model A is embedded, model B
//! arrives at run time over semihosting as `update.fer`, possibly damaged on
//! the way.

use std::path::Path;

use anyhow::{Context, Result};

use super::{build, run_qemu, timeout_for, work_dir, Board, BuildOpts, Firmware, Run, RunRequest};

/// What reaches the board of the update.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Delivery {
    /// No update is offered.
    None,
    /// The whole image.
    Intact,
    /// One byte in the middle flipped (a corrupted transfer).
    FlipByte,
    /// The transfer stops after this many bytes (an interrupted download).
    CutAt(usize),
}

/// Builds the firmware with model A, offers `update` as `delivery` says
/// (`update.fer` in the semihosting working directory), runs it.
pub fn run_ota(
    board: &'static Board,
    a: &Path,
    update: Option<&Path>,
    delivery: Delivery,
    prompt: &str,
    n: usize,
    echo: bool,
) -> Result<Run> {
    let req = RunRequest {
        board,
        firmware: Firmware::Ota,
        image: a,
        prompt,
        n,
        defmt: false,
        echo,
        opts: BuildOpts::default(),
    };
    let elf = build(&req)?;
    let cwd = work_dir().join(board.name).join("ota");
    std::fs::create_dir_all(&cwd)?;
    let target = cwd.join("update.fer");
    let _ = std::fs::remove_file(&target);
    if let (Some(update), false) = (update, delivery == Delivery::None) {
        let mut bytes = std::fs::read(update).with_context(|| update.display().to_string())?;
        match delivery {
            Delivery::None | Delivery::Intact => {}
            Delivery::FlipByte => {
                let i = bytes.len() / 2;
                bytes[i] ^= 0x40;
            }
            Delivery::CutAt(k) => bytes.truncate(k),
        }
        std::fs::write(&target, &bytes)?;
    }
    run_qemu(board, &elf, &cwd, echo, false, timeout_for(n))
}

/// The firmware's verdict line: `ota: accepted`, `ota: refused <reason>` or
/// `ota: no update`.
pub fn verdict(run: &Run) -> Option<String> {
    String::from_utf8_lossy(&run.output)
        .lines()
        .find(|l| {
            l.starts_with("ota: accepted")
                || l.starts_with("ota: refused")
                || l.starts_with("ota: no update")
        })
        .map(str::to_string)
}
