//! The command line (clap): the commands, each holding its module's options
//! (the option groups several share are in `args.rs`), and the options of
//! the commands that have no module of their own.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use crate::args::GenerateArgs;
use crate::boards::{Board, BOARDS, CHIPS};
use crate::{
    bench, board, capi, chip, eval_board, fuzz, ota, profile, setup, sigbench, soak, suite, table,
};

/// `cargo xtask`: build, run and check ferrite's firmware and everything else.
#[derive(Parser, Debug)]
#[command(name = "xtask", bin_name = "cargo xtask", after_help = targets_help())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// The trained LM (models/lm/en-m4f, int8) writing 200 sampled tokens on the M4F board
    /// (installs QEMU if missing)
    ///
    /// Takes the options of `board`, with the demo's defaults: --prompt "A man " -n 200
    /// --temperature 0.6 --seed 1.
    Demo(board::Opts),
    /// Build and run `generate` on a board; prints text, `tokens:`, `stats:`
    Board(board::Args),
    /// Run the `eval` firmware: MQAR accuracy or bits per byte on the board, checked against
    /// `ferrite eval` on the host (built with the same math)
    EvalBoard(eval_board::Args),
    /// A/B update: the board serves A, receives B in chunks over semihosting, validates it,
    /// prints `ota: accepted` or `ota: refused <reason>`, then generates with the model that
    /// serves
    Ota(ota::Args),
    /// QEMU suite: every board against the host runtime and boards/expected/, every board's
    /// tile kernels against the reference
    TestBoards(SuiteArgs),
    /// Regenerate docs/boards.md (board x model sizes and speed)
    BoardTable,
    /// Instructions to the first generated token with a 64- and a 256-token prompt, fed or
    /// baked (`ferrite bake`, restored from flash), on m4f (models/lm/en-m4f int8) and
    /// rv32imac (models/lm/small int8); prints the table of docs/snapshot-format.md
    BakeGain,
    /// Instructions per function while `generate` runs (QEMU counts every block it executes),
    /// from the first token on, also with the compiler builtins (soft float) each called, and
    /// calls
    Profile(profile::Args),
    /// Time the int8/int4 tiled and f32 matrix-vector products (256x256, 64x512, 1024x64;
    /// weights in flash) on every board under QEMU; one `kernel:` line per case
    ///
    /// m4f, m55, m3 and rv32imac also run with the portable kernels.
    BenchKernels(bench::Args),
    /// Cost of one signature verification by crate (ed25519-dalek, salty, ed25519-compact,
    /// the runtime's own Ed25519, p256) and of SHA-256 per KiB on m4f, m3 and rv32imac under QEMU: instructions, stack,
    /// flash and static RAM added (docs/signing.md)
    BenchSignatures(sigbench::Args),
    /// Long streams with no reset (docs/soak.md): 1M tokens per model on the host, 100k on
    /// m4f; finite logits, state size, first vs last window (minutes; not in `test`)
    Soak(soak::Args),
    /// Build the libFuzzer targets (fuzz/) on stable and run them over their committed
    /// corpora; fails on a crash
    Fuzz(fuzz::Args),
    /// Build `generate` for a real chip (no emulator: flash it with the printed probe-rs /
    /// espflash line); prints flash and RAM against the chip's budget and a `stats:` line
    /// (docs/chips.md)
    ///
    /// The Arm chips always print through defmt over RTT, so there is no --defmt.
    Chip(ChipArgs),
    /// Every chip built with its default model and size-checked (part of `test`)
    Chips(ChipsArgs),
    /// The C API (capi/, docs/c-api.md): ferrite.h fresh, the host C test under ASan and UBSan,
    /// the panic branches left in the library, the C example on m4f under QEMU against the Rust
    /// firmware (part of `test`; installs cbindgen and gcc-arm-none-eabi)
    Capi(capi::Args),
    /// Install what the other commands need and a fresh machine lacks: the targets and
    /// components of rust-toolchain.toml (rustup), QEMU (apt-get), defmt-print (cargo install)
    Setup,
    /// Every check (the README's test command and CI): fmt, clippy, rustdoc, cargo test,
    /// embedded builds, Python tests, test-boards
    Test(crate::test::Args),
}

impl Command {
    /// Installs what the command needs (setup.rs), then runs it.
    pub fn run(self) -> Result<ExitCode> {
        match &self {
            Command::Chip(_) | Command::Chips(_) => setup::ensure_toolchain()?,
            Command::Fuzz(_) | Command::Soak(_) | Command::Test(_) => {}
            _ => setup::ensure_board_tools()?,
        }
        let exit = |ok: bool| ExitCode::from(u8::from(!ok));
        match self {
            Command::Demo(opts) => board::demo(opts),
            Command::Board(args) => board::run(args.board, &args.opts),
            Command::EvalBoard(args) => eval_board::run(&args),
            Command::Ota(args) => ota::run(&args),
            Command::TestBoards(a) if a.list => suite::list(a.only.as_deref()),
            Command::TestBoards(a) => {
                let scope = match (a.full, a.full_only) {
                    (_, true) => suite::Scope::FullOnly,
                    (true, false) => suite::Scope::All,
                    (false, false) => suite::Scope::Default,
                };
                suite::run(a.overwrite, a.only.as_deref(), scope)
            }
            Command::BoardTable => table::run().map(|()| ExitCode::SUCCESS),
            Command::BakeGain => crate::bake_gain::run().map(|()| ExitCode::SUCCESS),
            Command::Profile(args) => profile::run(&args),
            Command::BenchKernels(a) => bench::run(a.board, a.record),
            Command::BenchSignatures(a) => sigbench::run(a.board, a.record),
            Command::Soak(args) => soak::run(&args),
            Command::Fuzz(a) => fuzz::run(a.seconds, a.only.as_deref()).map(exit),
            Command::Chip(a) => chip::run(a.chip, &a.generate),
            Command::Chips(a) => chip::all(a.name.as_deref(), a.record).map(exit),
            Command::Capi(args) => capi::run(&args),
            Command::Setup => {
                setup::ensure_defmt_print()?;
                setup::ensure_arm_gcc()?;
                setup::ensure_cbindgen()?;
                eprintln!(
                    "setup: the targets, components, QEMU, defmt-print, gcc-arm-none-eabi and cbindgen the commands need are installed"
                );
                Ok(ExitCode::SUCCESS)
            }
            Command::Test(args) => crate::test::run(&args),
        }
    }
}

/// The boards and chips, below `--help`.
fn targets_help() -> String {
    let boards: Vec<_> = BOARDS.iter().map(|b| b.name).collect();
    let chips: Vec<_> = CHIPS.iter().map(|c| c.name).collect();
    format!("boards: {}\nchips: {}", boards.join(" "), chips.join(" "))
}

/// `test-boards`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct SuiteArgs {
    /// Record the expected outputs in boards/expected/ instead of comparing with them
    #[arg(long)]
    pub overwrite: bool,
    /// Only the checks whose name contains T, e.g. `kernels`
    #[arg(long, value_name = "T")]
    pub only: Option<String>,
    /// Also the checks only `cargo xtask test --full` runs (docs/testing.md, "--full")
    #[arg(long, conflicts_with = "full_only")]
    pub full: bool,
    /// Only the checks the default run leaves out
    #[arg(long)]
    pub full_only: bool,
    /// Print each check's run (`default` or `full`) and name, run nothing
    #[arg(long)]
    pub list: bool,
}

/// `chip <name>`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct ChipArgs {
    /// The chip
    #[arg(value_name = "NAME", value_parser = crate::args::chip())]
    pub chip: &'static Board,
    #[command(flatten)]
    pub generate: GenerateArgs,
}

/// `chips [<name>]`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct ChipsArgs {
    /// Only the chips whose name contains NAME (then the library's host tests are left out)
    pub name: Option<String>,
    /// Write docs/chips.md's measured table
    #[arg(long)]
    pub record: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(line: &str) -> Result<Command, clap::Error> {
        let args = std::iter::once("xtask").chain(line.split_whitespace());
        Cli::try_parse_from(args).map(|c| c.command)
    }

    /// Every command line of the usage before clap (`cargo xtask --help` as
    /// recorded), each command with each of its options, and what each must
    /// set (in the parsed command's `Debug` text).
    const OLD_USAGE: &[(&str, &[&str])] = &[
        (
            "demo",
            &["Demo(Opts { generate: GenerateArgs { image: ImageArgs { image: None"],
        ),
        (
            "board m3 --image x.fer --dtype int4 --prompt Hi -n 5 --temperature 0.7 --top-k 3 \
             --top-p 0.9 --seed 1 --defmt --math libm",
            &[
                "Board(Args { board: Target { name: \"m3\"",
                "image: Some(\"x.fer\")",
                "dtype: Some(I4)",
                "prompt: Some(\"Hi\")",
                "n: Some(5)",
                "temperature: Some(0.7)",
                "top_k: Some(3)",
                "top_p: Some(0.9)",
                "seed: Some(1)",
                "fast_math: Some(false)",
                "defmt: true",
            ],
        ),
        (
            "board m4f --math fast --tokens 7",
            &["fast_math: Some(true)", "n: Some(7)"],
        ),
        ("board m4f", &["n: None", "fast_math: None", "defmt: false"]),
        ("board m4f --memory 1", &["memory: Some(1)"]),
        (
            "eval-board m4f --image d --dtype f16 --mqar -n 4 --seed 2 --pairs 4 --seq-len 32 \
             --math fast",
            &[
                "EvalBoard(Args { board: Target { name: \"m4f\"",
                "image: Some(\"d\")",
                "dtype: Some(F16)",
                "mqar: true, n: 4, seed: 2, pairs: 4, seq_len: 32",
                "fast_math: Some(true)",
            ],
        ),
        (
            "eval-board m3 --image d --text t.txt --bytes 256 --chunk 128 --math libm",
            &[
                "text: Some(\"t.txt\"), bytes: Some(256), chunk: 128",
                "fast_math: Some(false)",
            ],
        ),
        (
            "eval-board m3 --image d --mqar",
            &["n: 100, seed: 0, pairs: 8, seq_len: 64, text: None, bytes: None, chunk: 512"],
        ),
        (
            "ota m4f --image a.fer --update b.fer --corrupt --prompt P -n 3",
            &[
                "Ota(Args { board: Target { name: \"m4f\"",
                "image: Some(\"a.fer\")",
                "update: Some(\"b.fer\"), corrupt: true, cut_at: None, prompt: \"P\", n: 3",
            ],
        ),
        (
            "ota m4f --update b.fer --cut-at 100",
            &["corrupt: false, cut_at: Some(100)"],
        ),
        (
            "ota m4f --update b.fer --trust k1.pub --trust k2.pub",
            &["n: 32, trust: [\"k1.pub\", \"k2.pub\"]"],
        ),
        (
            "bench-signatures --board m3",
            &["BenchSignatures(Args { board: Some(Target { name: \"m3\""],
        ),
        ("bench-signatures --record", &["record: true"]),
        (
            "ota m4f",
            &["update: None", "prompt: \"Once upon a time\", n: 32"],
        ),
        (
            "test-boards --overwrite --only kernels",
            &["overwrite: true, only: Some(\"kernels\")"],
        ),
        ("test-boards", &["overwrite: false, only: None"]),
        ("board-table", &["BoardTable"]),
        ("bake-gain", &["BakeGain"]),
        ("board m4f --bake", &["bake: true"]),
        (
            "profile m3 --image d --dtype int8 --prompt P -n 2 --top 10 --math fast --math-calls",
            &[
                "Profile(Args { board: Target { name: \"m3\"",
                "dtype: Some(I8)",
                "prompt: \"P\", n: 2, top: 10",
                "fast_math: Some(true)",
                "math_calls: true",
            ],
        ),
        ("profile m3", &["n: 8, top: 30", "math_calls: false"]),
        (
            "bench-kernels --board m33 --record",
            &["name: \"m33\"", "record: true"],
        ),
        (
            "bench-kernels",
            &["BenchKernels(Args { board: None, record: false })"],
        ),
        (
            "soak --tokens 50000 --board-tokens 0 --only lm --record",
            &["tokens: 50000, board_tokens: 0, only: Some(\"lm\"), record: true"],
        ),
        (
            "soak",
            &["tokens: 1000000, board_tokens: 100000, only: None, record: false"],
        ),
        (
            "fuzz --seconds 5 --only bpe",
            &["Fuzz(Args { seconds: 5, only: Some(\"bpe\") })"],
        ),
        ("fuzz", &["Fuzz(Args { seconds: 60, only: None })"]),
        (
            "chip rp2350 --image d --dtype int4 --prompt P -n 9 --temperature 1 --top-k 2 \
             --top-p 0.5 --seed 3 --math libm",
            &[
                "Chip(ChipArgs { chip: Target { name: \"rp2350\"",
                "dtype: Some(I4)",
                "prompt: Some(\"P\"), n: Some(9), temperature: Some(1.0), top_k: Some(2), \
                 top_p: Some(0.5), seed: Some(3)",
                "fast_math: Some(false)",
            ],
        ),
        (
            "chips rp2350 --record",
            &["Chips(ChipsArgs { name: Some(\"rp2350\"), record: true })"],
        ),
        ("chips", &["Chips(ChipsArgs { name: None, record: false })"]),
        ("setup", &["Setup"]),
        (
            "test",
            &["Test(Args { list: false, full: false, only: None, lane: [] })"],
        ),
        (
            "test --list",
            &["Test(Args { list: true, full: false, only: None, lane: [] })"],
        ),
        (
            "test --only 32-bit",
            &["Test(Args { list: false, full: false, only: Some(\"32-bit\"), lane: [] })"],
        ),
        (
            "test --full",
            &["Test(Args { list: false, full: true, only: None, lane: [] })"],
        ),
        (
            "test --full --list",
            &["Test(Args { list: true, full: true, only: None, lane: [] })"],
        ),
    ];

    #[test]
    fn every_command_line_of_the_old_usage_parses() {
        Cli::command().debug_assert();
        for (line, wanted) in OLD_USAGE {
            let parsed = format!(
                "{:?}",
                parse(line).unwrap_or_else(|e| panic!("{line}: {e}"))
            );
            for w in *wanted {
                assert!(parsed.contains(w), "{line}: no {w:?} in {parsed}");
            }
        }
    }

    #[test]
    fn unknown_commands_options_and_bad_values_are_refused() {
        for line in [
            "",
            "frobnicate",
            "board",
            "board m99",
            "board m4f --record",
            "board m4f extra",
            "board m4f -n 0",
            "board m4f --prompt=",
            "board m4f --top-p 1.5",
            "board m4f --temperature -1",
            "board m4f --math fastest",
            "board m4f --dtype int3",
            "board m4f -n x",
            "chip rp2350 --defmt",
            "chip m4f",
            "eval-board m4f --mqar",
            "eval-board m4f --image d",
            "eval-board m4f --image d --mqar --text t",
            "eval-board m4f --image d --mqar --pairs 65",
            "eval-board m4f --image d --text t --chunk 1",
            "ota m4f --corrupt",
            "ota m4f --cut-at 5",
            "ota m4f --update b --corrupt --cut-at 1",
            "test-boards --record",
            "test --only",
            "soak --tokens 10",
            "fuzz --seconds x",
            "bench-kernels --board nope",
            "bench-signatures --board m3 --record",
        ] {
            assert!(parse(line).is_err(), "accepted: {line:?}");
        }
    }

    #[test]
    fn the_help_lists_every_command_and_the_targets() {
        let help = Cli::command().render_help().to_string();
        for (line, _) in OLD_USAGE {
            let name = line.split(' ').next().unwrap();
            assert!(
                help.contains(&format!("\n  {name} ")),
                "{name} missing from\n{help}"
            );
        }
        assert!(
            help.contains("boards: m4f ") && help.contains("chips: rp2350 "),
            "{help}"
        );
    }
}
