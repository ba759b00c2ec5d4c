//! `cargo xtask`: build and run the ferrite firmware on QEMU boards and real
//! chips, and run every check (`cargo xtask test`, CI's command).
//! `cargo xtask --help` lists the commands (cli.rs); each has its module, and
//! the option groups several share are in args.rs.
//! Boards and chips: the target table of `ferrite_common::target` (m4f is the demo's). See boards/README.md.

mod args;
mod bake_gain;
mod bench;
mod bit_identity;
mod board;
mod boards;
mod capi;
mod chip;
mod cli;
mod eval_board;
mod expected;
mod fuzz;
mod host;
mod image_check;
mod options;
mod ota;
mod paths;
mod profile;
mod section;
mod setup;
mod sigbench;
mod soak;
mod suite;
mod table;
mod test;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match cli::Cli::parse().command.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
