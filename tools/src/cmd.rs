//! The subcommands: each one's arguments (a clap derive struct, whose doc
//! comment is the command's `--help` text) and its handler in a module of
//! its own; [`args`] holds the option groups several of them share.

pub mod args;
mod bake;
mod eval;
mod generate;
mod inspect;
mod keygen;
mod logits;
mod mqar_sample;
mod quantize;
mod sign;
mod soak;
mod tokenize;
mod verify;

use anyhow::Result;
use clap::Subcommand;

/// The `ferrite` subcommands, in the order `ferrite --help` lists them.
#[derive(Subcommand)]
pub enum Command {
    Quantize(quantize::Args),
    Inspect(inspect::Args),
    Sign(sign::Args),
    Keygen(keygen::Args),
    Verify(verify::Args),
    Logits(logits::Args),
    Tokenize(tokenize::Args),
    Generate(generate::Args),
    Bake(bake::Args),
    Eval(eval::Args),
    Soak(soak::Args),
    MqarSample(mqar_sample::Args),
}

impl Command {
    /// Runs the command, writing its output to stdout.
    pub fn run(self) -> Result<()> {
        match self {
            Command::Quantize(args) => quantize::run(args),
            Command::Inspect(args) => inspect::run(args),
            Command::Sign(args) => sign::run(args),
            Command::Keygen(args) => keygen::run(args),
            Command::Verify(args) => verify::run(args),
            Command::Logits(args) => logits::run(args),
            Command::Tokenize(args) => tokenize::run(args),
            Command::Generate(args) => generate::run(args),
            Command::Bake(args) => bake::run(args),
            Command::Eval(args) => eval::run(args),
            Command::Soak(args) => soak::run(args),
            Command::MqarSample(args) => mqar_sample::run(args),
        }
    }
}
