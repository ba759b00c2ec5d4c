//! `cargo xtask test-boards [--overwrite]`: the QEMU suite.
//!
//! - every board: the instruction counter is calibrated; the `kernels`
//!   firmware runs this build's tile kernels (the module the board's target
//!   gets) against the reference, bit for bit, on random, extreme and
//!   misaligned cases, and reports no mismatch;
//! - every board: `generate` with the board's default image; the generated ids
//!   equal the host runtime's (`ferrite generate --ids`) and the final-step
//!   logits checksum equals `ferrite logits` (FNV-1a over the f32 bits, no
//!   tolerance); the transcript and the stats line equal
//!   boards/expected/<board>.out / .stats (costs within 2%: [`expected`]).
//!   The firmware runs the runtime's `fast-math` feature and is compared
//!   with a host CLI that runs the same module (host::ferrite_with); each
//!   board also runs `generate` without the feature against the plain host
//!   (boards/expected/<board>-libm.*); the recorded transcripts then show
//!   one set of bits per image and module ([`bit_identity`]);
//! - every board: snapshots both ways (docs/snapshot-format.md, "Baked
//!   prompts"), from one `generate` build with the default image and math
//!   module: a snapshot baked on the host (by the CLI of the board's module)
//!   restored on the board generates the tokens and final logit bits of one
//!   uninterrupted host run; the snapshot the board writes after
//!   [`SNAPSHOT_K`] tokens is the host's byte for byte, and the host going
//!   on from it ends in the uninterrupted run's tokens, state and logits;
//! - BPE, every format-4 fixture (`--full`), every format-8 fixture
//!   (Mamba-2, RWKV-7, GLA, the generalized block) on m4f and (`--full`) the
//!   other boards (the m0: those its RAM holds, [`TOO_LARGE_FOR`]),
//!   constant memory over 1,000 tokens on m4f (10,000 on m4f and rv32imafc
//!   with `--full`), OTA updates on the signed firmware (a signed update accepted;
//!   unsigned, another key, tampered, older (anti-rollback, in one boot and
//!   after a simulated reset), cut, hostile and too large refused with A
//!   serving: on m4f; rv32imac accepts the good update, and refuses with
//!   `--full`), an image too large for the M3, a defmt build (`--full`); the trained
//!   models (the demo, the M3's LMs en-m3, rwkv7-m3 and mamba2-m3, MQAR
//!   and bits per byte with the `eval` firmware) against the host and
//!   their recorded metrics.
//! - m4f and m3 (`--full`): `generate` with the default image built with the
//!   `roofline` feature generates like the host; its `roofline:` line's
//!   MACs per token are `ferrite inspect`'s and what its products counted,
//!   and its kernel + other instructions per token are the default build's
//!   (this suite's run, else boards/expected/<board>.stats) within
//!   [`ROOFLINE_REL_TOL`].
//! - the integer token path (format 6): `models/mqar/gdn-2k-lr3e-3` on
//!   every board, `models/mqar/swa-w32` (SWA with a short convolution;
//!   swa-w64 needs 216 B more static RAM than the M0 has) and
//!   `models/mqar/gsa-m16-lr3e-3` on m0 and rv32imac (m3 and m4f too with
//!   `--full`), int8 with
//!   `--path int`, built with their `fast-math` module, generate the plain host CLI's tokens and final logits bit for bit, and
//!   their `kernel_calls:` line shows the module's assembly ran the products
//!   with no fallback to portable code.
//!
//! Failures are gathered; the slowest checks are listed on stderr and the last
//! line is `N passed, N failed`. `--only TEXT`
//! runs the checks whose name contains TEXT (e.g. `kernels`, `m3:`).
//! The checks marked `--full` above run with `--full` (all checks) or
//! `--full-only` (those alone: `cargo xtask test --full` runs the default
//! ones in its default step); `--list` prints each check's run and name.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, ensure, Context, Result};
use ferrite_common::report::{last_value, Fields, KERNELS};

use crate::boards::{self, Board, BuildOpts, Delivery, Firmware, Report, Run, RunRequest, BOARDS};
use crate::eval_board::{self, Task};
use crate::host;
use crate::paths::expected_dir;
use crate::{bit_identity, expected};

/// Boards that run the 10,000-token constant-memory check (`--full`: 42 s
/// of the suite's 907; the default run has [`MID_N`] on the m4f).
const LONG_RUN_BOARDS: &[&str] = &["m4f", "rv32imafc"];
const LONG_N: usize = 10_000;
/// The default run's constant-memory check: [`MID_N`] against [`SHORT_N`]
/// tokens on the m4f.
const MID_N: usize = 1_000;
const SHORT_N: usize = 100;
/// Boards that run a model with a byte-level BPE tokenizer.
const BPE_BOARDS: &[&str] = &["m4f", "rv32imac"];
/// Boards that run every fixture whose int8 image is format 4 (the mixer
/// options that version added): host and board must agree bit for bit
/// (`--full`: every fixture is checked against the f64 reference on the
/// host, and the integer-path models run their options on the boards).
const FORMAT4_BOARDS: &[&str] = &["m4f"];
/// Boards that run every fixture whose int8 image is format 5 (a `bla`
/// layer whose phi the runtime computes: every BLA fixture, among them
/// `bla_gqa`'s shared key/value heads, issue 28, and `hybrid_all4_untied`):
/// host and board bit for bit (`--full`: every fixture is checked against
/// the f64 reference on the host, and the default run runs the BLA MQAR
/// model on the boards).
const FORMAT5_BOARDS: &[&str] = &["m4f"];
/// Boards that run every fixture whose int8 image is format 8 (Mamba-2,
/// RWKV-7, GLA / HGRN2 / RetNet and the generalized block, issue 27; the
/// `cross` kind's fixtures, issue 32, on memory 0 and on memory 1): host
/// and board bit for bit on every board (issue 27, item 4). The first in
/// the default run, the others in `--full` (the m3 runs fla's RWKV-7 and
/// Mamba-2 LMs by default, [`M3_LMS`]); the m0 runs those its RAM holds
/// ([`TOO_LARGE_FOR`]).
const FORMAT8_BOARDS: &[&str] = &[
    "m4f",
    "m3",
    "m7",
    "m33",
    "m55",
    "rv32imac",
    "rv32imafc",
    "m0",
    "m3-mps2",
];
/// Fixtures a board's RAM cannot hold: `mamba2_groups`' 13.6 KB session
/// and `rwkv7_hybrid`'s 14.5 KB (`ferrite inspect`'s ram_bytes) leave the
/// microbit's 16 KB 1,568 and 752 bytes of stack, and a token needs ~3 KB.
/// The fixture checks run them there and require the firmware's own stack
/// check to end the run with `stack overflow` (the QEMU boards have no
/// hardware guard: the firmware checks its painted stack in the fault
/// handler and after the run, boards/src/qemu.rs).
const TOO_LARGE_FOR: &[(&str, &str)] = &[("m0", "mamba2_groups"), ("m0", "rwkv7_hybrid")];
/// The integer token path (format 6): models, each with every layer on its
/// integer step, and the boards that run them with the firmware's
/// `fast-math` module, against the plain host CLI, bit for bit (the path
/// computes no f32, so the module cannot matter), each run's products on
/// its module's assembly with no fallback: (model, the default run's
/// boards, the boards `--full` adds). GDN (int16 state) on every board, so
/// that every kernel module runs a whole model; SWA with a short
/// convolution (int8 KV cache), GSA (int16 slot memories), BLA and MLA on
/// a Thumb-1 and a RISC-V core by default (their integer steps are
/// portable Rust: the kernels under them are GDN's, which every board
/// runs), on the M3 and the M4F too with `--full` (issue 29's budget);
/// `cross`'s integer step over an int8 memory likewise (a fixture).
const INT_PATH_RUNS: &[(&str, &[&str], &[&str])] = &[
    (
        "models/mqar/gdn-2k-lr3e-3",
        &[
            "m0",
            "m3",
            "m4f",
            "m7",
            "m33",
            "m55",
            "rv32imac",
            "rv32imafc",
        ],
        &[],
    ),
    ("models/mqar/swa-w32", &["m0", "rv32imac"], &["m3", "m4f"]),
    (
        "models/mqar/gsa-m16-lr3e-3",
        &["m0", "rv32imac"],
        &["m3", "m4f"],
    ),
    ("models/mqar/bla-m1", &["m0", "rv32imac"], &["m3", "m4f"]),
    // `cross` over an int8 memory (issue 32): its integer step, memory 0.
    (
        "tests/fixtures/cross_memories",
        &["m0", "rv32imac"],
        &["m3", "m4f"],
    ),
    // m0 and m3: its int8 image with the int-path firmware overflows their
    // 256 KiB flash (by ~29 KB).
    (
        "models/mqar-256/st-mla-1k-lr3e-3-s1",
        &["rv32imac"],
        &["m4f"],
    ),
];

/// QEMU boards that add a machine for a core an earlier board already runs
/// (the same triple, CPU and tile kernels, which the target table decides):
/// the M3 on mps2-an385 (4 MB of code memory), beside the lm3s6965 `m3`
/// (256 KB), for the images the m3 cannot hold. Their board checks
/// (calibration, kernels, `generate` with and without fast math, the
/// snapshots, the format-8 fixtures) run with `--full`: the m3 runs the same
/// code by default, and what a second machine changes is the memory map
/// and the counter's clock. The default run has one check of each:
/// [`ROOMY_RUNS`].
const SECOND_MACHINES: &[&str] = &["m3-mps2"];
/// The images only a second machine holds, on the integer token path, in
/// the default run: (board, model). `models/lm/small` on the M3 (issue 24's
/// target: <= 1.0M instructions a token; the m3's 256 KB cannot hold the
/// integer-path firmware with its image, docs/integer-path.md): host and
/// board bit for bit as [`INT_PATH_RUNS`], its transcript and `stats:` line
/// recorded (boards/expected/lm-small-int-<board>.*).
const ROOMY_RUNS: &[(&str, &str)] = &[("m3-mps2", "models/lm/small")];

/// Boards whose `generate` also runs with the `roofline` feature (the
/// default image and math module): an FPU core and a soft-float one, both
/// `--full` only (each its own firmware build: 35 s on the m4f in the
/// default run of 2026-12-07, issue 29's budget).
const ROOFLINE_BOARDS: &[&str] = &["m4f", "m3"];
/// How far the kernel and other instructions of a roofline run may sum
/// from the default build's recorded instructions per token: code placed
/// differently around the timed products (measured: +0.25% on m4f, +0.16%
/// on m3, -0.22% to +0.12% with `models/lm/small`). Tight enough that the
/// timing counted as work (1.2% of the m4f's token) fails.
const ROOFLINE_REL_TOL: f64 = 0.005;

/// Snapshots between host and board (issue 25 item 5), on every board with
/// its default image and math module: tokens generated from a baked
/// prompt, and the token after which the board writes its own snapshot.
const SNAPSHOT_N: usize = 16;
const SNAPSHOT_K: usize = 8;

/// Boards that run the OTA example, and the fixture offered as the good update.
/// The firmware runs only signed updates: it trusts the public test key
/// `tests/keys/test-signer.pub` (docs/signing.md), and every update offered
/// is signed with it unless the check says otherwise.
const OTA_BOARDS: &[&str] = &["m4f", "rv32imac"];
/// The board that runs every refusal of [`OTA_REFUSALS`] and the snapshot
/// slots' cuts in the default run; the others run them with `--full` (the
/// refusals are decided by the same portable code: 82 s of the suite's 907
/// on the rv32imac), and accept the good update by default.
const OTA_FULL_BOARD: &str = "m4f";
const OTA_UPDATE: &str = "swa_gqa";
/// The trusted test key, the other one, and the good update's security counter.
const OTA_KEY: &str = "test-signer";
const OTHER_KEY: &str = "other-signer";
const OTA_COUNTER: u32 = 2;
/// The updates the OTA firmware must refuse with A serving: what each is,
/// and the check.
type Refusal = (&'static str, fn(&'static Board) -> Result<String>);
const OTA_REFUSALS: [Refusal; 8] = [
    ("a corrupted update", |board| {
        let b = good_update()?;
        let want = "the signature by key 1c3ea13b13db3c1f does not verify";
        ota_refuses(board, &b, Delivery::FlipByte, want)
    }),
    ("an interrupted update at any stage", ota_cuts),
    ("a hostile update with a valid signature", |board| {
        let b = boards::root_dir().join("tests/corrupt/signed_overflow_gdn_heads.fer");
        ota_refuses(board, &b, Delivery::Intact, "invalid image: size overflow")
    }),
    ("an update whose session does not fit", |board| {
        let b = host::shipped_image("models/lm/large", "int8")?;
        let b = host::signed_image(&b, OTA_KEY, OTA_COUNTER)?;
        ota_refuses(board, &b, Delivery::Intact, "its session needs")
    }),
    ("an unsigned update", |board| {
        let b = host::fixture_image(OTA_UPDATE, "int8")?;
        ota_refuses(board, &b, Delivery::Intact, "the image is not signed")
    }),
    ("an update signed by another key", |board| {
        let b = host::fixture_image(OTA_UPDATE, "int8")?;
        let b = host::signed_image(&b, OTHER_KEY, OTA_COUNTER)?;
        let want =
            "the image is signed by key 8f1140fca9ffafa3, which this firmware does not trust";
        ota_refuses(board, &b, Delivery::Intact, want)
    }),
    ("an update changed after signing, CRC fixed", ota_tampered),
    (
        "an older update, in the same boot and after a reset",
        ota_rollback,
    ),
];
/// Shipped MQAR models evaluated at int8: (board, model, `--full` only).
/// On the M4F two strong and one mid (a second BLA: `--full`); on the M0
/// the one its 16 KB of RAM is made for (`--full`: the M4F evaluates the
/// same image on the same sequences by default, and the M0 runs the
/// model's integer-path image by default; at 2.8M instructions a token it
/// is the longest of these evaluations).
const MQAR_MODELS: &[(&str, &str, bool)] = &[
    ("m4f", "bla-m15", false),
    ("m4f", "gdn-2k-lr3e-3", false),
    ("m4f", "bla-m7", true),
    ("m0", "gdn-2k-lr3e-3", true),
];
/// The byte-level LMs trained for the M3's budget (models/lm): ferrite's
/// hybrid and fla's RWKV-7 and Mamba-2 (issue 27), each generating on the m3
/// like the host, its stats recorded (boards/expected/lm-<name>-m3.*).
const M3_LMS: [&str; 3] = ["en-m3", "rwkv7-m3", "mamba2-m3"];
/// MQAR sequences of seed 0 on the board (the first 100 of the recorded 1,000).
const MQAR_N: usize = 100;
/// Held-out excerpts scored on the boards: (board, model, dtype, bytes, chunk).
/// The M3 is soft float, so its excerpt is short; both span two or more chunks.
const TEXT_EVALS: &[(&str, &str, &str, usize, usize)] = &[
    ("m3", "models/lm/small", "int8", 256, 128),
    ("m4f", "models/lm/large", "int8", 1024, 512),
];
/// How far an excerpt's bits per byte may sit from the recorded figure of the
/// whole held-out file: a sanity bound (the real check is equality with the host).
const EXCERPT_BPB_SLACK: f64 = 0.5;

/// Which of the suite's checks a run has ([`Tier`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The default run's checks (`cargo xtask test`).
    Default,
    /// Only the checks the default run leaves out (what `cargo xtask test
    /// --full` adds to the default run's suite).
    FullOnly,
    /// Both (`cargo xtask test-boards --full`).
    All,
}

/// Where a check runs: in the default run, or only with `--full`
/// (docs/testing.md, "--full": each there with the reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Default,
    Full,
}

impl Scope {
    fn has(self, tier: Tier) -> bool {
        match self {
            Scope::Default => tier == Tier::Default,
            Scope::FullOnly => tier == Tier::Full,
            Scope::All => true,
        }
    }
}

struct Suite {
    overwrite: bool,
    /// `--only TEXT`: run the checks whose name contains TEXT.
    only: Option<String>,
    /// The tiers this run has.
    scope: Scope,
    /// `--list`: gather each check's tier and name in `listed`, run nothing.
    list: bool,
    listed: Vec<(Tier, String)>,
    /// The tier of the checks [`Suite::check`] adds (see [`Suite::full`]).
    tier: Tier,
    passed: usize,
    failed: Vec<String>,
    /// Wall-clock seconds of each check run, for the slowest-checks list.
    seconds: Vec<(f64, String)>,
    /// Instructions per token of each board's default `generate` run in
    /// this suite ("<board>: generate matches host"), for the roofline
    /// checks.
    default_counts: std::cell::RefCell<std::collections::BTreeMap<&'static str, u64>>,
}

impl Suite {
    /// Runs the check `name` when this run has its tier and `--only` lets it.
    fn check(&mut self, name: &str, f: impl FnOnce(&Self) -> Result<String>) {
        if self
            .only
            .as_ref()
            .is_some_and(|only| !name.contains(only.as_str()))
        {
            return;
        }
        if self.list {
            self.listed.push((self.tier, name.to_string()));
            return;
        }
        if !self.scope.has(self.tier) {
            return;
        }
        eprintln!("--- {name}");
        let start = std::time::Instant::now();
        let outcome = f(self);
        self.seconds
            .push((start.elapsed().as_secs_f64(), name.to_string()));
        match outcome {
            Ok(note) if note.is_empty() => println!("ok   {name}"),
            Ok(note) => println!("ok   {name} ({note})"),
            Err(e) => {
                println!("FAIL {name}: {e:#}");
                self.failed.push(name.to_string());
                return;
            }
        }
        self.passed += 1;
    }

    /// [`Suite::check`] of a check that only `--full` runs.
    fn full(&mut self, name: &str, f: impl FnOnce(&Self) -> Result<String>) {
        self.tier = Tier::Full;
        self.check(name, f);
        self.tier = Tier::Default;
    }

    /// [`Suite::check`] or [`Suite::full`]: `full` says which.
    fn check_in(&mut self, full: bool, name: &str, f: impl FnOnce(&Self) -> Result<String>) {
        if full {
            self.full(name, f);
        } else {
            self.check(name, f);
        }
    }

    /// Compares `actual` with boards/expected/<file>, or writes it with --overwrite.
    fn expect(&self, file: &str, actual: &[u8]) -> Result<()> {
        let path = expected_dir().join(file);
        if self.overwrite {
            std::fs::create_dir_all(expected_dir())?;
            return Ok(std::fs::write(&path, actual)?);
        }
        let want = std::fs::read(&path).with_context(|| {
            format!(
                "{} missing: run `cargo xtask test-boards --overwrite`",
                path.display()
            )
        })?;
        let (w, a) = (
            String::from_utf8_lossy(&want),
            String::from_utf8_lossy(actual),
        );
        let diff = expected::differences(&w, &a);
        if !diff.is_empty() {
            let shown: Vec<String> = diff
                .iter()
                .take(3)
                .map(|(x, y)| format!("  expected: {x}\n  actual:   {y}"))
                .collect();
            bail!(
                "output differs from {} ({} vs {} lines; costs may move {}%):\n{}\n(if intended: cargo xtask test-boards --overwrite)",
                path.display(),
                w.lines().count(),
                a.lines().count(),
                expected::COST_REL_TOL * 100.0,
                shown.join("\n")
            );
        }
        Ok(())
    }

    /// The transcript and (`stats`) the `stats:` line of a run as
    /// boards/expected/<stem>.out and .stats; returns the stats for a note.
    fn expect_run(&self, stem: &str, run: &Run, report: &Report, stats: bool) -> Result<String> {
        self.expect(&format!("{stem}.out"), &run.output)?;
        let line = report.stats_line();
        if stats {
            self.expect(&format!("{stem}.stats"), format!("{line}\n").as_bytes())?;
        }
        Ok(line.trim_start_matches("stats: ").to_string())
    }
}

/// Runs the suite's checks of `scope` (those whose name contains `only`).
pub fn run(overwrite: bool, only: Option<&str>, scope: Scope) -> Result<ExitCode> {
    run_or_list(overwrite, only, scope, false).map(|(code, _)| code)
}

/// Prints every check's run (`default` or `full`) and name, runs nothing.
pub fn list(only: Option<&str>) -> Result<ExitCode> {
    for (tier, name) in checks(only)? {
        let tier = match tier {
            Tier::Default => "default",
            Tier::Full => "full",
        };
        println!("{tier}\t{name}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Every check's tier and name, in the suite's order; runs nothing.
fn checks(only: Option<&str>) -> Result<Vec<(Tier, String)>> {
    run_or_list(false, only, Scope::All, true).map(|(_, listed)| listed)
}

fn run_or_list(
    overwrite: bool,
    only: Option<&str>,
    scope: Scope,
    list: bool,
) -> Result<(ExitCode, Vec<(Tier, String)>)> {
    let mut s = Suite {
        overwrite,
        only: only.map(str::to_string),
        scope,
        list,
        listed: Vec::new(),
        tier: Tier::Default,
        passed: 0,
        failed: Vec::new(),
        seconds: Vec::new(),
        default_counts: Default::default(),
    };
    if !list {
        host::ferrite()?;
    }
    let named = |names: &'static [&str]| {
        names
            .iter()
            .map(|n| boards::named(n))
            .collect::<Result<Vec<_>>>()
    };

    for board in BOARDS {
        let name = board.name;
        let second = SECOND_MACHINES.contains(&name);
        s.check_in(
            second,
            &format!("{name}: instruction counter calibrated"),
            |_| calibrated(board),
        );
        s.check_in(
            second,
            &format!(
                "{name}: tile kernels ({}) match the reference bit for bit",
                board.kernels()
            ),
            |_| kernels_match(board),
        );
        s.check_in(second, &format!("{name}: generate matches host"), |s| {
            let note = board_matches_host(s, board, &BuildOpts::default(), name)?;
            if let Some(count) = instructions_per_token(&note) {
                s.default_counts.borrow_mut().insert(name, count);
            }
            Ok(note)
        });
        // The libm build too, so that the path without fast math stays checked.
        s.check_in(
            second,
            &format!("{name}: generate without fast-math matches the libm host"),
            |s| {
                let libm = BuildOpts {
                    fast_math: Some(false),
                    ..BuildOpts::default()
                };
                board_matches_host(s, board, &libm, &format!("{name}-libm"))
            },
        );
        // One firmware build and run serves both directions.
        let snap_run = std::cell::OnceCell::new();
        let snap_run = || {
            snap_run
                .get_or_init(|| snapshot_run(board).map_err(|e| format!("{e:#}")))
                .as_ref()
                .map_err(|e| anyhow::anyhow!("{e}"))
        };
        s.check_in(
            second,
            &format!("{name}: a snapshot baked on the host continues on the board like one run"),
            |_| baked_on_host(snap_run()?),
        );
        s.check_in(
            second,
            &format!(
                "{name}: a snapshot the board wrote at token {SNAPSHOT_K} continues on the host like one run"
            ),
            |_| written_on_board(snap_run()?),
        );
    }
    s.check(
        "every board: one image and one math module, one set of logit bits",
        |_| {
            let groups = bit_identity::recorded_groups(&expected_dir())?;
            let split = bit_identity::disagreements(&groups);
            ensure!(split.is_empty(), "boards disagree: {}", split.join("; "));
            Ok(format!("{} image and module pairs", groups.len()))
        },
    );
    for board in named(FORMAT4_BOARDS)? {
        s.full(
            &format!(
                "{}: the format-4 mixer options generate like the host (int8)",
                board.name
            ),
            |_| format4_matches_host(board),
        );
    }
    for board in named(FORMAT5_BOARDS)? {
        s.full(
            &format!(
                "{}: the bla fixtures (format 5, shared kv heads among them) generate like the host (int8)",
                board.name
            ),
            |_| fixtures_of_version_match_host(board, 5),
        );
    }
    for (i, board) in named(FORMAT8_BOARDS)?.into_iter().enumerate() {
        s.check_in(
            i > 0,
            &format!(
                "{}: mamba2, rwkv7, gla and cross (format 8) generate like the host (int8)",
                board.name
            ),
            |_| fixtures_of_version_match_host(board, 8),
        );
    }
    for &(model, default, full) in INT_PATH_RUNS {
        for (i, name) in default.iter().chain(full).enumerate() {
            let board = boards::named(name)?;
            s.check_in(
                i >= default.len(),
                &format!(
                    "{name}: {model} on the integer token path like the plain host, bit for bit"
                ),
                |_| int_path_matches_host(board, model),
            );
        }
    }
    for &(name, model) in ROOMY_RUNS {
        let board = boards::named(name)?;
        s.check(
            &format!(
                "{name}: {model} on the integer token path like the plain host, bit for bit, recorded"
            ),
            |s| {
                let (run, report, note) = int_path_run(board, model)?;
                let stem = model.trim_start_matches("models/").replace('/', "-");
                s.expect_run(&format!("{stem}-int-{name}"), &run, &report, true)?;
                let (flash, ram) = boards::budget(board)?;
                Ok(format!(
                    "{note}; flash {} of {flash} B, static RAM {} of {ram} B",
                    report.sizes.flash, report.sizes.ram
                ))
            },
        );
    }
    for board in named(ROOFLINE_BOARDS)? {
        s.full(
            &format!(
                "{}: generate matches host with the roofline line (the host's MACs per token, kernel + other = the default build's instructions)",
                board.name
            ),
            |s| roofline(s, board),
        );
    }
    for board in named(BPE_BOARDS)? {
        s.check(
            &format!("{}: BPE model generates like the host", board.name),
            |s| {
                let image = host::bpe_image("f32")?;
                let (run, report, note) = generate(&generate_req(board, &image))?;
                let stats = s.expect_run(&format!("bpe-{}", board.name), &run, &report, false)?;
                Ok(format!(
                    "{note}; prompt {} tokens; {stats}",
                    report.get("prompt_tokens")
                ))
            },
        );
    }
    s.check(
        &format!("m4f: constant memory, {MID_N} vs {SHORT_N} tokens"),
        |_| constant_memory(boards::named("m4f")?, MID_N),
    );
    for board in named(LONG_RUN_BOARDS)? {
        s.full(
            &format!(
                "{}: constant memory, {LONG_N} vs {SHORT_N} tokens",
                board.name
            ),
            |_| constant_memory(board, LONG_N),
        );
    }
    for board in named(OTA_BOARDS)? {
        let name = board.name;
        s.check(
            &format!("{name}: ota accepts a good update and serves it like the host"),
            |s| {
                let b = good_update()?;
                let (verdict, report, run) = ota_run(board, &b, Delivery::Intact)?;
                ensure!(verdict == "ota: accepted", "{verdict}");
                let text = String::from_utf8_lossy(&run.output);
                let cost = text
                    .lines()
                    .find(|l| l.starts_with("ota: validated "))
                    .context("no `ota: validated` line")?;
                let note =
                    compare_with_host(&b, &report, boards::DEFAULT_PROMPT, &BuildOpts::default())?;
                s.expect(&format!("ota-{name}.out"), &run.output)?;
                Ok(format!("{verdict} ({cost}); B serves: {note}"))
            },
        );
        for (what, refused) in OTA_REFUSALS {
            s.check_in(
                name != OTA_FULL_BOARD,
                &format!("{name}: ota refuses {what}, A serves"),
                |_| refused(board),
            );
        }
    }
    for board in named(OTA_BOARDS)? {
        s.check_in(
            board.name != OTA_FULL_BOARD,
            &format!(
                "{}: snapshot slots: a cut anywhere in a save keeps the previous snapshot",
                board.name
            ),
            |_| slots_cuts(board),
        );
    }
    s.check(
        "m3: an image over the flash budget is refused clearly",
        |_| too_big_for_m3(),
    );
    s.full("m4f: defmt build (decoded with defmt-print)", |_| {
        defmt_build()
    });
    let demo = format!(
        "m4f: demo ({} {}, sampled) generates like the host",
        crate::args::DEMO_MODEL,
        crate::args::DEMO_DTYPE.name()
    );
    s.check(&demo, |s| {
        let board = boards::named("m4f")?;
        let image = host::shipped_image(crate::args::DEMO_MODEL, crate::args::DEMO_DTYPE.name())?;
        let opts = BuildOpts {
            temperature: crate::args::DEMO_TEMPERATURE,
            seed: crate::args::DEMO_SEED,
            ..BuildOpts::default()
        };
        let req = RunRequest {
            prompt: crate::args::DEMO_PROMPT,
            n: crate::args::DEMO_N,
            opts,
            ..generate_req(board, &image)
        };
        let (run, report, note) = generate(&req)?;
        Ok(format!(
            "{note}; {}",
            s.expect_run("demo-m4f", &run, &report, true)?
        ))
    });
    for name in M3_LMS {
        s.check(
            &format!("m3: models/lm/{name} int8 generates like the host"),
            |s| {
                let board = boards::named("m3")?;
                let image = host::shipped_image(&format!("models/lm/{name}"), "int8")?;
                let (run, report, note) = generate(&generate_req(board, &image))?;
                let stats = s.expect_run(&format!("lm-{name}-m3"), &run, &report, true)?;
                let (flash, ram) = boards::budget(board)?;
                let sizes = report.sizes;
                Ok(format!(
                    "{note}; flash {} of {flash} B, static RAM {} of {ram} B; {stats}",
                    sizes.flash, sizes.ram
                ))
            },
        );
    }
    for &(board, name, full) in MQAR_MODELS {
        s.check_in(
            full,
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

    if list {
        return Ok((ExitCode::SUCCESS, s.listed));
    }
    if overwrite {
        println!("wrote {}", expected_dir().display());
    }
    s.seconds.sort_by(|a, b| b.0.total_cmp(&a.0));
    write_check_times(&s.seconds, scope);
    eprintln!("slowest checks (wall clock, builds included):");
    for (seconds, name) in s.seconds.iter().take(12) {
        eprintln!("  {seconds:6.1} s  {name}");
    }
    for f in &s.failed {
        println!("failed: {f}");
    }
    println!("{} passed, {} failed", s.passed, s.failed.len());
    let code = if s.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    Ok((code, Vec::new()))
}

/// Every check's wall-clock seconds, slowest first, into
/// target/test-boards-times.tsv (the default run's checks;
/// `test-boards-times-full-only.tsv` and `-all.tsv` for the other scopes,
/// so that `cargo xtask test --full` keeps both) (where the suite's time
/// goes; best effort: the suite's verdict does not depend on it).
fn write_check_times(seconds: &[(f64, String)], scope: Scope) {
    let name = match scope {
        Scope::Default => "test-boards-times.tsv",
        Scope::FullOnly => "test-boards-times-full-only.tsv",
        Scope::All => "test-boards-times-all.tsv",
    };
    let path = crate::paths::root_dir().join("target").join(name);
    let rows: String = seconds
        .iter()
        .map(|(t, name)| format!("{t:.1}\t{name}\n"))
        .collect();
    if let Err(e) = std::fs::write(&path, rows) {
        eprintln!("(could not write {}: {e})", path.display());
    }
}

/// The counter reads 2,000,000 instructions for a loop of 2,000,000, within
/// one SysTick tick plus the loop's set-up.
fn calibrated(board: &'static Board) -> Result<String> {
    let image = host::default_image(board)?;
    let run = boards::build_and_run(&RunRequest::new(board, Firmware::Calibrate, &image))?;
    run.succeeded()?;
    let text = String::from_utf8_lossy(&run.output);
    let counted: i64 = last_value(&text, "counted=")
        .and_then(|s| s.parse().ok())
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
    let run = boards::build_and_run(&RunRequest::new(board, Firmware::Kernels, &image))?;
    let text = String::from_utf8_lossy(&run.output);
    let (module, cases, failed, max_cols) = parse_kernels(&text)?;
    let first_failure = text
        .lines()
        .find(|l| l.starts_with("kernels: FAIL"))
        .unwrap_or("");
    ensure!(
        failed == 0 && run.status == 0,
        "{failed} of {cases} cases differ (exit status {}); first: {first_failure}",
        run.status
    );
    ensure!(
        module == board.kernels(),
        "ran the {module} kernels, not the {} module the board's target gets (is FERRITE_KERNELS set?)",
        board.kernels()
    );
    ensure!(cases >= 1000, "only {cases} cases ran");
    Ok(format!(
        "{cases} cases, module {module}, up to {max_cols} columns"
    ))
}

/// The `kernels: board=.. module=.. cases=.. failed=.. max_cols=..` line:
/// (module, cases, failed, max_cols).
fn parse_kernels(text: &str) -> Result<(String, u64, u64, u64)> {
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
    let module = f
        .get("module")
        .with_context(|| format!("no module= in {line:?}"))?;
    Ok((
        module.to_string(),
        number("cases")?,
        number("failed")?,
        number("max_cols")?,
    ))
}

/// Builds and runs `req` (a `generate` run) and compares it with the host:
/// the run, its report and a note.
fn generate(req: &RunRequest<'_>) -> Result<(Run, Report, String)> {
    let run = boards::build_and_run(req)?;
    let report = run.report()?;
    let note = compare_with_host(req.image, &report, req.prompt, &req.opts)?;
    Ok((run, report, note))
}

/// `generate` on `board` with `image` and the defaults.
fn generate_req<'a>(board: &'static Board, image: &'a Path) -> RunRequest<'a> {
    RunRequest::new(board, Firmware::Generate, image)
}

/// Tokens and the final-step logits checksum of a run with `prompt` and the
/// sampler of `opts` against the host CLI that runs the same math.
pub(crate) fn compare_with_host(
    image: &Path,
    report: &Report,
    prompt: &str,
    opts: &BuildOpts,
) -> Result<String> {
    let n = report.count;
    let math = opts.math(boards::named(report.board)?);
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
        "tokens differ from the host's:\n  board: {:?}\n  host:  {shown:?}",
        report.tokens
    );
    ensure!(
        report.tokens_fnv == boards::fnv1a(host_ids.iter().copied()),
        "hash of all {n} ids differs from the host's"
    );
    let mut fed = host::tokenize(image, prompt)?;
    ensure!(
        fed.len().to_string() == report.get("prompt_tokens"),
        "the board encoded the prompt as {} tokens, the host as {}",
        report.get("prompt_tokens"),
        fed.len()
    );
    fed.extend_from_slice(&host_ids[..n - 1]);
    let logits = host::last_logits(image, &fed, math, opts.memory)?;
    if boards::fnv1a(logits.iter().map(|l| l.to_bits())) == report.logits_fnv {
        return Ok(format!("{n} tokens, logits bit-identical"));
    }
    bail!(
        "final-step logits differ from the host's bits (the host ran the board's math module, {})",
        math.name()
    )
}

/// `generate` with the board's default image and the build options `opts`
/// against the host; the transcript and stats are boards/expected/<stem>.*.
fn board_matches_host(
    s: &Suite,
    board: &'static Board,
    opts: &BuildOpts,
    stem: &str,
) -> Result<String> {
    let image = host::default_image(board)?;
    let req = RunRequest {
        opts: opts.clone(),
        ..generate_req(board, &image)
    };
    let (run, report, note) = generate(&req)?;
    let stats = s.expect_run(stem, &run, &report, true)?;
    Ok(format!("{note}; math {}; {stats}", opts.math(board).name()))
}

/// The `generate` firmware of `board` (its default image and math module)
/// built with a snapshot baked on the host from the default prompt by the
/// CLI of the board's module, and writing its own snapshot after
/// [`SNAPSHOT_K`] of [`SNAPSHOT_N`] tokens.
struct SnapshotRun {
    board: &'static Board,
    image: std::path::PathBuf,
    opts: BuildOpts,
    run: Run,
    report: Report,
}

fn snapshot_run(board: &'static Board) -> Result<SnapshotRun> {
    let image = host::default_image(board)?;
    let mut opts = BuildOpts::default();
    let math = opts.math(board);
    opts.snapshot = Some(host::bake(&image, boards::DEFAULT_PROMPT, math)?);
    opts.snapshot_at = SNAPSHOT_K;
    let req = RunRequest {
        n: SNAPSHOT_N,
        opts: opts.clone(),
        ..generate_req(board, &image)
    };
    let run = boards::build_and_run(&req)?;
    let report = run.report()?;
    Ok(SnapshotRun {
        board,
        image,
        opts,
        run,
        report,
    })
}

/// Host -> board: the firmware restored the baked snapshot (its `baked:`
/// line; it fed no prompt token) and generated the tokens and final-step
/// logit bits of one uninterrupted host run of the prompt and
/// [`SNAPSHOT_N`] tokens.
fn baked_on_host(r: &SnapshotRun) -> Result<String> {
    let text = String::from_utf8_lossy(&r.run.output);
    let baked = text
        .lines()
        .find_map(|l| l.strip_prefix("baked: "))
        .context("no `baked:` line: the firmware did not start from the snapshot")?;
    let note = compare_with_host(&r.image, &r.report, boards::DEFAULT_PROMPT, &r.opts)?;
    Ok(format!(
        "{baked}; math {}; {note}",
        r.opts.math(r.board).name()
    ))
}

/// Board -> host: the snapshot the firmware wrote after [`SNAPSHOT_K`]
/// tokens is byte for byte the host's at the same point, and the host
/// restoring it (`ferrite generate --load-state`) generates the
/// uninterrupted run's remaining tokens and ends in its state and logit
/// bits (the two `--save-state` snapshots after the last token, equal
/// byte for byte).
fn written_on_board(r: &SnapshotRun) -> Result<String> {
    let text = String::from_utf8_lossy(&r.run.output);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("snapshot: "))
        .context("no `snapshot:` line")?;
    let f = Fields(line);
    ensure!(
        f.get("at") == Some(&SNAPSHOT_K.to_string()),
        "snapshot at {:?}, want {SNAPSHOT_K}",
        f.get("at")
    );
    let hex = f.get("hex").context("no hex= on the snapshot line")?;
    ensure!(hex.len() % 2 == 0, "odd number of hex digits");
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .context("bad hex on the snapshot line")?;
    ensure!(
        f.get("bytes") == Some(&bytes.len().to_string()),
        "the line says bytes={:?}, the hex has {}",
        f.get("bytes"),
        bytes.len()
    );
    let dir = boards::work_dir().join(r.board.name).join("snapshots");
    std::fs::create_dir_all(&dir)?;
    let path = |what: &str| dir.join(format!("{what}.snap"));
    std::fs::write(path("board"), &bytes)?;
    let math = r.opts.math(r.board);
    let prompt = Ok(boards::DEFAULT_PROMPT);
    // The host's own stream: K tokens and its snapshot, then all N.
    host::generate_states(&r.image, prompt, SNAPSHOT_K, &path("host-k"), math)?;
    let whole = host::generate_states(&r.image, prompt, SNAPSHOT_N, &path("host-n"), math)?;
    ensure!(
        std::fs::read(path("host-k"))? == bytes,
        "the board's snapshot at token {SNAPSHOT_K} differs from the host's"
    );
    let rest = SNAPSHOT_N - SNAPSHOT_K;
    let board_snap = path("board");
    let go_on = host::generate_states(&r.image, Err(&board_snap), rest, &path("resumed"), math)?;
    ensure!(
        go_on == whole[SNAPSHOT_K..],
        "the host went on with {go_on:?} from the board's snapshot, the uninterrupted run with {:?}",
        &whole[SNAPSHOT_K..]
    );
    ensure!(
        std::fs::read(path("resumed"))? == std::fs::read(path("host-n"))?,
        "after the last token the resumed stream's state or logits differ from the uninterrupted one's"
    );
    Ok(format!(
        "{} bytes = the host's at token {SNAPSHOT_K}; the host went on with {rest} tokens, state and logit bits of the uninterrupted run (math {})",
        bytes.len(),
        math.name()
    ))
}

/// `model` on the integer token path on `board`, built with the board's
/// math module, against the host CLI without `fast-math`: the same tokens
/// and the same final logits bit for bit.
fn int_path_matches_host(board: &'static Board, model: &str) -> Result<String> {
    int_path_run(board, model).map(|(_, _, note)| note)
}

/// [`int_path_matches_host`]'s run, its report and its note.
fn int_path_run(board: &'static Board, model: &str) -> Result<(Run, Report, String)> {
    let image = host::shipped_image(model, "int8-int")?;
    let req = RunRequest {
        n: 16,
        ..generate_req(board, &image)
    };
    let run = boards::build_and_run(&req)?;
    let report = run.report()?;
    let calls = kernel_calls(&String::from_utf8_lossy(&run.output))?;
    // The host CLI without `fast-math`, whatever the board's module.
    let plain = BuildOpts {
        fast_math: Some(false),
        ..req.opts.clone()
    };
    let note = compare_with_host(&image, &report, req.prompt, &plain)?;
    ensure!(
        note.contains("bit-identical"),
        "the integer token path must give the host's bits: {note}"
    );
    let note = format!(
        "{note} (board math {}, host libm); {calls}; {}",
        req.opts.math(board).name(),
        report.stats_line().trim_start_matches("stats: ")
    );
    Ok((run, report, note))
}

/// The `instructions_per_token=` of a check's note (its stats).
fn instructions_per_token(note: &str) -> Option<u64> {
    last_value(note, "instructions_per_token=")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `generate` with the default image built with `roofline`: the same
/// tokens and logits as the host; its `roofline:` line's MACs per token
/// are `ferrite inspect`'s and what the products counted; kernel, other and
/// timing instructions sum to the run's instructions per token (to one per
/// term: each is rounded down), and kernel + other is the default build's
/// count within [`ROOFLINE_REL_TOL`]: this suite's run of it ("<board>:
/// generate matches host") when it ran, else the recorded one
/// (boards/expected/<board>.stats).
fn roofline(s: &Suite, board: &'static Board) -> Result<String> {
    let image = host::default_image(board)?;
    let req = RunRequest {
        opts: BuildOpts {
            roofline: true,
            ..BuildOpts::default()
        },
        ..generate_req(board, &image)
    };
    let (_, report, note) = generate(&req)?;
    let r = report
        .roofline
        .context("no `roofline:` line (the roofline firmware prints one)")?;
    let macs = host::macs_per_token(&image)?;
    ensure!(
        r.macs_per_token == macs && r.measured_macs_per_token == macs,
        "MACs per token: the board says {} and counted {}, the host {macs}",
        r.macs_per_token,
        r.measured_macs_per_token
    );
    let total: u64 = report.number("instructions_per_token")?;
    let (kernel, other) = (
        r.kernel_instructions_per_token,
        r.other_instructions_per_token,
    );
    let sum = kernel + other + r.timing_instructions_per_token;
    ensure!(
        kernel > 0 && other > 0 && sum <= total && total - sum <= 3,
        "kernel {kernel} + other {other} + timing {} = {sum}, the run's instructions per token {total}",
        r.timing_instructions_per_token
    );
    let ran = s.default_counts.borrow().get(board.name).copied();
    let (recorded, source) = match ran {
        Some(count) => (count, "this suite's default build"),
        None => {
            let file = expected_dir().join(format!("{}.stats", board.name));
            let stats = std::fs::read_to_string(file)?;
            let count = Fields(stats.trim().trim_start_matches("stats: "))
                .number("instructions_per_token")
                .context("no instructions_per_token= in the recorded stats")?;
            (count, "the recorded default build")
        }
    };
    let off = (kernel + other) as f64 / recorded as f64 - 1.0;
    ensure!(
        off.abs() <= ROOFLINE_REL_TOL,
        "kernel {kernel} + other {other} is {:+.2}% off {source}'s {recorded} instructions per token",
        off * 100.0
    );
    Ok(format!(
        "{note}; {r}; kernel + other {:+.2}% off {source}'s {recorded}",
        off * 100.0
    ))
}

/// Checks the `kernel_calls:` line of an integer-path run: with a module
/// that has assembly, the assembly ran products and no wrapper refused one
/// (`ferrite::kernels::calls`); returns the line's fields for the note.
fn kernel_calls(output: &str) -> Result<String> {
    let rest = output
        .lines()
        .find_map(|l| l.strip_prefix("kernel_calls: "))
        .context("no `kernel_calls:` line (the int-path firmware prints one)")?;
    let f = ferrite_common::report::Fields(rest);
    let module = f
        .get("module")
        .context("no module= on the kernel_calls line")?;
    let count = |k: &str| -> Result<u64> {
        f.get(k)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {k}= on the kernel_calls line"))
    };
    let (assembly, fallback) = (count("assembly")?, count("fallback")?);
    ensure!(
        fallback == 0,
        "{fallback} products fell back from the {module} assembly to portable code"
    );
    ensure!(
        module == "portable" || assembly > 0,
        "the {module} assembly ran no product"
    );
    Ok(format!(
        "kernels {module}: {assembly} assembly calls, no fallback"
    ))
}

/// Every fixture whose int8 image is format 4, on `board`: the host's
/// tokens and final logits, bit for bit (the list read from the images' headers).
fn format4_matches_host(board: &'static Board) -> Result<String> {
    fixtures_of_version_match_host(board, 4)
}

/// Every fixture whose int8 image is format `version`, on `board`: the
/// host's tokens and final logits, bit for bit (the list read from the
/// images' headers).
fn fixtures_of_version_match_host(board: &'static Board, version: u32) -> Result<String> {
    let mut names: Vec<String> = std::fs::read_dir(boards::root_dir().join("tests/fixtures"))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let (mut ran, mut left_out, mut memory_runs) = (0, Vec::new(), 0);
    for fixture in &names {
        let image = host::fixture_image(fixture, "int8")?;
        // Header: magic (8 bytes), then the format version (u32 LE).
        let bytes = std::fs::read(&image)?;
        if bytes.get(8..12) != Some(&version.to_le_bytes()[..]) {
            continue;
        }
        let req = RunRequest {
            n: 16,
            ..generate_req(board, &image)
        };
        if TOO_LARGE_FOR.contains(&(board.name, fixture.as_str())) {
            match generate(&req) {
                Err(e) if format!("{e:#}").contains("stack overflow") => {
                    left_out.push(fixture.as_str());
                    continue;
                }
                Err(e) => bail!("fixture {fixture}: expected a stack overflow, got: {e:#}"),
                Ok(_) => {
                    bail!("fixture {fixture}: ran in RAM said too small: TOO_LARGE_FOR is stale")
                }
            }
        }
        generate(&req).with_context(|| format!("fixture {fixture}"))?;
        ran += 1;
        // A cross fixture runs again on its memory 1 (`FERRITE_MEMORY`,
        // `ferrite generate --memory 1` on the host): every one has 2 or more.
        let config = std::fs::read_to_string(
            boards::root_dir()
                .join("tests/fixtures")
                .join(fixture)
                .join("config.json"),
        )?;
        if config.contains("\"cross\"") {
            let mut on_one = RunRequest {
                n: 16,
                ..generate_req(board, &image)
            };
            on_one.opts.memory = 1;
            generate(&on_one).with_context(|| format!("fixture {fixture}, memory 1"))?;
            memory_runs += 1;
        }
    }
    ensure!(ran > 0, "no fixture has a format-{version} image");
    let left_out = if left_out.is_empty() {
        String::new()
    } else {
        format!(
            "; stopped by the stack check, too large for its RAM: {}",
            left_out.join(", ")
        )
    };
    let memories = match memory_runs {
        0 => String::new(),
        n => format!(" (the {n} with cross layers also on memory 1)"),
    };
    Ok(format!(
        "{ran} format-{version} fixtures{memories}, 16 tokens each, logits bit-identical{left_out}"
    ))
}

/// The same stack, state, session and static RAM after [`SHORT_N`] and
/// after `long` tokens; the long run generates like the host.
fn constant_memory(board: &'static Board, long: usize) -> Result<String> {
    let image = host::default_image(board)?;
    let req = |n| RunRequest {
        n,
        ..generate_req(board, &image)
    };
    let short = boards::build_and_run(&req(SHORT_N))?.report()?;
    let n = long;
    let (_, long, note) = generate(&req(n))?;
    for key in ["stack_bytes", "state_bytes", "session_bytes"] {
        ensure!(
            short.get(key) == long.get(key),
            "{key}: {} after {SHORT_N} tokens, {} after {n}",
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
    Ok(format!(
        "stack {} B, static RAM {} B, state {} B in both; {n}-token run: {note}",
        long.get("stack_bytes"),
        long.sizes.ram,
        long.get("state_bytes")
    ))
}

/// The good update: the fixture signed by the trusted test key.
fn good_update() -> Result<std::path::PathBuf> {
    let b = host::fixture_image(OTA_UPDATE, "int8")?;
    host::signed_image(&b, OTA_KEY, OTA_COUNTER)
}

/// The signed firmware's plan: `update` as `delivery`, the test key trusted.
fn ota_plan(update: &Path, delivery: Delivery) -> Result<boards::OtaPlan<'_>> {
    Ok(boards::OtaPlan::new(
        Some(update),
        delivery,
        Some(host::test_public_key(OTA_KEY)?),
    ))
}

/// Runs the update firmware with the board's model as A and `update`
/// delivered as `delivery`; returns the verdict line, the report and the run.
fn ota_run(
    board: &'static Board,
    update: &Path,
    delivery: Delivery,
) -> Result<(String, Report, Run)> {
    ota_run_plan(board, &ota_plan(update, delivery)?)
}

/// [`ota_run`] with a whole plan.
fn ota_run_plan(
    board: &'static Board,
    plan: &boards::OtaPlan<'_>,
) -> Result<(String, Report, Run)> {
    let a = host::default_image(board)?;
    let (prompt, n) = (boards::DEFAULT_PROMPT, boards::DEFAULT_N);
    let run = boards::run_ota(board, &a, plan, prompt, n, false)?;
    let verdict = boards::verdict(&run).with_context(|| {
        format!(
            "no `ota:` verdict (exit status {}):\n{}",
            run.status,
            run.tail()
        )
    })?;
    Ok((verdict, run.report()?, run))
}

/// A byte in the middle of the good update changed and the CRC sealed
/// again, as an attacker would: the signature refuses it.
fn ota_tampered(board: &'static Board) -> Result<String> {
    let good = good_update()?;
    let mut bytes = std::fs::read(&good)?;
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    let end = bytes.len() - ferrite::image::SIGNATURE_SECTION_LEN;
    let crc = ferrite::image::CRC.checksum(&bytes[ferrite::image::CRC_START..end]);
    let at = ferrite::image::CRC_FIELD;
    bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    let tampered = boards::work_dir().join("images").join("ota-tampered.fer");
    std::fs::write(&tampered, &bytes)?;
    let want = "the signature by key 1c3ea13b13db3c1f does not verify";
    ota_refuses(board, &tampered, Delivery::Intact, want)
}

/// Anti-rollback (issue 31 item 3): within one boot the good update
/// (security counter 2) is accepted and the counter advanced, then an older
/// one (1) is refused and the good one keeps serving; after a simulated
/// reset (the counter's flash carried in `counter.bin`) the older one is
/// refused again and A serves.
fn ota_rollback(board: &'static Board) -> Result<String> {
    let good = good_update()?;
    let fixture = host::fixture_image(OTA_UPDATE, "int8")?;
    let older = host::signed_image(&fixture, OTA_KEY, OTA_COUNTER - 1)?;
    let plan = boards::OtaPlan {
        second: Some(&older),
        ..ota_plan(&good, Delivery::Intact)?
    };
    let a = host::default_image(board)?;
    let (prompt, n) = (boards::DEFAULT_PROMPT, boards::DEFAULT_N);
    let run = boards::run_ota(board, &a, &plan, prompt, n, false)?;
    let verdicts = boards::verdicts(&run);
    let want = format!(
        "ota: refused rollback: the image's security counter is {}, this device accepts {OTA_COUNTER} or newer",
        OTA_COUNTER - 1
    );
    ensure!(
        verdicts.len() == 2 && verdicts[0] == "ota: accepted" && verdicts[1] == want,
        "same boot: {verdicts:?}, want accepted then `{want}`"
    );
    compare_with_host(&good, &run.report()?, prompt, &BuildOpts::default())
        .context("the good update does not serve after the older one was refused")?;
    let reset = boards::OtaPlan {
        keep_counter: true,
        ..ota_plan(&older, Delivery::Intact)?
    };
    let (verdict, report, run) = ota_run_plan(board, &reset)?;
    ensure!(verdict == want, "after a reset: `{verdict}`, want `{want}`");
    let text = String::from_utf8_lossy(&run.output);
    ensure!(
        text.contains("carried across a reset"),
        "the counter was not carried: {}",
        run.tail()
    );
    compare_with_host(&a, &report, prompt, &BuildOpts::default())
        .context("A does not serve after the reset")?;
    Ok(format!(
        "same boot: accepted then `{}`; after a reset: the same refusal, A serves",
        verdicts[1]
    ))
}

/// A refused update leaves A serving: the verdict starts with `want`, and
/// the tokens are the host's for A.
fn ota_refuses(
    board: &'static Board,
    update: &Path,
    delivery: Delivery,
    want: &str,
) -> Result<String> {
    let (verdict, report, _) = ota_run(board, update, delivery)?;
    ensure!(
        verdict.starts_with(&format!("ota: refused {want}")),
        "{delivery:?}: `{verdict}`, want `ota: refused {want}...`"
    );
    compare_with_host(
        &host::default_image(board)?,
        &report,
        boards::DEFAULT_PROMPT,
        &BuildOpts::default(),
    )
    .with_context(|| format!("A does not serve after `{verdict}`"))?;
    Ok(verdict)
}

/// A transfer cut anywhere — before the header, in it, after the first
/// chunk, in the middle, one byte short — is refused and A serves.
fn ota_cuts(board: &'static Board) -> Result<String> {
    let b = good_update()?;
    let len = std::fs::metadata(&b)?.len() as usize;
    let cuts = [0, 10, 1024, len / 2, len - 1];
    for cut in cuts {
        let want = if cut < 20 {
            "the transfer ended"
        } else {
            "the transfer stopped"
        };
        ota_refuses(board, &b, Delivery::CutAt(cut), want)?;
    }
    let cuts: Vec<String> = cuts.iter().map(usize::to_string).collect();
    Ok(format!(
        "cut at {} of {len} bytes: each refused, A serves",
        cuts.join(", ")
    ))
}

/// The `slots` firmware (snapshots in two flash slots, docs/snapshot-format.md):
/// after a cut before each operation of a save the previous snapshot loads (or
/// the new one, when the cut left it written whole: at most once), and the
/// streams restored after a cut half-way and after the whole save go on as
/// the uninterrupted one, tokens and logit bits.
fn slots_cuts(board: &'static Board) -> Result<String> {
    let run = boards::run_slots(board, &host::default_image(board)?)?;
    let text = String::from_utf8_lossy(&run.output);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("slots: ")).collect();
    ensure!(
        run.status == ferrite_common::status::OK,
        "exit status {}:\n{}",
        run.status,
        lines.join("\n")
    );
    let cuts = lines
        .iter()
        .find_map(|l| l.strip_prefix("slots: cut at each of "))
        .context("no `slots: cut at each of` line")?;
    let numbers: Vec<usize> = cuts
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let [ops, kept, whole] = numbers[..] else {
        bail!("`{cuts}`: want N operations, K boots loaded A, W B");
    };
    ensure!(
        kept + whole == ops && whole <= 1 && ops > 0,
        "cut at each of {ops}: {kept} loaded A, {whole} B"
    );
    let resumed = lines
        .iter()
        .filter(|l| l.ends_with("as the uninterrupted stream: yes"))
        .count();
    ensure!(
        resumed == 2,
        "{resumed} of 2 restored streams went on as the uninterrupted one"
    );
    let save = lines
        .iter()
        .find(|l| l.contains("flash operations"))
        .map_or("", |l| l.trim_start_matches("slots: "));
    Ok(format!(
        "{save}; a cut before each of {ops}: {kept} boots loaded A, {whole} B; both restored streams bit for bit"
    ))
}

fn too_big_for_m3() -> Result<String> {
    let board = boards::named("m3")?;
    // The f32 default model plus the code must not fit 256 KB; otherwise pick a bigger one.
    let image = host::fixture_image(boards::DEFAULT_MODEL, "f32")?;
    match boards::build(&RunRequest {
        n: 4,
        ..generate_req(board, &image)
    }) {
        Ok(elf) => bail!(
            "expected a link failure, but it fits: flash {} of {} bytes",
            boards::sizes(&elf)?.flash,
            boards::budget(board)?.0
        ),
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
    let elf = boards::build(&RunRequest {
        n: 8,
        defmt: true,
        ..generate_req(board, &image)
    })?;
    // Never "ok" without decoding: the decoder is installed when missing.
    crate::setup::ensure_defmt_print()?;
    let cwd = boards::work_dir().join(board.name);
    let run = boards::run_qemu(board, &elf, &cwd, false, true, boards::timeout_for(8))?;
    run.succeeded()?;
    let host_ids = host::generate_ids(
        &image,
        boards::DEFAULT_PROMPT,
        8,
        BuildOpts::default().math(board),
    )?;
    let ids: Vec<String> = host_ids.iter().map(u32::to_string).collect();
    let want = format!("tokens: {}", ids.join(","));
    ensure!(
        String::from_utf8_lossy(&run.output).contains(&want),
        "decoded stream lacks `{want}`:\n{}",
        run.tail()
    );
    Ok("decoded with defmt-print; tokens match the host".into())
}

/// A number at `path` (keys) in a model's metrics.json.
fn recorded(model_dir: &str, path: &[&str]) -> Result<f64> {
    let file = boards::root_dir().join(model_dir).join("metrics.json");
    let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    path.iter()
        .try_fold(&json, |v, key| v.get(key))
        .and_then(serde_json::Value::as_f64)
        .with_context(|| format!("{}: no number at {}", file.display(), path.join(".")))
}

/// MQAR on a board: the board's correct count equals the host's on the same
/// int8 image and sequences, and the subset accuracy is consistent with the
/// recorded 1,000-sequence figure: within 4 binomial standard deviations of
/// it for the subset's queries (+ 1/total for the record's 4-decimal rounding).
fn mqar_on_board(s: &Suite, board: &str, name: &str) -> Result<String> {
    let board = boards::named(board)?;
    let dir = format!("models/mqar/{name}");
    let image = host::shipped_image(&dir, "int8")?;
    let task = Task::Mqar {
        seed: 0,
        n: MQAR_N,
        pairs: 8,
        seq_len: 64,
    };
    let out = eval_board::evaluate(board, &image, &task, false, None)?;
    let (correct, total): (u64, u64) = (out.report.number("correct")?, out.report.number("total")?);
    let p = recorded(&dir, &["runtime", "int8", "accuracy"])?;
    let acc = correct as f64 / total as f64;
    let tol = 4.0 * (p * (1.0 - p) / total as f64).sqrt() + 1.0 / total as f64;
    ensure!(
        (acc - p).abs() <= tol,
        "{correct}/{total} = {acc:.4} on {MQAR_N} sequences is not within {tol:.4} of the recorded {p:.4}"
    );
    let stats = s.expect_run(
        &format!("eval-{name}-{}", board.name),
        &out.run,
        &out.report,
        true,
    )?;
    Ok(format!(
        "{}; recorded {p:.4} on 1000, |{acc:.4} - {p:.4}| <= {tol:.4}; {stats}",
        out.note
    ))
}

/// Bits per byte of a held-out excerpt on a board: bit-identical to the host
/// (see [`eval_board::evaluate`]), and near the recorded whole-file figure.
fn text_on_board(
    s: &Suite,
    board: &str,
    model: &str,
    dtype: &str,
    bytes: usize,
    chunk: usize,
) -> Result<String> {
    let board = boards::named(board)?;
    let image = host::shipped_image(model, dtype)?;
    let file = boards::root_dir().join("models/lm/heldout.txt");
    let task = Task::Text {
        file,
        bytes: Some(bytes),
        chunk,
    };
    let out = eval_board::evaluate(board, &image, &task, false, None)?;
    let bpb: f64 = out.report.result.parse().context("bits_per_byte")?;
    let rec = recorded(model, &["runtime", dtype, "bits_per_byte"])?;
    ensure!(
        (bpb - rec).abs() <= EXCERPT_BPB_SLACK,
        "excerpt bits per byte {bpb} is more than {EXCERPT_BPB_SLACK} from the recorded {rec}"
    );
    let stem = model.trim_start_matches("models/").replace('/', "-");
    let stats = s.expect_run(
        &format!("eval-{stem}-{}", board.name),
        &out.run,
        &out.report,
        true,
    )?;
    Ok(format!(
        "{}; recorded {rec:.4} on the whole file; {stats}",
        out.note
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each check that only `--full` runs is named in docs/testing.md's
    /// "--full" section (none leaves the default run silently), and the
    /// default run keeps every board's core checks (a second machine's
    /// with `--full`, and one check of its own by default).
    #[test]
    fn every_full_check_is_in_docs_testing_md() {
        let doc =
            std::fs::read_to_string(crate::paths::root_dir().join("docs/testing.md")).unwrap();
        let section = doc.split("\n## --full\n").nth(1).unwrap();
        let section = section.split("\n## ").next().unwrap();
        let listed = checks(None).unwrap();
        let mut full = 0;
        for (tier, name) in &listed {
            if *tier == Tier::Full {
                full += 1;
                assert!(
                    section.contains(&format!("`{name}`")),
                    "docs/testing.md's --full section does not name the suite check {name:?}"
                );
            }
        }
        assert!(full > 0);
        for board in BOARDS {
            let prefix = format!("{}: ", board.name);
            if SECOND_MACHINES.contains(&board.name) {
                // A second machine of a core the default run checks on an
                // earlier board: its core checks run with --full, one of
                // its own by default.
                let at = BOARDS.iter().position(|b| b.name == board.name).unwrap();
                assert!(
                    BOARDS[..at].iter().any(|b| {
                        !SECOND_MACHINES.contains(&b.name)
                            && (b.triple, b.cpu, b.kernels())
                                == (board.triple, board.cpu, board.kernels())
                    }),
                    "{} is not a second machine of an earlier board's core",
                    board.name
                );
                assert!(
                    listed
                        .iter()
                        .any(|(tier, name)| *tier == Tier::Default && name.starts_with(&prefix)),
                    "the default run has no check of {}",
                    board.name
                );
            }
            for core in [
                "instruction counter calibrated",
                "match the reference bit for bit",
                "generate matches host",
                "generate without fast-math matches the libm host",
                "a snapshot baked on the host continues on the board like one run",
                "continues on the host like one run",
                "on the integer token path like the plain host, bit for bit",
            ] {
                let second = SECOND_MACHINES.contains(&board.name);
                assert!(
                    listed
                        .iter()
                        .any(|(tier, name)| (*tier == Tier::Default || second)
                            && name.starts_with(&prefix)
                            && name.contains(core)),
                    "the default run lacks {prefix}...{core}"
                );
            }
        }
    }

    #[test]
    fn reads_the_default_count_of_a_note() {
        let note = "32 tokens, logits bit-identical; math float; board=m4f tokens=32 instructions_per_token=300234 flash_bytes=302976";
        assert_eq!(instructions_per_token(note), Some(300234));
        assert_eq!(instructions_per_token("32 tokens"), None);
    }

    #[test]
    fn reads_the_kernels_summary() {
        let text = "kernels: FAIL case=2 matvec dtype=int4 rows=10\n\
                    kernels: board=m4f module=dsp cases=1072 failed=284 max_cols=4096\n";
        assert_eq!(
            parse_kernels(text).unwrap(),
            ("dsp".into(), 1072, 284, 4096)
        );
        assert!(parse_kernels("panic: oops\n").is_err());
    }
}
