//! `cargo xtask bench-kernels [--board B] [--record]`: times the runtime's
//! matrix-vector products on the boards under QEMU (the `bench` firmware,
//! boards/src/bin/bench.rs) and, with `--record`, writes the table into
//! docs/benchmarks.md between `<!-- kernels:start -->` and
//! `<!-- kernels:end -->`.
//!
//! Each board runs [`CASES`] with the kernel module its target gets; m4f and
//! m55 also run the integer cases with `FERRITE_KERNELS=portable`, to show
//! what their assembly buys. The weights are in flash: the firmware is first
//! built with every case; when it does not fit the board, with one dtype at a
//! time, then one case at a time, and a case that does not fit alone is
//! reported as `kernel: board=.. dtype=.. rows=.. cols=.. does not fit`.

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};

use crate::boards::{self, Board, BuildOpts, Firmware, RunRequest, BOARDS};

/// (dtype, rows, cols): what every board times.
pub const CASES: &[(&str, usize, usize)] = &[
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
pub const PORTABLE_TOO: &[&str] = &["m4f", "m55", "m3", "rv32imac"];

const START: &str = "<!-- kernels:start -->";
const END: &str = "<!-- kernels:end -->";

type Case = (&'static str, usize, usize);

/// One `kernel:` line, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub line: String,
    pub board: String,
    pub module: String,
    pub dtype: String,
    pub rows: Option<usize>,
    pub cols: usize,
    pub instructions: Option<u64>,
    pub macs_per_instruction: Option<String>,
    /// `kernel-mismatch:` seen for this case: the results were wrong.
    pub mismatch: bool,
}

/// Parses the `kernel:` lines of a run (and marks the `kernel-mismatch:` ones).
pub fn parse(text: &str) -> Result<Vec<Measurement>> {
    let mut out: Vec<Measurement> = Vec::new();
    let mut mismatched = Vec::new();
    for line in text.lines().map(str::trim) {
        let (rest, mismatch) = if let Some(r) = line.strip_prefix("kernel: ") {
            (r, false)
        } else if let Some(r) = line.strip_prefix("kernel-mismatch: ") {
            (r, true)
        } else {
            continue;
        };
        let kv: BTreeMap<&str, &str> = rest
            .split_whitespace()
            .filter_map(|p| p.split_once('='))
            .collect();
        let get = |k: &str| {
            kv.get(k)
                .copied()
                .with_context(|| format!("no {k}= in {line:?}"))
        };
        let num = |k: &str| -> Result<usize> {
            get(k)?
                .parse()
                .with_context(|| format!("bad {k}= in {line:?}"))
        };
        let key = (
            get("board")?.to_string(),
            get("module")?.to_string(),
            get("dtype")?.to_string(),
            kv.get("rows").map(|_| num("rows")).transpose()?,
            num("cols")?,
        );
        if mismatch {
            mismatched.push(key);
            continue;
        }
        let instructions = kv
            .get("instructions")
            .map(|v| {
                v.parse::<u64>()
                    .with_context(|| format!("bad instructions= in {line:?}"))
            })
            .transpose()?;
        if instructions.is_none() && !line.ends_with("does not fit") {
            bail!("no instructions= in {line:?}");
        }
        out.push(Measurement {
            line: line.to_string(),
            board: key.0,
            module: key.1,
            dtype: key.2,
            rows: key.3,
            cols: key.4,
            instructions,
            macs_per_instruction: kv.get("macs_per_instruction").map(|s| s.to_string()),
            mismatch: false,
        });
    }
    for key in mismatched {
        for r in out.iter_mut() {
            if (&r.board, &r.module, &r.dtype, r.rows, r.cols)
                == (&key.0, &key.1, &key.2, key.3, key.4)
            {
                r.mismatch = true;
            }
        }
    }
    Ok(out)
}

/// `dtype:ROWSxCOLS,...` for `FERRITE_BENCH`.
fn spec(cases: &[Case]) -> String {
    cases
        .iter()
        .map(|(d, r, c)| format!("{d}:{r}x{c}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Builds and runs the bench firmware with `cases`; splits them (by dtype,
/// then one by one) when they do not fit the board's flash together.
fn run_cases(
    board: &'static Board,
    kernels: Option<&'static str>,
    cases: &[Case],
) -> Result<Vec<Measurement>> {
    let req = RunRequest {
        board,
        firmware: Firmware::Bench,
        image: std::path::Path::new(""),
        prompt: boards::DEFAULT_PROMPT,
        n: boards::DEFAULT_N,
        defmt: false,
        echo: false,
        opts: BuildOpts {
            bench: Some(spec(cases)),
            kernels,
            ..BuildOpts::default()
        },
    };
    let elf = match boards::build(&req) {
        Ok(elf) => elf,
        Err(e) if format!("{e:#}").contains("does not fit board") => {
            let module = kernels.unwrap_or(board.kernels());
            if let [(dtype, rows, cols)] = cases {
                eprintln!("{dtype} {rows}x{cols} does not fit {}", board.name);
                return Ok(vec![Measurement {
                    line: format!(
                        "kernel: board={} module={module} dtype={dtype} rows={rows} cols={cols} does not fit",
                        board.name
                    ),
                    board: board.name.into(),
                    module: module.into(),
                    dtype: dtype.to_string(),
                    rows: Some(*rows),
                    cols: *cols,
                    instructions: None,
                    macs_per_instruction: None,
                    mismatch: false,
                }]);
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
    let text = String::from_utf8_lossy(&run.output);
    // 0: ran; 1: ran, and a product differed from the reference.
    if !matches!(run.status, 0 | 1) {
        bail!(
            "the bench firmware failed on {} (exit status {}):\n{}",
            board.name,
            run.status,
            run.tail()
        );
    }
    let results = parse(&text)?;
    for r in &results {
        println!("{}", r.line);
        if r.mismatch {
            println!(
                "kernel-mismatch: board={} module={} dtype={} rows={} cols={}: results differ from the reference",
                r.board,
                r.module,
                r.dtype,
                r.rows.unwrap_or(0),
                r.cols
            );
        }
    }
    Ok(results)
}

/// Every case of one board: its own module, then (m4f, m55, m3, rv32imac) the portable one.
fn run_board(board: &'static Board) -> Result<Vec<Measurement>> {
    let mut out = run_cases(board, None, CASES)?;
    if PORTABLE_TOO.contains(&board.name) {
        let ints: Vec<Case> = CASES.iter().filter(|c| c.0 != "f32").copied().collect();
        out.extend(run_cases(board, Some("portable"), &ints)?);
    }
    // A quantize line per width and module (each build prints its own).
    let mut seen = Vec::new();
    out.retain(|r| {
        if r.dtype != "quantize" {
            return true;
        }
        let key = (r.module.clone(), r.cols);
        if seen.contains(&key) {
            false
        } else {
            seen.push(key);
            true
        }
    });
    Ok(out)
}

pub fn run(board: Option<&str>, record: bool) -> Result<ExitCode> {
    if let Some(v) = std::env::var_os("FERRITE_KERNELS") {
        bail!(
            "FERRITE_KERNELS={} is set: unset it (bench-kernels builds each board's own module, and the portable one where it compares them)",
            v.to_string_lossy()
        );
    }
    let boards: Vec<&'static Board> = match board {
        Some(name) => vec![boards::named(name)?],
        None => BOARDS.clone(),
    };
    let mut results = Vec::new();
    for b in &boards {
        results.extend(run_board(b)?);
    }
    let wrong = results.iter().filter(|r| r.mismatch).count();
    if record {
        let path = boards::root_dir().join("docs").join("benchmarks.md");
        let doc = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let names: Vec<&str> = boards.iter().map(|b| b.name).collect();
        let new = record_into(&doc, &results, &names, &qemu_version())?;
        std::fs::write(&path, new)?;
        println!("wrote the kernel table in {}", path.display());
    }
    if wrong > 0 {
        println!("{wrong} case(s) computed results that differ from the reference (see kernel-mismatch lines)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `qemu-system-arm --version`, e.g. `7.2.22`.
fn qemu_version() -> String {
    Command::new("qemu-system-arm")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let v = text.split("version ").nth(1)?.split_whitespace().next()?;
            Some(v.to_string())
        })
        .unwrap_or_else(|| "?".into())
}

/// The document with its kernels section rewritten: the lines already there
/// for boards not in `ran`, and `results` for those that are.
pub fn record_into(doc: &str, results: &[Measurement], ran: &[&str], qemu: &str) -> Result<String> {
    let (Some(a), Some(b)) = (doc.find(START), doc.find(END)) else {
        bail!("docs/benchmarks.md has no {START} ... {END} section to write the table into");
    };
    if a > b {
        bail!("docs/benchmarks.md: {END} comes before {START}");
    }
    let mut kept: Vec<Measurement> = parse(&doc[a..b])?
        .into_iter()
        .filter(|r| !ran.contains(&r.board.as_str()))
        .collect();
    kept.extend(results.iter().cloned());
    Ok(format!(
        "{}{START}\n{}{END}{}",
        &doc[..a],
        render(&kept, qemu),
        &doc[b + END.len()..]
    ))
}

/// Board order, then the board's own module before `portable`.
fn row_order(board: &str, module: &str) -> (usize, bool) {
    (
        BOARDS
            .iter()
            .position(|b| b.name == board)
            .unwrap_or(usize::MAX),
        module == "portable"
            && BOARDS
                .iter()
                .any(|b| b.name == board && b.kernels() != "portable"),
    )
}

/// The tables and the raw lines of the section.
fn render(results: &[Measurement], qemu: &str) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    for r in results {
        let key = (r.board.clone(), r.module.clone());
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    rows.sort_by_key(|(b, m)| row_order(b, m));
    let find = |board: &str, module: &str, dtype: &str, rows: Option<usize>, cols: usize| {
        results.iter().find(|r| {
            r.board == board
                && r.module == module
                && r.dtype == dtype
                && r.rows == rows
                && r.cols == cols
        })
    };
    let cell = |r: Option<&Measurement>, what: fn(&Measurement) -> String| match r {
        None => "".to_string(),
        Some(r) if r.instructions.is_none() => "does not fit".to_string(),
        Some(r) if r.mismatch => format!("{} (wrong results)", what(r)),
        Some(r) => what(r),
    };
    let mut head = String::from("| board | module |");
    let mut rule = String::from("|---|---|");
    for (d, r, c) in CASES {
        head.push_str(&format!(" {d} {r}x{c} |"));
        rule.push_str("---|");
    }
    let table = |what: fn(&Measurement) -> String| {
        let mut t = format!("{head}\n{rule}\n");
        for (board, module) in &rows {
            t.push_str(&format!("| {board} | {module} |"));
            for &(d, r, c) in CASES {
                t.push_str(&format!(
                    " {} |",
                    cell(find(board, module, d, Some(r), c), what)
                ));
            }
            t.push('\n');
        }
        t
    };
    let mpi = table(|r| r.macs_per_instruction.clone().unwrap_or_default());
    let count = table(|r| r.instructions.map(|n| n.to_string()).unwrap_or_default());
    let mut widths: Vec<usize> = results
        .iter()
        .filter(|r| r.dtype == "quantize")
        .map(|r| r.cols)
        .collect();
    widths.sort_unstable();
    widths.dedup();
    let mut quant = String::from("| board | module |");
    let mut qrule = String::from("|---|---|");
    for w in &widths {
        quant.push_str(&format!(" {w} columns |"));
        qrule.push_str("---|");
    }
    quant = format!("{quant}\n{qrule}\n");
    for (board, module) in &rows {
        if !results
            .iter()
            .any(|r| &r.board == board && &r.module == module && r.dtype == "quantize")
        {
            continue;
        }
        quant.push_str(&format!("| {board} | {module} |"));
        for &w in &widths {
            let c = cell(find(board, module, "quantize", None, w), |r| {
                r.instructions.map(|n| n.to_string()).unwrap_or_default()
            });
            quant.push_str(&format!(" {c} |"));
        }
        quant.push('\n');
    }
    let mut lines: Vec<&Measurement> = results.iter().collect();
    lines.sort_by_key(|r| row_order(&r.board, &r.module));
    let mut raw = String::new();
    for r in lines {
        raw.push_str(&r.line);
        raw.push('\n');
        if r.mismatch {
            raw.push_str(&format!(
                "kernel-mismatch: board={} module={} dtype={} rows={} cols={}\n",
                r.board,
                r.module,
                r.dtype,
                r.rows.unwrap_or(0),
                r.cols
            ));
        }
    }
    format!(
        "Written by `cargo xtask bench-kernels --record` (QEMU {qemu}, `-icount shift=0`); do not edit by hand.\n\n\
         Multiply-accumulates per instruction, `rows x cols / instructions` of one product (higher is better):\n\n\
         {mpi}\n\
         Instructions of one product:\n\n\
         {count}\n\
         Instructions to quantize one input vector (`tiled::quantize` + `arch::prepare`), once per vector for every integer product that reads it:\n\n\
         {quant}\n\
         <details><summary>The firmware's lines (what <code>--record</code> merges)</summary>\n\n```text\n{raw}```\n\n</details>\n"
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
        assert_eq!(r[0].dtype, "quantize");
        assert_eq!(r[0].rows, None);
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
        let doc = format!("# Title\n\nbefore\n{START}\nold\n```text\n{m3}kernel: board=m4f module=dsp dtype=int8 rows=256 cols=256 instructions=1 macs_per_instruction=65536.000\n```\n{END}\nafter\n");
        let new = record_into(&doc, &parse(RUN).unwrap(), &["m4f"], "7.2.22").unwrap();
        assert!(new.starts_with("# Title\n\nbefore\n<!-- kernels:start -->\nWritten by"));
        assert!(new.ends_with("<!-- kernels:end -->\nafter\n"));
        assert!(new.contains("| m4f | dsp | 0.674 |"), "{new}");
        assert!(new.contains("| m3 | portable | 0.328 |"), "{new}");
        assert!(new.contains("does not fit"));
        assert!(new.contains("0.367 (wrong results)"));
        assert!(!new.contains("65536"), "the m4f lines were replaced");
        // m4f comes after m3? No: board order (m4f first).
        assert!(new.find("| m4f | dsp |").unwrap() < new.find("| m3 | portable |").unwrap());
        // Recording the same again changes nothing.
        let again = record_into(&new, &parse(RUN).unwrap(), &["m4f"], "7.2.22").unwrap();
        assert_eq!(again, new);
        assert!(record_into("no markers", &[], &[], "7.2.22").is_err());
    }
}
