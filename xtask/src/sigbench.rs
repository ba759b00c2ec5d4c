//! `cargo xtask bench-signatures [--board B] [--record]`: what one signature
//! verification costs on the boards under QEMU, by crate (the `sigbench`
//! firmware, boards/src/bin/sigbench.rs), and with `--record` the table in
//! docs/signing.md between `<!-- signatures:start -->` and
//! `<!-- signatures:end -->`.
//!
//! Each crate is built alone into the firmware, and the harness without any
//! crate too: a crate's flash and static RAM are its build's less the
//! harness's; its instructions and stack are those of the one call.

use std::process::ExitCode;

use anyhow::{bail, ensure, Context, Result};
use ferrite_common::report::Fields;

use crate::boards::{self, Board, BuildOpts, Firmware, RunRequest};
use crate::section;

/// `bench-signatures`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct Args {
    /// Only this board [default: m4f, m3 and rv32imac]
    #[arg(long, value_name = "B", value_parser = crate::args::board())]
    pub board: Option<&'static Board>,
    /// Write the table into docs/signing.md (every board of the default set)
    #[arg(long, conflicts_with = "board")]
    pub record: bool,
}

/// The boards measured by default.
pub const BOARDS: &[&str] = &["m4f", "m3", "rv32imac"];

/// (firmware feature, the `crate=` the firmware prints): the harness alone
/// first (docs/signing.md says what each measures).
pub const CRATES: &[(&str, &str)] = &[
    ("", "none"),
    ("sig-dalek", "ed25519-dalek"),
    ("sig-salty", "salty"),
    ("sig-compact", "ed25519-compact"),
    ("sig-compact-small", "ed25519-compact-opt-size"),
    ("sig-ferrite", "ferrite"),
    ("sig-p256", "p256"),
    ("sig-sha256", "sha2-sha256-1kib"),
];

/// One `sigverify:` line with the build's sizes appended (or a build that
/// does not fit the board: `sigverify: board=.. crate=.. does not fit`).
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub board: String,
    pub krate: String,
    pub fits: bool,
    pub instructions: u64,
    pub stack: u64,
    pub flash: u64,
    pub ram: u64,
    pub ok: bool,
}

/// Parses the `sigverify:` lines of `text`.
pub fn parse(text: &str) -> Result<Vec<Line>> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("sigverify: ") else {
            continue;
        };
        let kv = Fields(rest);
        let get = |k: &str| kv.get(k).with_context(|| format!("no {k}= in {line:?}"));
        if line.ends_with(" does not fit") {
            out.push(Line {
                board: get("board")?.to_string(),
                krate: get("crate")?.to_string(),
                fits: false,
                instructions: 0,
                stack: 0,
                flash: 0,
                ram: 0,
                ok: false,
            });
            continue;
        }
        let num = |k: &str| -> Result<u64> {
            get(k)?
                .parse()
                .with_context(|| format!("bad {k}= in {line:?}"))
        };
        out.push(Line {
            board: get("board")?.to_string(),
            krate: get("crate")?.to_string(),
            fits: true,
            instructions: num("instructions")?,
            stack: num("stack_bytes")?,
            flash: num("flash_bytes")?,
            ram: num("ram_bytes")?,
            ok: num("verifies")? == 1 && num("rejects_tampered")? == 1,
        });
    }
    Ok(out)
}

impl Line {
    /// The line as the firmware printed it, with the build's sizes.
    fn text(&self) -> String {
        if !self.fits {
            return format!(
                "sigverify: board={} crate={} does not fit",
                self.board, self.krate
            );
        }
        let ok = u8::from(self.ok);
        format!(
            "sigverify: board={} crate={} instructions={} stack_bytes={} verifies={ok} rejects_tampered={ok} flash_bytes={} ram_bytes={}",
            self.board, self.krate, self.instructions, self.stack, self.flash, self.ram
        )
    }
}

/// Builds and runs `sigbench` on `board` with `feature` (printing `krate`).
fn measure(board: &'static Board, feature: &'static str, krate: &str) -> Result<Line> {
    let req = RunRequest {
        opts: BuildOpts {
            features: [feature].into_iter().filter(|f| !f.is_empty()).collect(),
            ..BuildOpts::default()
        },
        ..RunRequest::new(board, Firmware::SigBench, std::path::Path::new(""))
    };
    let elf = match boards::build(&req) {
        Ok(elf) => elf,
        Err(e) if format!("{e:#}").contains("does not fit") => {
            let line = format!("sigverify: board={} crate={krate} does not fit", board.name);
            println!("{line}");
            return Ok(parse(&line)?.remove(0));
        }
        Err(e) => return Err(e),
    };
    let cwd = boards::work_dir().join(board.name);
    let run = boards::run_qemu(board, &elf, &cwd, false, false, boards::DEFAULT_TIMEOUT_S)?;
    let text = String::from_utf8_lossy(&run.output);
    let line = text
        .lines()
        .find(|l| l.starts_with("sigverify: "))
        .with_context(|| {
            format!(
                "no sigverify: line (exit status {}):\n{}",
                run.status,
                run.tail()
            )
        })?;
    let with_sizes = format!(
        "{line} flash_bytes={} ram_bytes={}",
        run.sizes.flash, run.sizes.ram
    );
    let parsed = parse(&with_sizes)?.remove(0);
    ensure!(
        run.status == 0 && parsed.ok,
        "{} on {}: the good signature must verify and the tampered one must not: {line}",
        parsed.krate,
        board.name
    );
    println!("{}", parsed.text());
    Ok(parsed)
}

/// Measures every crate on `board` (the default boards without); `record`: writes docs/signing.md.
pub fn run(board: Option<&'static Board>, record: bool) -> Result<ExitCode> {
    let names: Vec<&str> = board.map_or_else(|| BOARDS.to_vec(), |b| vec![b.name]);
    let mut lines = Vec::new();
    for name in names {
        let b = boards::named(name)?;
        for (feature, krate) in CRATES {
            lines.push(measure(b, feature, krate)?);
        }
    }
    println!("{}", render(&lines)?);
    if record {
        let path = boards::root_dir().join("docs").join("signing.md");
        let doc = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        std::fs::write(
            &path,
            section::replace(&doc, "signatures", &render(&lines)?)?,
        )?;
        println!("wrote the signature table in {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The table (each crate's flash and static RAM less the harness's on the
/// same board) and the raw lines it is made from.
pub fn render(lines: &[Line]) -> Result<String> {
    let mut t = String::from(
        "| board | crate | instructions | stack bytes | flash bytes added | static RAM bytes added |\n|---|---|---|---|---|---|\n",
    );
    for l in lines.iter().filter(|l| l.krate != "none") {
        let Some(base) = lines
            .iter()
            .find(|b| b.board == l.board && b.krate == "none")
        else {
            bail!("no harness-alone line for {}", l.board);
        };
        if !l.fits {
            t.push_str(&format!(
                "| {} | {} | does not fit | | | |\n",
                l.board, l.krate
            ));
            continue;
        }
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            l.board,
            l.krate,
            l.instructions,
            l.stack,
            l.flash as i64 - base.flash as i64,
            l.ram as i64 - base.ram as i64
        ));
    }
    let raw: String = lines.iter().map(|l| l.text() + "\n").collect();
    Ok(format!(
        "Written by `cargo xtask bench-signatures --record`; do not edit by hand.\n\n{t}\n\
         <details><summary>The firmware's lines</summary>\n\n```text\n{raw}```\n\n</details>\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed table in docs/signing.md is what its own lines render to.
    #[test]
    fn the_committed_table_is_the_rendered_one() {
        let doc = std::fs::read_to_string(boards::root_dir().join("docs/signing.md")).unwrap();
        let old = section::get(&doc, "signatures").unwrap();
        let lines = parse(old).unwrap();
        assert!(lines.len() >= CRATES.len(), "{old}");
        let new = section::replace(&doc, "signatures", &render(&lines).unwrap()).unwrap();
        assert!(
            new == doc,
            "docs/signing.md: the table is not the rendered one"
        );
    }

    #[test]
    fn sizes_are_the_crate_build_less_the_harness() {
        let text = "sigverify: board=m3 crate=none instructions=9 stack_bytes=8 verifies=1 rejects_tampered=1 flash_bytes=1000 ram_bytes=100\n\
                    sigverify: board=m3 crate=salty instructions=900 stack_bytes=80 verifies=1 rejects_tampered=1 flash_bytes=1500 ram_bytes=104\n\
                    sigverify: board=m3 crate=big does not fit\n";
        let lines = parse(text).unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[2].text(),
            "sigverify: board=m3 crate=big does not fit"
        );
        let table = render(&lines).unwrap();
        assert!(
            table.contains("| m3 | salty | 900 | 80 | 500 | 4 |"),
            "{table}"
        );
        assert!(!table.contains("| m3 | none |"), "{table}");
        assert!(table.contains("| m3 | big | does not fit |"), "{table}");
        assert!(render(&lines[1..]).is_err());
    }
}
