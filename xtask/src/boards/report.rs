//! The firmware's reports, parsed from its output with the line types of
//! `ferrite_common::report` (the firmware prints them with the same macros).

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use ferrite_common::report::{self as line, Checksum, Fields, TokensHash};

use super::{Run, Sizes};

/// The `generate` firmware's report, parsed from its output.
#[derive(Debug, Clone)]
pub struct Report {
    /// The board that ran.
    pub board: &'static str,
    /// Ids on the `tokens:` line (the first 256 for longer runs).
    pub tokens: Vec<u32>,
    /// Whether the `tokens:` line shows only the first ids.
    pub tokens_truncated: bool,
    /// FNV-1a of all generated ids.
    pub tokens_fnv: u32,
    /// How many ids were generated.
    pub count: usize,
    /// FNV-1a of the final step's logits.
    pub logits_fnv: u32,
    /// Their f32 sum.
    pub logits_sum: f32,
    /// key=value pairs of the `run:` line.
    pub run: BTreeMap<String, String>,
    /// Flash and RAM of the ELF.
    pub sizes: Sizes,
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
        format!(
            "{board}: no `{prefix}` line in the output:\n{}",
            lines[lines.len().saturating_sub(5)..].join("\n")
        )
    })
}

impl Report {
    /// Parses the output `text` of a `generate` (or `ota`) run on `board`.
    pub fn parse(board: &'static str, text: &str, sizes: Sizes) -> Result<Report> {
        let mut tokens = Vec::new();
        let rest = find(board, text, line::TOKENS)?;
        let tokens_truncated = line::parse_tokens(rest, |id| tokens.push(id))
            .with_context(|| format!("{board}: bad token ids in {rest:?}"))?;
        let rest = find(board, text, line::TOKENS_HASH)?;
        let th =
            TokensHash::parse(rest).with_context(|| format!("{board}: bad tokens_hash: {rest}"))?;
        let rest = find(board, text, line::CHECKSUM)?;
        let ck = Checksum::parse(rest).with_context(|| format!("{board}: bad checksum: {rest}"))?;
        Ok(Report {
            board,
            tokens,
            tokens_truncated,
            tokens_fnv: th.fnv,
            count: th.count,
            logits_fnv: ck.fnv,
            logits_sum: f32::from_bits(ck.sum_bits),
            run: map(find(board, text, line::RUN)?),
            sizes,
        })
    }

    pub fn get(&self, key: &str) -> &str {
        self.run.get(key).map(String::as_str).unwrap_or("?")
    }

    /// The `stats:` line of `cargo xtask board`.
    pub fn stats_line(&self) -> String {
        format!(
            "stats: board={} tokens={} instructions_per_token={} flash_bytes={} ram_bytes={} stack_bytes={} state_bytes={}",
            self.board,
            self.get("tokens"),
            self.get("instructions_per_token"),
            self.sizes.flash,
            self.sizes.ram,
            self.get("stack_bytes"),
            self.get("state_bytes"),
        )
    }
}

impl Run {
    /// The firmware's last lines, for error messages.
    pub fn tail(&self) -> String {
        let text = String::from_utf8_lossy(&self.output);
        let lines: Vec<_> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// A non-zero exit is an error with the reason.
    fn check_status(&self) -> Result<()> {
        if self.status != ferrite_common::status::OK {
            let why = ferrite_common::status::describe(self.status)
                .map_or_else(|| format!("exit status {}", self.status), str::to_string);
            bail!(
                "{} firmware failed: {why}\n{}",
                self.board.name,
                self.tail()
            );
        }
        Ok(())
    }

    /// Parses a successful `generate` run; a non-zero exit is an error with the reason.
    pub fn report(&self) -> Result<Report> {
        self.check_status()?;
        Report::parse(
            self.board.name,
            &String::from_utf8_lossy(&self.output),
            self.sizes,
        )
    }

    /// Parses a successful `eval` run.
    pub fn eval_report(&self) -> Result<EvalReport> {
        self.check_status()?;
        EvalReport::parse(
            self.board.name,
            &String::from_utf8_lossy(&self.output),
            self.sizes,
        )
    }
}

/// The `eval` firmware's report.
#[derive(Debug, Clone)]
pub struct EvalReport {
    pub board: &'static str,
    /// key=value pairs of the `eval:` line (mqar: correct, total, ...;
    /// text: bytes, tokens, predicted_bytes, nats_bits, ...).
    pub eval: BTreeMap<String, String>,
    /// The value of the `accuracy=` or `bits_per_byte=` line, as printed.
    pub result: String,
    /// key=value pairs of the `run:` line.
    pub run: BTreeMap<String, String>,
    pub sizes: Sizes,
}

impl EvalReport {
    pub fn get(&self, key: &str) -> &str {
        self.eval
            .get(key)
            .or_else(|| self.run.get(key))
            .map(String::as_str)
            .unwrap_or("?")
    }

    pub fn number<T: std::str::FromStr>(&self, key: &str) -> Result<T> {
        let v = self.get(key);
        v.parse()
            .ok()
            .with_context(|| format!("{}: bad or missing {key}={v}", self.board))
    }

    /// The `stats:` line of `cargo xtask eval-board`.
    pub fn stats_line(&self) -> String {
        format!(
            "stats: board={} eval={} tokens={} instructions_per_token={} flash_bytes={} ram_bytes={} stack_bytes={} state_bytes={}",
            self.board,
            self.run_get("eval"),
            self.run_get("tokens"),
            self.run_get("instructions_per_token"),
            self.sizes.flash,
            self.sizes.ram,
            self.run_get("stack_bytes"),
            self.run_get("state_bytes"),
        )
    }

    /// A value of the `run:` line.
    pub fn run_get(&self, key: &str) -> &str {
        self.run.get(key).map(String::as_str).unwrap_or("?")
    }

    /// Parses the output `text` of an `eval` run on `board`.
    pub fn parse(board: &'static str, text: &str, sizes: Sizes) -> Result<EvalReport> {
        let result = find(board, text, line::ACCURACY)
            .or_else(|_| find(board, text, line::BITS_PER_BYTE))?
            .to_string();
        Ok(EvalReport {
            board,
            eval: map(find(board, text, line::EVAL)?),
            result,
            run: map(find(board, text, line::RUN)?),
            sizes,
        })
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
        assert_eq!((r.logits_fnv, r.logits_sum), (0x7a4d_045e, 1.5));
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
        let r = EvalReport::parse("m4f", &text, SIZES).unwrap();
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
