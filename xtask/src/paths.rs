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

/// Where xtask keeps ELF copies and run directories.
pub fn work_dir() -> PathBuf {
    boards_dir().join("target").join("xtask")
}

/// The QEMU suite's recorded outputs, `boards/expected/`.
pub fn expected_dir() -> PathBuf {
    boards_dir().join("expected")
}
