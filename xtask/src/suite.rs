//! `cargo xtask test-boards [--overwrite]`: the QEMU suite.
//!
//! - every board: the `kernels` firmware runs this build's tile kernels (the
//!   module the board's target gets) against the reference, bit for bit, on
//!   random, extreme and misaligned cases, and reports no mismatch;
//! - every board: `generate` with the board's default image; the generated ids
//!   equal the host runtime's (`ferrite generate --ids`) and the final-step
//!   logits checksum equals `ferrite logits` (bit-identical FNV-1a over the
//!   f32 bits; if the bits differ, the f32 sum must agree within
//!   LOGITS_REL_TOL, except on the integer path (tiled int8/int4 images),
//!   where they must not differ); the transcript and the stats line equal
//!   boards/expected/<board>.out / .stats;
//! - fast math: a board built with the runtime's `fast-math` feature (by
//!   default where `Board::fast_math` is set) is compared, in every check,
//!   with a host CLI that runs the same module (`fast-math` for the f32
//!   polynomial, `fast-math-int` for the integer one; host::ferrite_with);
//!   such a board also runs `generate` without the feature against the
//!   plain host (boards/expected/<board>-libm.out / .stats);
//! - BPE: a model with the committed byte-level BPE tokenizer
//!   (tests/tokenizer/model) encodes the prompt and generates the host's
//!   tokens, and its transcript equals boards/expected/bpe-<board>.out;
//! - constant memory: 10,000 tokens use the same stack and RAM as 100;
//! - OTA: an intact download generates the host's tokens, a corrupted or
//!   truncated one is refused with a message (exit status 2, no fault);
//! - fit: an image too large for the M3's 256 KB flash is refused clearly;
//! - defmt: the firmware builds with the `defmt` feature (and is decoded
//!   with defmt-print, when that is installed);
//! - trained models (models/): the demo (lm-large f32, sampled with a seed)
//!   on m4f and lm-small int8 on m3 generate the host's tokens; the `eval`
//!   firmware scores MQAR (100 sequences of seed 0, int8) for three MQAR
//!   models on m4f and gdn-2k-lr3e-3 on m0 (its 16 KB of RAM) with the
//!   host's correct count, consistent with the
//!   recorded 1,000-sequence accuracy (metrics.json, binomial tolerance), and
//!   the bits per byte of a held-out excerpt for lm-small int8 on m3 and
//!   lm-large int8 on m4f bit-identical to the host's.
//!
//! Failures are gathered; the last line is `N passed, N failed`. `--only TEXT`
//! runs the checks whose name contains TEXT (e.g. `kernels`, `m3:`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, ensure, Context, Result};

use crate::boards::{
    self, Board, BoardExt, BuildOpts, Delivery, Firmware, Report, RunRequest, BOARDS, DEFAULT_N,
    DEFAULT_PROMPT,
};
use crate::evalboard::{self, Task};
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
/// Boards that run every fixture whose int8 image is format 4 (the mixer
/// options that version added: the GDN family, GSA short convolution,
/// dilated SWA, `mla`): host and board must agree bit for bit.
const FORMAT4_BOARDS: &[&str] = &["m4f"];
/// Boards that run the OTA example.
const OTA_BOARDS: &[&str] = &["m4f", "rv32imac"];
/// Shipped MQAR models evaluated at int8: (board, model). On the M4F two
/// strong and one mid; on the M0 the one its 16 KB of RAM is made for.
const MQAR_MODELS: &[(&str, &str)] = &[
    ("m4f", "bla-m15"),
    ("m4f", "gdn-2k-lr3e-3"),
    ("m4f", "bla-m7"),
    ("m0", "gdn-2k-lr3e-3"),
];
/// MQAR sequences of seed 0 on the board (the first 100 of the recorded 1,000).
const MQAR_N: usize = 100;
/// Held-out excerpts scored on the boards: (board, model, dtype, bytes, chunk).
/// The M3 is soft float (~28M instructions per byte with lm-small), so its
/// excerpt is short; both excerpts span two or more chunks (state resets).
const TEXT_EVALS: &[(&str, &str, &str, usize, usize)] = &[
    ("m3", "models/lm/small", "int8", 256, 128),
    ("m4f", "models/lm/large", "int8", 1024, 512),
];
/// How far an excerpt's bits per byte may sit from the recorded figure of the
/// whole held-out file: a sanity bound only (a short excerpt is noisy), the
/// real check is equality with the host.
const EXCERPT_BPB_SLACK: f64 = 0.5;

struct Suite {
    overwrite: bool,
    /// `--only TEXT`: run the checks whose name contains TEXT.
    only: Option<String>,
    passed: usize,
    failed: Vec<String>,
}

impl Suite {
    fn check(&mut self, name: &str, f: impl FnOnce(&mut Self) -> Result<String>) {
        if self
            .only
            .as_ref()
            .is_some_and(|only| !name.contains(only.as_str()))
        {
            return;
        }
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

pub fn run(overwrite: bool, only: Option<&str>) -> Result<ExitCode> {
    let mut s = Suite {
        overwrite,
        only: only.map(str::to_string),
        passed: 0,
        failed: Vec::new(),
    };
    host::ferrite()?;

    for &board in BOARDS.iter() {
        s.check(
            &format!("{}: instruction counter calibrated", board.name),
            |_| calibrated(board),
        );
        s.check(
            &format!(
                "{}: tile kernels ({}) match the reference bit for bit",
                board.name,
                board.kernels()
            ),
            |_| kernels_match(board),
        );
        s.check(&format!("{}: generate matches host", board.name), |s| {
            board_matches_host(s, board)
        });
        // A board that runs fast math by default: the libm build too, so
        // that the path without the feature stays checked on it.
        {
            s.check(
                &format!(
                    "{}: generate without fast-math matches the libm host",
                    board.name
                ),
                |s| {
                    let opts = BuildOpts {
                        fast_math: Some(false),
                        ..BuildOpts::default()
                    };
                    board_matches_host_as(s, board, &opts, &format!("{}-libm", board.name))
                },
            );
        }
    }
    for name in FORMAT4_BOARDS {
        let board = boards::named(name)?;
        s.check(
            &format!("{name}: the format-4 mixer options generate like the host (int8)"),
            |_| format4_matches_host(board),
        );
    }
    for name in BPE_BOARDS {
        let board = boards::named(name)?;
        s.check(&format!("{name}: BPE model generates like the host"), |s| {
            bpe_matches_host(s, board)
        });
    }
    for name in LONG_RUN_BOARDS {
        let board = boards::named(name)?;
        s.check(
            &format!("{name}: constant memory, {LONG_N} vs {SHORT_N} tokens"),
            |_| constant_memory(board),
        );
    }
    for name in OTA_BOARDS {
        let board = boards::named(name)?;
        s.check(
            &format!("{name}: ota accepts a good update and serves it like the host"),
            |s| ota_accepts(s, board),
        );
        s.check(
            &format!("{name}: ota refuses a corrupted update, A serves"),
            |_| {
                let b = host::fixture_image(OTA_UPDATE, "int8")?;
                ota_refuses(
                    board,
                    &b,
                    Delivery::FlipByte,
                    "invalid image: image corrupted: CRC mismatch",
                )
            },
        );
        s.check(
            &format!("{name}: ota refuses an interrupted update at any stage, A serves"),
            |_| ota_cuts(board),
        );
        s.check(
            &format!("{name}: ota refuses a hostile update with a valid CRC, A serves"),
            |_| {
                let b = boards::root_dir().join("tests/corrupt/overflow_gdn_heads.fer");
                ota_refuses(board, &b, Delivery::Intact, "invalid image: size overflow")
            },
        );
        s.check(
            &format!("{name}: ota refuses an update whose session does not fit, A serves"),
            |_| {
                let b = host::model_image(
                    &boards::root_dir().join("models/lm/large"),
                    "lm_large",
                    "int8",
                )?;
                ota_refuses(board, &b, Delivery::Intact, "its session needs")
            },
        );
    }
    s.check(
        "m3: an image over the flash budget is refused clearly",
        |_| too_big_for_m3(),
    );
    s.check("m4f: defmt build (decoded with defmt-print)", |_| {
        defmt_build()
    });

    s.check(
        &format!(
            "m4f: demo ({} {}, sampled) generates like the host",
            crate::DEMO_MODEL,
            crate::DEMO_DTYPE
        ),
        demo_matches_host,
    );
    s.check("m3: models/lm/en-m3 int8 generates like the host", |s| {
        english_lm_on_m3(s)
    });
    for &(board, name) in MQAR_MODELS {
        s.check(
            &format!("{board}: MQAR {name} int8, {MQAR_N} sequences, like the host and the record"),
            |s| mqar_on_board(s, board, name),
        );
    }
    for &(board, model, dtype, bytes, chunk) in TEXT_EVALS {
        s.check(
            &format!(
                "{board}: {model} {dtype} bits per byte of {bytes} held-out bytes like the host"
            ),
            |s| text_on_board(s, board, model, dtype, bytes, chunk),
        );
    }

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
        opts: BuildOpts::default(),
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

/// The `kernels` firmware: every case bit-identical to the reference, with
/// the kernel module the board's target gets.
fn kernels_match(board: &'static Board) -> Result<String> {
    let image = host::default_image(board)?;
    let req = RunRequest {
        board,
        firmware: Firmware::Kernels,
        image: &image,
        prompt: DEFAULT_PROMPT,
        n: DEFAULT_N,
        defmt: false,
        echo: false,
        opts: BuildOpts::default(),
    };
    let run = boards::build_and_run(&req)?;
    let text = String::from_utf8_lossy(&run.output);
    let summary = parse_kernels(&text)?;
    let first_failure = text
        .lines()
        .find(|l| l.starts_with("kernels: FAIL"))
        .unwrap_or("");
    ensure!(
        summary.failed == 0 && run.status == 0,
        "{} of {} cases differ (exit status {}); first: {first_failure}",
        summary.failed,
        summary.cases,
        run.status
    );
    ensure!(
        summary.module == board.kernels(),
        "ran the {} kernels, not the {} module the board's target gets (is FERRITE_KERNELS set?)",
        summary.module,
        board.kernels()
    );
    ensure!(summary.cases >= 1000, "only {} cases ran", summary.cases);
    Ok(format!(
        "{} cases, module {}, up to {} columns",
        summary.cases, summary.module, summary.max_cols
    ))
}

/// The `kernels: board=.. module=.. cases=.. failed=.. max_cols=..` line.
#[derive(Debug, PartialEq)]
struct KernelsSummary {
    module: String,
    cases: u64,
    failed: u64,
    max_cols: u64,
}

fn parse_kernels(text: &str) -> Result<KernelsSummary> {
    use ferrite_common::report::{last_value, Fields, KERNELS};
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with("kernels: board="))
        .with_context(|| format!("no `kernels: board=` line in the output:\n{text}"))?;
    let f = Fields(last_value(line, KERNELS).unwrap_or(""));
    let number = |key: &str| {
        f.number(key)
            .with_context(|| format!("bad or no {key}= in {line:?}"))
    };
    Ok(KernelsSummary {
        module: f
            .get("module")
            .with_context(|| format!("no module= in {line:?}"))?
            .to_string(),
        cases: number("cases")?,
        failed: number("failed")?,
        max_cols: number("max_cols")?,
    })
}

fn run_generate(board: &'static Board, image: &Path, n: usize) -> Result<(boards::Run, Report)> {
    run_generate_as(board, image, n, &BuildOpts::default())
}

/// [`run_generate`] with the build options `opts`.
fn run_generate_as(
    board: &'static Board,
    image: &Path,
    n: usize,
    opts: &BuildOpts,
) -> Result<(boards::Run, Report)> {
    let req = RunRequest {
        board,
        firmware: Firmware::Generate,
        image,
        prompt: DEFAULT_PROMPT,
        n,
        defmt: false,
        echo: false,
        opts: opts.clone(),
    };
    let run = boards::build_and_run(&req)?;
    let report = run.report()?;
    Ok((run, report))
}

/// Tokens and the final-step logits checksum against the host runtime.
fn compare_with_host(image: &Path, report: &Report) -> Result<String> {
    compare_with_host_as(image, report, DEFAULT_PROMPT, &BuildOpts::default())
}

/// [`compare_with_host`] for a run with `prompt` and the sampler of `opts`.
fn compare_with_host_as(
    image: &Path,
    report: &Report,
    prompt: &str,
    opts: &BuildOpts,
) -> Result<String> {
    let n = report.count;
    let board = boards::named(report.board)?;
    let math = opts.math(board);
    let host_ids = host::generate_ids_with(image, prompt, n, opts, math)?;
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

    let mut fed = host::tokenize(image, prompt)?;
    ensure!(
        fed.len() == report.get("prompt_tokens").parse::<usize>().unwrap_or(0),
        "the board encoded the prompt as {} tokens, the host as {}",
        report.get("prompt_tokens"),
        fed.len()
    );
    fed.extend_from_slice(&host_ids[..n - 1]);
    let logits = host::last_logits(image, &fed, math)?;
    let host_fnv = boards::fnv1a(logits.iter().map(|l| l.to_bits()));
    if host_fnv == report.logits_fnv {
        return Ok(format!("{n} tokens, logits bit-identical"));
    }
    // The integer path is exact integer arithmetic between two f32 steps
    // that every core rounds alike: no tolerance.
    ensure!(
        !crate::image_check::check(image)?.tiled,
        "final-step logits differ from the host's bits on the integer path (an int8/int4 tiled image)"
    );
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
    board_matches_host_as(s, board, &BuildOpts::default(), board.name)
}

/// `generate` with the build options `opts` against the host CLI that runs
/// the same math; the transcript and stats are boards/expected/<stem>.out
/// and .stats.
fn board_matches_host_as(
    s: &mut Suite,
    board: &'static Board,
    opts: &BuildOpts,
    stem: &str,
) -> Result<String> {
    let image = host::default_image(board)?;
    let (run, report) = run_generate_as(board, &image, DEFAULT_N, opts)?;
    let note = compare_with_host_as(&image, &report, DEFAULT_PROMPT, opts)?;
    s.expect(&format!("{stem}.out"), &run.output)?;
    s.expect(
        &format!("{stem}.stats"),
        format!("{}\n", report.stats_line()).as_bytes(),
    )?;
    Ok(format!(
        "{note}; math {}; {}",
        opts.math(board).name(),
        report.stats_line().trim_start_matches("stats: ")
    ))
}

/// Every fixture whose int8 image is format 4, on `board`: the host's
/// tokens and final logits, bit for bit. The list is read from the images'
/// headers (`tests/tests/format.rs` checks which fixtures those are).
fn format4_matches_host(board: &'static Board) -> Result<String> {
    let mut names: Vec<String> = std::fs::read_dir(boards::root_dir().join("tests/fixtures"))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut ran = 0;
    for fixture in &names {
        let image = host::fixture_image(fixture, "int8")?;
        let bytes = std::fs::read(&image)?;
        // Header: magic (8 bytes), then the format version (u32 LE).
        let version = bytes
            .get(8..12)
            .map_or(0, |v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]));
        if version != 4 {
            continue;
        }
        let (_, report) = run_generate(board, &image, 16)?;
        compare_with_host(&image, &report).with_context(|| format!("fixture {fixture}"))?;
        ran += 1;
    }
    ensure!(ran > 0, "no fixture has a format-4 image");
    Ok(format!(
        "{ran} format-4 fixtures, 16 tokens each, logits bit-identical"
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

/// The fixture every OTA check offers as the good update (model B).
const OTA_UPDATE: &str = "swa_gqa";

/// Runs the update firmware with the board's model as A and `update`
/// delivered as `delivery`; returns the verdict line and the report.
fn ota_run(
    board: &'static Board,
    update: Option<&Path>,
    delivery: Delivery,
) -> Result<(String, Report, boards::Run)> {
    let a = host::default_image(board)?;
    let run = boards::run_ota(
        board,
        &a,
        update,
        delivery,
        DEFAULT_PROMPT,
        DEFAULT_N,
        false,
    )?;
    let verdict = boards::verdict(&run).with_context(|| {
        format!(
            "no `ota:` verdict (exit status {}):\n{}",
            run.status,
            run.tail()
        )
    })?;
    let report = run.report()?;
    Ok((verdict, report, run))
}

/// A good update is accepted and serves: its tokens are the host's for B.
fn ota_accepts(s: &mut Suite, board: &'static Board) -> Result<String> {
    let b = host::fixture_image(OTA_UPDATE, "int8")?;
    let (verdict, report, run) = ota_run(board, Some(&b), Delivery::Intact)?;
    ensure!(verdict == "ota: accepted", "{verdict}");
    let note = compare_with_host(&b, &report)?;
    s.expect(&format!("ota-{}.out", board.name), &run.output)?;
    Ok(format!("{verdict}; B serves: {note}"))
}

/// A refused update leaves A serving: the verdict starts with `want`, and
/// the tokens are the host's for A.
fn ota_refuses(
    board: &'static Board,
    update: &Path,
    delivery: Delivery,
    want: &str,
) -> Result<String> {
    let (verdict, report, _) = ota_run(board, Some(update), delivery)?;
    ensure!(
        verdict.starts_with(&format!("ota: refused {want}")),
        "{delivery:?}: `{verdict}`, want `ota: refused {want}...`"
    );
    compare_with_host(&host::default_image(board)?, &report)
        .with_context(|| format!("A does not serve after `{verdict}`"))?;
    Ok(verdict)
}

/// A transfer cut anywhere — before the header, in it, after the first
/// chunk, in the middle, one byte short — is refused and A serves.
fn ota_cuts(board: &'static Board) -> Result<String> {
    let b = host::fixture_image(OTA_UPDATE, "int8")?;
    let len = std::fs::metadata(&b)?.len() as usize;
    let mut seen = Vec::new();
    for cut in [0, 10, 1024, len / 2, len - 1] {
        let want = if cut < 20 {
            "the transfer ended"
        } else {
            "the transfer stopped"
        };
        ota_refuses(board, &b, Delivery::CutAt(cut), want)?;
        seen.push(cut.to_string());
    }
    Ok(format!(
        "cut at {} of {len} bytes: each refused, A serves",
        seen.join(", ")
    ))
}

fn too_big_for_m3() -> Result<String> {
    let board = boards::named("m3")?;
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
        opts: BuildOpts::default(),
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
    let board = boards::named("m4f")?;
    let image = host::default_image(board)?;
    let req = RunRequest {
        board,
        firmware: Firmware::Generate,
        image: &image,
        prompt: DEFAULT_PROMPT,
        n: 8,
        defmt: true,
        echo: false,
        opts: BuildOpts::default(),
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
    let host_ids = host::generate_ids(&image, DEFAULT_PROMPT, 8, board.math(true))?;
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

/// The demo of `cargo xtask demo`: the trained LM, sampled with a seed.
fn demo_matches_host(s: &mut Suite) -> Result<String> {
    let board = boards::named("m4f")?;
    let image = host::shipped_image(crate::DEMO_MODEL, crate::DEMO_DTYPE)?;
    let opts = BuildOpts {
        temperature: crate::DEMO_TEMPERATURE,
        seed: crate::DEMO_SEED,
        ..BuildOpts::default()
    };
    let req = RunRequest {
        board,
        firmware: Firmware::Generate,
        image: &image,
        prompt: crate::DEMO_PROMPT,
        n: crate::DEMO_N,
        defmt: false,
        echo: false,
        opts: opts.clone(),
    };
    let run = boards::build_and_run(&req)?;
    let report = run.report()?;
    let note = compare_with_host_as(&image, &report, crate::DEMO_PROMPT, &opts)?;
    s.expect("demo-m4f.out", &run.output)?;
    s.expect(
        "demo-m4f.stats",
        format!("{}\n", report.stats_line()).as_bytes(),
    )?;
    Ok(format!(
        "{note}; {}",
        report.stats_line().trim_start_matches("stats: ")
    ))
}

/// `cargo xtask board m3 --image models/lm/en-m3`: the trained English LM
/// for the M3, int8, in the M3's real budget, greedy, against the host.
fn english_lm_on_m3(s: &mut Suite) -> Result<String> {
    let board = boards::named("m3")?;
    let image = host::shipped_image("models/lm/en-m3", "int8")?;
    let (run, report) = run_generate(board, &image, DEFAULT_N)?;
    let note = compare_with_host(&image, &report)?;
    s.expect("lm-en-m3-m3.out", &run.output)?;
    s.expect(
        "lm-en-m3-m3.stats",
        format!("{}\n", report.stats_line()).as_bytes(),
    )?;
    let (flash, ram) = board.budget()?;
    Ok(format!(
        "{note}; flash {} of {flash} B, static RAM {} of {ram} B; {}",
        report.sizes.flash,
        report.sizes.ram,
        report.stats_line().trim_start_matches("stats: ")
    ))
}

/// A number at `path` (keys) in a model's metrics.json.
fn recorded(model_dir: &str, path: &[&str]) -> Result<f64> {
    let file = boards::root_dir().join(model_dir).join("metrics.json");
    let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
    let mut v: &serde_json::Value = &serde_json::from_str(&text)?;
    for key in path {
        v = v
            .get(key)
            .with_context(|| format!("{}: no {}", file.display(), path.join(".")))?;
    }
    v.as_f64()
        .with_context(|| format!("{}: {} is not a number", file.display(), path.join(".")))
}

/// MQAR on a board: the board's correct count equals the host's on the same
/// int8 image and sequences, and the subset accuracy is consistent with the
/// recorded 1,000-sequence figure: within 4 binomial standard deviations of
/// it for the subset's queries (+ 1/total for the record's 4-decimal rounding).
fn mqar_on_board(s: &mut Suite, board: &str, name: &str) -> Result<String> {
    let board = boards::named(board)?;
    let dir = format!("models/mqar/{name}");
    let image = host::shipped_image(&dir, "int8")?;
    let task = Task::Mqar {
        seed: 0,
        n: MQAR_N,
        pairs: 8,
        seq_len: 64,
    };
    let out = evalboard::run(board, &image, &task, false, None)?;
    let (correct, total): (u64, u64) = (out.report.number("correct")?, out.report.number("total")?);
    let p = recorded(&dir, &["runtime", "int8", "accuracy"])?;
    let acc = correct as f64 / total as f64;
    let tol = 4.0 * (p * (1.0 - p) / total as f64).sqrt() + 1.0 / total as f64;
    ensure!(
        (acc - p).abs() <= tol,
        "{correct}/{total} = {acc:.4} on {MQAR_N} sequences is not within {tol:.4} of the recorded {p:.4}"
    );
    s.expect(&format!("eval-{name}-{}.out", board.name), &out.run.output)?;
    s.expect(
        &format!("eval-{name}-{}.stats", board.name),
        format!("{}\n", out.report.stats_line()).as_bytes(),
    )?;
    Ok(format!(
        "{}; recorded {p:.4} on 1000, |{acc:.4} - {p:.4}| <= {tol:.4}; {}",
        out.note,
        out.report.stats_line().trim_start_matches("stats: ")
    ))
}

/// Bits per byte of a held-out excerpt on a board: bit-identical to the host
/// (see [`evalboard::run`]), and near the recorded whole-file figure.
fn text_on_board(
    s: &mut Suite,
    board: &str,
    model: &str,
    dtype: &str,
    bytes: usize,
    chunk: usize,
) -> Result<String> {
    let board = boards::named(board)?;
    let image = host::shipped_image(model, dtype)?;
    let task = Task::Text {
        file: boards::root_dir().join("models/lm/heldout.txt"),
        bytes: Some(bytes),
        chunk,
    };
    let out = evalboard::run(board, &image, &task, false, None)?;
    let bpb: f64 = out.report.result.parse().context("bits_per_byte")?;
    let rec = recorded(model, &["runtime", dtype, "bits_per_byte"])?;
    ensure!(
        (bpb - rec).abs() <= EXCERPT_BPB_SLACK,
        "excerpt bits per byte {bpb} is more than {EXCERPT_BPB_SLACK} from the recorded {rec}"
    );
    let stem = model.trim_start_matches("models/").replace('/', "-");
    s.expect(&format!("eval-{stem}-{}.out", board.name), &out.run.output)?;
    s.expect(
        &format!("eval-{stem}-{}.stats", board.name),
        format!("{}\n", out.report.stats_line()).as_bytes(),
    )?;
    Ok(format!(
        "{}; recorded {rec:.4} on the whole file; {}",
        out.note,
        out.report.stats_line().trim_start_matches("stats: ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernels_summary() {
        let text = "kernels: FAIL case=2 matvec dtype=int4 rows=10\n\
                    kernels: board=m4f module=dsp cases=1072 failed=284 max_cols=4096\n";
        assert_eq!(
            parse_kernels(text).unwrap(),
            KernelsSummary {
                module: "dsp".into(),
                cases: 1072,
                failed: 284,
                max_cols: 4096
            }
        );
        assert!(parse_kernels("panic: oops\n").is_err());
    }
}
