//! `cargo xtask profile <board> --image F|DIR [-n N] [--prompt P] [--top K]`:
//! instructions retired per function while a board generates, counted by
//! QEMU itself. QEMU logs every translated block (`-d in_asm`: its
//! instructions) and every execution of one (`-d exec,nochain`: its address
//! and the symbol it starts in); each execution adds the block's length to
//! that symbol. The count runs from the first entry into `Session::feed` to
//! the last one, so it covers whole tokens (a feed and the sampling after
//! it) and leaves out loading the image (its CRC) and the report at the
//! end; a block that runs past the end of a function counts for the
//! function it starts in.
//!
//! The log goes through a pipe and is folded as it streams (gigabytes for a
//! few tokens otherwise). Like every count under `-icount shift=0`, the
//! result is deterministic.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::boards::{self, Board, BuildOpts, Firmware, RunRequest};

/// Instructions per function over whole tokens.
#[derive(Debug, Default)]
pub struct Profile {
    /// (demangled function name, instructions), largest first.
    pub functions: Vec<(String, u64)>,
    /// Their sum.
    pub total: u64,
    /// Tokens counted: entries into the start symbol, minus one.
    pub tokens: u64,
}

/// Folds a QEMU `-d in_asm,exec,nochain` log into a [`Profile`].
pub fn fold(log: impl BufRead, start: &str) -> Result<Profile> {
    let mut block_len: HashMap<u64, u64> = HashMap::new();
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut current: Option<(u64, u64)> = None;
    let mut on = false;
    let mut entries = 0u64;
    let mut at_last_entry: HashMap<String, u64> = HashMap::new();
    let mut entry_pc = None;
    for line in log.lines() {
        let line = line.context("reading the QEMU log")?;
        if line.starts_with("IN:") {
            current = None;
        } else if let Some(addr) = line.strip_prefix("0x").and_then(|l| l.split(':').next()) {
            // One translated instruction: `0x00001234:  ...`.
            if let Ok(pc) = u64::from_str_radix(addr, 16) {
                let (start_pc, n) = current.unwrap_or((pc, 0));
                current = Some((start_pc, n + 1));
            }
        } else if line.starts_with("Trace ") {
            if let Some((pc, n)) = current.take() {
                block_len.insert(pc, n);
            }
            // `Trace 0: 0x7f.. [00800400/00002728/00000110/ff020200] symbol`
            let Some((fields, symbol)) = line
                .split_once('[')
                .and_then(|(_, rest)| rest.split_once(']'))
            else {
                continue;
            };
            let Some(pc) = fields
                .split('/')
                .nth(1)
                .and_then(|p| u64::from_str_radix(p, 16).ok())
            else {
                continue;
            };
            let symbol = symbol.trim();
            // An entry: a block at the address where the start symbol was
            // first entered (its first instruction; returns into it from
            // the functions it calls land elsewhere).
            if entry_pc.is_none() && symbol.contains(start) {
                entry_pc = Some(pc);
            }
            if entry_pc == Some(pc) {
                on = true;
                entries += 1;
                at_last_entry.clone_from(&counts);
            }
            if on {
                *counts.entry(symbol.to_string()).or_default() +=
                    block_len.get(&pc).copied().unwrap_or(0);
            }
        }
    }
    if entries < 2 {
        bail!("the log entered {start} fewer than twice: no whole token to count");
    }
    let mut merged: HashMap<String, u64> = HashMap::new();
    for (sym, n) in at_last_entry {
        *merged.entry(demangle(&sym)).or_default() += n;
    }
    let mut functions: Vec<(String, u64)> = merged.into_iter().collect();
    functions.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let total = functions.iter().map(|(_, n)| n).sum();
    Ok(Profile {
        functions,
        total,
        tokens: entries - 1,
    })
}

/// A readable function name: demangled, without the hash.
fn demangle(symbol: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(symbol))
}

/// Builds `generate` for `board` with `image` and profiles `n` tokens after `prompt`.
pub fn run(board: &'static Board, image: &Path, prompt: &str, n: usize) -> Result<Profile> {
    let req = RunRequest {
        board,
        firmware: Firmware::Generate,
        image,
        prompt,
        n,
        defmt: false,
        echo: false,
        opts: BuildOpts::default(),
    };
    let elf = boards::build(&req)?;
    let dir = boards::work_dir().join(board.name).join("profile");
    std::fs::create_dir_all(&dir)?;
    let fifo = dir.join("qemu.log");
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .context("mkfifo")?;
    anyhow::ensure!(made.success(), "mkfifo {} failed", fifo.display());
    eprintln!(
        "profiling under QEMU ({} -machine {}, every block logged: slower than a run) ...",
        board.qemu, board.machine
    );
    let mut qemu = Command::new("timeout")
        .arg(boards::timeout_for(n * 20).to_string())
        .arg(board.qemu)
        .args(["-machine", board.machine])
        .args(board.qemu_args)
        .args(["-nographic", "-monitor", "none", "-serial", "none"])
        .args(["-semihosting-config", "enable=on,target=native"])
        .args(["-icount", "shift=0,sleep=off"])
        .args(["-d", "in_asm,exec,nochain", "-D"])
        .arg(&fifo)
        .arg("-kernel")
        .arg(&elf)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", board.qemu))?;
    let log = std::fs::File::open(&fifo).with_context(|| fifo.display().to_string())?;
    let profile = fold(BufReader::with_capacity(1 << 20, log), "Session4feed");
    let status = qemu.wait()?;
    let _ = std::fs::remove_file(&fifo);
    anyhow::ensure!(
        status.success(),
        "the firmware failed under QEMU ({status})"
    );
    profile
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_blocks_into_their_functions_from_the_start_symbol() {
        let log = "\
----------------
IN: Reset
0x00000400:  f002 f992  bl       #0x2728

Trace 0: 0x7f [00800400/00000400/00000110/ff020200] Reset
----------------
IN: _ZN7ferrite7session7Session4feed17h0123456789abcdefE
0x00001000:  b580       push     {r7, lr}
0x00001002:  466f       mov      r7, sp
0x00001004:  bd80       pop      {r7, pc}

Trace 0: 0x7f [00800400/00001000/00000110/ff020200] _ZN7ferrite7session7Session4feed17h0123456789abcdefE
----------------
IN: expf
0x00002000:  4770       bx lr
0x00002002:  4770       bx lr

Trace 0: 0x7f [00800400/00002000/00000110/ff020200] expf
Trace 0: 0x7f [00800400/00002000/00000110/ff020200] expf
Trace 0: 0x7f [00800400/00000400/00000110/ff020200] Reset
Trace 0: 0x7f [00800400/00001000/00000110/ff020200] _ZN7ferrite7session7Session4feed17h0123456789abcdefE
Trace 0: 0x7f [00800400/00002000/00000110/ff020200] expf
";
        // One whole token: from the first feed to the second (the Reset
        // block before the first and the expf after the second are out).
        let p = fold(log.as_bytes(), "Session4feed").unwrap();
        assert_eq!(p.tokens, 1);
        assert_eq!(p.total, 3 + 2 + 2 + 1);
        assert_eq!(p.functions[0], ("expf".to_string(), 4));
        assert_eq!(
            p.functions[1],
            ("ferrite::session::Session::feed".to_string(), 3)
        );
        assert_eq!(p.functions[2], ("Reset".to_string(), 1));
        assert!(fold("".as_bytes(), "Session4feed").is_err());
    }
}
