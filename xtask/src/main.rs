//! `cargo xtask`: build and run the ferrite firmware on QEMU boards.
//!
//! ```text
//! cargo xtask demo                                  # M4F board, the trained LM (models/lm/en-m4f); installs QEMU if missing
//! cargo xtask board <name> [--image F|DIR] [--prompt P] [-n N] [--temperature T --seed S] [--defmt]
//! cargo xtask eval-board <name> --image F|DIR (--mqar [-n N] [--seed S] | --text FILE [--bytes B])
//! cargo xtask ota <name> [--image A] [--update B [--corrupt | --cut-at K]] [--prompt P] [-n N]
//! cargo xtask test-boards [--overwrite] [--only T]  # the QEMU suite (CI)
//! cargo xtask board-table                           # writes docs/boards.md
//! cargo xtask bench-kernels [--board B] [--record]  # matrix-vector products under QEMU
//! cargo xtask chip <name> [--image F|DIR] [--prompt P] [-n N]  # a real chip's firmware, sized
//! cargo xtask chips [<name>] [--record]             # every real chip built and size-checked
//! cargo xtask test                                  # every check: fmt, clippy, docs, tests, Python, boards
//! ```
//! Boards: the table of `ferrite_common::board` (m4f is the demo's). See boards/README.md.

mod bench;
mod boards;
mod chip;
mod cli;
mod evalboard;
mod fuzz;
mod host;
mod image_check;
mod profile;
mod setup;
mod soak;
mod suite;
mod table;
mod test;

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use boards::{Board, BuildOpts, Firmware, RunRequest};

/// The demo: the trained English byte-level LM (1.8M params; its int8 image,
/// 1.9 MB, fits the M4F's 4 MB flash where the f32 one would not), sampled with
/// a fixed seed so that the text is the same on every run and equals
/// `ferrite generate`'s.
pub const DEMO_MODEL: &str = "models/lm/en-m4f";
pub const DEMO_DTYPE: &str = "int8";
pub const DEMO_PROMPT: &str = "A man ";
pub const DEMO_N: usize = 200;
pub const DEMO_TEMPERATURE: f32 = 0.6;
pub const DEMO_SEED: u64 = 1;

const USAGE: &str = "\
usage: cargo xtask <command>
  demo                                    the trained LM (models/lm/en-m4f, int8) writing 200 sampled tokens on
                                          the M4F board (installs QEMU if missing)
  board <name> [--image F|DIR] [--dtype D] [--prompt P] [-n N] [--temperature T] [--top-k K]
        [--top-p P] [--seed S] [--defmt] [--math fast|libm]
                                          build and run `generate` on a board; prints text, `tokens:`, `stats:`
                                          (a model DIR is quantized to --dtype, default int8; --math: the
                                          runtime's fast-math feature on or off, default the board's)
  eval-board <name> --image F|DIR [--dtype D] (--mqar [-n N] [--seed S] [--pairs P] [--seq-len L]
        | --text FILE [--bytes B] [--chunk C]) [--math fast|libm]
                                          run the `eval` firmware: MQAR accuracy or bits per byte on the
                                          board, checked against `ferrite eval` on the host (built with the
                                          same math)
  ota <name> [--image A] [--update B [--corrupt | --cut-at K]] [--prompt P] [-n N]
                                          A/B update: the board serves A (F|DIR), receives B in chunks over
                                          semihosting (--corrupt flips a byte, --cut-at stops the transfer),
                                          validates it, prints `ota: accepted` or `ota: refused <reason>`,
                                          then generates with the model that serves
  test-boards [--overwrite] [--only T]    QEMU suite: every board against the host runtime and boards/expected/,
                                          every board's tile kernels against the reference (--only: the checks
                                          whose name contains T, e.g. `kernels`)
  board-table                             regenerate docs/boards.md (board x model sizes and speed)
  profile <name> [--image F|DIR] [--dtype D] [--prompt P] [-n N] [--top K] [--math fast|libm]
        [--math-calls]
                                          instructions per function while `generate` runs (QEMU counts
                                          every block it executes), from the first token on, also with
                                          the compiler builtins (soft float) each called, and calls;
                                          --math-calls: the runtime's math functions kept out of line
  bench-kernels [--board B] [--record]    time the int8/int4 tiled and f32 matrix-vector products (256x256,
                                          64x512, 1024x64; weights in flash) on every board, or B, under QEMU;
                                          m4f, m55, m3, rv32imac also with the portable kernels; one `kernel:` line per
                                          case; --record writes the table into docs/benchmarks.md
  soak [--tokens N] [--board-tokens N] [--only T] [--record]
                                          long streams with no reset (docs/soak.md): 1M tokens per model on
                                          the host, 100k on m4f; finite logits, state size, first vs last
                                          window; --record writes docs/soak.md (minutes; not in `test`)
  fuzz [--seconds N] [--only T]           build the libFuzzer targets (fuzz/) on stable and run them N s in all
                                          (60) over their committed corpora; fails on a crash
  chip <name> [--image F|DIR] [--dtype D] [--prompt P] [-n N] [--temperature T] [--top-k K]
        [--top-p P] [--seed S] [--math fast|libm]
                                          build `generate` for a real chip (no emulator: flash it with the
                                          printed probe-rs / espflash line); prints flash and RAM against the
                                          chip's budget and a `stats:` line (docs/chips.md)
  chips [<name>] [--record]               every chip built with its default model and size-checked
                                          (part of `test`); --record writes docs/chips.md's measured table
  setup                                   install what the other commands need and a fresh machine lacks: the
                                          targets and components of rust-toolchain.toml (rustup), QEMU (apt-get)
  test                                    every check (the README's test command and CI): fmt, clippy,
                                          rustdoc, cargo test, embedded builds, Python tests, test-boards";

/// The usage text with the boards of the table.
fn usage() -> String {
    let names: Vec<_> = ferrite_common::target::boards().map(|b| b.name).collect();
    let chips: Vec<_> = ferrite_common::target::chips().map(|c| c.name).collect();
    format!(
        "{USAGE}\nboards: {}\nchips: {}",
        names.join(" "),
        chips.join(" ")
    )
}

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<ExitCode> {
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{}", usage());
        return Ok(ExitCode::FAILURE);
    };
    if matches!(cmd.as_str(), "-h" | "--help" | "help") {
        println!("{}", usage());
        return Ok(ExitCode::SUCCESS);
    }
    let mut flags = cli::Flags::parse(rest).map_err(|e| anyhow::anyhow!("{e}\n{}", usage()))?;
    if flags.help {
        println!("{}", usage());
        return Ok(ExitCode::SUCCESS);
    }
    // Each command takes its own options; whatever is left is refused.
    macro_rules! take {
        ($t:ty) => {{
            let o = <$t>::take(&mut flags)?;
            flags.finish(cmd)?;
            o
        }};
    }
    match cmd.as_str() {
        "demo" => {
            let opts = take!(cli::BoardOpts);
            setup::ensure_board_tools()?;
            let image = match opts.image.image {
                Some(_) => opts.image,
                None => cli::ImageOpts {
                    image: Some(DEMO_MODEL.into()),
                    dtype: Some(DEMO_DTYPE.into()),
                },
            };
            board_cmd(&cli::BoardOpts {
                board: Some("m4f".into()),
                image,
                prompt: Some(opts.prompt.unwrap_or_else(|| DEMO_PROMPT.into())),
                n: Some(opts.n.unwrap_or(DEMO_N)),
                temperature: Some(opts.temperature.unwrap_or(DEMO_TEMPERATURE)),
                seed: Some(opts.seed.unwrap_or(DEMO_SEED)),
                ..opts
            })
        }
        "eval-board" => {
            let opts = take!(cli::EvalBoardOpts);
            setup::ensure_board_tools()?;
            eval_board_cmd(&opts)
        }
        "board" => {
            let opts = take!(cli::BoardOpts);
            setup::ensure_board_tools()?;
            board_cmd(&opts)
        }
        "ota" => {
            let opts = take!(cli::OtaOpts);
            setup::ensure_board_tools()?;
            ota_cmd(&opts)
        }
        "test-boards" => {
            let opts = take!(cli::SuiteOpts);
            setup::ensure_board_tools()?;
            suite::run(opts.overwrite, opts.only.as_deref())
        }
        "test" => {
            flags.finish(cmd)?;
            test::run()
        }
        "profile" => {
            let opts = take!(cli::ProfileOpts);
            setup::ensure_board_tools()?;
            profile_cmd(&opts)
        }
        "fuzz" => {
            let opts = take!(cli::FuzzOpts);
            Ok(
                if fuzz::run(opts.seconds.unwrap_or(60), opts.only.as_deref())? {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                },
            )
        }
        "soak" => soak::run(take!(cli::SoakOpts)),
        "setup" => {
            flags.finish(cmd)?;
            setup::ensure_board_tools()?;
            eprintln!("setup: the targets, components and QEMU the commands need are installed");
            Ok(ExitCode::SUCCESS)
        }
        "bench-kernels" => {
            let opts = take!(cli::BenchOpts);
            setup::ensure_board_tools()?;
            bench::run(opts.board.as_deref(), opts.record)
        }
        "chip" => {
            let opts = take!(cli::BoardOpts);
            setup::ensure_targets()?;
            setup::ensure_components()?;
            chip::run(&opts)
        }
        "chips" => {
            let opts = take!(cli::BenchOpts);
            setup::ensure_targets()?;
            setup::ensure_components()?;
            Ok(if chip::all(opts.board.as_deref(), opts.record)? {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        "board-table" => {
            flags.finish(cmd)?;
            setup::ensure_board_tools()?;
            table::run().map(|()| ExitCode::SUCCESS)
        }
        other => bail!("unknown command {other}\n{}", usage()),
    }
}

fn pick_board(board: &Option<String>) -> Result<&'static Board> {
    let name = board
        .as_deref()
        .context(format!("which board?\n{}", usage()))?;
    boards::named(name)
}

/// `--image`: an image file, or a model directory quantized to `--dtype` (default int8).
fn image_arg(opts: &cli::ImageOpts, board: &Board) -> Result<std::path::PathBuf> {
    let Some(p) = &opts.image else {
        return host::default_image(board);
    };
    let path = std::fs::canonicalize(p).with_context(|| format!("--image {p}"))?;
    if !path.is_dir() {
        return Ok(path);
    }
    let dtype = opts.dtype.as_deref().unwrap_or("int8");
    let rel = path.strip_prefix(boards::root_dir()).unwrap_or(&path);
    let name = rel
        .to_string_lossy()
        .trim_start_matches("models/")
        .replace('/', "-");
    host::model_image(&path, &name, dtype)
}

fn sampler_opts(opts: &cli::BoardOpts) -> BuildOpts {
    let d = BuildOpts::default();
    BuildOpts {
        temperature: opts.temperature.unwrap_or(d.temperature),
        top_k: opts.top_k.unwrap_or(d.top_k),
        top_p: opts.top_p.unwrap_or(d.top_p),
        seed: opts.seed.unwrap_or(d.seed),
        fast_math: opts.fast_math,
        ..d
    }
}

fn board_cmd(opts: &cli::BoardOpts) -> Result<ExitCode> {
    let board = pick_board(&opts.board)?;
    let image = image_arg(&opts.image, board)?;
    let req = RunRequest {
        board,
        firmware: Firmware::Generate,
        image: &image,
        prompt: opts.prompt.as_deref().unwrap_or(boards::DEFAULT_PROMPT),
        n: opts.n.unwrap_or(boards::DEFAULT_N),
        defmt: opts.defmt,
        echo: true,
        opts: sampler_opts(opts),
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

fn profile_cmd(opts: &cli::ProfileOpts) -> Result<ExitCode> {
    let board = pick_board(&opts.board)?;
    let image = image_arg(&opts.image, board)?;
    let prompt = opts.prompt.as_deref().unwrap_or(boards::DEFAULT_PROMPT);
    let n = opts.n.unwrap_or(8);
    let opts_build = BuildOpts {
        math_noinline: opts.math_calls,
        fast_math: opts.fast_math,
        ..BuildOpts::default()
    };
    let p = profile::run(board, &image, prompt, n, &opts_build)?;
    let fed = p.tokens.max(1);
    println!(
        "profile: board={} math={} image={} tokens={fed} instructions={} instructions_per_token={}",
        board.name,
        opts_build.math(board).name(),
        image.display(),
        p.total,
        p.total / fed
    );
    // own: blocks that start in the function; +builtins: with the compiler
    // builtins it called (soft-float helpers on FPU-less cores); calls:
    // entries into it. Inlined code counts for the function it is inlined in.
    println!(
        "{:>6}  {:>12}  {:>10}  {:>10}  {:>8}  function",
        "share", "instructions", "per_token", "+builtins", "calls/tok"
    );
    for f in p.functions.iter().take(opts.top.unwrap_or(30)) {
        println!(
            "{:>5.1}%  {:>12}  {:>10}  {:>10}  {:>8.1}  {}",
            100.0 * f.own as f64 / p.total.max(1) as f64,
            f.own,
            f.own / fed,
            f.with_builtins / fed,
            f.calls as f64 / fed as f64,
            f.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn eval_board_cmd(opts: &cli::EvalBoardOpts) -> Result<ExitCode> {
    let board = pick_board(&opts.board)?;
    if opts.image.image.is_none() {
        bail!(
            "eval-board needs --image (an image or a model directory)\n{}",
            usage()
        );
    }
    let image = image_arg(&opts.image, board)?;
    let task = match (&opts.text, opts.mqar) {
        (Some(file), false) => evalboard::Task::Text {
            file: std::fs::canonicalize(file).with_context(|| format!("--text {file}"))?,
            bytes: opts.bytes,
            chunk: opts.chunk.unwrap_or(512),
        },
        (None, true) => evalboard::Task::Mqar {
            seed: opts.seed.unwrap_or(0),
            n: opts.n.unwrap_or(100),
            pairs: opts.pairs.unwrap_or(8),
            seq_len: opts.seq_len.unwrap_or(64),
        },
        _ => bail!(
            "eval-board needs exactly one of --mqar and --text FILE\n{}",
            usage()
        ),
    };
    let out = evalboard::run(board, &image, &task, true, opts.fast_math)?;
    println!("host: {}", out.note);
    println!("{}", out.report.stats_line());
    Ok(ExitCode::SUCCESS)
}

fn ota_cmd(opts: &cli::OtaOpts) -> Result<ExitCode> {
    let board = pick_board(&opts.board)?;
    let image = image_arg(&opts.image, board)?;
    let update = match &opts.update {
        None => None,
        Some(u) => Some(image_arg(
            &cli::ImageOpts {
                image: Some(u.clone()),
                dtype: None,
            },
            board,
        )?),
    };
    let delivery = match (&update, opts.corrupt, opts.cut_at) {
        (None, _, _) => boards::Delivery::None,
        (Some(_), true, _) => boards::Delivery::FlipByte,
        (Some(_), false, Some(k)) => boards::Delivery::CutAt(k),
        (Some(_), false, None) => boards::Delivery::Intact,
    };
    let run = boards::run_ota(
        board,
        &image,
        update.as_deref(),
        delivery,
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
