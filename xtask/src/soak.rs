//! `cargo xtask soak [--tokens N] [--board-tokens N] [--only T] [--record]`:
//! long streams with no reset (docs/soak.md). On the host, `ferrite soak`
//! streams `--tokens` (default 1,000,000) tokens through each LM (the held-out
//! text, repeated; fla's RWKV-7 and Mamba-2 LMs among them) and one MQAR
//! model per mixer family that has one (sequences back to back), int8;
//! lm/small also with its SWA sinks removed. On the m4f board the
//! `eval` firmware scores `--board-tokens` (default 100,000) bytes of the
//! repeated text through `models/lm/small` int8 in one chunk (never reset),
//! and its f64 sum must equal the host's bit for bit. `--record` writes the
//! table into docs/soak.md. `cargo xtask test` runs the host streams at
//! 100,000 tokens (docs/testing.md).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, ensure, Context, Result};
use ferrite_common::report::Fields;

use crate::boards::{self, root_dir};
use crate::{eval_board, host, section};

/// One host stream, a row of the table.
#[derive(Clone, Copy)]
struct Case {
    label: &'static str,
    dir: &'static str,
    /// Streams the held-out text (else MQAR sequences).
    text: bool,
    /// Removes the sinks of every SWA layer (of a model trained with them).
    drop_sinks: bool,
    /// The image takes the integer token path (`--path int`: int16 / int8 KV states).
    int_path: bool,
}

const fn case(label: &'static str, dir: &'static str, text: bool) -> Case {
    Case {
        label,
        dir,
        text,
        drop_sinks: false,
        int_path: false,
    }
}

/// The host streams (int8 images).
const HOST_CASES: [Case; 12] = [
    case(
        "lm/small (gdn+swa+gsa+bla, 4 sinks)",
        "models/lm/small",
        true,
    ),
    Case {
        drop_sinks: true,
        ..case("lm/small, sinks removed", "models/lm/small", true)
    },
    Case {
        int_path: true,
        ..case("lm/small, integer token path", "models/lm/small", true)
    },
    case("lm/large (4 sinks)", "models/lm/large", true),
    case("lm/rwkv7-m3 (fla's RWKV-7)", "models/lm/rwkv7-m3", true),
    case("lm/mamba2-m3 (fla's Mamba-2)", "models/lm/mamba2-m3", true),
    case("mqar/bla-m7", "models/mqar/bla-m7", false),
    case("mqar/gdn-8k-lr3e-3", "models/mqar/gdn-8k-lr3e-3", false),
    Case {
        int_path: true,
        ..case(
            "mqar/gdn-8k-lr3e-3, integer token path",
            "models/mqar/gdn-8k-lr3e-3",
            false,
        )
    },
    case("mqar/gsa-m16-lr3e-3", "models/mqar/gsa-m16-lr3e-3", false),
    case("mqar/swa-w32 (no sinks)", "models/mqar/swa-w32", false),
    case("mqar/swa-s4-w28 (4 sinks)", "models/mqar/swa-s4-w28", false),
];

/// How far the last window's bits per byte may sit from the first's (the
/// same text at position 0 and at the end of the stream): f32 states, and
/// the integer token path's quantized states (issue 24's bar).
pub const BPB_DRIFT: f64 = 0.001;
pub const BPB_DRIFT_INT: f64 = 0.002;
/// How far the largest state magnitude of the last window may grow over the
/// first window's: bounded, not drifting.
pub const STATE_GROWTH: f64 = 2.0;

/// What every stream must show (docs/soak.md): finite logits, no clamped
/// state, a state that stays bounded and, on text, the same quality at the
/// end as at the start.
fn check_claims(c: &Case, f: &Fields) -> Result<()> {
    let num = |key: &str| -> Result<f64> {
        let v = f
            .get(key)
            .with_context(|| format!("soak line without {key}"))?;
        v.parse().with_context(|| format!("{key}={v}"))
    };
    let label = c.label;
    ensure!(
        num("nonfinite_logits")? == 0.0,
        "{label}: non-finite logits"
    );
    ensure!(
        num("clamps")? == 0.0,
        "{label}: {} state values clamped",
        num("clamps")?
    );
    let (first, last) = (num("max_state_first")?, num("max_state_last")?);
    ensure!(
        last.is_finite() && last <= STATE_GROWTH * first,
        "{label}: the state grew from {first} (first window) to {last} (last), more than {STATE_GROWTH}x"
    );
    if c.text {
        let drift = (num("last_bpb")? - num("first_bpb")?).abs();
        let bound = if c.int_path { BPB_DRIFT_INT } else { BPB_DRIFT };
        ensure!(
            drift <= bound + 1e-9,
            "{label}: the same text scores {drift:.4} bits per byte apart at the start and the end (bound {bound})"
        );
    }
    Ok(())
}

/// `soak`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct Args {
    /// Tokens per host stream (at least 20000: two windows)
    #[arg(short = 'n', long, alias = "n", value_name = "N", default_value_t = 1_000_000,
          value_parser = crate::args::at_least::<20_000>)]
    pub tokens: usize,
    /// Tokens of the m4f stream; 0 skips it
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub board_tokens: usize,
    /// Only the rows whose label contains T
    #[arg(long, value_name = "T")]
    pub only: Option<String>,
    /// Write the table into docs/soak.md
    #[arg(long)]
    pub record: bool,
}

/// The text every text stream repeats.
const TEXT: &str = "models/lm/heldout.txt";
/// Where `--record` writes (its `soak` section).
const DOC: &str = "docs/soak.md";

/// The `key=value` fields of a `soak:` line.
fn fields(line: &str) -> Fields<'_> {
    Fields(line.trim_start_matches("soak:"))
}

/// A copy of `dir` whose config.json has `sinks: 0` on every SWA layer.
fn without_sinks(dir: &Path) -> Result<PathBuf> {
    let out = boards::work_dir().join("soak").join("lm-small-nosinks");
    std::fs::create_dir_all(&out)?;
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;
    let layers = config["layers"]
        .as_array_mut()
        .context("config.json without layers")?;
    for layer in layers.iter_mut().filter(|l| l["mixer"] == "swa") {
        layer["sinks"] = 0.into();
    }
    std::fs::write(
        out.join("config.json"),
        serde_json::to_string_pretty(&config)?,
    )?;
    std::fs::copy(dir.join("model.safetensors"), out.join("model.safetensors"))?;
    Ok(out)
}

/// Runs one host stream, checks its claims; returns its table row.
fn host_case(c: &Case, tokens: usize) -> Result<String> {
    let label = c.label;
    let name = format!(
        "soak-{}",
        label.replace(['/', ' ', '(', ')', ',', '+'], "_")
    );
    let dir = match c.drop_sinks {
        true => without_sinks(&root_dir().join(c.dir))?,
        false => root_dir().join(c.dir),
    };
    let image = host::model_image(&dir, &name, if c.int_path { "int8-int" } else { "int8" })?;
    let mut cmd = Command::new(host::ferrite()?);
    cmd.arg("soak")
        .arg(&image)
        .args(["--tokens", &tokens.to_string()]);
    match c.text {
        true => cmd.arg("--text").arg(root_dir().join(TEXT)),
        false => cmd.arg("--mqar"),
    };
    eprintln!("soak: {label} ({tokens} tokens) ...");
    let o = cmd.output().context("running ferrite soak")?;
    if !o.status.success() {
        bail!(
            "ferrite soak {label}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .rfind(|l| l.starts_with("soak:"))
        .context("ferrite soak printed no soak: line")?;
    eprintln!("{line}");
    let f = fields(line);
    let get = |key: &str| {
        f.get(key)
            .with_context(|| format!("soak line without {key}"))
    };
    let metric = if c.text { "bpb" } else { "accuracy" };
    let row = format!(
        "| {label} | host | {} | {} | {} | {} / {} | {} / {} / {} | {metric} {} → {} |",
        get("tokens")?,
        get("state_bytes")?,
        get("session_bytes")?,
        get("nonfinite_logits")?,
        get("clamps")?,
        get("max_state_first")?,
        get("max_state_last")?,
        get("max_state")?,
        get(&format!("first_{metric}"))?,
        get(&format!("last_{metric}"))?,
    );
    check_claims(c, &f)?;
    Ok(row)
}

/// The held-out text repeated to at least `bytes` bytes, cut there.
fn board_text(bytes: usize) -> Result<PathBuf> {
    let text = std::fs::read(root_dir().join(TEXT))?;
    let stream: Vec<u8> = text.iter().copied().cycle().take(bytes).collect();
    let dir = boards::work_dir().join("soak");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("heldout-repeated-{bytes}.txt"));
    if std::fs::read(&path).ok().as_deref() != Some(&stream[..]) {
        std::fs::write(&path, &stream)?;
    }
    Ok(path)
}

/// The m4f run: one chunk of `bytes` tokens, compared with the host.
fn board_case(bytes: usize) -> Result<String> {
    let board = boards::named("m4f")?;
    let image = host::model_image(&root_dir().join("models/lm/small"), "lm_small", "int8")?;
    let file = board_text(bytes)?;
    eprintln!("soak: m4f, models/lm/small int8, {bytes} tokens in one stream (QEMU, minutes) ...");
    let task = eval_board::Task::Text {
        file,
        bytes: None,
        chunk: bytes,
    };
    let out = eval_board::evaluate(board, &image, &task, false, None)?;
    eprintln!("{}", out.note);
    let r = &out.report;
    Ok(format!(
        "| lm/small (4 sinks) | m4f (QEMU) | {} | {} | {} static (4 per text byte for the token ids) + {} stack | finite sum, = host bit for bit | — | bpb {} over the whole stream; {} instructions/token (with the f64 scoring) |",
        r.run_get("tokens"),
        r.run_get("state_bytes"),
        r.sizes.ram,
        r.run_get("stack_bytes"),
        r.result,
        r.run_get("instructions_per_token"),
    ))
}

/// Replaces the `soak` section of docs/soak.md with the table.
fn record(rows: &[String]) -> Result<()> {
    let table = format!(
        "\n| model (int8) | where | tokens | state bytes | session bytes | non-finite logits / clamps | max abs state: first 10k / last 10k / all | first 10k → last 10k |\n|---|---|---:|---:|---:|---:|---|---|\n{}\n\n",
        rows.join("\n")
    );
    section::write(&root_dir().join(DOC), "soak", &table)?;
    eprintln!("soak: wrote the table into {DOC}");
    Ok(())
}

/// The command.
pub fn run(o: &Args) -> Result<ExitCode> {
    let wanted = |label: &str| o.only.as_deref().is_none_or(|t| label.contains(t));
    // The host streams on every core (each is one thread of `ferrite soak`),
    // their rows in table order.
    let cases: Vec<&Case> = HOST_CASES.iter().filter(|c| wanted(c.label)).collect();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, Result<String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers.min(cases.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(case) = cases.get(i) else { break out };
                        out.push((i, host_case(case, o.tokens)));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a soak worker panicked"))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    let mut rows = Vec::new();
    for (_, row) in done {
        rows.push(row?);
    }
    if o.board_tokens > 0 && wanted("m4f") {
        crate::setup::ensure_board_tools()?;
        rows.push(board_case(o.board_tokens)?);
    }
    println!("{}", rows.join("\n"));
    if o.record {
        record(&rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claims_fail_when_the_stream_breaks_them() {
        let line = "soak: tokens=140980 nonfinite_logits=0 clamps=0 max_state_first=14.0 \
                    max_state_last=12.0 max_state=15.0 first_bpb=2.3355 last_bpb=2.3346";
        let text = case("lm", "models/lm/small", true);
        assert!(check_claims(&text, &fields(line)).is_ok());
        for (from, to) in [
            ("nonfinite_logits=0", "nonfinite_logits=3"),
            ("clamps=0", "clamps=1"),
            ("max_state_last=12.0", "max_state_last=29.0"),
            ("max_state_last=12.0", "max_state_last=NaN"),
            ("last_bpb=2.3346", "last_bpb=2.3370"),
        ] {
            let broken = line.replace(from, to);
            assert!(check_claims(&text, &fields(&broken)).is_err(), "{to}");
        }
        // The integer path's bound is 0.002; MQAR streams have no bpb.
        let drift = line.replace("last_bpb=2.3346", "last_bpb=2.3370");
        let int = Case {
            int_path: true,
            ..text
        };
        assert!(check_claims(&int, &fields(&drift)).is_ok());
        let mqar = case("mqar", "models/mqar/bla-m7", false);
        let acc = "soak: nonfinite_logits=0 clamps=0 max_state_first=1 max_state_last=1";
        assert!(check_claims(&mqar, &fields(acc)).is_ok());
    }

    #[test]
    fn reads_the_soak_line() {
        let f = fields("soak: tokens=140980 state_bytes=27392 nonfinite_logits=0 first_bpb=2.3355");
        assert_eq!(
            (f.get("tokens"), f.get("first_bpb"), f.get("last_bpb")),
            (Some("140980"), Some("2.3355"), None)
        );
    }
}
