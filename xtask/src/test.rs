//! `cargo xtask test`: every check the project has, in one command (the
//! README's test command and CI's). Each step runs even when an earlier one
//! failed; the summary lists the failures and the exit status is non-zero if
//! there is any.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::boards::root_dir;
use crate::setup::{self, Toolchain};
use crate::{host, suite};

/// One step: a name and how to run it.
struct Step {
    name: &'static str,
    run: Box<dyn Fn() -> Result<bool>>,
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root_dir());
    c
}

/// Runs a command, streaming its output; `Ok(true)` when it succeeds.
/// The workspace crates `cargo package` packages and then builds as from a registry.
const PACKAGED: [&str; 4] = [
    "ferrite-asm",
    "ferrite-lm",
    "ferrite-common",
    "ferrite-tools",
];

/// `cargo package` unpacks the crates it has just packaged into
/// `$CARGO_HOME/registry/src/-<hash>/<name>-<version>` (a local registry,
/// hence the name without a host) and reuses an unpacked copy of the same
/// version if one is there: an earlier run's sources, which then get built
/// instead of the new package (an API change fails as if it were the new
/// code's error). Remove those copies first; crates.io's are left alone.
fn clear_stale_package_extractions() -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
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

fn status(mut cmd: Command) -> Result<bool> {
    let shown = format!("{cmd:?}");
    Ok(cmd
        .status()
        .with_context(|| format!("cannot run {shown}"))?
        .success())
}

/// The Python interpreter of a virtual environment under target/ with the
/// test requirements (numpy, safetensors, pytest) installed.
fn python_env() -> Result<std::path::PathBuf> {
    let root = root_dir();
    let venv = root.join("target").join("pyenv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()?
            .success();
        anyhow::ensure!(ok, "python3 -m venv failed");
    }
    // tools/python as a package (pyproject.toml), editable: the tests import
    // ferrite_ref and the fixture scripts from it, with no sys.path edits.
    let ok = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-e",
        ])
        .arg(format!("{}[test]", root.join("tools/python").display()))
        .status()?
        .success();
    anyhow::ensure!(ok, "pip install -e 'tools/python[test]' failed");
    Ok(python)
}

fn steps() -> Vec<Step> {
    vec![
        Step {
            name: "cargo fmt --check",
            run: Box::new(|| {
                status({
                    let mut c = cargo();
                    c.args(["fmt", "--all", "--", "--check"]);
                    c
                })
            }),
        },
        Step {
            name: "cargo fmt --check (boards, chips, fuzz)",
            run: Box::new(|| {
                let mut ok = true;
                for dir in ["boards", "chips", "chips/esp32c3", "fuzz"] {
                    let mut c = cargo();
                    c.args(["fmt", "--manifest-path"])
                        .arg(root_dir().join(dir).join("Cargo.toml"))
                        .args(["--", "--check"]);
                    ok &= status(c)?;
                }
                Ok(ok)
            }),
        },
        Step {
            name: "cargo clippy -D warnings",
            run: Box::new(|| {
                status({
                    let mut c = cargo();
                    c.args([
                        "clippy",
                        "--workspace",
                        "--all-targets",
                        "--",
                        "-D",
                        "warnings",
                    ]);
                    c
                })
            }),
        },
        Step {
            name: "cargo clippy -D warnings (fast-math: the f32 and the integer module)",
            run: Box::new(|| {
                let mut ok = true;
                for feature in ["ferrite/fast-math", "ferrite/fast-math-int"] {
                    let mut c = cargo();
                    c.args([
                        "clippy",
                        "--workspace",
                        "--all-targets",
                        "--features",
                        feature,
                        "--",
                        "-D",
                        "warnings",
                    ]);
                    ok &= status(c)?;
                }
                Ok(ok)
            }),
        },
        Step {
            name: "cargo clippy -D warnings (boards on Arm and RISC-V, fuzz)",
            run: Box::new(|| {
                let image = host::fixture_image(crate::boards::DEFAULT_MODEL, "f32")?;
                let mut ok = true;
                // Arm v7E-M, v6-M (no atomic read-modify-write, no DSP) and RISC-V.
                for board in ["m4f", "m0", "rv32imac"] {
                    let board = crate::boards::named(board)?;
                    let mut c = cargo();
                    c.current_dir(root_dir().join("boards"))
                        .args([
                            "clippy",
                            "--quiet",
                            "--release",
                            "--bins",
                            "--target",
                            board.triple,
                        ])
                        // As xtask builds them: with the runtime's fast math.
                        .args(["--features", &format!("{},fast-math", board.name)])
                        .args(["--", "-D", "warnings"])
                        .env(
                            "CARGO_ENCODED_RUSTFLAGS",
                            crate::boards::firmware::rustflags(board),
                        )
                        .env("FERRITE_IMAGE", &image);
                    ok &= status(c)?;
                }
                let mut c = cargo();
                c.current_dir(root_dir().join("fuzz"))
                    .args(["clippy", "--quiet", "--", "-D", "warnings"]);
                ok &= status(c)?;
                Ok(ok)
            }),
        },
        Step {
            name: "rustdoc -D warnings",
            run: Box::new(|| {
                status({
                    let mut c = cargo();
                    c.args([
                        "doc",
                        "--no-deps",
                        "-p",
                        "ferrite-lm",
                        "-p",
                        "ferrite-asm",
                        "-p",
                        "ferrite-tools",
                        "-p",
                        "ferrite-common",
                    ])
                    .env("RUSTDOCFLAGS", "-D warnings");
                    c
                })
            }),
        },
        Step {
            name: "rustdoc -D warnings as docs.rs builds it (thumbv7em, all features)",
            run: Box::new(|| {
                status({
                    let mut c = cargo();
                    c.args([
                        "doc",
                        "--no-deps",
                        "-p",
                        "ferrite-lm",
                        "-p",
                        "ferrite-asm",
                        "--all-features",
                        "--target",
                        "thumbv7em-none-eabihf",
                    ])
                    .env("RUSTDOCFLAGS", "-D warnings");
                    c
                })
            }),
        },
        Step {
            name: "cargo test (host workspace, checked: optimised, overflow checks and debug assertions on)",
            run: Box::new(|| {
                status({
                    let mut c = cargo();
                    // Cargo.toml's `checked` profile: release optimisations
                    // with overflow checks and debug assertions, so that the
                    // runtime's unit, integration, corrupt-image and property
                    // tests catch an overflow instead of wrapping; release
                    // itself (benchmarks, boards, the CLI) stays unchecked.
                    c.args(["test", "--workspace", "--profile", "checked"]);
                    c
                })
            }),
        },
        Step {
            name: "cargo test with fast-math (runtime tests, reference parity; both modules, checked)",
            run: Box::new(|| {
                let mut ok = true;
                for feature in ["fast-math", "fast-math-int"] {
                    let mut c = cargo();
                    c.args(["test", "--profile", "checked", "-p", "ferrite-lm", "--features"])
                        .arg(feature);
                    ok &= status(c)?;
                    let mut c = cargo();
                    c.args([
                        "test",
                        "--profile",
                        "checked",
                        "-p",
                        "ferrite-tests",
                        "--test",
                        "parity",
                        "--features",
                    ])
                    .arg(format!("ferrite/{feature}"));
                    ok &= status(c)?;
                }
                Ok(ok)
            }),
        },
        Step {
            name: "runtime builds for every embedded target",
            run: Box::new(|| {
                let mut ok = true;
                for target in &Toolchain::of_repo()?.targets {
                    let mut c = cargo();
                    c.args([
                        "build",
                        "--quiet",
                        "--release",
                        "-p",
                        "ferrite-lm",
                        "--features",
                        "defmt",
                        "--target",
                        target.as_str(),
                    ]);
                    ok &= status(c)?;
                }
                Ok(ok)
            }),
        },
        Step {
            name: "runtime feature combinations (bpe x defmt, mla, fast-math, fast-math-int, all) for thumbv6m and thumbv7em, with clippy -D warnings",
            run: Box::new(|| {
                let mut ok = true;
                for target in ["thumbv6m-none-eabi", "thumbv7em-none-eabihf"] {
                    for features in [
                        "",
                        "bpe",
                        "defmt",
                        "bpe,defmt",
                        "mla",
                        "fast-math",
                        "fast-math-int",
                        "bpe,defmt,mla,fast-math",
                    ] {
                        for command in ["build", "clippy"] {
                            let mut c = cargo();
                            c.args([command, "--quiet", "--release", "-p", "ferrite-lm"])
                                .args(["--no-default-features", "--target", target]);
                            if !features.is_empty() {
                                c.args(["--features", features]);
                            }
                            if command == "clippy" {
                                c.args(["--", "-D", "warnings"]);
                            }
                            ok &= status(c)?;
                        }
                    }
                }
                // The host tests and examples without the default feature.
                let mut c = cargo();
                c.args(["clippy", "--quiet", "-p", "ferrite-lm", "--no-default-features"])
                    .args(["--all-targets", "--", "-D", "warnings"]);
                ok &= status(c)?;
                Ok(ok)
            }),
        },
        Step {
            name: "MSRV: ferrite and ferrite-asm build for Cortex-M with the toolchain rust-version names",
            run: Box::new(|| {
                let read = |path: &str| -> Result<toml::Table> {
                    let text = std::fs::read_to_string(root_dir().join(path))
                        .with_context(|| path.to_string())?;
                    text.parse().with_context(|| path.to_string())
                };
                let runtime = read("runtime/Cargo.toml")?;
                let msrv = runtime["package"]
                    .get("rust-version")
                    .and_then(toml::Value::as_str)
                    .context("runtime/Cargo.toml declares no rust-version")?
                    .to_string();
                let pinned = read("rust-toolchain.toml")?;
                let channel = pinned["toolchain"]
                    .get("channel")
                    .and_then(toml::Value::as_str)
                    .context("rust-toolchain.toml has no channel")?
                    .to_string();
                // The pinned toolchain when it is that version, else a rustup
                // toolchain named by it (never downloaded here).
                let toolchain = if channel == msrv || channel.starts_with(&format!("{msrv}.")) {
                    channel
                } else {
                    msrv.clone()
                };
                let rustup = |args: &[&str]| {
                    let mut c = Command::new("rustup");
                    c.current_dir(root_dir())
                        .arg("run")
                        .arg(&toolchain)
                        .args(args)
                        .env("RUSTUP_AUTO_INSTALL", "0");
                    c
                };
                let version = rustup(&["rustc", "--version"]).output();
                let version = match version {
                    Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
                    _ => {
                        eprintln!(
                            "no toolchain {toolchain} for rust-version {msrv}: install it (with \
                             thumbv6m-none-eabi and thumbv7em-none-eabihf) or declare a \
                             rust-version CI builds with (docs/publishing.md)"
                        );
                        return Ok(false);
                    }
                };
                eprintln!("rust-version {msrv}: {}", version.trim());
                anyhow::ensure!(
                    version.starts_with(&format!("rustc {msrv}")),
                    "toolchain {toolchain} is not Rust {msrv}"
                );
                let mut ok = true;
                for target in ["thumbv6m-none-eabi", "thumbv7em-none-eabihf"] {
                    ok &= status(rustup(&[
                        "cargo",
                        "build",
                        "--quiet",
                        "--release",
                        "-p",
                        "ferrite-lm",
                        "-p",
                        "ferrite-asm",
                        "--all-features",
                        "--target",
                        target,
                    ]))?;
                }
                Ok(ok)
            }),
        },
        Step {
            name: "cargo package (ferrite-asm, ferrite, ferrite-common, ferrite-tools: packaged and built as from crates.io)",
            run: Box::new(|| {
                clear_stale_package_extractions()?;
                // Registry crates count as immutable, so a build directory that once
                // compiled `ferrite-lm 0.1.0` from an older package reuses it: verify in
                // a directory of its own, emptied first.
                let target_dir = root_dir().join("target").join("package-check");
                let _ = std::fs::remove_dir_all(&target_dir);
                status({
                    let mut c = cargo();
                    c.env("CARGO_TARGET_DIR", &target_dir);
                    c.args(["package", "--quiet", "--allow-dirty"])
                        .args(["-p", "ferrite-asm", "-p", "ferrite-lm", "-p", "ferrite-common"])
                        .args(["-p", "ferrite-tools"]);
                    c
                })
            }),
        },
        Step {
            name: "python tests (reference, fixtures, CLI parity)",
            run: Box::new(|| {
                let python = python_env()?;
                let ferrite = host::ferrite()?;
                let mut c = Command::new(python);
                c.current_dir(root_dir().join("tools/python"))
                    .args(["-m", "pytest", "-q", "tests"])
                    .env("FERRITE_BIN", ferrite);
                status(c)
            }),
        },
        Step {
            name: "fuzz smoke (cargo xtask fuzz --seconds 60)",
            run: Box::new(|| crate::fuzz::run(60, None)),
        },
        Step {
            name: "cargo clippy -D warnings (chips: every real chip's firmware)",
            run: Box::new(crate::chip::clippy),
        },
        Step {
            name: "chips: the library's tests on the host; every real chip built with its default model, within its flash and RAM budget (cargo xtask chips)",
            run: Box::new(|| crate::chip::all(None, false)),
        },
        Step {
            name: "boards under QEMU (cargo xtask test-boards)",
            run: Box::new(|| {
                setup::ensure_qemu()?;
                Ok(suite::run(false, None)? == ExitCode::SUCCESS)
            }),
        },
    ]
}

/// Runs every step and prints `N passed, N failed` (steps) last.
pub fn run() -> Result<ExitCode> {
    let root = root_dir();
    anyhow::ensure!(
        Path::new(&root).join("Cargo.toml").exists(),
        "not in the ferrite repository"
    );
    // A fresh machine has only the host target: add what the checks build for.
    setup::ensure_targets()?;
    setup::ensure_components()?;
    let mut failed = Vec::new();
    let steps = steps();
    for step in &steps {
        eprintln!("\n==> {}", step.name);
        let start = Instant::now();
        let ok = match (step.run)() {
            Ok(ok) => ok,
            Err(e) => {
                eprintln!("error: {e:#}");
                false
            }
        };
        eprintln!(
            "<== {}: {} in {:.0?}",
            step.name,
            if ok { "ok" } else { "FAILED" },
            start.elapsed()
        );
        if !ok {
            failed.push(step.name);
        }
    }
    println!();
    for name in &failed {
        println!("FAILED: {name}");
    }
    println!(
        "{} passed, {} failed",
        steps.len() - failed.len(),
        failed.len()
    );
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::is_version_of;

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
}
