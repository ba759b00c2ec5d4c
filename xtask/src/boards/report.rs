//! The firmware's report, parsed from its output with the line types of
//! `ferrite_common::report` (the firmware prints them with the same
//! macros): one parser for `generate` (and `ota`), `eval` and `kernels`.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use ferrite_common::report::{self as line, Checksum, Fields, TokensHash};
use ferrite_common::roofline::{Roofline, ROOFLINE};

use super::Sizes;

/// What a run reported.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The board that ran.
    pub board: &'static str,
    /// `generate`: the ids on the `tokens:` line (the first 256 of longer runs).
    pub tokens: Vec<u32>,
    /// Whether the `tokens:` line shows only the first ids.
    pub tokens_truncated: bool,
    /// FNV-1a of all generated ids, and how many there were.
    pub tokens_fnv: u32,
    pub count: usize,
    /// FNV-1a of the final step's logits (their f32 bits).
    pub logits_fnv: u32,
    /// `eval`: the value of the `accuracy=` or `bits_per_byte=` line, as printed.
    pub result: String,
    /// `eval`: key=value pairs of the `eval:` line.
    pub eval: BTreeMap<String, String>,
    /// key=value pairs of the `run:` line.
    pub run: BTreeMap<String, String>,
    /// Flash and RAM of the ELF.
    pub sizes: Sizes,
    /// `generate` built with `roofline`: its `roofline:` line.
    pub roofline: Option<Roofline>,
}

/// The `key=value` pairs of a line, owned.
fn map(rest: &str) -> BTreeMap<String, String> {
    Fields(rest)
        .pairs()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

/// The rest of the last line with `prefix`, or an error that shows the tail.
fn find<'t>(board: &str, text: &'t str, prefix: &str) -> Result<&'t str> {
    line::last_value(text, prefix).with_context(|| {
        let lines: Vec<_> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join("\n");
        format!("{board}: no `{prefix}` line in the output:\n{tail}")
    })
}

impl Report {
    /// Parses the output `text` of a run on `board`: an `eval` run when its
    /// `run:` line says `eval=`, else a `generate` (or `ota`) run.
    pub fn parse(board: &'static str, text: &str, sizes: Sizes) -> Result<Report> {
        let run = map(find(board, text, line::RUN)?);
        if run.contains_key("eval") {
            let result = find(board, text, line::ACCURACY)
                .or_else(|_| find(board, text, line::BITS_PER_BYTE))?
                .to_string();
            let eval = map(find(board, text, line::EVAL)?);
            return Ok(Report {
                board,
                result,
                eval,
                run,
                sizes,
                ..Report::default()
            });
        }
        let mut tokens = Vec::new();
        let rest = find(board, text, line::TOKENS)?;
        let tokens_truncated = line::parse_tokens(rest, |id| tokens.push(id))
            .with_context(|| format!("{board}: bad token ids in {rest:?}"))?;
        let rest = find(board, text, line::TOKENS_HASH)?;
        let th =
            TokensHash::parse(rest).with_context(|| format!("{board}: bad tokens_hash: {rest}"))?;
        let rest = find(board, text, line::CHECKSUM)?;
        let ck = Checksum::parse(rest).with_context(|| format!("{board}: bad checksum: {rest}"))?;
        let roofline = match line::last_value(text, ROOFLINE) {
            Some(rest) => Some(
                Roofline::parse(rest).with_context(|| format!("{board}: bad roofline: {rest}"))?,
            ),
            None => None,
        };
        Ok(Report {
            board,
            tokens,
            tokens_truncated,
            tokens_fnv: th.fnv,
            count: th.count,
            logits_fnv: ck.fnv,
            run,
            sizes,
            roofline,
            ..Report::default()
        })
    }

    /// A value of the `eval:` line, else of the `run:` line ("?" if neither has it).
    pub fn get(&self, key: &str) -> &str {
        self.eval
            .get(key)
            .or_else(|| self.run.get(key))
            .map_or("?", String::as_str)
    }

    /// [`Report::get`] as a number.
    pub fn number<T: std::str::FromStr>(&self, key: &str) -> Result<T> {
        let v = self.get(key);
        v.parse()
            .ok()
            .with_context(|| format!("{}: bad or missing {key}={v}", self.board))
    }

    /// A value of the `run:` line ("?" if it lacks it).
    pub fn run_get(&self, key: &str) -> &str {
        self.run.get(key).map_or("?", String::as_str)
    }

    /// The `stats:` line of `cargo xtask board` and `eval-board`.
    pub fn stats_line(&self) -> String {
        let run = |key| self.run_get(key);
        let eval = self
            .run
            .get("eval")
            .map(|e| format!(" eval={e}"))
            .unwrap_or_default();
        format!(
            "stats: board={}{eval} tokens={} instructions_per_token={} flash_bytes={} ram_bytes={} stack_bytes={} state_bytes={}",
            self.board,
            run("tokens"),
            run("instructions_per_token"),
            self.sizes.flash,
            self.sizes.ram,
            run("stack_bytes"),
            run("state_bytes"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_common::{
        checksum_line, eval_mqar_line, eval_run_line, generate_run_line, tokens_hash_line,
    };

    const SIZES: Sizes = Sizes {
        flash: 1000,
        ram: 200,
    };

    #[test]
    fn reads_a_generate_report() {
        let text = format!(
            "Once upon a time\\x13 text\n{}{}\n{}\n{}\n{}\n",
            line::TOKENS,
            line::Tokens(&[242, 64], true),
            tokens_hash_line!(0xcef7_0c74u32, 300),
            checksum_line!(0x7a4d_045eu32, 1.5f32.to_bits()),
            generate_run_line!("m3", 16, 300, 99u64, 3u64, 2944, 6784, 9264),
        );
        let r = Report::parse("m3", &text, SIZES).unwrap();
        assert_eq!(
            (r.tokens.as_slice(), r.tokens_truncated),
            (&[242, 64][..], true)
        );
        assert_eq!((r.tokens_fnv, r.count), (0xcef7_0c74, 300));
        assert_eq!(r.logits_fnv, 0x7a4d_045e);
        assert_eq!(r.get("stack_bytes"), "2944");
        assert_eq!(
            r.stats_line(),
            "stats: board=m3 tokens=300 instructions_per_token=3 flash_bytes=1000 ram_bytes=200 stack_bytes=2944 state_bytes=6784"
        );
        let cut = text.replace("checksum:", "check:");
        let e = Report::parse("m3", &cut, SIZES).unwrap_err();
        assert!(format!("{e:#}").contains("no `checksum: ` line"), "{e:#}");
    }

    #[test]
    fn reads_an_eval_report() {
        let text = format!(
            "{}\naccuracy=0.9663\n{}\n",
            eval_mqar_line!(100, 8, 64, 0u64, 773u64, 800u64),
            eval_run_line!("m4f", "mqar", 6400u64, 64000u64, 10u64, 3000, 6400, 9000),
        );
        let r = Report::parse("m4f", &text, SIZES).unwrap();
        assert_eq!(r.result, "0.9663");
        assert_eq!(r.number::<u64>("correct").unwrap(), 773);
        assert_eq!(r.get("eval"), "mqar");
        assert!(r.number::<u64>("nope").is_err());
        assert_eq!(
            r.stats_line(),
            "stats: board=m4f eval=mqar tokens=6400 instructions_per_token=10 flash_bytes=1000 ram_bytes=200 stack_bytes=3000 state_bytes=6400"
        );
    }
}
