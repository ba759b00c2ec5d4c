//! `cargo xtask board-table`: runs every board with every table model, and
//! the trained LMs of models/lm on the boards they are made for, and writes
//! docs/boards.md from the `stats:` lines (never typed by hand), naming the
//! commit it measured. README.md's compact board table is not written here:
//! it is generated from the suite's recorded `boards/expected/*.stats`
//! (`ferrite-figures --write`, tools/python), so that it has one source.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::boards::{self, Firmware, RunRequest, BOARDS, DEFAULT_MODEL, DEFAULT_N, DEFAULT_PROMPT};
use crate::host;

/// (model directory under tests/fixtures, dtype).
const MODELS: &[(&str, &str)] = &[
    (DEFAULT_MODEL, "f32"),
    (DEFAULT_MODEL, "f16"),
    (DEFAULT_MODEL, "int8"),
    (DEFAULT_MODEL, "int4"),
    ("swa_sink_logits", "f32"),
];

/// Trained models: (board, model directory, dtype, what). The LMs, and the
/// MQAR model the M0's 16 KB of RAM runs (its default image).
const TRAINED: &[(&str, &str, &str, &str)] = &[
    (
        "m4f",
        "models/lm/en-m4f",
        "int8",
        "lm-en-m4f int8 (trained on English text, 1.8M params; the demo model)",
    ),
    (
        "m4f",
        "models/lm/large",
        "f32",
        "lm-large f32 (trained, 0.7M params)",
    ),
    (
        "m4f",
        "models/lm/large",
        "int8",
        "lm-large int8 (trained, 0.7M params)",
    ),
    (
        "m3",
        "models/lm/en-m3",
        "int8",
        "lm-en-m3 int8 (trained on English text, 151k params)",
    ),
    (
        "m3",
        "models/lm/small",
        "int8",
        "lm-small int8 (trained, 151k params)",
    ),
    (
        "m0",
        "models/mqar/gdn-2k-lr3e-3",
        "int8",
        "mqar gdn-2k-lr3e-3 int8 (trained MQAR recall, 88k params; the board's default)",
    ),
];

/// Runs every board with every table model and the trained models, and writes docs/boards.md.
pub fn run() -> Result<()> {
    let mut rows = Vec::new();
    for board in BOARDS {
        for &(model, dtype) in MODELS {
            let image = host::fixture_image(model, dtype)?;
            let image_bytes = std::fs::metadata(&image)?.len();
            let req = RunRequest::new(board, Firmware::Generate, &image);
            let row = match boards::build_and_run(&req).and_then(|r| r.report()) {
                Ok(r) => {
                    println!("{}", r.stats_line());
                    format!(
                        "| {} | {model} {dtype} | {image_bytes} | {} | {} | {} | {} | {} |",
                        board.name,
                        r.sizes.flash,
                        r.sizes.ram,
                        r.get("stack_bytes"),
                        r.get("state_bytes"),
                        r.get("instructions_per_token"),
                    )
                }
                Err(e) if format!("{e:#}").contains("does not fit") => {
                    println!("{} {model} {dtype}: does not fit", board.name);
                    format!(
                        "| {} | {model} {dtype} | {image_bytes} | does not fit | | | | |",
                        board.name
                    )
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("{} with {model} {dtype}", board.name))
                }
            };
            rows.push(row);
        }
    }
    let table = format!(
        "| board | model | image bytes | flash bytes | RAM bytes | stack bytes | state bytes | instructions/token |\n\
         |---|---|---|---|---|---|---|---|\n{}\n",
        rows.join("\n")
    );
    let mut trained = Vec::new();
    for &(name, dir, dtype, _) in TRAINED {
        let board = boards::named(name)?;
        let image = host::shipped_image(dir, dtype)?;
        let image_bytes = std::fs::metadata(&image)?.len();
        let req = RunRequest::new(board, Firmware::Generate, &image);
        let r = boards::build_and_run(&req)
            .and_then(|r| r.report())
            .with_context(|| format!("{name} with {dir} {dtype}"))?;
        println!("{}", r.stats_line());
        let cells = format!(
            "{} | {} | {} | {} | {} |",
            r.sizes.flash,
            r.sizes.ram,
            r.get("stack_bytes"),
            r.get("state_bytes"),
            r.get("instructions_per_token"),
        );
        trained.push(format!(
            "| {name} | `{dir}` {dtype} | {image_bytes} | {cells}"
        ));
    }
    let trained = format!(
        "| board | model | image bytes | flash bytes | RAM bytes | stack bytes | state bytes | instructions/token |\n\
         |---|---|---|---|---|---|---|---|\n{}\n",
        trained.join("\n")
    );
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(boards::root_dir())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "an unknown commit".to_string(),
            |o| format!("commit {}", String::from_utf8_lossy(&o.stdout).trim()),
        );
    let boards: Vec<String> = BOARDS
        .iter()
        .filter_map(|b| Some(format!("`{}` {}", b.name, b.qemu()?.about)))
        .collect();
    let boards = boards.join("; ");
    let doc = format!(
        "# Boards: sizes and speed\n\n\
         Generated by `cargo xtask board-table` from the `stats:` lines of\n\
         `cargo xtask board <board> --image <model> -n {DEFAULT_N}` (prompt {DEFAULT_PROMPT:?}, greedy); do not edit by hand.\n\
         Measured on {commit}: a record of that build, not guarded; the current figures of the boards'\n\
         default images are `boards/expected/*.stats` (the board suite fails beyond 2% of them) and\n\
         README.md's board table, generated from them.\n\n\
         - flash = .vector_table + .text + .rodata + .data of the firmware ELF (llvm-size), image included;\n\
         - RAM = .data + .bss (+ .uninit): static memory without the stack; the session buffer\n  \
           (state + scratch) is a `static` sized from the image at compile time;\n\
         - stack = peak measured by stack painting; state = the recurrent state inside the session buffer;\n\
         - instructions/token = instructions retired (QEMU `-icount shift=0,sleep=off`: SysTick on\n  \
           Cortex-M, `instret` on RISC-V) from the first prompt token to the last sample, divided by the\n  \
           tokens fed. These are instruction counts, not cycles: M3, M0 and rv32imac have no FPU (soft float).\n\n\
         Boards: {boards}.\n\n\
         Models are the random-weight fixtures of tests/fixtures (vocab 256, byte tokenizer); see\n\
         boards/README.md for the memory maps.\n\n{table}\n\
         ## Trained models\n\n\
         The byte-level LMs of models/lm (docs/models.md), same run (prompt {DEFAULT_PROMPT:?},\n\
         {DEFAULT_N} greedy tokens), on the boards they are made for: `small` fits the M3's real\n\
         256 KB / 64 KB at int8, `large` is for the M4F (f32 is what `cargo xtask demo` runs; int8\n\
         takes more instructions on the M4F, whose FPU makes f32 cheap). And the M0's default, the\n\
         MQAR recall model `models/mqar/gdn-2k-lr3e-3` at int8 (docs/mqar.md; 0.966 recall): two\n\
         Gated DeltaNet layers whose session fits the nRF51's 16 KB of RAM with the stack.\n\n{trained}"
    );
    let path = boards::root_dir().join("docs").join("boards.md");
    std::fs::create_dir_all(path.parent().unwrap())?;
    std::fs::write(&path, doc)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Replaces what lies between the markers `<!-- {name}:start -->` and
/// `<!-- {name}:end -->` of the file at `path` with `table`.
pub fn write_between(path: &Path, name: &str, table: &str) -> Result<()> {
    let (start, end) = (
        format!("<!-- {name}:start -->"),
        format!("<!-- {name}:end -->"),
    );
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let (Some(a), Some(z)) = (text.find(&start), text.find(&end)) else {
        bail!("{} has no {start} ... {end} markers", path.display());
    };
    std::fs::write(
        path,
        format!("{}{start}\n{table}{}", &text[..a], &text[z..]),
    )?;
    println!("wrote {} ({name})", path.display());
    Ok(())
}
