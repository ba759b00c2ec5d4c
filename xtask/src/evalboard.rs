//! `cargo xtask eval-board`: the `eval` firmware (boards/src/bin/eval.rs) on a
//! board, checked against `ferrite eval` on the host with the same image and
//! the same task: MQAR correct counts must be equal, and for a text the f64
//! sum of -ln p (the board prints its bits) must be bit-identical, so the
//! bits per byte are equal. A firmware with the runtime's `fast-math`
//! feature is compared with a host CLI built with it.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};

use crate::boards::{self, Board, BuildOpts, Firmware, Report, Run, RunRequest};
use crate::host;

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
pub fn run(
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
