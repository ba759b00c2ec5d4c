//! `cargo xtask fuzz [--seconds N]`: builds the libFuzzer target of `fuzz/`
//! on the pinned stable toolchain and runs it over the committed corpus and
//! seeds. CI runs it for a minute as a smoke test (docs/fuzzing.md has the
//! long runs, made the same way).
//!
//! `cargo fuzz` needs nightly only for its sanitizers; the coverage
//! instrumentation libFuzzer needs is made of stable `-C` flags, which are set
//! here (with `--target`, so build scripts are not instrumented), together
//! with debug assertions and overflow checks: an overflow is a crash.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use crate::boards::root_dir;

/// The instrumentation `cargo fuzz build` would add (sanitizer none).
const FUZZ_RUSTFLAGS: &str = "-Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    --cfg fuzzing -Cdebug-assertions -Coverflow-checks";

/// The fuzz target's binary, built for the host.
fn build() -> Result<PathBuf> {
    let fuzz = root_dir().join("fuzz");
    let host = crate::setup::host_triple()?;
    eprintln!("building the fuzz target load_and_feed (libFuzzer, instrumented) ...");
    let ok = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&fuzz)
        .args(["build", "--release", "--quiet", "--bin", "load_and_feed"])
        .args(["--target", &host])
        .env("RUSTFLAGS", FUZZ_RUSTFLAGS)
        .status()
        .context("running cargo build in fuzz/")?
        .success();
    anyhow::ensure!(ok, "building the fuzz target failed");
    Ok(fuzz
        .join("target")
        .join(host)
        .join("release")
        .join("load_and_feed"))
}

/// Runs the target for `seconds` from the committed corpus and seeds; new
/// inputs go to a scratch directory, so the committed corpus stays as it is.
/// `Ok(false)` when libFuzzer found a crash (it prints the input's path).
pub fn run(seconds: u64) -> Result<bool> {
    let bin = build()?;
    let fuzz = root_dir().join("fuzz");
    let scratch = fuzz.join("target").join("smoke-corpus");
    std::fs::create_dir_all(&scratch)?;
    let artifacts = fuzz.join("target").join("artifacts");
    std::fs::create_dir_all(&artifacts)?;
    eprintln!("fuzzing Model::load + Session for {seconds} s ...");
    let out = Command::new(bin)
        .arg(&scratch)
        .arg(fuzz.join("corpus").join("load_and_feed"))
        .arg(fuzz.join("seeds"))
        .arg("-max_len=32768")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1")
        .output()
        .context("running the fuzz target")?;
    let log = String::from_utf8_lossy(&out.stderr);
    let stat = |name: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| "?".into())
    };
    if out.status.success() {
        eprintln!(
            "fuzz: no crash in {} runs ({} s, {} new corpus units)",
            stat("stat::number_of_executed_units:"),
            seconds,
            stat("stat::new_units_added:")
        );
        Ok(true)
    } else {
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        for line in tail.into_iter().rev() {
            eprintln!("{line}");
        }
        eprintln!("fuzz: the target failed ({})", out.status);
        Ok(false)
    }
}
