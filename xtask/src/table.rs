//! `cargo xtask board-table`: runs every board with every table model, and
//! the trained LMs of models/lm on the boards they are made for, and writes
//! docs/boards.md from the `stats:` lines (never typed by hand). If README.md
//! holds the markers `<!-- board-table:start -->` and
//! `<!-- board-table:end -->`, a compact table goes between them: one row per
//! board with its default image, and one per trained LM.

use anyhow::{Context, Result};

use crate::boards::{
    self, Firmware, Report, RunRequest, BOARDS, DEFAULT_MODEL, DEFAULT_N, DEFAULT_PROMPT,
};
use crate::{host, section};

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

/// The measured cells of a row: flash, RAM, stack, state, instructions per token.
fn cells(r: &Report) -> String {
    let (flash, ram) = (r.sizes.flash, r.sizes.ram);
    let run = |k| r.get(k).to_string();
    let [stack, state, speed] = ["stack_bytes", "state_bytes", "instructions_per_token"].map(run);
    format!("{flash} | {ram} | {stack} | {state} | {speed} |")
}

/// A table of `rows` whose first three columns are `first`, then [`cells`]'.
fn table(first: &str, rows: &[String]) -> String {
    let cells = "flash bytes | RAM bytes | stack bytes | state bytes | instructions/token";
    format!(
        "| {first} | {cells} |\n{}\n{}\n",
        "|---".repeat(8) + "|",
        rows.join("\n")
    )
}

/// Runs every board with every table model and the trained models, and writes the tables.
pub fn run() -> Result<()> {
    let (mut rows, mut compact, mut trained) = (Vec::new(), Vec::new(), Vec::new());
    for board in BOARDS {
        for &(model, dtype) in MODELS {
            let image = host::fixture_image(model, dtype)?;
            let image_bytes = std::fs::metadata(&image)?.len();
            let req = RunRequest::new(board, Firmware::Generate, &image);
            let cells = match boards::build_and_run(&req).and_then(|r| r.report()) {
                Ok(r) => {
                    println!("{}", r.stats_line());
                    if (model, dtype) == board.model {
                        let (name, core) = (board.name, board.core);
                        compact.push(format!("| {name} | {core} | {dtype} | {}", cells(&r)));
                    }
                    cells(&r)
                }
                Err(e) if format!("{e:#}").contains("does not fit") => {
                    println!("{} {model} {dtype}: does not fit", board.name);
                    "does not fit | | | | |".into()
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("{} with {model} {dtype}", board.name))
                }
            };
            rows.push(format!(
                "| {} | {model} {dtype} | {image_bytes} | {cells}",
                board.name
            ));
        }
    }
    let fixtures = table("board | model | image bytes", &rows);
    for &(name, dir, dtype, what) in TRAINED {
        let board = boards::named(name)?;
        let image = host::shipped_image(dir, dtype)?;
        let image_bytes = std::fs::metadata(&image)?.len();
        let req = RunRequest::new(board, Firmware::Generate, &image);
        let r = boards::build_and_run(&req)
            .and_then(|r| r.report())
            .with_context(|| format!("{name} with {dir} {dtype}"))?;
        println!("{}", r.stats_line());
        let cells = cells(&r);
        trained.push(format!(
            "| {name} | `{dir}` {dtype} | {image_bytes} | {cells}"
        ));
        compact.push(format!("| {name} | {} | {what} | {cells}", board.core));
    }
    let trained = table("board | model | image bytes", &trained);
    let compact = table("board | core | image", &compact);
    let boards: Vec<String> = BOARDS
        .iter()
        .filter_map(|b| Some(format!("`{}` {}", b.name, b.qemu()?.about)))
        .collect();
    let boards = boards.join("; ");
    let doc = format!(
        "# Boards: sizes and speed\n\n\
         Generated by `cargo xtask board-table` from the `stats:` lines of\n\
         `cargo xtask board <board> --image <model> -n {DEFAULT_N}` (prompt {DEFAULT_PROMPT:?}, greedy); do not edit by hand.\n\n\
         - flash = .vector_table + .text + .rodata + .data of the firmware ELF (llvm-size), image included;\n\
         - RAM = .data + .bss (+ .uninit): static memory without the stack; the session buffer\n  \
           (state + scratch) is a `static` sized from the image at compile time;\n\
         - stack = peak measured by stack painting; state = the recurrent state inside the session buffer;\n\
         - instructions/token = instructions retired (QEMU `-icount shift=0,sleep=off`: SysTick on\n  \
           Cortex-M, `instret` on RISC-V) from the first prompt token to the last sample, divided by the\n  \
           tokens fed. These are instruction counts, not cycles: M3, M0 and rv32imac have no FPU (soft float).\n\n\
         Boards: {boards}.\n\n\
         Models are the random-weight fixtures of tests/fixtures (vocab 256, byte tokenizer); see\n\
         boards/README.md for the memory maps.\n\n{fixtures}\n\
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

    let readme = boards::root_dir().join("README.md");
    section::write(&readme, "board-table", &compact)?;
    println!("wrote {} (board-table)", readme.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables' headers are those of the committed docs/boards.md and README.md.
    #[test]
    fn headers_are_the_committed_ones() {
        let read = |f: &str| std::fs::read_to_string(boards::root_dir().join(f)).unwrap();
        let (doc, readme) = (read("docs/boards.md"), read("README.md"));
        let row = "| m0 | x | y | ".to_string();
        let full = table("board | model | image bytes", std::slice::from_ref(&row));
        let compact = table("board | core | image", &[row]);
        let header = |t: &str| t.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(doc.matches(&header(&full)).count(), 2, "{full}");
        assert!(readme.contains(&header(&compact)), "{compact}");
        assert!(full.ends_with("\n| m0 | x | y | \n"));
    }
}
