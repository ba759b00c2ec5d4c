//! Running a firmware under QEMU, instructions counted.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use super::{build, sizes, work_dir, Board, Firmware, RunRequest, Sizes, DEFAULT_TIMEOUT_S};

/// One finished QEMU run.
pub struct Run {
    pub board: &'static Board,
    pub status: i32,
    /// Everything the firmware wrote (decoded, for defmt).
    pub output: Vec<u8>,
    pub sizes: Sizes,
}

/// Runs an ELF under QEMU with `-icount shift=0,sleep=off`, inside `timeout`,
/// with `cwd` as the semihosting working directory.
pub fn run_qemu(
    board: &'static Board,
    elf: &Path,
    cwd: &Path,
    echo: bool,
    defmt: bool,
    timeout_s: u64,
) -> Result<Run> {
    let sizes = sizes(elf)?;
    if echo {
        eprintln!(
            "running it under QEMU ({} -machine {}, instructions counted) ...",
            board.qemu_binary(),
            board.qemu().unwrap().machine
        );
    }
    let mut cmd = Command::new("timeout");
    cmd.arg(timeout_s.to_string())
        .arg(board.qemu_binary())
        .args(["-machine", board.qemu().unwrap().machine])
        .args(board.qemu().unwrap().args)
        .args(["-nographic", "-monitor", "none", "-serial", "none"])
        .args(["-semihosting-config", "enable=on,target=native"])
        .args(["-icount", "shift=0,sleep=off"])
        .arg("-kernel")
        .arg(elf)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut qemu = cmd
        .spawn()
        .with_context(|| format!("starting {}", board.qemu_binary()))?;
    let mut source: Box<dyn Read + Send> = Box::new(qemu.stdout.take().unwrap());
    let mut decoder = None;
    if defmt {
        let mut d = Command::new("defmt-print")
            .arg("-e")
            .arg(elf)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting defmt-print (install it with `cargo install defmt-print`)")?;
        let mut to_decoder = d.stdin.take().unwrap();
        let mut raw = source;
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut raw, &mut to_decoder);
        });
        source = Box::new(d.stdout.take().unwrap());
        decoder = Some(d);
    }
    let mut output = Vec::new();
    let mut chunk = [0u8; 4096];
    let stdout = std::io::stdout();
    loop {
        let n = source.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        output.extend_from_slice(&chunk[..n]);
        if echo {
            let mut o = stdout.lock();
            o.write_all(&chunk[..n])?;
            o.flush()?;
        }
    }
    let status = qemu.wait()?.code().unwrap_or(-1);
    if let Some(mut d) = decoder {
        let _ = d.wait();
    }
    Ok(Run {
        board,
        status,
        output,
        sizes,
    })
}

pub fn build_and_run(req: &RunRequest<'_>) -> Result<Run> {
    let elf = build(req)?;
    let cwd = work_dir().join(req.board.name);
    let tokens = match (req.firmware, &req.opts.text) {
        (Firmware::Eval, Some(t)) => std::fs::metadata(t).map_or(0, |m| m.len() as usize),
        (Firmware::Eval, None) => req.n * req.opts.seq_len,
        _ => req.n,
    };
    run_qemu(
        req.board,
        &elf,
        &cwd,
        req.echo,
        req.defmt,
        timeout_for(tokens),
    )
}

/// A generous timeout: ~100M instructions take 0.15 s, the slowest board
/// (soft float) needs a few M instructions per token (27M for the small
/// trained LM on the M3: 0.05 s).
pub fn timeout_for(n: usize) -> u64 {
    DEFAULT_TIMEOUT_S + (n as u64) / 5
}
