//! `cargo xtask fuzz [--seconds N] [--only T]`: builds the libFuzzer
//! targets of `fuzz/` on the pinned stable toolchain and runs each over its
//! committed corpus and seeds. CI runs it for a minute as a smoke test (docs/fuzzing.md has the
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

/// `fuzz`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct Args {
    /// Seconds in all, split among the targets
    #[arg(long, value_name = "N", default_value_t = 60)]
    pub seconds: u64,
    /// Only the targets whose name contains T
    #[arg(long, value_name = "T")]
    pub only: Option<String>,
}

/// The instrumentation `cargo fuzz build` would add (sanitizer none).
const FUZZ_RUSTFLAGS: &str = "-Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    --cfg fuzzing -Cdebug-assertions -Coverflow-checks";

/// A fuzz target of `fuzz/`: its name, its seed directory (under `fuzz/`)
/// and the largest input it is given.
pub struct Target {
    pub name: &'static str,
    pub seeds: &'static str,
    pub max_len: usize,
    /// Share of a smoke run's seconds.
    pub share: u64,
}

/// Every target (docs/fuzzing.md), each with its committed corpus in
/// `fuzz/corpus/<name>`.
pub const TARGETS: &[Target] = &[
    Target {
        name: "load_and_feed",
        seeds: "seeds",
        max_len: 32768,
        share: 2,
    },
    Target {
        name: "bpe_tokenizer",
        seeds: "seeds-bpe",
        max_len: 65536,
        share: 1,
    },
    Target {
        name: "tools_inputs",
        seeds: "seeds-tools",
        max_len: 65536,
        share: 1,
    },
];

/// Builds every target's binary for the host; returns the directory.
fn build() -> Result<PathBuf> {
    let fuzz = root_dir().join("fuzz");
    let host = crate::setup::host_triple()?;
    eprintln!("building the fuzz targets (libFuzzer, instrumented) ...");
    let ok = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&fuzz)
        .args(["build", "--release", "--quiet", "--bins"])
        .args(["--target", &host])
        .env("RUSTFLAGS", FUZZ_RUSTFLAGS)
        .status()
        .context("running cargo build in fuzz/")?
        .success();
    anyhow::ensure!(ok, "building the fuzz targets failed");
    Ok(fuzz.join("target").join(host).join("release"))
}

/// Runs every target (or those whose name contains `only`) from its
/// committed corpus and seeds, `seconds` split by their shares (each at
/// least 1 s); new inputs go to a scratch directory, so the committed corpus
/// stays as it is. `Ok(false)` when libFuzzer found a crash (it prints the
/// input's path).
pub fn run(seconds: u64, only: Option<&str>) -> Result<bool> {
    let bins = build()?;
    let targets: Vec<&Target> = TARGETS
        .iter()
        .filter(|t| only.is_none_or(|o| t.name.contains(o)))
        .collect();
    anyhow::ensure!(!targets.is_empty(), "no fuzz target matches {only:?}");
    let shares: u64 = targets.iter().map(|t| t.share).sum();
    let mut ok = true;
    for t in targets {
        let secs = (seconds * t.share / shares).max(1);
        ok &= run_one(&bins, t, secs)?;
    }
    Ok(ok)
}

fn run_one(bins: &std::path::Path, t: &Target, seconds: u64) -> Result<bool> {
    let fuzz = root_dir().join("fuzz");
    let scratch = fuzz.join("target").join("smoke-corpus").join(t.name);
    std::fs::create_dir_all(&scratch)?;
    let artifacts = fuzz.join("target").join("artifacts");
    std::fs::create_dir_all(&artifacts)?;
    let corpus = fuzz.join("corpus").join(t.name);
    std::fs::create_dir_all(&corpus)?;
    eprintln!("fuzzing {} for {seconds} s ...", t.name);
    let out = Command::new(bins.join(t.name))
        .arg(&scratch)
        .arg(&corpus)
        .arg(fuzz.join(t.seeds))
        .arg(format!("-max_len={}", t.max_len))
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
            "fuzz: {}: no crash in {} runs ({} s, {} new corpus units)",
            t.name,
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
        eprintln!("fuzz: {}: the target failed ({})", t.name, out.status);
        Ok(false)
    }
}
