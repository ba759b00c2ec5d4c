//! `cargo xtask test-boards [--overwrite]`: the QEMU suite.
//!
//! - every board: `generate` with the board's default image; the generated ids
//!   equal the host runtime's (`ferrite generate --ids`) and the final-step
//!   logits checksum equals `ferrite logits` (bit-identical FNV-1a over the
//!   f32 bits; if the bits differ, the f32 sum must agree within
//!   LOGITS_REL_TOL); the transcript and the stats line equal
//!   boards/expected/<board>.out / .stats;
//! - BPE: a model with the committed byte-level BPE tokenizer
//!   (tests/tokenizer/model) encodes the prompt and generates the host's
//!   tokens, and its transcript equals boards/expected/bpe-<board>.out;
//! - constant memory: 10,000 tokens use the same stack and RAM as 100;
//! - OTA: an intact download generates the host's tokens, a corrupted or
//!   truncated one is refused with a message (exit status 2, no fault);
//! - fit: an image too large for the M3's 256 KB flash is refused clearly;
//! - defmt: the firmware builds with the `defmt` feature (and is decoded
//!   with defmt-print, when that is installed).
//!
//! Failures are gathered; the last line is `N passed, N failed`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, ensure, Context, Result};

use crate::boards::{
    self, Board, Download, Firmware, Report, RunRequest, BOARDS, DEFAULT_N, DEFAULT_PROMPT,
};
use crate::host;

/// Relative tolerance on the final-step logits sum, used only when the
/// board's logits are not bit-identical to the host's.
pub const LOGITS_REL_TOL: f32 = 1e-4;

/// Boards that run the 10,000-token constant-memory check.
const LONG_RUN_BOARDS: &[&str] = &["m4f", "rv32imafc"];
const LONG_N: usize = 10_000;
const SHORT_N: usize = 100;
/// Boards that run a model with a byte-level BPE tokenizer.
const BPE_BOARDS: &[&str] = &["m4f", "rv32imac"];
/// Boards that run the OTA example.
const OTA_BOARDS: &[&str] = &["m4f", "rv32imac"];

struct Suite {
    overwrite: bool,
    passed: usize,
    failed: Vec<String>,
}

impl Suite {
    fn check(&mut self, name: &str, f: impl FnOnce(&mut Self) -> Result<String>) {
        eprintln!("--- {name}");
        match f(self) {
            Ok(note) => {
                self.passed += 1;
                println!(
                    "ok   {name}{}",
                    if note.is_empty() {
                        String::new()
                    } else {
                        format!(" ({note})")
                    }
                );
            }
            Err(e) => {
                println!("FAIL {name}: {e:#}");
                self.failed.push(name.to_string());
            }
        }
    }

    /// Compares `actual` with boards/expected/<file>, or writes it with --overwrite.
    fn expect(&self, file: &str, actual: &[u8]) -> Result<()> {
        let path = expected_dir().join(file);
        if self.overwrite {
            std::fs::create_dir_all(expected_dir())?;
            std::fs::write(&path, actual)?;
            return Ok(());
        }
        let want = std::fs::read(&path).with_context(|| {
            format!(
                "{} missing: run `cargo xtask test-boards --overwrite`",
                path.display()
            )
        })?;
        if want != actual {
            let w = String::from_utf8_lossy(&want);
            let a = String::from_utf8_lossy(actual);
            let diff: Vec<String> = w
                .lines()
                .zip(a.lines())
                .filter(|(x, y)| x != y)
                .take(3)
                .map(|(x, y)| format!("  expected: {x}\n  actual:   {y}"))
                .collect();
            bail!(
                "output differs from {} ({} vs {} lines):\n{}\n(if intended: cargo xtask test-boards --overwrite)",
                path.display(),
                w.lines().count(),
                a.lines().count(),
                diff.join("\n")
            );
        }
        Ok(())
    }
}

pub fn expected_dir() -> PathBuf {
    boards::boards_dir().join("expected")
}

pub fn run(overwrite: bool) -> Result<ExitCode> {
    let mut s = Suite {
        overwrite,
        passed: 0,
        failed: Vec::new(),
    };
    host::ferrite()?;

    for board in BOARDS {
        s.check(
            &format!("{}: instruction counter calibrated", board.name),
            |_| calibrated(board),
        );
        s.check(&format!("{}: generate matches host", board.name), |s| {
            board_matches_host(s, board)
        });
    }
    for name in BPE_BOARDS {
        let board = Board::named(name)?;
        s.check(&format!("{name}: BPE model generates like the host"), |s| {
            bpe_matches_host(s, board)
        });
    }
    for name in LONG_RUN_BOARDS {
        let board = Board::named(name)?;
        s.check(
            &format!("{name}: constant memory, {LONG_N} vs {SHORT_N} tokens"),
            |_| constant_memory(board),
        );
    }
    for name in OTA_BOARDS {
        let board = Board::named(name)?;
        s.check(
            &format!("{name}: ota download generates like the host"),
            |s| ota_intact(s, board),
        );
        s.check(&format!("{name}: ota refuses a corrupted download"), |_| {
            ota_refused(board, Download::FlipByte)
        });
        s.check(&format!("{name}: ota refuses a truncated download"), |_| {
            ota_refused(board, Download::Truncated)
        });
    }
    s.check(
        "m3: an image over the flash budget is refused clearly",
        |_| too_big_for_m3(),
    );
    s.check("m4f: defmt build (decoded with defmt-print)", |_| {
        defmt_build()
    });

    if overwrite {
        println!("wrote {}", expected_dir().display());
    }
    for f in &s.failed {
        println!("failed: {f}");
    }
    println!("{} passed, {} failed", s.passed, s.failed.len());
    Ok(if s.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The counter reads 2,000,000 instructions for a loop of 2,000,000, within
/// one SysTick tick (40 instructions) plus the loop's set-up.
fn calibrated(board: &'static Board) -> Result<String> {
    let image = host::default_image(board)?;
    let req = RunRequest {
        board,
        firmware: Firmware::Calibrate,
        image: &image,
        prompt: DEFAULT_PROMPT,
        n: DEFAULT_N,
        defmt: false,
        echo: false,
    };
    let run = boards::build_and_run(&req)?;
    ensure!(
        run.status == 0,
        "exit status {}:\n{}",
        run.status,
        run.tail()
    );
    let text = String::from_utf8_lossy(&run.output);
    let counted: i64 = text
        .split("counted=")
        .nth(1)
        .and_then(|s| s.trim().parse().ok())
        .with_context(|| format!("no `counted=` in {text:?}"))?;
    ensure!(
        (counted - 2_000_000).abs() <= 64,
        "counted {counted} instructions for 2,000,000"
    );
    Ok(format!("counted {counted} for 2000000"))
}

fn run_generate(board: &'static Board, image: &Path, n: usize) -> Result<(boards::Run, Report)> {
    let req = RunRequest {
        board,
        firmware: Firmware::Generate,
        image,
        prompt: DEFAULT_PROMPT,
        n,
        defmt: false,
        echo: false,
    };
    let run = boards::build_and_run(&req)?;
    let report = run.report()?;
    Ok((run, report))
}

/// Tokens and the final-step logits checksum against the host runtime.
fn compare_with_host(image: &Path, report: &Report) -> Result<String> {
    let n = report.count;
    let host_ids = host::generate_ids(image, DEFAULT_PROMPT, n)?;
    ensure!(
        host_ids.len() == n,
        "host generated {} ids, board {n}",
        host_ids.len()
    );
    ensure!(
        report.tokens_truncated == (report.tokens.len() < n),
        "the tokens: line shows {} of {n} ids without saying so",
        report.tokens.len()
    );
    let shown = &host_ids[..report.tokens.len()];
    ensure!(
        report.tokens == shown,
        "tokens differ from the host's:\n  board: {:?}\n  host:  {:?}",
        report.tokens,
        shown
    );
    ensure!(
        report.tokens_fnv == boards::fnv1a(host_ids.iter().copied()),
        "hash of all {n} ids differs from the host's"
    );

    let mut fed = host::tokenize(image, DEFAULT_PROMPT)?;
    ensure!(
        fed.len() == report.get("prompt_tokens").parse::<usize>().unwrap_or(0),
        "the board encoded the prompt as {} tokens, the host as {}",
        report.get("prompt_tokens"),
        fed.len()
    );
    fed.extend_from_slice(&host_ids[..n - 1]);
    let logits = host::last_logits(image, &fed)?;
    let host_fnv = boards::fnv1a(logits.iter().map(|l| l.to_bits()));
    if host_fnv == report.logits_fnv {
        return Ok(format!("{n} tokens, logits bit-identical"));
    }
    let host_sum: f32 = logits.iter().sum();
    let scale: f32 = logits.iter().map(|l| l.abs()).sum::<f32>().max(1.0);
    let err = (host_sum - report.logits_sum).abs() / scale;
    ensure!(
        err <= LOGITS_REL_TOL,
        "final-step logits differ: board sum {} host sum {} (relative error {err:e} > {LOGITS_REL_TOL:e})",
        report.logits_sum,
        host_sum
    );
    Ok(format!(
        "{n} tokens, logits within {LOGITS_REL_TOL:e} (relative error {err:e}), not bit-identical"
    ))
}

fn board_matches_host(s: &mut Suite, board: &'static Board) -> Result<String> {
    let image = host::default_image(board)?;
    let (run, report) = run_generate(board, &image, DEFAULT_N)?;
    let note = compare_with_host(&image, &report)?;
    s.expect(&format!("{}.out", board.name), &run.output)?;
    s.expect(
        &format!("{}.stats", board.name),
        format!("{}\n", report.stats_line()).as_bytes(),
    )?;
    Ok(format!(
        "{note}; {}",
        report.stats_line().trim_start_matches("stats: ")
    ))
}

fn bpe_matches_host(s: &mut Suite, board: &'static Board) -> Result<String> {
    let image = host::bpe_image("f32")?;
    let (run, report) = run_generate(board, &image, DEFAULT_N)?;
    let note = compare_with_host(&image, &report)?;
    s.expect(&format!("bpe-{}.out", board.name), &run.output)?;
    Ok(format!(
        "{note}; prompt {} tokens; {}",
        report.get("prompt_tokens"),
        report.stats_line().trim_start_matches("stats: ")
    ))
}

fn constant_memory(board: &'static Board) -> Result<String> {
    let image = host::default_image(board)?;
    let (_, short) = run_generate(board, &image, SHORT_N)?;
    let (_, long) = run_generate(board, &image, LONG_N)?;
    for key in ["stack_bytes", "state_bytes", "session_bytes"] {
        ensure!(
            short.get(key) == long.get(key),
            "{key}: {} after {SHORT_N} tokens, {} after {LONG_N}",
            short.get(key),
            long.get(key)
        );
    }
    ensure!(
        short.sizes.ram == long.sizes.ram,
        "RAM {} vs {}",
        short.sizes.ram,
        long.sizes.ram
    );
    let note = compare_with_host(&image, &long)?;
    Ok(format!(
        "stack {} B, static RAM {} B, state {} B in both; {LONG_N}-token run: {note}",
        long.get("stack_bytes"),
        long.sizes.ram,
        long.get("state_bytes")
    ))
}

fn ota_intact(s: &mut Suite, board: &'static Board) -> Result<String> {
    let image = host::default_image(board)?;
    let run = boards::run_ota(
        board,
        &image,
        Download::Intact,
        DEFAULT_PROMPT,
        DEFAULT_N,
        false,
    )?;
    let report = run.report()?;
    let note = compare_with_host(&image, &report)?;
    s.expect(&format!("ota-{}.out", board.name), &run.output)?;
    Ok(format!("{note}; heap {} B", report.get("heap_bytes")))
}

fn ota_refused(board: &'static Board, download: Download) -> Result<String> {
    let image = host::default_image(board)?;
    let run = boards::run_ota(board, &image, download, DEFAULT_PROMPT, DEFAULT_N, false)?;
    let text = String::from_utf8_lossy(&run.output);
    let line = text
        .lines()
        .find(|l| l.starts_with("ota: refused"))
        .with_context(|| {
            format!(
                "no `ota: refused` line (exit status {}):\n{}",
                run.status,
                run.tail()
            )
        })?;
    ensure!(
        run.status == 2,
        "exit status {} (want 2, a refusal):\n{}",
        run.status,
        run.tail()
    );
    ensure!(!text.contains("tokens:"), "generated from a bad image");
    Ok(line.to_string())
}

fn too_big_for_m3() -> Result<String> {
    let board = Board::named("m3")?;
    let image = host::fixture_image(boards::DEFAULT_MODEL, "f32")?;
    let (flash, _) = board.budget()?;
    // The f32 default model plus the code must not fit 256 KB; otherwise pick a bigger one.
    let req = RunRequest {
        board,
        firmware: Firmware::Generate,
        image: &image,
        prompt: DEFAULT_PROMPT,
        n: 4,
        defmt: false,
        echo: false,
    };
    match boards::build(&req) {
        Ok(elf) => {
            let sizes = boards::sizes(&elf)?;
            bail!(
                "expected a link failure, but it fits: flash {} of {flash} bytes",
                sizes.flash
            )
        }
        Err(e) => {
            let msg = format!("{e:#}");
            ensure!(
                msg.contains("does not fit board m3"),
                "unclear failure: {msg}"
            );
            Ok(msg.lines().next().unwrap_or("").to_string())
        }
    }
}

fn defmt_build() -> Result<String> {
    let board = Board::named("m4f")?;
    let image = host::default_image(board)?;
    let req = RunRequest {
        board,
        firmware: Firmware::Generate,
        image: &image,
        prompt: DEFAULT_PROMPT,
        n: 8,
        defmt: true,
        echo: false,
    };
    let elf = boards::build(&req)?;
    let have_decoder = std::process::Command::new("defmt-print")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if !have_decoder {
        return Ok(
            "built; defmt-print not installed, decoding skipped (cargo install defmt-print)".into(),
        );
    }
    let cwd = boards::work_dir().join(board.name);
    let run = boards::run_qemu(board, &elf, &cwd, false, true, boards::timeout_for(8))?;
    ensure!(
        run.status == 0,
        "exit status {}:\n{}",
        run.status,
        run.tail()
    );
    let text = String::from_utf8_lossy(&run.output);
    let host_ids = host::generate_ids(&image, DEFAULT_PROMPT, 8)?;
    let want = format!(
        "tokens: {}",
        host_ids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    ensure!(
        text.contains(&want),
        "decoded stream lacks `{want}`:\n{}",
        run.tail()
    );
    Ok("decoded with defmt-print; tokens match the host".into())
}
