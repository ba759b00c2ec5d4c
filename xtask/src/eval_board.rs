//! `cargo xtask eval-board <name> --image F|DIR (--mqar | --text FILE)`: the
//! `eval` firmware on a board, checked against `ferrite eval` on the host
//! (evalboard.rs does the work).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, ensure, Context, Result};
use clap::Args as ClapArgs;

use crate::args::{self, ImageArgs, MathArgs};
use crate::boards::Board;
use crate::evalboard::{self, Task};

/// `eval-board <name>`.
#[derive(ClapArgs, Debug, Clone, PartialEq)]
#[command(group = clap::ArgGroup::new("task").required(true).args(["mqar", "text"]))]
#[command(mut_arg("image", |a| a.required(true)))]
pub struct Args {
    /// The board
    #[arg(value_name = "NAME", value_parser = args::board())]
    pub board: &'static Board,
    #[command(flatten)]
    pub image: ImageArgs,
    /// MQAR accuracy (docs/mqar.md)
    #[arg(long)]
    pub mqar: bool,
    /// MQAR sequences
    #[arg(short = 'n', alias = "n", default_value_t = 100, value_parser = args::at_least::<1>)]
    pub n: usize,
    /// The MQAR seed
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// MQAR key-value pairs per sequence (1 to 64)
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub pairs: u8,
    /// MQAR sequence length (at least 4 per pair)
    #[arg(long, default_value_t = 64)]
    pub seq_len: usize,
    /// Bits per byte of this text
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// Only the first B bytes of the text
    #[arg(long, value_name = "B")]
    pub bytes: Option<usize>,
    /// Tokens per chunk (the state is reset between chunks; at least 2)
    #[arg(long, value_name = "C", default_value_t = 512,
          value_parser = args::at_least::<2>)]
    pub chunk: usize,
    #[command(flatten)]
    pub math: MathArgs,
}

impl Args {
    /// The task the options describe.
    fn task(&self) -> Result<Task> {
        let pairs = usize::from(self.pairs);
        if let Some(file) = &self.text {
            let file = std::fs::canonicalize(file)
                .with_context(|| format!("--text {}", file.display()))?;
            return Ok(Task::Text {
                file,
                bytes: self.bytes,
                chunk: self.chunk,
            });
        }
        ensure!(
            self.seq_len >= 4 * pairs,
            "--seq-len {}: MQAR with {pairs} pairs needs at least {}",
            self.seq_len,
            4 * pairs
        );
        Ok(Task::Mqar {
            seed: self.seed,
            n: self.n,
            pairs,
            seq_len: self.seq_len,
        })
    }
}

/// Runs the `eval` firmware and prints the host's note and the `stats:` line.
pub fn run(args: &Args) -> Result<ExitCode> {
    let task = args.task()?;
    let image = args.image.resolve(|| bail!("eval-board needs --image"))?;
    let out = evalboard::run(args.board, &image, &task, true, args.math.fast_math)?;
    println!("host: {}", out.note);
    println!("{}", out.report.stats_line());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct One {
        #[command(flatten)]
        args: Args,
    }

    fn task(line: &str) -> Result<Task> {
        One::try_parse_from(line.split_whitespace())?.args.task()
    }

    #[test]
    fn mqar_needs_four_tokens_per_pair() {
        let e = task("x m4f --image d --mqar --pairs 9 --seq-len 32")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--seq-len 32: MQAR with 9 pairs needs at least 36");
        let Task::Mqar {
            n, pairs, seq_len, ..
        } = task("x m4f --image d --mqar --pairs 8 -n 3").unwrap()
        else {
            panic!("not mqar")
        };
        assert_eq!((n, pairs, seq_len), (3, 8, 64));
        assert!(task("x m4f --image d --text /no/such/file").is_err());
    }
}
