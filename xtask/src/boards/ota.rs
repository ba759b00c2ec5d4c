//! The OTA example: the image arrives at run time over semihosting.

use std::path::Path;

use anyhow::{Context, Result};

use super::{build, run_qemu, timeout_for, work_dir, Board, BuildOpts, Firmware, Run, RunRequest};

/// How the OTA example's download reaches the board.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Download {
    Intact,
    /// One byte in the middle of the image flipped (a corrupted transfer).
    FlipByte,
    /// Only the first half arrives.
    Truncated,
}

/// Builds the OTA example, puts the image (possibly damaged) where the
/// board reads it (`ota.fer` in the semihosting working directory), runs it.
pub fn run_ota(
    board: &'static Board,
    image: &Path,
    download: Download,
    prompt: &str,
    n: usize,
    echo: bool,
) -> Result<Run> {
    let req = RunRequest {
        board,
        firmware: Firmware::Ota,
        image,
        prompt,
        n,
        defmt: false,
        echo,
        opts: BuildOpts::default(),
    };
    let elf = build(&req)?;
    let cwd = work_dir().join(board.name).join("ota");
    std::fs::create_dir_all(&cwd)?;
    let mut bytes = std::fs::read(image).with_context(|| image.display().to_string())?;
    match download {
        Download::Intact => {}
        Download::FlipByte => {
            let i = bytes.len() / 2;
            bytes[i] ^= 0x40;
        }
        Download::Truncated => bytes.truncate(bytes.len() / 2),
    }
    std::fs::write(cwd.join("ota.fer"), &bytes)?;
    run_qemu(board, &elf, &cwd, echo, false, timeout_for(n))
}
