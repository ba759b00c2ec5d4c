//! Boards: build the firmware for one, run it under QEMU, read its output.
//!
//! - [`board`]: the board table (shared with boards/build.rs) and budgets;
//! - [`firmware`]: `cargo build` of a firmware with its settings;
//! - [`size`]: flash and RAM of an ELF;
//! - [`qemu`]: a run under QEMU; [`ota`]: the OTA example's run;
//! - [`report`]: the firmware's report lines, parsed.

use std::path::{Path, PathBuf};

pub mod board;
pub mod firmware;
pub mod ota;
pub mod qemu;
pub mod report;
pub mod size;

pub use board::{named, Board, BoardExt, Math, BOARDS, DEFAULT_MODEL};
pub use ferrite_common::fnv1a;
pub use firmware::{build, BuildOpts, Firmware, RunRequest};
pub use ota::{run_ota, verdict, Delivery};
pub use qemu::{build_and_run, run_qemu, timeout_for, Run};
pub use report::{EvalReport, Report};
pub use size::{sizes, Sizes};

pub const DEFAULT_PROMPT: &str = "Once upon a time";
pub const DEFAULT_N: usize = 32;
/// Seconds a QEMU run may take before it counts as hung.
pub const DEFAULT_TIMEOUT_S: u64 = 120;

pub fn root_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn boards_dir() -> PathBuf {
    root_dir().join("boards")
}

/// Where xtask keeps ELF copies and run directories.
pub fn work_dir() -> PathBuf {
    boards_dir().join("target").join("xtask")
}
