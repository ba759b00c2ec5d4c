//! `cargo xtask bake-gain`: what a baked prompt saves (issue 25 item 2).
//! For each board and model, the `generate` firmware runs one token from a
//! 64- and a 256-token prompt (the first bytes of models/lm/heldout.txt;
//! byte-level models, so one token a byte) twice: fed (the prompt fed token
//! by token, as without a snapshot) and baked (`ferrite bake` by the CLI of
//! the board's math module, the snapshot embedded in flash and restored).
//! With N = 1 the firmware's instruction count runs from before the first
//! feed (or the restore) to the first token's text: the instructions to the
//! first generated token. Both runs must give the host's token and logit
//! bits. Prints the markdown table of docs/snapshot-format.md.

use anyhow::{ensure, Context, Result};

use crate::boards::{self, BuildOpts, Firmware, RunRequest};
use crate::host;
use crate::suite::compare_with_host;

/// (board, model directory, dtype): an FPU core and a core without one.
const CASES: &[(&str, &str, &str)] = &[
    ("m4f", "models/lm/en-m4f", "int8"),
    // Not the M3: small int8 and its 28 KB snapshot overflow its 256 KiB
    // flash by 25 KB.
    ("rv32imac", "models/lm/small", "int8"),
];
/// Prompt lengths, in tokens.
const PROMPTS: &[usize] = &[64, 256];

/// Runs the cases and prints the table.
pub fn run() -> Result<()> {
    let file = boards::root_dir().join("models/lm/heldout.txt");
    let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
    let mut rows = Vec::new();
    for &(board, model, dtype) in CASES {
        let board = boards::named(board)?;
        let image = host::shipped_image(model, dtype)?;
        for &tokens in PROMPTS {
            let prompt = text.get(..tokens).context("heldout.txt is too short")?;
            let ids = host::tokenize(&image, prompt)?;
            ensure!(
                ids.len() == tokens,
                "{model}: {tokens} bytes are {} tokens, not {tokens}",
                ids.len()
            );
            let fed = first_token(board, &image, prompt, BuildOpts::default())?;
            let math = BuildOpts::default().math(board);
            let snapshot = host::bake(&image, prompt, math)?;
            let snap = std::fs::metadata(&snapshot)?.len();
            let opts = BuildOpts {
                snapshot: Some(snapshot),
                ..BuildOpts::default()
            };
            let baked = first_token(board, &image, prompt, opts)?;
            rows.push(format!(
                "| {} | `{model}` {dtype} | {tokens} | {} | {} | {:.1}x | {} |",
                board.name,
                thousands(fed),
                thousands(baked),
                fed as f64 / baked as f64,
                thousands(snap)
            ));
        }
    }
    println!(
        "| board | model | prompt tokens | fed: instructions to the first token | baked: restore + first token | gain | snapshot bytes |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for r in rows {
        println!("{r}");
    }
    Ok(())
}

/// The instructions to the first token of a greedy one-token run, which
/// must give the host's token and logit bits.
fn first_token(
    board: &'static boards::Board,
    image: &std::path::Path,
    prompt: &str,
    opts: BuildOpts,
) -> Result<u64> {
    let req = RunRequest {
        prompt,
        n: 1,
        opts,
        ..RunRequest::new(board, Firmware::Generate, image)
    };
    let run = boards::build_and_run(&req)?;
    let report = run.report()?;
    let note = compare_with_host(image, &report, prompt, &req.opts)?;
    eprintln!(
        "{} {} tokens, {}: {note}",
        board.name,
        report.get("prompt_tokens"),
        if req.opts.snapshot.is_some() {
            "baked"
        } else {
            "fed"
        }
    );
    report.number("instructions")
}

/// `n` with commas between thousands.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn groups_thousands() {
        assert_eq!(super::thousands(1234567), "1,234,567");
        assert_eq!(super::thousands(999), "999");
    }
}
