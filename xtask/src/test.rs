//! `cargo xtask test`: every check the project has, in one command (the
//! README's test command and CI's). Each step runs even when an earlier one
//! failed; the summary lists the failures and the exit status is non-zero if
//! there is any. `--list` prints the steps without running them (the
//! default run's, then those `--full` adds); `--full` adds the `#[ignore]`d
//! tests and the checks that left the default run to keep it within issue
//! 29's budget (docs/testing.md, "--full").

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::Instant;

use anyhow::{ensure, Context, Result};

use crate::boards::{self, root_dir};
use crate::setup::{self, cargo, Toolchain};
use crate::{chip, fuzz, host, soak, suite};

/// `test`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct Args {
    /// Print the steps' names (the default run's, then what `--full` adds), run nothing
    #[arg(long)]
    pub list: bool,
    /// Also run the steps that do not fit the default run's budget: the `#[ignore]`d
    /// tests (the exhaustive fast-math sweep, the full MQAR measurement), the QEMU
    /// suite's longer checks, the chips' clippy, `cargo package`, ... (docs/testing.md)
    #[arg(long)]
    pub full: bool,
    /// Run only the steps whose name contains TEXT (as `--list` prints them)
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
    /// (Internal) run these steps, in the background lane that a run of
    /// several steps starts ([`Background`])
    #[arg(long, hide = true, value_name = "STEP")]
    pub lane: Vec<String>,
}

/// `c` with `key=value` in its environment.
fn env(mut c: Command, key: &str, value: impl AsRef<OsStr>) -> Command {
    c.env(key, value);
    c
}

/// Runs every command, streaming its output; whether all succeeded.
fn all(commands: impl IntoIterator<Item = Command>) -> Result<bool> {
    let mut ok = true;
    for mut c in commands {
        ok &= c
            .status()
            .with_context(|| format!("cannot run {c:?}"))?
            .success();
    }
    Ok(ok)
}

/// `cargo clippy <args> -- -D warnings`.
fn clippy(args: &str) -> Command {
    cargo(&format!("clippy {args} -- -D warnings"))
}

/// `cargo doc --no-deps <args>` with `RUSTDOCFLAGS=-D warnings`.
fn doc(args: &str) -> Command {
    env(
        cargo(&format!("doc --no-deps {args}")),
        "RUSTDOCFLAGS",
        "-D warnings",
    )
}

/// `cargo test --profile checked <args>`: the `checked` profile
/// (Cargo.toml) is release with overflow checks and debug assertions on, so
/// that the tests catch an overflow instead of wrapping.
fn test(args: &str) -> Command {
    cargo(&format!("test --profile checked {args}"))
}

/// The runtime's two fast-math features: its f32 and its integer module.
const FAST_MATH: [&str; 2] = ["fast-math", "fast-math-int"];

/// A step: its name (printed) and what runs it (`Ok(true)`: it passed).
type Step = (&'static str, fn() -> Result<bool>);

/// The QEMU suite's step, the longest.
const BOARDS_STEP: &str = "boards under QEMU (cargo xtask test-boards)";
/// The 32-bit host's step (the default run's part).
const HOST_32_STEP: &str = "cargo test on a 32-bit host (i686: the runtime's unit tests and sizes.rs, the corrupt-image and image-property suites, checked)";
/// The QEMU suite's checks that only `--full` runs (`suite::Scope`).
const BOARDS_FULL_STEP: &str =
    "full: boards under QEMU, the checks the default run leaves out (cargo xtask test-boards --full-only)";
/// The chips' lint step (`--full`).
const CHIPS_CLIPPY_STEP: &str = "cargo clippy -D warnings (chips: every real chip's firmware)";
/// The chips' build and size step.
const CHIPS_STEP: &str = "chips: the library's tests on the host; every real chip built with its default model, within its flash and RAM budget (cargo xtask chips)";
/// The fuzz smoke step.
const FUZZ_STEP: &str = "fuzz smoke (cargo xtask fuzz --seconds 30)";

/// The steps of the background lane, in the order it runs them: when a run
/// has these and others, these run in a second process beside the others
/// ([`Background`]). The QEMU suite first: its QEMU runs and fat-LTO links
/// are single-threaded, so a compile beside them has the other core; then
/// the chips' builds and the fuzz smoke (in target directories that the
/// other process's steps do not build in by then: its clippy of the fuzz
/// crate runs among its first steps), which bring
/// the two processes to about the same length on two cores (fresh-clone
/// CI, 2026-12-06: lane 2,013 s, the other steps 2,010; since the split
/// into `--full` estimated at about 1,560 and 1,710, docs/testing.md); with
/// `--full`, the suite's `--full` checks and the chips' clippy last.
const LANE_STEPS: [&str; 5] = [
    BOARDS_STEP,
    CHIPS_STEP,
    FUZZ_STEP,
    BOARDS_FULL_STEP,
    CHIPS_CLIPPY_STEP,
];

/// The background lane: `xtask test --lane STEP...` as a child process with
/// `FERRITE_XTASK_LANE=suite` (its own firmware target directories, ELF
/// copies and images: [`crate::paths::LANE_VAR`]), started before the
/// other steps. Its output goes to a log, printed after the other steps with
/// its steps' verdicts (the child writes them to a file). Killed if dropped
/// unfinished.
struct Background {
    child: Option<Child>,
    steps: Vec<&'static str>,
    log: PathBuf,
    verdicts: PathBuf,
    start: Instant,
}

impl Background {
    /// Installs first what the lane's steps would otherwise install while
    /// a step beside them may run apt-get too (QEMU), then starts the lane.
    fn start(steps: Vec<&'static str>) -> Result<Background> {
        setup::ensure_qemu()?;
        let dir = root_dir().join("target");
        std::fs::create_dir_all(&dir)?;
        let (log, verdicts) = (dir.join("test-lane.log"), lane_verdicts());
        let _ = std::fs::remove_file(&verdicts);
        let out = std::fs::File::create(&log).with_context(|| log.display().to_string())?;
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("test");
        for step in &steps {
            cmd.args(["--lane", step]);
        }
        let child = cmd
            .current_dir(root_dir())
            .env(crate::paths::LANE_VAR, "suite")
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting `xtask test --lane` in the background")?;
        eprintln!(
            "==> started in the background ({} steps; output in {}, printed at the end):",
            steps.len(),
            log.display()
        );
        steps.iter().for_each(|s| eprintln!("    {s}"));
        Ok(Background {
            child: Some(child),
            steps,
            log,
            verdicts,
            start: Instant::now(),
        })
    }

    /// Waits for the lane and prints its output; its steps with whether
    /// each passed (a step the lane did not report as passed failed).
    fn finish(mut self) -> Vec<(&'static str, bool)> {
        eprintln!("\n==> the background lane");
        if let Some(mut child) = self.child.take() {
            match child.wait() {
                Ok(status) => eprintln!("(the lane exited: {status})"),
                Err(e) => eprintln!("error: waiting for `xtask test --lane`: {e}"),
            }
        }
        eprint!("{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        eprintln!(
            "<== the background lane: done after {:.0?}",
            self.start.elapsed()
        );
        let reported = std::fs::read_to_string(&self.verdicts).unwrap_or_default();
        self.steps
            .iter()
            .map(|&step| (step, reported.lines().any(|l| l == format!("ok\t{step}"))))
            .collect()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The steps, in order. (rustfmt leaves this table as it is: its longest
/// names do not fit a line.)
fn steps() -> [Step; 19] {
    [
        ("cargo fmt --check", || all([cargo("fmt --all -- --check")])),
        ("cargo fmt --check (boards, boards/esp32c3, fuzz, capi)", || {
            let dirs = ["boards", "boards/esp32c3", "fuzz", "capi"];
            all(dirs.map(|d| cargo(&format!("fmt --manifest-path {d}/Cargo.toml -- --check"))))
        }),
        ("cargo clippy -D warnings", || all([clippy("--workspace --all-targets")])),
        ("cargo clippy -D warnings (fast-math: the f32 and the integer module)", || {
            // Only the runtime and the tests that use the modules: nothing
            // else changes with the feature.
            let crates = "-p ferrite-lm -p ferrite-tests --all-targets";
            all(FAST_MATH.map(|f| clippy(&format!("{crates} --features ferrite/{f}"))))
        }),
        ("cargo clippy -D warnings (boards on Arm and RISC-V, fuzz)", boards_clippy),
        ("rustdoc -D warnings", || {
            all([doc("-p ferrite-lm -p ferrite-asm -p ferrite-tools -p ferrite-common")])
        }),
        ("rustdoc -D warnings as docs.rs builds it (thumbv7em, all features)", || {
            all([doc("-p ferrite-lm -p ferrite-asm --all-features --target thumbv7em-none-eabihf")])
        }),
        ("cargo test (host workspace, checked: optimised, overflow checks and debug assertions on)", || {
            // The runtime's `roofline` feature: its products counted as
            // `Model::macs_per_token` says (runtime/tests/roofline.rs).
            all([test("--workspace"), test("-p ferrite-lm --features roofline --test roofline --lib")])
        }),
        ("cargo test with fast-math (the runtime's unit, fast-math and generation tests, reference parity; both modules, checked)", || {
            // The tests whose code a module changes (`math.rs`: `exp`,
            // `sigmoid`, `silu` and what calls them); the kernels', sizes'
            // and feature tests test the same code with each: `--full`.
            all(FAST_MATH.into_iter().flat_map(|f| {
                let parity = format!("-p ferrite-tests --test parity --features ferrite/{f}");
                let runtime = format!("-p ferrite-lm --features {f} --lib --test fast_math --test generate");
                [test(&runtime), test(&parity)]
            }))
        }),
        (HOST_32_STEP, || {
            // The runtime's unit tests and `sizes.rs` (its size sums and
            // refusals), `corrupt.rs` and `image_props.rs`: the tests whose
            // outcome depends on `usize`'s width. The runtime's other
            // tests (kernels, fast math, generation) run in `--full`; every
            // QEMU board is 32-bit and runs the kernels and generation.
            setup::ensure_host_32()?;
            let t = setup::HOST_32;
            all([
                test(&format!("-p ferrite-lm --target {t} --lib --test sizes")),
                test(&format!("-p ferrite-tests --target {t} --test corrupt --test image_props")),
            ])
        }),
        ("runtime builds for every embedded target", || {
            // Built (codegen, the assembly included) for a target no board or
            // chip firmware builds; checked for the others, whose code the
            // QEMU suite and the chips' step compile in full.
            let firmware: Vec<&str> = boards::BOARDS.iter().chain(boards::CHIPS).map(|t| t.triple).collect();
            let targets = Toolchain::of_repo()?.targets;
            all(targets.iter().map(|t| {
                let verb = if firmware.contains(&t.as_str()) { "check" } else { "build" };
                cargo(&format!("{verb} --quiet --release -p ferrite-lm --features defmt --target {t}"))
            }))
        }),
        ("runtime feature combinations (bpe x defmt, one mixer family each, fast-math, fast-math-int, all) for thumbv7em, none and all for thumbv6m, with clippy -D warnings; a family left out is refused", feature_combinations),
        ("MSRV: ferrite and ferrite-asm build for Cortex-M with the toolchain rust-version names", msrv),
        ("python tests (reference, fixtures, CLI parity)", || {
            let mut c = env(Command::new(python_env()?), "FERRITE_BIN", host::ferrite()?);
            c.current_dir(root_dir().join("tools/python")).args(["-m", "pytest", "-q", "-n", "auto", "tests"]);
            all([c])
        }),
        ("soak: 100,000-token host streams, their claims asserted (cargo xtask soak --tokens 100000 --board-tokens 0)", || {
            let args = soak::Args {
                tokens: 100_000,
                board_tokens: 0,
                only: None,
                record: false,
            };
            Ok(soak::run(&args)? == ExitCode::SUCCESS)
        }),
        (FUZZ_STEP, || fuzz::run(30, None)),
        (CHIPS_STEP, || chip::all(None, false)),
        ("C API: header fresh, host C test under ASan/UBSan, panic branches named, the C example on the m4f under QEMU (cargo xtask capi)", || {
            crate::capi::check(false)
        }),
        (BOARDS_STEP, || {
            setup::ensure_qemu()?;
            Ok(suite::run(false, None, suite::Scope::Default)? == ExitCode::SUCCESS)
        }),
    ]
}

/// The steps `--full` adds after [`steps`]: the `#[ignore]`d tests, each
/// crate's `cargo test -- --ignored`, and the checks that left the default
/// run to keep it within issue 29's 25 minutes on two cores, each under its
/// old name or, for part of a step, a `full:` one (docs/testing.md, "--full").
fn full_steps() -> [Step; 12] {
    [
        (
            "ignored: fast-math error bounds over every f32 (both modules)",
            || all([test("-p ferrite-lm --test fast_math -- --ignored")]),
        ),
        (
            "ignored: the full MQAR measurement on the integer path",
            || all([test("-p ferrite-tests --test integer_path -- --ignored")]),
        ),
        (
            "ignored: the packaged runtime and the installed CLI run outside the workspace",
            || all([test("-p ferrite-tests --test publish -- --ignored")]),
        ),
        ("full: every shipped model's recorded figures re-measured (ferrite-eval-models --check)", || {
            let mut c = Command::new(python_env()?);
            c.current_dir(root_dir().join("tools/python"))
                .args(["-m", "ferrite_dev.reports.evaluate", "--check", "--bin"])
                .arg(host::ferrite()?);
            all([c])
        }),
        (
            "full: the C library built for every embedded target (cargo xtask capi --all-targets)",
            || crate::capi::embedded_libraries().map(|()| true),
        ),
        ("cargo package (ferrite-asm, ferrite, ferrite-common, ferrite-tools: packaged and built as from crates.io)", package),
        (CHIPS_CLIPPY_STEP, chip::clippy),
        ("full: cargo test with fast-math (every test of the runtime; both modules, checked)", || {
            all(FAST_MATH.map(|f| test(&format!("-p ferrite-lm --features {f}"))))
        }),
        ("full: cargo test on a 32-bit host (i686: every test of the runtime, checked)", || {
            setup::ensure_host_32()?;
            all([test(&format!("-p ferrite-lm --target {}", setup::HOST_32))])
        }),
        ("full: runtime feature combinations for thumbv6m (the default run's thumbv7em matrix), with clippy -D warnings", feature_combinations_v6m),
        ("full: cargo clippy -D warnings (the sigbench firmware with each signature crate)", sigbench_clippy),
        (BOARDS_FULL_STEP, || {
            setup::ensure_qemu()?;
            Ok(suite::run(false, None, suite::Scope::FullOnly)? == ExitCode::SUCCESS)
        }),
    ]
}

/// clippy on the boards' firmware as xtask builds it (with the runtime's
/// fast math) for Arm v7E-M, v6-M (no atomic read-modify-write, no DSP) and
/// RISC-V, and on the fuzz targets.
fn boards_clippy() -> Result<bool> {
    // Each board as the suite builds it (the `sigbench` firmware without a
    // signature crate among its `--bins`), the signed `ota` firmware too
    // (`verify`), `generate` with `roofline`.
    // `generate` with the `roofline` line on an Arm and a RISC-V board.
    let roofline = ["m4f", "rv32imac"].map(|b| (b, "roofline", "--bin generate"));
    let runs = ["m4f", "m0", "rv32imac"]
        .into_iter()
        .flat_map(|b| [(b, "", "--bins"), (b, "verify", "--bins")])
        .chain(roofline);
    let mut commands = firmware_clippy(runs)?;
    let mut c = clippy("--quiet");
    c.current_dir(root_dir().join("fuzz"));
    commands.push(c);
    all(commands)
}

/// clippy on the `sigbench` firmware with each signature crate it compares
/// (one at a time: they are alternatives), on the m4f: `--full` only. The
/// firmware exists to measure them (`cargo xtask bench-signatures`); the
/// default run lints it without a crate (`boards_clippy`), and the crates'
/// code is theirs.
fn sigbench_clippy() -> Result<bool> {
    let sigbench = crate::sigbench::CRATES
        .iter()
        .filter(|(f, _)| !f.is_empty())
        .map(|(f, _)| ("m4f", *f, "--bin sigbench"));
    all(firmware_clippy(sigbench)?)
}

/// `cargo clippy -D warnings` of the boards' firmware for each (board,
/// extra feature, which binaries) of `runs`, with the default image.
fn firmware_clippy<'a>(
    runs: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
) -> Result<Vec<Command>> {
    let image = host::fixture_image(boards::DEFAULT_MODEL, "f32")?;
    let mut commands = Vec::new();
    for (name, extra, bins) in runs {
        let board = boards::named(name)?;
        let target = board.triple;
        // The image has every mixer family: the firmware is built with each
        // (as `boards::build` does), else its session length is refused.
        let families = ferrite::LayerConfig::KIND_NAMES.iter().copied();
        let features = [name, "fast-math", extra].into_iter().chain(families);
        let features: Vec<&str> = features.filter(|f| !f.is_empty()).collect();
        let mut c = clippy(&format!(
            "--quiet --release {bins} --target {target} --features {}",
            features.join(",")
        ));
        c.current_dir(root_dir().join("boards"))
            .env("CARGO_ENCODED_RUSTFLAGS", boards::rustflags(board))
            .env("FERRITE_IMAGE", &image);
        commands.push(c);
    }
    Ok(commands)
}

/// The runtime linted with each feature combination for v7E-M, and with
/// none and with all for v6-M (built with none and with all on both), its
/// host tests and examples linted without the default features, and a
/// build without some mixer families refusing their layers. `--full` adds
/// v6-M's other combinations ([`feature_combinations_v6m`]).
fn feature_combinations() -> Result<bool> {
    let mut commands = feature_matrix("thumbv7em-none-eabihf", |_| true);
    commands.extend(feature_matrix("thumbv6m-none-eabi", |f| {
        f.is_empty() || f.contains("all-mixers")
    }));
    commands.push(clippy(
        "--quiet -p ferrite-lm --no-default-features --all-targets",
    ));
    // A family (or the format-8 block options) left out of the build refuses
    // its layers (and only those).
    for features in [
        "gdn",
        "gdn,gsa,swa",
        "rwkv7,mamba2",
        "block-options,mamba2",
        "block-options,rwkv7,mamba2",
        "gla",
        "cross",
    ] {
        commands.push(cargo(&format!(
            "test --quiet -p ferrite-lm --no-default-features --features {features} --test without_a_mixer"
        )));
    }
    all(commands)
}

/// `--full`: the runtime linted for v6-M with the combinations the default
/// run lints for v7E-M only (none and all it lints on both). The code a
/// feature switches is the same on both targets but for the v7E-M's DSP
/// kernels, which the default run's matrix has; v6-M's lack of atomic
/// read-modify-write is linted there with none and with all, and built by
/// the QEMU suite's m0 firmware.
fn feature_combinations_v6m() -> Result<bool> {
    all(feature_matrix("thumbv6m-none-eabi", |f| {
        !(f.is_empty() || f.contains("all-mixers"))
    }))
}

/// The runtime for `target` without default features, linted with each
/// combination of the matrix that `keep` keeps (and built with none and
/// with all of them, when kept).
fn feature_matrix(target: &str, keep: impl Fn(&str) -> bool) -> Vec<Command> {
    let matrix = [
        "",
        "bpe",
        "defmt",
        "bpe,defmt",
        "gdn",
        "gsa,int-path",
        "swa",
        "bla,int-path",
        "mla,int-path",
        "mamba2,int-path",
        "rwkv7,block-options",
        "gla",
        "cross",
        "fast-math",
        "fast-math-int",
        "verify",
        "verify,defmt",
        "bpe,defmt,all-mixers,int-path,block-options,fast-math,verify",
    ];
    let mut commands = Vec::new();
    for features in matrix.into_iter().filter(|f| keep(f)) {
        let features = match features {
            "" => String::new(),
            f => format!("--features {f}"),
        };
        let crates = "--quiet --release -p ferrite-lm --no-default-features";
        let args = format!("{crates} --target {target} {features}");
        // Linted in every combination; built (codegen too) with none and
        // with all.
        if features.is_empty() || features.contains("all-mixers") {
            commands.push(cargo(&format!("build {args}")));
        }
        commands.push(clippy(&args));
    }
    commands
}

/// `ferrite` and `ferrite-asm` built for Cortex-M with the toolchain that
/// runtime/Cargo.toml's `rust-version` names: the pinned one when it is that
/// version, else a rustup toolchain of that name (never downloaded here).
fn msrv() -> Result<bool> {
    let path = root_dir().join("runtime/Cargo.toml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let manifest: toml::Table = text.parse().context("runtime/Cargo.toml")?;
    let msrv = manifest
        .get("package")
        .and_then(|p| p.get("rust-version"))
        .and_then(toml::Value::as_str)
        .context("runtime/Cargo.toml declares no rust-version")?;
    let channel = Toolchain::of_repo()?.channel;
    let toolchain = match channel.strip_prefix(msrv) {
        Some("") => channel.as_str(),
        Some(rest) if rest.starts_with('.') => channel.as_str(),
        _ => msrv,
    };
    let rustup = |args: &str| {
        let mut c = Command::new("rustup");
        c.current_dir(root_dir())
            .args(["run", toolchain])
            .args(args.split_whitespace());
        env(c, "RUSTUP_AUTO_INSTALL", "0")
    };
    let version = match rustup("rustc --version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        _ => {
            eprintln!(
                "no toolchain {toolchain} for rust-version {msrv}: install it (with thumbv6m-none-eabi and \
                 thumbv7em-none-eabihf) or declare a rust-version CI builds with (docs/publishing.md)"
            );
            return Ok(false);
        }
    };
    eprintln!("rust-version {msrv}: {}", version.trim());
    ensure!(
        version.starts_with(&format!("rustc {msrv}")),
        "toolchain {toolchain} is not Rust {msrv}"
    );
    all(["thumbv6m-none-eabi", "thumbv7em-none-eabihf"].map(|t| {
        let crates = "-p ferrite-lm -p ferrite-asm --all-features";
        rustup(&format!(
            "cargo build --quiet --release {crates} --target {t}"
        ))
    }))
}

/// The crates `cargo package` packages and then builds as from a registry.
const PACKAGED: [&str; 4] = [
    "ferrite-asm",
    "ferrite-lm",
    "ferrite-common",
    "ferrite-tools",
];

/// `cargo package` of the published crates, in a target directory of its
/// own, emptied first: registry crates count as immutable, so a directory
/// that once compiled `ferrite-lm 0.1.0` from an older package reuses it.
fn package() -> Result<bool> {
    clear_stale_package_extractions()?;
    let target_dir = root_dir().join("target").join("package-check");
    let _ = std::fs::remove_dir_all(&target_dir);
    let c = cargo(&format!(
        "package --quiet --allow-dirty -p {}",
        PACKAGED.join(" -p ")
    ));
    all([env(c, "CARGO_TARGET_DIR", target_dir)])
}

/// `cargo package` unpacks the crates it has just packaged into
/// `$CARGO_HOME/registry/src/-<hash>/<name>-<version>` (a local registry,
/// hence the name without a host) and reuses an unpacked copy of the same
/// version if one is there: an earlier run's sources, which then get built
/// instead of the new package (an API change fails as if it were the new
/// code's error). Remove those copies first; crates.io's are left alone.
fn clear_stale_package_extractions() -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries
        .flatten()
        .filter(|r| r.file_name().to_string_lossy().starts_with('-'))
    {
        for entry in std::fs::read_dir(registry.path())?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if PACKAGED.iter().any(|p| is_version_of(&name, p)) {
                std::fs::remove_dir_all(entry.path())
                    .with_context(|| format!("removing {}", entry.path().display()))?;
            }
        }
    }
    Ok(())
}

/// Whether a directory name is `<package>-<version>` (a version starts with a digit).
fn is_version_of(dir: &str, package: &str) -> bool {
    dir.strip_prefix(package)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
}

/// The Python interpreter of a virtual environment under target/ with
/// tools/python installed editable with its test requirements (the tests
/// import ferrite_ref and the fixture scripts from it, no sys.path edits).
fn python_env() -> Result<PathBuf> {
    let root = root_dir();
    let venv = root.join("target").join("pyenv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()?
            .success();
        ensure!(ok, "python3 -m venv failed");
    }
    let mut pip = Command::new(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "-e",
    ])
    .arg(format!("{}[test]", root.join("tools/python").display()));
    ensure!(all([pip])?, "pip install -e 'tools/python[test]' failed");
    Ok(python)
}

/// Runs every step (or with `--list` names them) and prints `N passed, N failed` (steps) last.
pub fn run(args: &Args) -> Result<ExitCode> {
    let mut steps = steps().to_vec();
    if args.full || (args.list && args.lane.is_empty()) {
        steps.extend(full_steps());
    }
    if !args.lane.is_empty() {
        // This process is the background lane of another ([`Background`]):
        // its steps in the order given.
        let find = |l: &String| steps.iter().find(|(name, _)| name == l).copied();
        steps = args
            .lane
            .iter()
            .map(|l| find(l).with_context(|| format!("--lane {l:?}: no such step (see --list)")))
            .collect::<Result<_>>()?;
    } else if let Some(only) = &args.only {
        steps.retain(|(name, _)| name.contains(only.as_str()));
        ensure!(
            !steps.is_empty(),
            "no step's name contains {only:?} (see --list; those it prints after `with --full, also:` need --full)"
        );
    }
    if args.list {
        // The default run's steps, then those only `--full` runs.
        let full: Vec<&str> = full_steps().iter().map(|(name, _)| *name).collect();
        let (extra, default): (Vec<Step>, Vec<Step>) =
            steps.iter().partition(|(name, _)| full.contains(name));
        default.iter().for_each(|(name, _)| println!("{name}"));
        if !extra.is_empty() {
            println!("\nwith --full, also:");
            extra.iter().for_each(|(name, _)| println!("{name}"));
        }
        return Ok(ExitCode::SUCCESS);
    }
    ensure!(
        root_dir().join("Cargo.toml").exists(),
        "not in the ferrite repository"
    );
    // A fresh machine has only the host target: add what the checks build for.
    setup::ensure_toolchain()?;
    // The lane's steps run in a second process when others run here too.
    let (mut lane, here): (Vec<Step>, Vec<Step>) = steps
        .iter()
        .partition(|(name, _)| args.lane.is_empty() && LANE_STEPS.contains(name));
    let (background, here) = if lane.is_empty() || here.is_empty() {
        (None, steps.clone())
    } else {
        lane.sort_by_key(|(name, _)| LANE_STEPS.iter().position(|l| l == name));
        let names = lane.iter().map(|(name, _)| *name).collect();
        (Some(Background::start(names)?), here)
    };
    let mut verdicts = Vec::new();
    for (name, step) in &here {
        eprintln!("\n==> {name}");
        let start = Instant::now();
        let ok = step().unwrap_or_else(|e| {
            eprintln!("error: {e:#}");
            false
        });
        let verdict = if ok { "ok" } else { "FAILED" };
        eprintln!("<== {name}: {verdict} in {:.0?}", start.elapsed());
        verdicts.push((*name, ok));
    }
    if let Some(lane) = background {
        verdicts.extend(lane.finish());
    }
    if !args.lane.is_empty() {
        let lines: String = verdicts
            .iter()
            .map(|(name, ok)| format!("{}\t{name}\n", if *ok { "ok" } else { "FAILED" }))
            .collect();
        std::fs::write(lane_verdicts(), lines).context("writing the lane's verdicts")?;
    }
    println!();
    let failed: Vec<&str> = verdicts.iter().filter(|v| !v.1).map(|v| v.0).collect();
    for name in &failed {
        println!("FAILED: {name}");
    }
    println!(
        "{} passed, {} failed",
        verdicts.len() - failed.len(),
        failed.len()
    );
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Where the background lane writes its steps' verdicts (`ok` or `FAILED`,
/// a tab, the step's name; a line each).
fn lane_verdicts() -> PathBuf {
    root_dir().join("target").join("test-lane.verdicts")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unpacked_versions_of_the_package_match() {
        assert!(is_version_of("ferrite-lm-0.1.0", "ferrite-lm"));
        assert!(is_version_of(
            "ferrite-common-12.0.0-rc.1",
            "ferrite-common"
        ));
        assert!(!is_version_of("ferrite-lm-extra-0.1.0", "ferrite-lm"));
        assert!(!is_version_of("ferrite-lmx-0.1.0", "ferrite-lm"));
        assert!(!is_version_of("ferrite-lm", "ferrite-lm"));
    }

    /// Each step of the background lane is a step of the table (a renamed
    /// one would otherwise quietly run in the foreground), once.
    #[test]
    fn the_lane_steps_are_steps() {
        let all = steps().into_iter().chain(full_steps());
        let names: Vec<&str> = all.map(|(name, _)| name).collect();
        for (i, step) in LANE_STEPS.iter().enumerate() {
            assert!(names.contains(step), "{step:?} is not a step");
            assert!(!LANE_STEPS[..i].contains(step), "{step:?} twice");
        }
    }

    /// A step is in the default run or in `--full`'s, not both.
    #[test]
    fn no_step_is_in_both_runs() {
        let default: Vec<&str> = steps().iter().map(|(name, _)| *name).collect();
        for (name, _) in full_steps() {
            assert!(!default.contains(&name), "{name:?} in both runs");
        }
    }

    #[test]
    fn every_step_is_in_docs_testing_md() {
        let doc = std::fs::read_to_string(root_dir().join("docs/testing.md")).unwrap();
        for (name, _) in steps().iter().chain(full_steps().iter()) {
            assert!(
                doc.contains(&format!("`{name}`")),
                "docs/testing.md does not name the step {name:?}"
            );
        }
    }

    #[test]
    fn commands_are_split_at_spaces() {
        let c = cargo("clippy --features a,b -- -D warnings");
        let args: Vec<_> = c.get_args().collect();
        assert_eq!(
            args,
            ["clippy", "--features", "a,b", "--", "-D", "warnings"]
        );
        assert_eq!(c.get_current_dir(), Some(root_dir().as_path()));
    }
}
