//! `cargo xtask fuzz [--seconds N] [--only T]`: builds the libFuzzer
//! targets of `fuzz/` on the pinned stable toolchain and runs each over its
//! committed corpus and seeds. CI runs it for a minute as a smoke test (docs/fuzzing.md has the
//! long runs, made the same way).
//!
//! `cargo fuzz` needs nightly only for its sanitizers; the coverage
//! instrumentation libFuzzer needs is made of stable `-C` flags, which are set
//! here (with `--target`, so build scripts are not instrumented), together
//! with debug assertions and overflow checks: an overflow is a crash.

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

/// Every target (docs/fuzzing.md), each with its committed corpus in
/// `fuzz/corpus/<name>`: its name, its seed directory (under `fuzz/`), the
/// largest input it is given and its share of a smoke run's seconds.
const TARGETS: [(&str, &str, usize, u64); 3] = [
    ("load_and_feed", "seeds", 32768, 2),
    ("bpe_tokenizer", "seeds-bpe", 65536, 1),
    ("tools_inputs", "seeds-tools", 65536, 1),
];

/// Builds every target (instrumented, for the host) and runs each (or
/// those whose name contains `only`) from its committed corpus and seeds,
/// `seconds` split by their shares (each at least 1 s); new inputs go to a
/// scratch directory, so the committed corpus stays as it is. `Ok(false)`
/// when libFuzzer found a crash (it prints the input's path).
pub fn run(seconds: u64, only: Option<&str>) -> Result<bool> {
    let targets: Vec<_> = TARGETS
        .iter()
        .filter(|t| only.is_none_or(|o| t.0.contains(o)))
        .collect();
    anyhow::ensure!(!targets.is_empty(), "no fuzz target matches {only:?}");
    let fuzz = root_dir().join("fuzz");
    let host = crate::setup::host_triple()?;
    eprintln!("building the fuzz targets (libFuzzer, instrumented) ...");
    let ok = crate::setup::cargo("build --release --quiet --bins --target")
        .arg(host)
        .current_dir(&fuzz)
        .env("RUSTFLAGS", FUZZ_RUSTFLAGS)
        .status()
        .context("running cargo build in fuzz/")?
        .success();
    anyhow::ensure!(ok, "building the fuzz targets failed");
    let (bins, artifacts) = (
        fuzz.join("target").join(host).join("release"),
        fuzz.join("target/artifacts"),
    );
    let shares: u64 = targets.iter().map(|t| t.3).sum();
    let mut ok = true;
    for &&(name, seeds, max_len, share) in &targets {
        let secs = (seconds * share / shares).max(1);
        let (scratch, corpus) = (
            fuzz.join("target/smoke-corpus").join(name),
            fuzz.join("corpus").join(name),
        );
        for dir in [&scratch, &artifacts, &corpus] {
            std::fs::create_dir_all(dir)?;
        }
        eprintln!("fuzzing {name} for {secs} s ...");
        let out = Command::new(bins.join(name))
            .args([&scratch, &corpus, &fuzz.join(seeds)])
            .arg(format!("-max_len={max_len}"))
            .arg(format!("-max_total_time={secs}"))
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .arg("-print_final_stats=1")
            .output()
            .context("running the fuzz target")?;
        let log = String::from_utf8_lossy(&out.stderr);
        let stat = |key: &str| {
            log.lines()
                .find_map(|l| l.strip_prefix(key))
                .map_or("?", str::trim)
        };
        if out.status.success() {
            eprintln!(
                "fuzz: {name}: no crash in {} runs ({secs} s, {} new corpus units)",
                stat("stat::number_of_executed_units:"),
                stat("stat::new_units_added:")
            );
        } else {
            let lines: Vec<&str> = log.lines().collect();
            lines[lines.len().saturating_sub(40)..]
                .iter()
                .for_each(|l| eprintln!("{l}"));
            eprintln!("fuzz: {name}: the target failed ({})", out.status);
            ok = false;
        }
    }
    Ok(ok)
}
