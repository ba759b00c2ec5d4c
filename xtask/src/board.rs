//! `cargo xtask board <name>` and `cargo xtask demo`: the `generate`
//! firmware built for a board and run under QEMU; prints its text, its
//! `tokens:` line and a `stats:` line (and with `--roofline` the
//! `roofline:` line).

use std::process::ExitCode;

use anyhow::{ensure, Result};
use clap::Args as ClapArgs;

use crate::args::{self, GenerateArgs};
use crate::boards::{self, Board, Firmware, RunRequest};
use crate::host;

/// `board <name>`.
#[derive(ClapArgs, Debug, Clone, PartialEq)]
pub struct Args {
    /// The board
    #[arg(value_name = "NAME", value_parser = args::board())]
    pub board: &'static Board,
    #[command(flatten)]
    pub opts: Opts,
}

/// What `board` and `demo` run.
#[derive(ClapArgs, Debug, Clone, Default, PartialEq)]
pub struct Opts {
    #[command(flatten)]
    pub generate: GenerateArgs,
    /// Print the firmware's defmt log, decoded by defmt-print
    #[arg(long)]
    pub defmt: bool,
    /// Bake the prompt on the host (`ferrite bake`, by a CLI built with the
    /// board's math module) and embed the snapshot: the firmware starts from
    /// it and feeds no prompt token
    #[arg(long)]
    pub bake: bool,
    /// Time every matrix-vector product (the firmware's `roofline`
    /// feature) and print the `roofline:` line: MACs per token and the
    /// instructions in the products and in the rest (docs/benchmarks.md).
    /// Timing costs instructions of its own, which the line states: the
    /// `stats:` line's counts are then not the default build's
    #[arg(long)]
    pub roofline: bool,
}

/// The demo: `board m4f` with the demo's model and sampler where `opts` gives none.
pub fn demo(mut opts: Opts) -> Result<ExitCode> {
    let g = &mut opts.generate;
    if g.image.image.is_none() {
        g.image.image = Some(args::DEMO_MODEL.into());
        g.image.dtype.get_or_insert(args::DEMO_DTYPE);
    }
    g.prompt.get_or_insert(args::DEMO_PROMPT.into());
    g.n.get_or_insert(args::DEMO_N);
    g.temperature.get_or_insert(args::DEMO_TEMPERATURE);
    g.seed.get_or_insert(args::DEMO_SEED);
    run(boards::named("m4f")?, &opts)
}

/// Builds and runs `generate` on `board`.
pub fn run(board: &'static Board, opts: &Opts) -> Result<ExitCode> {
    let g = &opts.generate;
    if opts.defmt {
        crate::setup::ensure_defmt_print()?;
    }
    let image = g.image.resolve(|| host::default_image(board))?;
    let mut build = g.build_opts();
    build.roofline = opts.roofline;
    if opts.bake {
        ensure!(
            build.memory == 0,
            "--memory with --bake: a baked snapshot keeps the memory it was baked on (memory 0)"
        );
        build.snapshot = Some(host::bake(&image, g.prompt(), build.math(board))?);
    }
    let req = RunRequest {
        prompt: g.prompt(),
        n: g.n(),
        defmt: opts.defmt,
        echo: true,
        opts: build,
        ..RunRequest::new(board, Firmware::Generate, &image)
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
    if let Some(r) = report.roofline {
        println!("{r}");
    }
    Ok(ExitCode::SUCCESS)
}
