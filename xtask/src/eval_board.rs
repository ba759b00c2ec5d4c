//! `cargo xtask eval-board <name> --image F|DIR (--mqar | --text FILE)`: the
//! `eval` firmware (boards/src/bin/eval.rs) on a board, checked against
//! `ferrite eval` on the host with the same image and the same task: MQAR
//! correct counts must be equal, and for a text the f64 sum of -ln p (the
//! board prints its bits) must be bit-identical, so the bits per byte are
//! equal. A firmware with the runtime's `fast-math` feature is compared with
//! a host CLI built with it. [`evaluate`] serves the suite and `soak` too.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, ensure, Context, Result};
use clap::Args as ClapArgs;

use crate::args::{self, ImageArgs, MathArgs};
use crate::boards::{self, Board, BuildOpts, Firmware, Report, Run, RunRequest};
use crate::host;

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
    let out = evaluate(args.board, &image, &task, true, args.math.fast_math)?;
    println!("host: {}", out.note);
    println!("{}", out.report.stats_line());
    Ok(ExitCode::SUCCESS)
}

/// What to evaluate.
#[derive(Clone, Debug)]
pub enum Task {
    /// `n` MQAR sequences of `seed` (docs/mqar.md).
    Mqar {
        seed: u64,
        n: usize,
        pairs: usize,
        seq_len: usize,
    },
    /// Bits per byte of the first `bytes` bytes of `file` (all of it if None).
    Text {
        file: PathBuf,
        bytes: Option<usize>,
        chunk: usize,
    },
}

/// A finished board evaluation that agreed with the host.
pub struct Outcome {
    pub run: Run,
    pub report: Report,
    /// One line: the board's and the host's figures.
    pub note: String,
}

/// The first `bytes` bytes of `file`, written once under the xtask work dir
/// (rewritten only when the content changes, so the firmware is not rebuilt).
fn excerpt(file: &Path, bytes: Option<usize>) -> Result<PathBuf> {
    let all = std::fs::read(file).with_context(|| format!("--text {}", file.display()))?;
    let cut = &all[..bytes.unwrap_or(all.len()).min(all.len())];
    let stem = file
        .file_stem()
        .map_or("text".into(), |s| s.to_string_lossy().into_owned());
    let dir = boards::work_dir().join("texts");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{stem}-{}.txt", cut.len()));
    if std::fs::read(&path).ok().as_deref() != Some(cut) {
        std::fs::write(&path, cut)?;
    }
    Ok(path)
}

/// Builds `eval` for `board` with `image` and `task`, runs it under QEMU,
/// and compares it with the host runtime.
/// `fast_math`: the runtime's feature on or off (`None`: the board's default).
pub fn evaluate(
    board: &'static Board,
    image: &Path,
    task: &Task,
    echo: bool,
    fast_math: Option<bool>,
) -> Result<Outcome> {
    let mut opts = BuildOpts {
        fast_math,
        ..BuildOpts::default()
    };
    let math = opts.math(board);
    let mut n = 1;
    let text = match task {
        Task::Mqar {
            seed,
            n: count,
            pairs,
            seq_len,
        } => {
            opts.mqar_seed = *seed;
            opts.pairs = *pairs;
            opts.seq_len = *seq_len;
            n = *count;
            None
        }
        Task::Text { file, bytes, chunk } => {
            let path = excerpt(file, *bytes)?;
            opts.text = Some(path.clone());
            opts.chunk = *chunk;
            Some(path)
        }
    };
    let req = RunRequest {
        n,
        echo,
        opts: opts.clone(),
        ..RunRequest::new(board, Firmware::Eval, image)
    };
    let run = boards::build_and_run(&req)?;
    let report = run.report()?;
    let note = match text {
        None => {
            let host = host::eval_mqar(image, opts.mqar_seed, n, opts.pairs, opts.seq_len, math)?;
            let (correct, total): (u64, u64) = (report.number("correct")?, report.number("total")?);
            ensure!(
                (correct, total) == (host.correct, host.total),
                "MQAR: board {correct}/{total} correct, host {}/{}",
                host.correct,
                host.total
            );
            format!(
                "MQAR {n} sequences of seed {}: board {correct}/{total} correct = host (accuracy={})",
                opts.mqar_seed, host.accuracy
            )
        }
        Some(path) => {
            let host = host::eval_text(image, &path, opts.chunk, math)?;
            let bits = u64::from_str_radix(report.get("nats_bits").trim_start_matches("0x"), 16)
                .context("eval: bad nats_bits")?;
            let board_nats = f64::from_bits(bits);
            let predicted: u64 = report.number("predicted_bytes")?;
            ensure!(
                predicted == host.predicted_bytes,
                "text: board predicted {predicted} bytes, host {}",
                host.predicted_bytes
            );
            ensure!(
                board_nats.to_bits() == host.nats.to_bits(),
                "text: board nats {board_nats:?}, host {:?} (relative difference {:e})",
                host.nats,
                (board_nats - host.nats).abs() / host.nats.abs()
            );
            ensure!(
                report.result == host.bits_per_byte,
                "text: board bits_per_byte={}, host {}",
                report.result,
                host.bits_per_byte
            );
            format!(
                "{} bytes, chunk {}: bits_per_byte={} on board and host (nats {:?} bit-identical)",
                report.get("bytes"),
                opts.chunk,
                report.result,
                board_nats
            )
        }
    };
    Ok(Outcome { run, report, note })
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
