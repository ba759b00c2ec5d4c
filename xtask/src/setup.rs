//! `cargo xtask setup`, and what every command needs on a fresh machine,
//! installed when missing: the embedded targets and components that
//! `rust-toolchain.toml` lists (with `rustup`, which does not fetch them
//! itself when `RUSTUP_AUTO_INSTALL=0` or when the pinned toolchain is an
//! alias of another), QEMU (with `apt-get`) and, for the defmt checks and
//! `cargo xtask setup`, `defmt-print` (with `cargo install`). Every install
//! is announced on stderr before it starts; a tool still missing afterwards
//! is an error, never a skipped check.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{bail, ensure, Context, Result};

use crate::paths::root_dir;

/// The `[toolchain]` table of `rust-toolchain.toml`.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default)]
pub struct Toolchain {
    /// `channel = "1.95.0"`.
    pub channel: String,
    /// `targets = [...]`: every embedded target a board or check builds for.
    pub targets: Vec<String>,
    /// `components = [...]`: rustfmt, clippy, llvm-tools.
    pub components: Vec<String>,
}

impl Toolchain {
    /// Parses the text of a `rust-toolchain.toml`.
    pub fn parse(text: &str) -> Result<Toolchain> {
        #[derive(serde::Deserialize)]
        struct File {
            toolchain: Toolchain,
        }
        Ok(toml::from_str::<File>(text)
            .context("rust-toolchain.toml")?
            .toolchain)
    }

    /// The repository's `rust-toolchain.toml`.
    pub fn of_repo() -> Result<Toolchain> {
        let path = root_dir().join("rust-toolchain.toml");
        Toolchain::parse(
            &std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?,
        )
    }
}

/// `cargo <args>` (split at spaces) in the repository root: the cargo that
/// runs xtask (`$CARGO`), else the one on `PATH`.
pub fn cargo(args: &str) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root_dir()).args(args.split_whitespace());
    c
}

/// The active toolchain's sysroot and host triple (`rustc` run from the
/// repository root, so the pinned toolchain answers).
fn sysroot_and_host() -> Result<&'static (PathBuf, String)> {
    static FOUND: OnceLock<(PathBuf, String)> = OnceLock::new();
    if let Some(found) = FOUND.get() {
        return Ok(found);
    }
    let rustc = |args: &[&str]| -> Result<String> {
        let out = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
            .args(args)
            .current_dir(root_dir())
            .output()
            .with_context(|| format!("running rustc {}", args.join(" ")))?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.success(),
            "rustc {}: {}",
            args.join(" "),
            err.trim()
        );
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    };
    let sysroot = PathBuf::from(rustc(&["--print", "sysroot"])?);
    let host = rustc(&["--print", "host-tuple"])?;
    Ok(FOUND.get_or_init(|| (sysroot, host)))
}

/// The host's target triple (`rustc --print host-tuple`).
pub fn host_triple() -> Result<&'static str> {
    Ok(&sysroot_and_host()?.1)
}

/// `<sysroot>/lib/rustlib/<target>/<dir>`.
fn rustlib(target: &str, dir: &str) -> Result<PathBuf> {
    Ok(sysroot_and_host()?
        .0
        .join("lib/rustlib")
        .join(target)
        .join(dir))
}

/// Runs `rustup <args>` in the repository root, streaming its output.
fn rustup(args: &[&str]) -> Result<bool> {
    eprintln!("setup: rustup {}", args.join(" "));
    let status = Command::new("rustup")
        .args(args)
        .current_dir(root_dir())
        .status();
    Ok(status
        .with_context(|| format!("running rustup {} (is rustup installed?)", args.join(" ")))?
        .success())
}

/// What a build needs: the targets and components of `rust-toolchain.toml`
/// that the active toolchain lacks. A target counts as installed when its
/// standard library is in the sysroot (so this works without rustup when
/// everything is there). A component that will not install is reported,
/// not fatal: `llvm-size` falls back to the system's ([`llvm_size`]) and a
/// check that needs rustfmt or clippy fails with cargo's own message.
pub fn ensure_toolchain() -> Result<()> {
    let wanted = Toolchain::of_repo()?;
    let mut missing = vec!["target", "add"];
    for t in &wanted.targets {
        if !rustlib(t, "lib")?.is_dir() {
            missing.push(t);
        }
    }
    if missing.len() > 2 {
        let targets = missing[2..].join(" ");
        eprintln!("setup: installing the embedded targets this toolchain lacks: {targets}");
        ensure!(
            rustup(&missing)?,
            "`rustup target add {targets}` failed; install the targets by hand"
        );
    }
    let (sysroot, host) = sysroot_and_host()?;
    for component in &wanted.components {
        let have = match component.as_str() {
            "llvm-tools" | "llvm-tools-preview" => rustlib(host, "bin/llvm-size")?.exists(),
            "rustfmt" => sysroot.join("bin/rustfmt").exists(),
            "clippy" => sysroot.join("bin/clippy-driver").exists(),
            // Anything else: trust rustup, which is quick when nothing is missing.
            _ => false,
        };
        if !have {
            eprintln!("setup: installing the {component} component");
            if !rustup(&["component", "add", component])? {
                eprintln!("setup: warning: `rustup component add {component}` failed");
            }
        }
    }
    Ok(())
}

/// `llvm-size`: the rustup `llvm-tools` one when installed, else the first
/// `llvm-size` / `llvm-size-<N>` on `PATH`.
pub fn llvm_size() -> Result<&'static PathBuf> {
    static FOUND: OnceLock<PathBuf> = OnceLock::new();
    if let Some(p) = FOUND.get() {
        return Ok(p);
    }
    let rustup_one = rustlib(host_triple()?, "bin/llvm-size")?;
    if rustup_one.exists() {
        return Ok(FOUND.get_or_init(|| rustup_one));
    }
    let paths = std::env::var_os("PATH").unwrap_or_default();
    let system = std::iter::once("llvm-size".to_string())
        .chain((11..=22).rev().map(|v| format!("llvm-size-{v}")))
        .find_map(|name| {
            std::env::split_paths(&paths)
                .map(|d| d.join(&name))
                .find(|p| p.is_file())
        })
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
    Ok(FOUND.get_or_init(|| system))
}

/// Whether `bin --version` runs and succeeds.
fn runs(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Makes sure both QEMU system emulators exist, installing them from Debian
/// with apt-get (as root, or through `sudo -n`) when they do not.
pub fn ensure_qemu() -> Result<()> {
    let qemu = || runs("qemu-system-arm") && runs("qemu-system-riscv32");
    let packages = "qemu-system-arm qemu-system-misc";
    ensure_installed("QEMU", &format!("apt-get install {packages}"), qemu, || {
        apt_install(packages)
    })
}

/// Makes sure Debian's Arm GNU toolchain, newlib and CMake are installed
/// (the C API's firmware example, `cargo xtask capi`), with apt-get as for QEMU.
pub fn ensure_arm_gcc() -> Result<()> {
    let packages = "gcc-arm-none-eabi libnewlib-arm-none-eabi cmake";
    let present = || {
        runs("cmake") &&
        // newlib: the compiler finds its nano C library (else it echoes the name).
        Command::new("arm-none-eabi-gcc")
            .args([
                "-mcpu=cortex-m4",
                "-mthumb",
                "-mfloat-abi=hard",
                "-mfpu=fpv4-sp-d16",
            ])
            .arg("-print-file-name=libc_nano.a")
            .output()
            .is_ok_and(|o| {
                o.status.success()
                    && Path::new(String::from_utf8_lossy(&o.stdout).trim()).is_absolute()
            })
    };
    ensure_installed(
        "the Arm GNU toolchain with newlib (arm-none-eabi-gcc)",
        &format!("apt-get install {packages}"),
        present,
        || apt_install(packages),
    )
}

/// The cbindgen that writes capi/include/ferrite.h (its output is compared
/// byte for byte, so one version).
pub const CBINDGEN_VERSION: &str = "0.29.4";

/// Makes sure `cbindgen` [`CBINDGEN_VERSION`] runs, installing it with
/// `cargo install --locked` when it does not.
pub fn ensure_cbindgen() -> Result<()> {
    let how = format!("cargo install --locked cbindgen --version {CBINDGEN_VERSION}");
    let present = || {
        Command::new("cbindgen")
            .arg("--version")
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout).trim() == format!("cbindgen {CBINDGEN_VERSION}")
            })
    };
    ensure_installed("cbindgen", &how, present, || {
        let status = cargo(&format!(
            "install --quiet --locked --force cbindgen --version {CBINDGEN_VERSION}"
        ))
        .status()
        .context("cannot run cargo")?;
        ensure!(status.success(), "it exited with {status}");
        Ok(())
    })
}

/// The 32-bit host target the runtime's tests also run on (issue 29, item 5).
pub const HOST_32: &str = "i686-unknown-linux-gnu";

/// Makes sure tests for [`HOST_32`] build and run here: its standard library
/// (`rustup target add`) and a C toolchain that links 32-bit programs
/// (Debian's `gcc-multilib`, with apt-get as for QEMU).
pub fn ensure_host_32() -> Result<()> {
    if !rustlib(HOST_32, "lib")?.is_dir() {
        ensure!(
            rustup(&["target", "add", HOST_32])?,
            "`rustup target add {HOST_32}` failed; install it by hand"
        );
    }
    ensure_installed(
        "a 32-bit C toolchain (gcc -m32)",
        "apt-get install gcc-multilib",
        links_32_bit,
        || apt_install("gcc-multilib"),
    )
}

/// Whether `gcc -m32` links a C program here.
fn links_32_bit() -> bool {
    let dir = std::env::temp_dir().join(format!("ferrite-m32-{}", std::process::id()));
    let c = dir.join("t.c");
    let ok = std::fs::create_dir_all(&dir).is_ok()
        && std::fs::write(&c, "int main(void) { return 0; }\n").is_ok()
        && Command::new("gcc")
            .args(["-m32", "-o"])
            .arg(dir.join("t"))
            .arg(&c)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    let _ = std::fs::remove_dir_all(&dir);
    ok
}

/// `apt-get update` and `apt-get install` of `packages` (space separated),
/// as root or through `sudo -n`.
fn apt_install(packages: &str) -> Result<()> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    let sudo: &[&str] = if root { &[] } else { &["sudo", "-n"] };
    let install = format!("install -y -q --no-install-recommends {packages}");
    for args in ["update -q", install.as_str()] {
        let argv: Vec<&str> = sudo
            .iter()
            .copied()
            .chain(["apt-get"])
            .chain(args.split(' '))
            .collect();
        let status = Command::new(argv[0])
            .args(&argv[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .with_context(|| format!("running {}", argv.join(" ")))?;
        ensure!(
            status.success(),
            "`{}` exited with {status}",
            argv.join(" ")
        );
    }
    Ok(())
}

/// How `defmt-print` is installed when it is missing.
const DEFMT_PRINT_INSTALL: &str = "cargo install --locked defmt-print";

/// Makes sure `defmt-print` (the decoder of the boards' defmt logs) runs,
/// installing it with `cargo install --locked defmt-print` when it does not;
/// an error when it still does not (a defmt check never passes undecoded).
pub fn ensure_defmt_print() -> Result<()> {
    ensure_installed(
        "defmt-print",
        DEFMT_PRINT_INSTALL,
        || runs("defmt-print"),
        || {
            let status = cargo("install --quiet --locked defmt-print")
                .status()
                .context("cannot run cargo")?;
            ensure!(status.success(), "it exited with {status}");
            Ok(())
        },
    )
}

/// The decision of the `ensure_*` installers: `Ok` when `present()` holds;
/// otherwise `install()` (announced on stderr as `how`), then `Ok` only if
/// `present()` holds afterwards. Each failure is one line naming `tool`.
fn ensure_installed(
    tool: &str,
    how: &str,
    present: impl Fn() -> bool,
    install: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if present() {
        return Ok(());
    }
    eprintln!("setup: {tool} not found: installing it ({how}) ...");
    if let Err(e) = install() {
        bail!("{tool} is missing and `{how}` failed ({e:#}); install it by hand");
    }
    ensure!(present(), "{tool} still does not run after `{how}`");
    Ok(())
}

/// Everything a board command needs: targets, components (llvm-size), QEMU.
pub fn ensure_board_tools() -> Result<()> {
    ensure_toolchain()?;
    ensure_qemu()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Targets only the runtime is built for (as for every target of
    /// rust-toolchain.toml, by the `cargo xtask test` step "runtime builds
    /// for every embedded target"): RV32I without M, which must get the
    /// portable kernels.
    const BUILD_ONLY_TARGETS: &[&str] = &["riscv32i-unknown-none-elf"];

    /// rust-toolchain.toml lists exactly the targets of the board and chip
    /// tables and [`BUILD_ONLY_TARGETS`], so that a fresh machine gets every
    /// target a board, chip or check needs on the first cargo call, and none
    /// that none uses.
    #[test]
    fn toolchain_targets_are_the_board_tables() {
        let t = Toolchain::of_repo().unwrap();
        assert!(t.components.iter().any(|c| c == "llvm-tools"));
        let mut pinned = t.targets;
        let mut tables: Vec<String> = ferrite_common::target::triples()
            .chain(BUILD_ONLY_TARGETS.iter().copied())
            .map(str::to_string)
            .collect();
        pinned.sort();
        tables.sort();
        tables.dedup();
        assert_eq!(
            pinned, tables,
            "rust-toolchain.toml targets vs the target table (common/src/target.rs) and BUILD_ONLY_TARGETS"
        );
    }

    /// The installers' decision: a present tool is not installed again; a
    /// missing one is installed once; a failed install, or one after which the
    /// tool still does not run, is an error naming the tool (never `Ok`).
    #[test]
    fn a_missing_tool_is_installed_or_an_error() {
        use std::cell::Cell;
        let installs = Cell::new(0);
        let run = |before: bool, install_ok: bool, after: bool| {
            installs.set(0);
            let probes = Cell::new(0);
            let present = || {
                probes.set(probes.get() + 1);
                if probes.get() == 1 {
                    before
                } else {
                    after
                }
            };
            ensure_installed("tool-x", "get tool-x", present, || {
                installs.set(installs.get() + 1);
                if install_ok {
                    Ok(())
                } else {
                    bail!("exit status: 101")
                }
            })
            .map_err(|e| format!("{e:#}"))
        };
        assert_eq!(run(true, false, false), Ok(()));
        assert_eq!(installs.get(), 0, "a present tool is not installed");
        assert_eq!(run(false, true, true), Ok(()));
        assert_eq!(installs.get(), 1);
        assert_eq!(
            run(false, false, true),
            Err(
                "tool-x is missing and `get tool-x` failed (exit status: 101); install it by hand"
                    .into()
            )
        );
        assert_eq!(
            run(false, true, false),
            Err("tool-x still does not run after `get tool-x`".into())
        );
        assert_eq!(installs.get(), 1);
    }

    #[test]
    fn parses_lists_and_refuses_bad_ones() {
        let t = Toolchain::parse(
            "[toolchain]\nchannel = \"1.95.0\"\ncomponents = [\"clippy\"]\ntargets = [\"a\", \"b\"]\n",
        )
        .unwrap();
        assert_eq!(
            (t.channel.as_str(), t.targets, t.components),
            (
                "1.95.0",
                vec!["a".into(), "b".into()],
                vec!["clippy".into()]
            )
        );
        assert!(Toolchain::parse("[toolchain]\ntargets = \"a\"\n").is_err());
        assert!(Toolchain::parse("channel = 1").is_err());
    }
}
