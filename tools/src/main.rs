//! `ferrite`: quantize model directories into flash images, inspect and run them.
//!
//! Every command runs the `ferrite` runtime crate itself (the code the boards
//! run) and exits non-zero with a one-line reason on bad input (exit status 2
//! for argument errors, with clap's hints folded into that line); none panics
//! or aborts.
//! What a command streams (generated tokens, logits, MQAR sequences) is
//! written as it is made, never held, so memory stays constant however many.
//! An option that would change nothing is refused, or warned about where a
//! script may reasonably pass it regardless (each `--help` says which).
//!
//! Each subcommand's arguments and handler are a module of [`cmd`]; the
//! option groups several commands share are [`cmd::args`].

mod cmd;

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "ferrite",
    version,
    about = "Fixed-state language models for microcontrollers"
)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version: clap prints them and exits 0.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprintln!("{}", one_line(&e.render().to_string()));
            return ExitCode::from(2);
        }
    };
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// clap's whole message (error, possible values, usage, tips and the pointer
/// to `--help`) as one line.
fn one_line(message: &str) -> String {
    let parts: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut line = String::new();
    for part in parts {
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(part);
    }
    line
}

/// Whether an error is the reader of stdout going away (`ferrite inspect x | head`).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
