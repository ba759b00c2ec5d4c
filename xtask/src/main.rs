//! `cargo xtask`: build and run the ferrite firmware on QEMU boards.
//!
//! ```text
//! cargo xtask demo                                  # M4F board, default model; installs QEMU if missing
//! cargo xtask board <name> [--image F] [--prompt P] [-n N] [--defmt]
//! cargo xtask ota <name> [--image F] [--corrupt] [--prompt P] [-n N]
//! cargo xtask test-boards [--overwrite]             # the QEMU suite (CI)
//! cargo xtask board-table                           # writes docs/boards.md
//! cargo xtask test                                  # every check: fmt, clippy, docs, tests, Python, boards
//! ```
//! Boards: m4f (default), m7, m55, m3, rv32imac, rv32imafc. See boards/README.md.

mod boards;
mod host;
mod suite;
mod table;
mod test;

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use boards::{Board, Firmware, RunRequest};

const USAGE: &str = "\
usage: cargo xtask <command>
  demo                                    run the default model on the M4F board (installs QEMU if missing)
  board <name> [--image F] [--prompt P] [-n N] [--defmt]
                                          build and run `generate` on a board; prints text, `tokens:`, `stats:`
  ota <name> [--image F] [--corrupt] [--prompt P] [-n N]
                                          run the OTA example: the image arrives at run time over semihosting
  test-boards [--overwrite]               QEMU suite: every board against the host runtime and boards/expected/
  board-table                             regenerate docs/boards.md (board x model sizes and speed)
  test                                    every check (the README's test command and CI): fmt, clippy,
                                          rustdoc, cargo test, embedded builds, Python tests, test-boards
boards: m4f m7 m55 m3 rv32imac rv32imafc";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Options shared by `board` and `ota`.
struct Opts {
    board: Option<String>,
    image: Option<String>,
    prompt: Option<String>,
    n: Option<usize>,
    defmt: bool,
    corrupt: bool,
    overwrite: bool,
}

fn parse(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        board: None,
        image: None,
        prompt: None,
        n: None,
        defmt: false,
        corrupt: false,
        overwrite: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--image" => o.image = Some(value("--image")?),
            "--prompt" => o.prompt = Some(value("--prompt")?),
            "-n" | "--tokens" => {
                let v = value("-n")?;
                o.n = Some(v.parse().with_context(|| format!("-n {v}: not a number"))?);
            }
            "--defmt" => o.defmt = true,
            "--corrupt" => o.corrupt = true,
            "--overwrite" => o.overwrite = true,
            s if s.starts_with('-') => bail!("unknown option {s}\n{USAGE}"),
            s if o.board.is_none() => o.board = Some(s.to_string()),
            s => bail!("unexpected argument {s}\n{USAGE}"),
        }
    }
    Ok(o)
}

fn run(args: Vec<String>) -> Result<ExitCode> {
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return Ok(ExitCode::FAILURE);
    };
    let opts = parse(rest)?;
    match cmd.as_str() {
        "demo" => {
            boards::ensure_qemu()?;
            board_cmd(&Opts {
                board: Some("m4f".into()),
                ..opts
            })
        }
        "board" => {
            boards::ensure_qemu()?;
            board_cmd(&opts)
        }
        "ota" => {
            boards::ensure_qemu()?;
            ota_cmd(&opts)
        }
        "test-boards" => {
            boards::ensure_qemu()?;
            suite::run(opts.overwrite)
        }
        "test" => test::run(),
        "board-table" => {
            boards::ensure_qemu()?;
            table::run().map(|()| ExitCode::SUCCESS)
        }
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => bail!("unknown command {other}\n{USAGE}"),
    }
}

fn pick_board(opts: &Opts) -> Result<&'static Board> {
    let name = opts
        .board
        .as_deref()
        .context(format!("which board?\n{USAGE}"))?;
    Board::named(name)
}

fn board_cmd(opts: &Opts) -> Result<ExitCode> {
    let board = pick_board(opts)?;
    let image = match &opts.image {
        Some(p) => std::fs::canonicalize(p).with_context(|| format!("--image {p}"))?,
        None => host::default_image(board)?,
    };
    let req = RunRequest {
        board,
        firmware: Firmware::Generate,
        image: &image,
        prompt: opts.prompt.as_deref().unwrap_or(boards::DEFAULT_PROMPT),
        n: opts.n.unwrap_or(boards::DEFAULT_N),
        defmt: opts.defmt,
        echo: true,
    };
    let run = boards::build_and_run(&req)?;
    if opts.defmt {
        // defmt-print already showed the decoded stream.
        return Ok(if run.status == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let report = run.report()?;
    println!("{}", report.stats_line());
    Ok(ExitCode::SUCCESS)
}

fn ota_cmd(opts: &Opts) -> Result<ExitCode> {
    let board = pick_board(opts)?;
    let image = match &opts.image {
        Some(p) => std::fs::canonicalize(p).with_context(|| format!("--image {p}"))?,
        None => host::default_image(board)?,
    };
    let download = if opts.corrupt {
        boards::Download::FlipByte
    } else {
        boards::Download::Intact
    };
    let run = boards::run_ota(
        board,
        &image,
        download,
        opts.prompt.as_deref().unwrap_or(boards::DEFAULT_PROMPT),
        opts.n.unwrap_or(boards::DEFAULT_N),
        true,
    )?;
    Ok(if run.status == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(run.status.clamp(1, 255) as u8)
    })
}
