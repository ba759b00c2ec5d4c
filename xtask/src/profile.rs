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
use std::process::{ExitCode, Stdio};

use anyhow::{bail, ensure, Context, Result};
use clap::Args as ClapArgs;

use crate::args::{self, ImageArgs, MathArgs};
use crate::boards::{self, Board, BuildOpts, Firmware, RunRequest};
use crate::host;

/// `profile <name>`.
#[derive(ClapArgs, Debug, Clone, PartialEq)]
pub struct Args {
    /// The board
    #[arg(value_name = "NAME", value_parser = args::board())]
    pub board: &'static Board,
    #[command(flatten)]
    pub image: ImageArgs,
    /// The prompt
    #[arg(long, default_value = boards::DEFAULT_PROMPT, value_parser = args::prompt())]
    pub prompt: String,
    /// Tokens to generate
    #[arg(short = 'n', long = "tokens", alias = "n", default_value_t = 8, value_parser = args::at_least::<1>)]
    pub n: usize,
    /// Functions listed
    #[arg(long, value_name = "K", default_value_t = 30)]
    pub top: usize,
    #[command(flatten)]
    pub math: MathArgs,
    /// Keep the runtime's math functions out of line (to count them)
    #[arg(long)]
    pub math_calls: bool,
}

/// Instructions per function over whole tokens.
#[derive(Debug, Default)]
pub struct Profile {
    /// Per function, largest `own` first.
    pub functions: Vec<FunctionCount>,
    /// Their sum (of `own`, which is also the sum of `with_builtins`).
    pub total: u64,
    /// Tokens counted: entries into the start symbol, minus one.
    pub tokens: u64,
}

/// One function's share of a [`Profile`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FunctionCount {
    /// Demangled name, without the hash.
    pub name: String,
    /// Instructions in blocks that start in this function.
    pub own: u64,
    /// `own` plus the compiler builtins (soft-float helpers, `memcpy`, ...)
    /// it called: a builtin's blocks count for the last function that is not
    /// a builtin to run before them (the helpers call nothing else), so a
    /// builtin itself keeps 0 here.
    pub with_builtins: u64,
    /// Executions of the function's entry block (its lowest executed
    /// address): calls, tail calls included.
    pub calls: u64,
}

/// Whether a symbol is a compiler builtin: a soft-float or integer helper
/// (`__addsf3`, `__aeabi_fmul`, ...) or a `compiler_builtins` function.
pub fn is_builtin(symbol: &str) -> bool {
    (symbol.starts_with("__") && !symbol.starts_with("__ZN"))
        || symbol.contains("compiler_builtins")
}

/// Folds a QEMU `-d in_asm,exec,nochain` log into a [`Profile`].
pub fn fold(log: impl BufRead, start: &str) -> Result<Profile> {
    #[derive(Clone, Default)]
    struct Counts {
        /// Executions per block start address.
        runs: HashMap<u64, u64>,
        /// Instructions per symbol, builtins folded into their caller.
        with_builtins: HashMap<String, u64>,
    }
    let mut block_len: HashMap<u64, u64> = HashMap::new();
    let mut symbol_at: HashMap<u64, String> = HashMap::new();
    let mut counts = Counts::default();
    let mut at_last_entry = Counts::default();
    let mut current: Option<(u64, u64)> = None;
    let mut on = false;
    let mut entries = 0u64;
    let mut entry_pc = None;
    let mut caller: Option<String> = None;
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
            if !is_builtin(symbol) && caller.as_deref() != Some(symbol) {
                caller = Some(symbol.to_string());
            }
            if on {
                symbol_at.entry(pc).or_insert_with(|| symbol.to_string());
                *counts.runs.entry(pc).or_default() += 1;
                let to = caller.as_deref().unwrap_or(symbol);
                *counts.with_builtins.entry(to.to_string()).or_default() +=
                    block_len.get(&pc).copied().unwrap_or(0);
            }
        }
    }
    if entries < 2 {
        bail!("the log entered {start} fewer than twice: no whole token to count");
    }
    // Per demangled name: own instructions, builtins folded in, and the
    // runs of the lowest block address (the entry).
    let mut merged: HashMap<String, FunctionCount> = HashMap::new();
    let mut entry: HashMap<String, (u64, u64)> = HashMap::new();
    for (&pc, &runs) in &at_last_entry.runs {
        let sym = &symbol_at[&pc];
        let f = merged.entry(demangle(sym)).or_default();
        f.own += runs * block_len.get(&pc).copied().unwrap_or(0);
        let e = entry.entry(sym.clone()).or_insert((pc, runs));
        if pc < e.0 {
            *e = (pc, runs);
        }
    }
    for (sym, (_, runs)) in entry {
        merged.entry(demangle(&sym)).or_default().calls += runs;
    }
    for (sym, n) in at_last_entry.with_builtins {
        merged.entry(demangle(&sym)).or_default().with_builtins += n;
    }
    let mut functions: Vec<FunctionCount> = merged
        .into_iter()
        .map(|(name, f)| FunctionCount { name, ..f })
        .collect();
    functions.sort_by(|a, b| b.own.cmp(&a.own).then_with(|| a.name.cmp(&b.name)));
    let total = functions.iter().map(|f| f.own).sum();
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

/// Builds `generate` for the board, profiles its tokens under QEMU and
/// prints the `profile:` line and the table of functions.
pub fn run(args: &Args) -> Result<ExitCode> {
    let board = args.board;
    let image = args.image.resolve(|| host::default_image(board))?;
    let opts = BuildOpts {
        math_noinline: args.math_calls,
        fast_math: args.math.fast_math,
        ..BuildOpts::default()
    };
    let req = RunRequest {
        prompt: &args.prompt,
        n: args.n,
        opts: opts.clone(),
        ..RunRequest::new(board, Firmware::Generate, &image)
    };
    let elf = boards::build(&req)?;
    let dir = boards::work_dir().join(board.name).join("profile");
    std::fs::create_dir_all(&dir)?;
    eprintln!(
        "profiling under QEMU ({} -machine {}, every block logged: slower than a run) ...",
        board.qemu_binary(),
        board.qemu().map_or("?", |q| q.machine)
    );
    // The log goes to QEMU's stderr, a pipe (the firmware's output is stdout).
    let mut qemu = boards::run::qemu_command(board, &elf, boards::timeout_for(args.n * 20))?
        .args(["-d", "in_asm,exec,nochain", "-D", "/dev/stderr"])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", board.qemu_binary()))?;
    let log = qemu.stderr.take().context("QEMU's stderr")?;
    let p = fold(BufReader::with_capacity(1 << 20, log), "Session4feed");
    let status = qemu.wait()?;
    ensure!(
        status.success(),
        "the firmware failed under QEMU ({status})"
    );
    let p = p?;
    let fed = p.tokens.max(1);
    println!(
        "profile: board={} math={} image={} tokens={fed} instructions={} instructions_per_token={}",
        board.name,
        opts.math(board).name(),
        image.display(),
        p.total,
        p.total / fed
    );
    // own: blocks that start in the function; +builtins: with the compiler
    // builtins it called (soft-float helpers on FPU-less cores); calls:
    // entries into it. Inlined code counts for the function it is inlined in.
    println!(
        "{:>6}  {:>12}  {:>10}  {:>10}  {:>8}  function",
        "share", "instructions", "per_token", "+builtins", "calls/tok"
    );
    for f in p.functions.iter().take(args.top) {
        println!(
            "{:>5.1}%  {:>12}  {:>10}  {:>10}  {:>8.1}  {}",
            100.0 * f.own as f64 / p.total.max(1) as f64,
            f.own,
            f.own / fed,
            f.with_builtins / fed,
            f.calls as f64 / fed as f64,
            f.name
        );
    }
    Ok(ExitCode::SUCCESS)
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
----------------
IN: __aeabi_fmul
0x00003000:  4770       bx lr

Trace 0: 0x7f [00800400/00003000/00000110/ff020200] __aeabi_fmul
----------------
IN: expf
0x00002004:  4770       bx lr

Trace 0: 0x7f [00800400/00002004/00000110/ff020200] expf
Trace 0: 0x7f [00800400/00002000/00000110/ff020200] expf
Trace 0: 0x7f [00800400/00000400/00000110/ff020200] Reset
Trace 0: 0x7f [00800400/00001000/00000110/ff020200] _ZN7ferrite7session7Session4feed17h0123456789abcdefE
Trace 0: 0x7f [00800400/00002000/00000110/ff020200] expf
";
        // One whole token: from the first feed to the second (the Reset
        // block before the first and the expf after the second are out).
        let p = fold(log.as_bytes(), "Session4feed").unwrap();
        assert_eq!(p.tokens, 1);
        assert_eq!(p.total, 3 + 2 + 1 + 1 + 2 + 1);
        let f = |name: &str, own, with_builtins, calls| FunctionCount {
            name: name.into(),
            own,
            with_builtins,
            calls,
        };
        assert_eq!(p.functions[0], f("expf", 5, 6, 2));
        assert_eq!(
            p.functions[1],
            f("ferrite::session::Session::feed", 3, 3, 1)
        );
        assert_eq!(p.functions[2], f("Reset", 1, 1, 1));
        // The helper's instruction counts for expf, which called it.
        assert_eq!(p.functions[3], f("__aeabi_fmul", 1, 0, 1));
        assert_eq!(p.functions.len(), 4);
        assert!(
            is_builtin("__addsf3")
                && is_builtin("_ZN17compiler_builtins5float3add8__addsf317h0123E")
        );
        assert!(!is_builtin("expf") && !is_builtin("_ZN7ferrite4math7sigmoid17h0123E"));
        assert!(fold("".as_bytes(), "Session4feed").is_err());
    }
}
