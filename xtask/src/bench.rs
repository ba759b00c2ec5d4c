//! `cargo xtask bench-kernels [--board B] [--record]`: times the runtime's
//! matrix-vector products on the boards under QEMU (the `bench` firmware,
//! boards/src/bin/bench.rs) and, with `--record`, writes the table into
//! docs/benchmarks.md between `<!-- kernels:start -->` and
//! `<!-- kernels:end -->`.
//!
//! Each board runs [`CASES`] with the kernel module its target gets; those
//! of [`PORTABLE_TOO`] also run the integer cases with
//! `FERRITE_KERNELS=portable`, to show what their assembly buys. The weights
//! are in flash: the firmware is first built with every case; when it does
//! not fit the board, with one dtype at a time, then one case at a time, and
//! a case that does not fit alone is reported as
//! `kernel: board=.. dtype=.. rows=.. cols=.. does not fit`.

use std::collections::HashSet;
use std::process::{Command, ExitCode};

use anyhow::{bail, ensure, Context, Result};
use ferrite_common::report::Fields;

use crate::boards::{self, Board, BuildOpts, Firmware, RunRequest, BOARDS};
use crate::section;

/// `bench-kernels`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct Args {
    /// Only this board [default: every board]
    #[arg(long, value_name = "B", value_parser = crate::args::board())]
    pub board: Option<&'static Board>,
    /// Write the table into docs/benchmarks.md
    #[arg(long)]
    pub record: bool,
}

/// (dtype, rows, cols): what every board times.
type Case = (&'static str, usize, usize);

/// What every board times.
pub const CASES: &[Case] = &[
    ("int8", 256, 256),
    ("int8", 64, 512),
    ("int8", 1024, 64),
    ("int4", 256, 256),
    ("int4", 64, 512),
    ("int4", 1024, 64),
    ("f32", 256, 256),
    ("f32", 64, 512),
    ("f32", 1024, 64),
];

/// Boards also measured with the portable kernels.
pub const PORTABLE_TOO: &[&str] = &["m4f", "m55", "m3", "rv32imac", "m0"];

/// What a `kernel:` line measured: board, module, dtype, rows (none for
/// `quantize`), cols.
type Key = (String, String, String, Option<usize>, usize);

/// One `kernel:` line, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub line: String,
    pub key: Key,
    /// None: the case does not fit the board.
    pub instructions: Option<u64>,
    pub macs_per_instruction: Option<String>,
    /// `kernel-mismatch:` seen for this case: the results were wrong.
    pub mismatch: bool,
}

impl Measurement {
    /// The `kernel-mismatch:` line of this case.
    fn mismatch_line(&self) -> String {
        let (board, module, dtype, rows, cols) = &self.key;
        let rows = rows.unwrap_or(0);
        format!(
            "kernel-mismatch: board={board} module={module} dtype={dtype} rows={rows} cols={cols}"
        )
    }
}

/// Parses the `kernel:` lines of a run (and marks the `kernel-mismatch:` ones).
pub fn parse(text: &str) -> Result<Vec<Measurement>> {
    let mut out: Vec<Measurement> = Vec::new();
    let mut mismatched = Vec::new();
    for line in text.lines().map(str::trim) {
        let (rest, mismatch) = match (
            line.strip_prefix("kernel: "),
            line.strip_prefix("kernel-mismatch: "),
        ) {
            (Some(r), _) => (r, false),
            (_, Some(r)) => (r, true),
            _ => continue,
        };
        let kv = Fields(rest);
        let get = |k: &str| kv.get(k).with_context(|| format!("no {k}= in {line:?}"));
        let num = |k: &str| {
            get(k)?
                .parse()
                .with_context(|| format!("bad {k}= in {line:?}"))
        };
        let rows = kv.get("rows").map(|_| num("rows")).transpose()?;
        let key = (
            get("board")?.into(),
            get("module")?.into(),
            get("dtype")?.into(),
            rows,
            num("cols")?,
        );
        if mismatch {
            mismatched.push(key);
            continue;
        }
        let instructions = kv
            .get("instructions")
            .map(|_| num("instructions"))
            .transpose()?;
        ensure!(
            instructions.is_some() || line.ends_with("does not fit"),
            "no instructions= in {line:?}"
        );
        out.push(Measurement {
            line: line.to_string(),
            key,
            instructions: instructions.map(|n| n as u64),
            macs_per_instruction: kv.get("macs_per_instruction").map(|s| s.to_string()),
            mismatch: false,
        });
    }
    for r in out.iter_mut() {
        r.mismatch = mismatched.contains(&r.key);
    }
    Ok(out)
}

/// Builds and runs the bench firmware with `cases`; splits them (by dtype,
/// then one by one) when they do not fit the board's flash together.
fn run_cases(
    board: &'static Board,
    kernels: Option<&'static str>,
    cases: &[Case],
) -> Result<Vec<Measurement>> {
    let spec: Vec<String> = cases
        .iter()
        .map(|(d, r, c)| format!("{d}:{r}x{c}"))
        .collect();
    let req = RunRequest {
        opts: BuildOpts {
            bench: Some(spec.join(",")),
            kernels,
            ..BuildOpts::default()
        },
        ..RunRequest::new(board, Firmware::Bench, std::path::Path::new(""))
    };
    let elf = match boards::build(&req) {
        Ok(elf) => elf,
        Err(e) if format!("{e:#}").contains("does not fit board") => {
            if let [(dtype, rows, cols)] = cases {
                eprintln!("{dtype} {rows}x{cols} does not fit {}", board.name);
                let module = kernels.unwrap_or(board.kernels());
                return parse(&format!(
                    "kernel: board={} module={module} dtype={dtype} rows={rows} cols={cols} does not fit",
                    board.name
                ));
            }
            let mut dtypes: Vec<&str> = cases.iter().map(|c| c.0).collect();
            dtypes.dedup();
            let parts: Vec<Vec<Case>> = if dtypes.len() > 1 {
                eprintln!("too large for {}: one dtype at a time", board.name);
                dtypes
                    .iter()
                    .map(|d| cases.iter().filter(|c| c.0 == *d).copied().collect())
                    .collect()
            } else {
                eprintln!("too large for {}: one case at a time", board.name);
                cases.iter().map(|c| vec![*c]).collect()
            };
            let mut all = Vec::new();
            for part in parts {
                all.extend(run_cases(board, kernels, &part)?);
            }
            return Ok(all);
        }
        Err(e) => return Err(e),
    };
    let cwd = boards::work_dir().join(board.name);
    let run = boards::run_qemu(board, &elf, &cwd, false, false, boards::DEFAULT_TIMEOUT_S)?;
    // 0: ran; 1: ran, and a product differed from the reference.
    if !matches!(run.status, 0 | 1) {
        bail!(
            "the bench firmware failed on {} (exit status {}):\n{}",
            board.name,
            run.status,
            run.tail()
        );
    }
    let results = parse(&String::from_utf8_lossy(&run.output))?;
    for r in &results {
        println!("{}", r.line);
        if r.mismatch {
            println!("{}: results differ from the reference", r.mismatch_line());
        }
    }
    Ok(results)
}

/// Every case of one board: its own module, then (those of [`PORTABLE_TOO`]) the portable one.
fn run_board(board: &'static Board) -> Result<Vec<Measurement>> {
    let mut out = run_cases(board, None, CASES)?;
    if PORTABLE_TOO.contains(&board.name) {
        let ints: Vec<Case> = CASES.iter().filter(|c| c.0 != "f32").copied().collect();
        out.extend(run_cases(board, Some("portable"), &ints)?);
    }
    // A quantize line per width and module (each build prints its own).
    let mut seen = HashSet::new();
    out.retain(|r| r.key.2 != "quantize" || seen.insert((r.key.1.clone(), r.key.4)));
    Ok(out)
}

/// Runs every case on `board` (every board without); `record`: writes docs/benchmarks.md.
pub fn run(board: Option<&'static Board>, record: bool) -> Result<ExitCode> {
    if let Some(v) = std::env::var_os("FERRITE_KERNELS") {
        bail!(
            "FERRITE_KERNELS={} is set: unset it (bench-kernels builds each board's own module, and the portable one where it compares them)",
            v.to_string_lossy()
        );
    }
    let boards: Vec<&'static Board> = board.map_or_else(|| BOARDS.iter().collect(), |b| vec![b]);
    let mut results = Vec::new();
    for b in &boards {
        results.extend(run_board(b)?);
    }
    if record {
        let path = boards::root_dir().join("docs").join("benchmarks.md");
        let doc = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let names: Vec<&str> = boards.iter().map(|b| b.name).collect();
        std::fs::write(&path, record_into(&doc, &results, &names, &qemu_version())?)?;
        println!("wrote the kernel table in {}", path.display());
    }
    let wrong = results.iter().filter(|r| r.mismatch).count();
    if wrong > 0 {
        println!("{wrong} case(s) computed results that differ from the reference (see kernel-mismatch lines)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `qemu-system-arm --version`, e.g. `7.2.22`.
fn qemu_version() -> String {
    let out = Command::new("qemu-system-arm").arg("--version").output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let version = text
        .split("version ")
        .nth(1)
        .and_then(|v| v.split_whitespace().next());
    version.unwrap_or("?").to_string()
}

/// The document with its kernels section rewritten: the lines already there
/// for boards not in `ran`, and `results` for those that are.
pub fn record_into(doc: &str, results: &[Measurement], ran: &[&str], qemu: &str) -> Result<String> {
    let old = section::get(doc, "kernels").context("docs/benchmarks.md")?;
    let mut kept: Vec<Measurement> = parse(old)?
        .into_iter()
        .filter(|r| !ran.contains(&r.key.0.as_str()))
        .collect();
    kept.extend(results.iter().cloned());
    section::replace(doc, "kernels", &render(&kept, qemu))
}

/// Board order, then the board's own module before `portable`.
fn row_order(r: &Measurement) -> (usize, bool) {
    let (board, module) = (&r.key.0, &r.key.1);
    let at = BOARDS.iter().position(|b| b.name == board);
    (
        at.unwrap_or(usize::MAX),
        module == "portable" && at.is_some_and(|i| BOARDS[i].kernels() != "portable"),
    )
}

/// The tables and the raw lines of the section.
fn render(results: &[Measurement], qemu: &str) -> String {
    let mut sorted: Vec<&Measurement> = results.iter().collect();
    sorted.sort_by_key(|r| row_order(r));
    let mut rows: Vec<(&str, &str)> = Vec::new();
    for r in &sorted {
        if !rows.contains(&(&r.key.0, &r.key.1)) {
            rows.push((&r.key.0, &r.key.1));
        }
    }
    // A table of `what` per (board, module) row and (dtype, rows, cols)
    // column, with the rows that have a cell.
    let table = |columns: &[(&str, Option<usize>, usize, String)],
                 what: fn(&Measurement) -> String| {
        let mut t = String::from("| board | module |");
        columns
            .iter()
            .for_each(|c| t.push_str(&format!(" {} |", c.3)));
        t.push_str(&format!("\n|---|---|{}\n", "---|".repeat(columns.len())));
        for (board, module) in &rows {
            let cells: Vec<Option<&Measurement>> = columns
                .iter()
                .map(|(d, r, c, _)| {
                    results.iter().find(|m| {
                        m.key == (board.to_string(), module.to_string(), d.to_string(), *r, *c)
                    })
                })
                .collect();
            if cells.iter().all(Option::is_none) {
                continue;
            }
            t.push_str(&format!("| {board} | {module} |"));
            for cell in cells {
                let text = match cell {
                    None => String::new(),
                    Some(m) if m.instructions.is_none() => "does not fit".into(),
                    Some(m) if m.mismatch => format!("{} (wrong results)", what(m)),
                    Some(m) => what(m),
                };
                t.push_str(&format!(" {text} |"));
            }
            t.push('\n');
        }
        t
    };
    let cases: Vec<_> = CASES
        .iter()
        .map(|&(d, r, c)| (d, Some(r), c, format!("{d} {r}x{c}")))
        .collect();
    let mut widths: Vec<usize> = results
        .iter()
        .filter(|r| r.key.2 == "quantize")
        .map(|r| r.key.4)
        .collect();
    widths.sort_unstable();
    widths.dedup();
    let quantize: Vec<_> = widths
        .iter()
        .map(|&w| ("quantize", None, w, format!("{w} columns")))
        .collect();
    let count = |r: &Measurement| r.instructions.map(|n| n.to_string()).unwrap_or_default();
    let mut raw = String::new();
    for r in sorted {
        raw.push_str(&format!("{}\n", r.line));
        if r.mismatch {
            raw.push_str(&format!("{}\n", r.mismatch_line()));
        }
    }
    format!(
        "Written by `cargo xtask bench-kernels --record` (QEMU {qemu}, `-icount shift=0`); do not edit by hand.\n\n\
         Multiply-accumulates per instruction, `rows x cols / instructions` of one product (higher is better):\n\n\
         {}\n\
         Instructions of one product:\n\n\
         {}\n\
         Instructions to quantize one input vector (`tiled::quantize` + `arch::prepare`), once per vector for every integer product that reads it:\n\n\
         {}\n\
         <details><summary>The firmware's lines (what <code>--record</code> merges)</summary>\n\n```text\n{raw}```\n\n</details>\n",
        table(&cases, |r| r.macs_per_instruction.clone().unwrap_or_default()),
        table(&cases, count),
        table(&quantize, count),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
kernel: board=m4f module=dsp dtype=quantize cols=256 instructions=13245
kernel: board=m4f module=dsp dtype=int8 rows=256 cols=256 instructions=97220 macs_per_instruction=0.674
kernel: board=m4f module=dsp dtype=int4 rows=256 cols=256 instructions=178625 macs_per_instruction=0.367
kernel-mismatch: board=m4f module=dsp dtype=int4 rows=256 cols=256 row=0 got=0x419121aa want=0x4183e1b2
";

    #[test]
    fn parses_lines_and_marks_mismatches() {
        let r = parse(RUN).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].key.2.as_str(), r[0].key.3), ("quantize", None));
        assert_eq!(r[1].instructions, Some(97220));
        assert_eq!(r[1].macs_per_instruction.as_deref(), Some("0.674"));
        assert!(!r[1].mismatch);
        assert!(r[2].mismatch);
        let fit =
            parse("kernel: board=m3 module=portable dtype=f32 rows=256 cols=256 does not fit")
                .unwrap();
        assert_eq!(fit[0].instructions, None);
        assert!(parse("kernel: board=m3 module=portable dtype=f32 rows=1 cols=16").is_err());
    }

    #[test]
    fn records_into_the_section_and_keeps_other_boards() {
        let m3 = "kernel: board=m3 module=portable dtype=int8 rows=256 cols=256 instructions=200000 macs_per_instruction=0.328\n\
                  kernel: board=m3 module=portable dtype=f32 rows=256 cols=256 does not fit\n";
        let doc = format!("# Title\n\nbefore\n<!-- kernels:start -->\nold\n```text\n{m3}kernel: board=m4f module=dsp dtype=int8 rows=256 cols=256 instructions=1 macs_per_instruction=65536.000\n```\n<!-- kernels:end -->\nafter\n");
        let new = record_into(&doc, &parse(RUN).unwrap(), &["m4f"], "7.2.22").unwrap();
        assert!(new.starts_with("# Title\n\nbefore\n<!-- kernels:start -->\nWritten by"));
        assert!(new.ends_with("<!-- kernels:end -->\nafter\n"));
        assert!(new.contains("| m4f | dsp | 0.674 |"), "{new}");
        assert!(new.contains("| m3 | portable | 0.328 |"), "{new}");
        assert!(new.contains("does not fit"));
        assert!(new.contains("0.367 (wrong results)"));
        assert!(!new.contains("65536"), "the m4f lines were replaced");
        // Board order: m4f first.
        assert!(new.find("| m4f | dsp |").unwrap() < new.find("| m3 | portable |").unwrap());
        // Recording the same again changes nothing.
        let again = record_into(&new, &parse(RUN).unwrap(), &["m4f"], "7.2.22").unwrap();
        assert_eq!(again, new);
        assert!(record_into("no markers", &[], &[], "7.2.22").is_err());
    }

    /// The committed docs/benchmarks.md is what its own lines render to.
    #[test]
    fn the_committed_table_is_the_rendered_one() {
        let doc = std::fs::read_to_string(boards::root_dir().join("docs/benchmarks.md")).unwrap();
        let qemu = doc
            .split("--record` (QEMU ")
            .nth(1)
            .and_then(|v| v.split(',').next())
            .unwrap();
        let new = record_into(&doc, &[], &[], qemu).unwrap();
        assert!(
            new == doc,
            "docs/benchmarks.md: the kernels section is not the rendered one"
        );
    }
}
