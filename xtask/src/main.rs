//! `cargo xtask`: build and run the ferrite firmware on QEMU boards and real
//! chips, and run every check (`cargo xtask test`, CI's command).
//! `cargo xtask --help` lists the commands (cli.rs); each has its module.
//! Boards and chips: the target table of `ferrite_common::target` (m4f is the demo's). See boards/README.md.

mod bench;
mod board;
mod boards;
mod chip;
mod cli;
mod eval_board;
mod evalboard;
mod fuzz;
mod host;
mod image_check;
mod options;
mod ota;
mod paths;
mod profile;
mod setup;
mod soak;
mod suite;
mod table;
mod test;

use std::process::ExitCode;

use clap::Parser;
use ferrite::image::DType;

/// The demo: the trained English byte-level LM (1.8M params; its int8 image,
/// 1.9 MB, fits the M4F's 4 MB flash where the f32 one would not), sampled with
/// a fixed seed so that the text is the same on every run and equals
/// `ferrite generate`'s.
pub const DEMO_MODEL: &str = "models/lm/en-m4f";
pub const DEMO_DTYPE: DType = DType::I8;
pub const DEMO_PROMPT: &str = "A man ";
pub const DEMO_N: usize = 200;
pub const DEMO_TEMPERATURE: f32 = 0.6;
pub const DEMO_SEED: u64 = 1;

fn main() -> ExitCode {
    match cli::Cli::parse().command.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
