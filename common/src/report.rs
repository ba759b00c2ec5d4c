//! The report lines the firmware prints and xtask parses, defined together:
//! each line has a macro that the firmware prints (it expands to
//! `format_args!` of one literal, so the firmware's code is what a format
//! string in place gives) and a parser here that xtask reads it with; the
//! tests write every line with its macro and read it back.
//!
//! ```text
//! tokens: 242,64,132              tokens_line! (the ids; ",..." when cut)
//! tokens_hash: fnv1a=0x.. count=N tokens_hash_line!   -> TokensHash
//! checksum: fnv1a=0x.. sum_bits=0x..                   -> Checksum
//! run: board=.. key=value ...     generate_run_line!, eval_run_line!   -> Fields
//! eval: mqar ... correct=C total=T    eval_mqar_line!    -> Fields
//! eval: text ... nats_bits=0x..       eval_text_line!    -> Fields
//! accuracy=0.9660 / bits_per_byte=2.2006               -> last_value
//! kernels: board=.. module=.. cases=.. failed=.. max_cols=..
//! roofline: macs_per_token=.. ...  (crate::roofline::Roofline: Display, parse)
//! ```

/// Prefix of the generated ids line.
pub const TOKENS: &str = "tokens: ";
/// Prefix of the ids' checksum line.
pub const TOKENS_HASH: &str = "tokens_hash: ";
/// Prefix of the final logits' checksum line.
pub const CHECKSUM: &str = "checksum: ";
/// Prefix of the measurements line.
pub const RUN: &str = "run: ";
/// Prefix of the `eval` firmware's task line.
pub const EVAL: &str = "eval: ";
/// Prefix of the MQAR result.
pub const ACCURACY: &str = "accuracy=";
/// Prefix of the text result.
pub const BITS_PER_BYTE: &str = "bits_per_byte=";
/// Prefix of the `kernels` firmware's summary.
pub const KERNELS: &str = "kernels: ";
/// What ends a `tokens:` line that shows only the first ids of a run.
pub const TRUNCATED: &str = ",...";

/// `tokens_hash: fnv1a=<u32 hex> count=<n>`: FNV-1a of all generated ids.
#[macro_export]
macro_rules! tokens_hash_line {
    ($fnv:expr, $count:expr) => {
        format_args!("tokens_hash: fnv1a={:#010x} count={}", $fnv, $count)
    };
}

/// `checksum: fnv1a=<u32 hex> sum_bits=<u32 hex>`: FNV-1a of the final
/// step's logits (f32 bits) and the bits of their f32 sum.
#[macro_export]
macro_rules! checksum_line {
    ($fnv:expr, $sum_bits:expr) => {
        format_args!(
            "checksum: fnv1a={:#010x} sum_bits={:#010x}",
            $fnv, $sum_bits
        )
    };
}

/// The `run:` line of the `generate` firmware.
#[macro_export]
macro_rules! generate_run_line {
    ($board:expr, $prompt_tokens:expr, $tokens:expr, $instructions:expr, $per_token:expr, $stack:expr, $state:expr, $session:expr) => {
        format_args!(
            "run: board={} prompt_tokens={} tokens={} instructions={} instructions_per_token={} stack_bytes={} state_bytes={} session_bytes={}",
            $board, $prompt_tokens, $tokens, $instructions, $per_token, $stack, $state, $session
        )
    };
}

/// The `run:` line of the `eval` firmware (`eval` is `mqar` or `text`).
#[macro_export]
macro_rules! eval_run_line {
    ($board:expr, $eval:expr, $tokens:expr, $instructions:expr, $per_token:expr, $stack:expr, $state:expr, $session:expr) => {
        format_args!(
            "run: board={} eval={} tokens={} instructions={} instructions_per_token={} stack_bytes={} state_bytes={} session_bytes={}",
            $board, $eval, $tokens, $instructions, $per_token, $stack, $state, $session
        )
    };
}

/// The `eval:` line of an MQAR evaluation.
#[macro_export]
macro_rules! eval_mqar_line {
    ($sequences:expr, $pairs:expr, $seq_len:expr, $seed:expr, $correct:expr, $total:expr) => {
        format_args!(
            "eval: mqar sequences={} pairs={} seq_len={} seed={} correct={} total={}",
            $sequences, $pairs, $seq_len, $seed, $correct, $total
        )
    };
}

/// The `eval:` line of a text evaluation (`nats_bits`: the f64 bits of the
/// summed negative log-likelihood).
#[macro_export]
macro_rules! eval_text_line {
    ($bytes:expr, $tokens:expr, $chunk:expr, $predicted_bytes:expr, $nats_bits:expr) => {
        format_args!(
            "eval: text bytes={} tokens={} chunk={} predicted_bytes={} nats_bits={:#018x}",
            $bytes, $tokens, $chunk, $predicted_bytes, $nats_bits
        )
    };
}

/// The `kernels` firmware's summary: `kernels: board=.. module=.. cases=..
/// failed=.. max_cols=..`.
#[macro_export]
macro_rules! kernels_line {
    ($board:expr, $module:expr, $cases:expr, $failed:expr, $max_cols:expr) => {
        format_args!(
            "kernels: board={} module={} cases={} failed={} max_cols={}",
            $board, $module, $cases, $failed, $max_cols
        )
    };
}

/// The rest of the last line of `text` that contains `prefix`, after it,
/// trimmed (a report line may follow model text on the same line only if the
/// firmware forgot a newline; the last one wins).
pub fn last_value<'t>(text: &'t str, prefix: &str) -> Option<&'t str> {
    text.lines()
        .rev()
        .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest.trim()))
}

/// The `key=value` pairs of a line's rest (after its prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields<'t>(pub &'t str);

impl<'t> Fields<'t> {
    /// Every `key=value` pair, in order (words without `=` are skipped).
    pub fn pairs(&self) -> impl Iterator<Item = (&'t str, &'t str)> {
        self.0.split_whitespace().filter_map(|p| p.split_once('='))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&'t str> {
        self.pairs().find_map(|(k, v)| (k == key).then_some(v))
    }

    /// The value of `key` as a decimal number.
    pub fn number(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }

    /// The value of `key` as `0x`-prefixed hex.
    pub fn hex(&self, key: &str) -> Option<u64> {
        u64::from_str_radix(self.get(key)?.strip_prefix("0x")?, 16).ok()
    }
}

/// The `tokens_hash:` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokensHash {
    /// FNV-1a of all generated ids.
    pub fnv: u32,
    /// How many ids were generated.
    pub count: usize,
}

impl TokensHash {
    /// Parses the rest of a `tokens_hash:` line.
    pub fn parse(rest: &str) -> Option<TokensHash> {
        let f = Fields(rest);
        Some(TokensHash {
            fnv: u32::try_from(f.hex("fnv1a")?).ok()?,
            count: usize::try_from(f.number("count")?).ok()?,
        })
    }
}

/// The `checksum:` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checksum {
    /// FNV-1a of the final step's logits (their f32 bits).
    pub fnv: u32,
    /// The f32 bits of their sum.
    pub sum_bits: u32,
}

impl Checksum {
    /// Parses the rest of a `checksum:` line.
    pub fn parse(rest: &str) -> Option<Checksum> {
        let f = Fields(rest);
        Some(Checksum {
            fnv: u32::try_from(f.hex("fnv1a")?).ok()?,
            sum_bits: u32::try_from(f.hex("sum_bits")?).ok()?,
        })
    }
}

/// The ids of the rest of a `tokens:` line, and whether it shows only the
/// first ids of the run (it ends with [`TRUNCATED`]). Calls `id` for each;
/// `None` on a bad id.
pub fn parse_tokens(rest: &str, mut id: impl FnMut(u32)) -> Option<bool> {
    let truncated = rest.ends_with(TRUNCATED);
    for s in rest.trim_end_matches(TRUNCATED).split(',') {
        if !s.is_empty() {
            id(s.parse().ok()?);
        }
    }
    Some(truncated)
}

/// Writes the rest of a `tokens:` line: `ids` separated by commas, then
/// [`TRUNCATED`] when they are only the first of the run.
pub struct Tokens<'a>(pub &'a [u32], pub bool);

impl core::fmt::Display for Tokens<'_> {
    /// `#[inline]`: built in the firmware crate that prints it, as if
    /// written there (its recorded sizes are those of a local type).
    #[inline]
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, id) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", id)?;
        }
        if self.1 {
            f.write_str(TRUNCATED)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;
    use std::string::String;
    use std::vec::Vec;

    fn line(args: core::fmt::Arguments<'_>) -> String {
        format!("{args}\n")
    }

    #[test]
    fn tokens_round_trip() {
        let text = format!("some text\n{TOKENS}{}\n", Tokens(&[242, 64, 0], true));
        assert_eq!(text, "some text\ntokens: 242,64,0,...\n");
        let mut ids = Vec::new();
        let rest = last_value(&text, TOKENS).unwrap();
        assert_eq!(parse_tokens(rest, |i| ids.push(i)), Some(true));
        assert_eq!(ids, [242, 64, 0]);
        let mut none = Vec::new();
        assert_eq!(parse_tokens("", |i| none.push(i)), Some(false));
        assert!(none.is_empty());
        assert_eq!(parse_tokens("1,x", |_| {}), None);
    }

    #[test]
    fn hash_and_checksum_round_trip() {
        let text = line(tokens_hash_line!(0xcef7_0c74u32, 32))
            + &line(checksum_line!(0x7a4d_045eu32, 0x40d7_8c70u32));
        assert_eq!(
            text,
            "tokens_hash: fnv1a=0xcef70c74 count=32\nchecksum: fnv1a=0x7a4d045e sum_bits=0x40d78c70\n"
        );
        assert_eq!(
            TokensHash::parse(last_value(&text, TOKENS_HASH).unwrap()),
            Some(TokensHash {
                fnv: 0xcef7_0c74,
                count: 32
            })
        );
        assert_eq!(
            Checksum::parse(last_value(&text, CHECKSUM).unwrap()),
            Some(Checksum {
                fnv: 0x7a4d_045e,
                sum_bits: 0x40d7_8c70
            })
        );
        // Small values keep their width: 0x00000001.
        let small = line(checksum_line!(1u32, 0u32));
        assert_eq!(small, "checksum: fnv1a=0x00000001 sum_bits=0x00000000\n");
        assert_eq!(TokensHash::parse("fnv1a=12 count=3"), None);
    }

    #[test]
    fn run_lines_round_trip() {
        let g = line(generate_run_line!(
            "m3",
            16,
            32,
            53344160u64,
            1134982u64,
            2944,
            6784,
            9264
        ));
        assert_eq!(
            g,
            "run: board=m3 prompt_tokens=16 tokens=32 instructions=53344160 instructions_per_token=1134982 stack_bytes=2944 state_bytes=6784 session_bytes=9264\n"
        );
        let f = Fields(last_value(&g, RUN).unwrap());
        assert_eq!(f.get("board"), Some("m3"));
        assert_eq!(f.number("instructions_per_token"), Some(1_134_982));
        assert_eq!(f.get("missing"), None);
        let e = line(eval_run_line!(
            "m4f", "mqar", 6400u64, 1u64, 0u64, 3000, 6400, 9000
        ));
        let f = Fields(last_value(&e, RUN).unwrap());
        assert_eq!(
            (f.get("eval"), f.number("tokens")),
            (Some("mqar"), Some(6400))
        );
    }

    #[test]
    fn kernels_line_round_trips() {
        let k = line(kernels_line!("m0", "portable", 1036u64, 0u64, 256));
        assert_eq!(
            k,
            "kernels: board=m0 module=portable cases=1036 failed=0 max_cols=256\n"
        );
        let f = Fields(last_value(&k, KERNELS).unwrap());
        assert_eq!(
            (f.get("module"), f.number("cases"), f.number("failed")),
            (Some("portable"), Some(1036), Some(0))
        );
    }

    #[test]
    fn eval_lines_round_trip() {
        let m = line(eval_mqar_line!(100, 8, 64, 0u64, 773u64, 800u64)) + "accuracy=0.9663\n";
        let f = Fields(last_value(&m, EVAL).unwrap());
        assert_eq!(f.get("eval"), None);
        assert!(f.0.starts_with("mqar "));
        assert_eq!(
            (f.number("correct"), f.number("total")),
            (Some(773), Some(800))
        );
        assert_eq!(last_value(&m, ACCURACY), Some("0.9663"));
        let bits = 2.5f64.to_bits();
        let t = line(eval_text_line!(256, 256, 128, 254, bits)) + "bits_per_byte=2.2006\n";
        assert!(t.contains("nats_bits=0x4004000000000000"));
        let f = Fields(last_value(&t, EVAL).unwrap());
        assert_eq!(f.hex("nats_bits"), Some(bits));
        assert_eq!(f.number("predicted_bytes"), Some(254));
        assert_eq!(last_value(&t, BITS_PER_BYTE), Some("2.2006"));
    }
}
