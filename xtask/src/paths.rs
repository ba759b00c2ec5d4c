//! The repository's directories xtask works in.

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn root_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The firmware crate, `boards/`.
pub fn boards_dir() -> PathBuf {
    root_dir().join("boards")
}

/// The environment variable that gives an xtask process a lane of its own:
/// `cargo xtask test` runs the QEMU suite in the background with
/// `FERRITE_XTASK_LANE=suite`, so that its firmware builds, ELF copies and
/// images never share a file with the steps running beside it.
pub const LANE_VAR: &str = "FERRITE_XTASK_LANE";

/// This process's lane ([`LANE_VAR`]), if it has one.
fn lane() -> Option<String> {
    std::env::var(LANE_VAR).ok().filter(|l| !l.is_empty())
}

/// Where xtask keeps ELF copies and run directories:
/// `boards/target/xtask`, or `boards/target/xtask-<lane>` in a lane.
pub fn work_dir() -> PathBuf {
    let name = lane().map_or_else(|| "xtask".to_string(), |l| format!("xtask-{l}"));
    boards_dir().join("target").join(name)
}

/// The cargo target directory of a firmware package (`boards/`, a chip's
/// own package): `<package>/target`, or `<package>/target/lane-<lane>` in a
/// lane.
pub fn firmware_target_dir(package: &Path) -> PathBuf {
    let dir = package.join("target");
    match lane() {
        Some(l) => dir.join(format!("lane-{l}")),
        None => dir,
    }
}

/// The QEMU suite's recorded outputs, `boards/expected/`.
pub fn expected_dir() -> PathBuf {
    boards_dir().join("expected")
}
