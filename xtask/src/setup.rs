//! What the commands need on a fresh machine, installed when missing: the
//! embedded targets and components that `rust-toolchain.toml` lists (with
//! `rustup`, which does not fetch them itself when `RUSTUP_AUTO_INSTALL=0`
//! or when the pinned toolchain is an alias of another), and QEMU (with
//! `apt-get`). Every install is announced on stderr before it starts.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};

use crate::boards::root_dir;

/// The `[toolchain]` table of `rust-toolchain.toml`.
#[derive(Debug, Default, PartialEq)]
pub struct Toolchain {
    /// `targets = [...]`: every embedded target a board or check builds for.
    pub targets: Vec<String>,
    /// `components = [...]`: rustfmt, clippy, llvm-tools.
    pub components: Vec<String>,
}

impl Toolchain {
    /// Parses the text of a `rust-toolchain.toml`.
    pub fn parse(text: &str) -> Result<Toolchain> {
        let doc: toml::Table = text.parse().context("rust-toolchain.toml is not TOML")?;
        let table = doc
            .get("toolchain")
            .and_then(toml::Value::as_table)
            .context("rust-toolchain.toml has no [toolchain] table")?;
        let list = |key: &str| -> Result<Vec<String>> {
            match table.get(key) {
                None => Ok(Vec::new()),
                Some(v) => v
                    .as_array()
                    .with_context(|| format!("rust-toolchain.toml: {key} is not a list"))?
                    .iter()
                    .map(|s| {
                        s.as_str()
                            .map(str::to_string)
                            .with_context(|| format!("rust-toolchain.toml: {key}: not a string"))
                    })
                    .collect(),
            }
        };
        Ok(Toolchain {
            targets: list("targets")?,
            components: list("components")?,
        })
    }

    /// The repository's `rust-toolchain.toml`.
    pub fn of_repo() -> Result<Toolchain> {
        let path = root_dir().join("rust-toolchain.toml");
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
        Toolchain::parse(&text)
    }
}

/// Runs `rustc` from the repository root (so the pinned toolchain answers).
fn rustc(args: &[&str]) -> Result<String> {
    let out = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(args)
        .current_dir(root_dir())
        .output()
        .with_context(|| format!("running rustc {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "rustc {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// The active toolchain's sysroot and host triple.
fn sysroot_and_host() -> Result<(PathBuf, String)> {
    let sysroot = PathBuf::from(rustc(&["--print", "sysroot"])?);
    let host = rustc(&["-vV"])?
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .context("rustc -vV printed no host")?;
    Ok((sysroot, host))
}

/// The host's target triple (`rustc -vV`).
pub fn host_triple() -> Result<String> {
    Ok(sysroot_and_host()?.1)
}

/// Runs `rustup <args>` in the repository root, streaming its output.
fn rustup(args: &[&str]) -> Result<bool> {
    eprintln!("setup: rustup {}", args.join(" "));
    Ok(Command::new("rustup")
        .args(args)
        .current_dir(root_dir())
        .status()
        .with_context(|| format!("running rustup {} (is rustup installed?)", args.join(" ")))?
        .success())
}

/// Installs the targets of `rust-toolchain.toml` that the active toolchain
/// lacks (`rustup target add`). A target counts as installed when its
/// standard library is in the sysroot, so this also works without rustup
/// when everything is already there.
pub fn ensure_targets() -> Result<()> {
    let wanted = Toolchain::of_repo()?.targets;
    let (sysroot, _) = sysroot_and_host()?;
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|t| !sysroot.join("lib/rustlib").join(t).join("lib").is_dir())
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "setup: installing the embedded targets this toolchain lacks: {}",
        missing.join(" ")
    );
    let mut args = vec!["target", "add"];
    args.extend(&missing);
    if !rustup(&args)? {
        bail!(
            "`rustup target add {}` failed; install the targets by hand",
            missing.join(" ")
        );
    }
    Ok(())
}

/// Installs the components of `rust-toolchain.toml` that are missing
/// (`rustup component add`): rustfmt and clippy for the checks, llvm-tools
/// for `llvm-size`. A component that will not install is reported, not
/// fatal: `llvm-size` falls back to the system's (see [`llvm_size`]) and a
/// check that needs rustfmt or clippy fails with cargo's own message.
pub fn ensure_components() -> Result<()> {
    let wanted = Toolchain::of_repo()?.components;
    let (sysroot, host) = sysroot_and_host()?;
    let bin = sysroot.join("lib/rustlib").join(&host).join("bin");
    let have = |component: &str| match component {
        "llvm-tools" | "llvm-tools-preview" => bin.join("llvm-size").exists(),
        "rustfmt" => sysroot.join("bin/rustfmt").exists(),
        "clippy" => sysroot.join("bin/clippy-driver").exists(),
        // Anything else: trust rustup, which is quick when nothing is missing.
        _ => false,
    };
    for component in wanted.iter().filter(|c| !have(c)) {
        eprintln!("setup: installing the {component} component");
        if !rustup(&["component", "add", component])? {
            eprintln!("setup: warning: `rustup component add {component}` failed");
        }
    }
    Ok(())
}

/// `llvm-size`: the rustup `llvm-tools` one when installed, else the first
/// `llvm-size` / `llvm-size-<N>` on `PATH`.
pub fn llvm_size() -> Result<PathBuf> {
    static FOUND: OnceLock<PathBuf> = OnceLock::new();
    if let Some(p) = FOUND.get() {
        return Ok(p.clone());
    }
    let (sysroot, host) = sysroot_and_host()?;
    let rustup_one = sysroot.join("lib/rustlib").join(host).join("bin/llvm-size");
    let found = if rustup_one.exists() {
        rustup_one
    } else {
        let candidates = std::iter::once("llvm-size".to_string())
            .chain((11..=22).rev().map(|v| format!("llvm-size-{v}")));
        let system = candidates
            .filter_map(|name| which(&name))
            .next()
            .with_context(|| {
                format!(
                    "llvm-size not found: neither {} (rustup component add llvm-tools) nor one on PATH",
                    rustup_one.display()
                )
            })?;
        eprintln!(
            "setup: using the system's {} (the llvm-tools component is not installed)",
            system.display()
        );
        system
    };
    Ok(FOUND.get_or_init(|| found).clone())
}

/// The first executable called `name` on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// Whether `bin --version` runs.
fn runs(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Makes sure both QEMU system emulators exist, installing them from Debian
/// with apt-get (as root, or through `sudo -n`) when they do not.
pub fn ensure_qemu() -> Result<()> {
    if runs("qemu-system-arm") && runs("qemu-system-riscv32") {
        return Ok(());
    }
    eprintln!(
        "setup: QEMU not found: installing qemu-system-arm and qemu-system-misc with apt-get ..."
    );
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false);
    let sudo: &[&str] = if root { &[] } else { &["sudo", "-n"] };
    let apt = |args: &[&str]| -> Result<()> {
        let mut argv: Vec<&str> = sudo.to_vec();
        argv.push("apt-get");
        argv.extend_from_slice(args);
        let status = Command::new(argv[0])
            .args(&argv[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .with_context(|| format!("running {}", argv.join(" ")))?;
        if !status.success() {
            bail!(
                "`{}` failed ({status}); install QEMU by hand: apt-get install qemu-system-arm qemu-system-misc",
                argv.join(" ")
            );
        }
        Ok(())
    };
    apt(&["update", "-q"])?;
    apt(&[
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
        "qemu-system-arm",
        "qemu-system-misc",
    ])?;
    if !(runs("qemu-system-arm") && runs("qemu-system-riscv32")) {
        bail!("QEMU still missing after apt-get install");
    }
    Ok(())
}

/// Everything a board command needs: targets, components (llvm-size), QEMU.
pub fn ensure_board_tools() -> Result<()> {
    ensure_targets()?;
    ensure_components()?;
    ensure_qemu()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_repository_toolchain_file() {
        let t = Toolchain::of_repo().unwrap();
        assert!(t.targets.iter().any(|t| t == "thumbv7em-none-eabihf"));
        assert!(t.components.iter().any(|c| c == "llvm-tools"));
    }

    /// rust-toolchain.toml lists exactly the targets of the board and chip
    /// tables, so that a fresh machine gets every target a board or chip
    /// needs on the first cargo call, and none that none uses.
    #[test]
    fn toolchain_targets_are_the_board_tables() {
        let mut pinned = Toolchain::of_repo().unwrap().targets;
        let mut boards: Vec<String> = ferrite_common::target::triples()
            .map(str::to_string)
            .collect();
        pinned.sort();
        boards.sort();
        boards.dedup();
        assert_eq!(
            pinned, boards,
            "rust-toolchain.toml targets vs the board and chip tables (common/src/board.rs, common/src/chip.rs)"
        );
    }

    /// runtime/Cargo.toml and runtime/asm/Cargo.toml do not inherit from the
    /// workspace (see their headers): their package fields must still equal
    /// the workspace's (a field the workspace lacks, such as `repository`
    /// today, they must lack too), and `ferrite` must require the
    /// `ferrite-asm` version it is released with.
    #[test]
    fn runtime_package_fields_equal_the_workspace() {
        let read = |p: &str| -> toml::Table {
            std::fs::read_to_string(root_dir().join(p))
                .unwrap()
                .parse()
                .unwrap()
        };
        let root = read("Cargo.toml");
        let ws = root["workspace"]["package"].as_table().unwrap();
        for manifest in [
            "runtime/Cargo.toml",
            "runtime/asm/Cargo.toml",
            "common/Cargo.toml",
        ] {
            let table = read(manifest);
            let pkg = table["package"].as_table().unwrap();
            for key in [
                "version",
                "edition",
                "license",
                "rust-version",
                "repository",
            ] {
                assert_eq!(pkg.get(key), ws.get(key), "{manifest} {key}");
            }
        }
        let runtime = read("runtime/Cargo.toml");
        let asm = &runtime["dependencies"]["ferrite-asm"];
        assert_eq!(
            asm.get("version"),
            ws.get("version"),
            "ferrite's ferrite-asm"
        );
    }

    #[test]
    fn parses_lists_and_refuses_bad_ones() {
        let t = Toolchain::parse(
            "[toolchain]\nchannel = \"1.95.0\"\ncomponents = [\"clippy\"]\ntargets = [\"a\", \"b\"]\n",
        )
        .unwrap();
        assert_eq!(t.targets, ["a", "b"]);
        assert_eq!(t.components, ["clippy"]);
        assert!(Toolchain::parse("[toolchain]\ntargets = \"a\"\n").is_err());
        assert!(Toolchain::parse("channel = 1").is_err());
    }
}
