//! Soak runs: one stream of many tokens through one session with no reset,
//! watching what a device that runs for months would lose — memory (fixed
//! by construction: one buffer, sized before the first token), finite
//! logits, the size of the state, and the quality of the predictions at the
//! end of the stream against its start (`cargo xtask soak`, docs/soak.md).
//!
//! Two kinds of stream:
//! - **text**: a byte-level text repeated without a break, its length chosen
//!   so that the last window scores the same bytes as the first: bits per
//!   byte of the same text at position 0 and at position ~N;
//! - **MQAR**: sequences of the recall task back to back (the state carries
//!   from one into the next): accuracy in the first and the last window.

use anyhow::{bail, Result};
use ferrite::sampler::argmax;
use ferrite::{Model, Session};

use crate::mqar::{MqarParams, MqarStream, MqarToken};
use crate::run::session_buffer;
use ferrite_common::nll::nll;

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// What to stream.
#[derive(Clone, Copy, Debug)]
pub enum SoakSource<'t> {
    /// Byte-level text, repeated.
    Text(&'t [u8]),
    /// MQAR sequences of the given shape from a seed, back to back.
    Mqar {
        /// Generator seed.
        seed: u64,
        /// Sequence shape.
        params: MqarParams,
    },
}

/// How long and how finely.
#[derive(Clone, Copy, Debug)]
pub struct SoakOptions {
    /// Tokens to stream at least (text streams round up so that the last
    /// window repeats the first).
    pub tokens: u64,
    /// Tokens in the first and last scoring windows.
    pub window: u64,
    /// The state is scanned for its largest magnitude every this many tokens
    /// (and at the last token).
    pub scan_every: u64,
}

/// A window's score: bits per byte (text) or accuracy (MQAR).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowScore {
    /// Sum of `-ln p(next token)` (text) or correct recalls (MQAR).
    pub sum: f64,
    /// Predicted tokens (text) or queries (MQAR).
    pub count: u64,
}

impl WindowScore {
    /// Bits per byte (text, byte-level) or accuracy (MQAR).
    pub fn value(&self, text: bool) -> f64 {
        match text {
            true => self.sum / self.count as f64 / core::f64::consts::LN_2,
            false => self.sum / self.count as f64,
        }
    }
}

/// What a soak run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct SoakReport {
    /// Tokens streamed.
    pub tokens: u64,
    /// Bytes of recurrent state (fixed when the session is made).
    pub state_bytes: usize,
    /// Bytes of the whole session buffer (state + scratch), idem.
    pub session_bytes: usize,
    /// Logits that were NaN or infinite, over every token.
    pub nonfinite_logits: u64,
    /// State values the integer token path clamped, all layers, the whole
    /// stream (docs/integer-path.md, "Saturation"; 0 on the f32 path).
    pub clamps: u64,
    /// Largest `|state|` seen in the scans of the first window.
    pub max_state_first: f32,
    /// Largest `|state|` seen in the scans of the last window.
    pub max_state_last: f32,
    /// Largest `|state|` of every scan.
    pub max_state: f32,
    /// Score of the first window.
    pub first: WindowScore,
    /// Score of the last window.
    pub last: WindowScore,
    /// Whether the stream was text (scores are bits per byte) or MQAR.
    pub text: bool,
}

impl SoakReport {
    /// The one-line summary `ferrite soak` prints (and xtask parses).
    pub fn line(&self) -> String {
        let (name, first, last) = match self.text {
            true => ("bpb", self.first.value(true), self.last.value(true)),
            false => ("accuracy", self.first.value(false), self.last.value(false)),
        };
        format!(
            "soak: tokens={} state_bytes={} session_bytes={} nonfinite_logits={} clamps={} \
             max_state_first={:.4} max_state_last={:.4} max_state={:.4} \
             first_{name}={first:.4} last_{name}={last:.4}",
            self.tokens,
            self.state_bytes,
            self.session_bytes,
            self.nonfinite_logits,
            self.clamps,
            self.max_state_first,
            self.max_state_last,
            self.max_state,
        )
    }
}

/// Tokens a text stream of at least `want` tokens has: `k * len + window`,
/// so that the last window starts where the text does.
pub fn text_stream_len(len: u64, want: u64, window: u64) -> u64 {
    let body = want.saturating_sub(window).div_ceil(len).max(1);
    body * len + window
}

/// Streams the source through one session, never reset.
/// `progress(tokens_done)` every `scan_every` tokens.
pub fn soak(
    model: Model<'_>,
    source: SoakSource<'_>,
    opts: SoakOptions,
    mut progress: impl FnMut(u64),
) -> Result<SoakReport> {
    if opts.window == 0 || opts.scan_every == 0 {
        bail!("the window and the scan interval must be at least 1 token");
    }
    let byte_level = matches!(model.tokenizer(), ferrite::Tokenizer::Bytes(_));
    let total = match source {
        SoakSource::Text(text) => {
            if !byte_level {
                bail!("a text soak needs a byte-level model (this image has another tokenizer)");
            }
            if text.len() < 2 {
                bail!("the text needs at least 2 bytes");
            }
            text_stream_len(text.len() as u64, opts.tokens, opts.window)
        }
        SoakSource::Mqar { .. } => opts.tokens,
    };
    if total < 2 * opts.window {
        bail!(
            "{total} tokens are fewer than two windows of {}",
            opts.window
        );
    }
    let mut buf = session_buffer(&model, 0)?;
    let session_bytes = 4 * buf.len();
    let mut session = Session::new(model, &mut buf).map_err(err)?;
    let state_bytes = session.state().len();
    let mut report = SoakReport {
        tokens: total,
        state_bytes,
        session_bytes,
        nonfinite_logits: 0,
        clamps: 0,
        max_state_first: 0.0,
        max_state_last: 0.0,
        max_state: 0.0,
        first: WindowScore::default(),
        last: WindowScore::default(),
        text: matches!(source, SoakSource::Text(_)),
    };
    let last_start = total - opts.window;
    // `score(t, logits)` is what token t's logits earned: text scores the
    // next byte, MQAR the expected value at a query.
    let mut feed = |t: u64, token: u32, score: &dyn Fn(&[f32]) -> Option<f64>| -> Result<()> {
        let logits = session.feed(token).map_err(err)?;
        report.nonfinite_logits += logits.iter().filter(|l| !l.is_finite()).count() as u64;
        let window = match t {
            t if t < opts.window => Some(&mut report.first),
            t if t >= last_start => Some(&mut report.last),
            _ => None,
        };
        if let Some(w) = window {
            if let Some(s) = score(logits) {
                w.sum += s;
                w.count += 1;
            }
        }
        if (t + 1) % opts.scan_every == 0 || t + 1 == total {
            let m = session.state_max_abs().map_err(err)?;
            report.max_state = if m.is_nan() {
                m
            } else {
                report.max_state.max(m)
            };
            if t < opts.window {
                report.max_state_first = report.max_state_first.max(m);
            }
            if t >= last_start {
                report.max_state_last = report.max_state_last.max(m);
            }
            progress(t + 1);
        }
        Ok(())
    };
    match source {
        SoakSource::Text(text) => {
            let len = text.len() as u64;
            let byte = |t: u64| u32::from(text[(t % len) as usize]);
            for t in 0..total {
                let next = byte(t + 1);
                // The last token predicts nothing scored (it is outside the stream).
                let scored = t + 1 < total;
                feed(t, byte(t), &|logits| scored.then(|| nll(logits, next)))?;
            }
        }
        SoakSource::Mqar { seed, params } => {
            let mut stream = MqarStream::new(seed, usize::MAX, params)?;
            let mut t = 0;
            'stream: while let Some(seq) = stream.next_sequence() {
                for MqarToken { token, expect } in seq {
                    if t == total {
                        break 'stream;
                    }
                    feed(t, token, &|logits| {
                        expect.map(|v| f64::from(u8::from(argmax(logits) == v)))
                    })?;
                    t += 1;
                }
            }
        }
    }
    report.clamps = session.clamps().iter().map(|&c| u64::from(c)).sum();
    if report.first.count == 0 || report.last.count == 0 {
        bail!("a window scored nothing (make --window longer)");
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_streams_end_on_the_first_window() {
        // (len, want, window) -> k * len + window >= want, last window at 0 mod len.
        for (len, want, window) in [(100, 1000, 10), (7, 5, 3), (65_490, 1_000_000, 10_000)] {
            let n = text_stream_len(len, want, window);
            assert!(n >= want, "{n} < {want}");
            assert_eq!((n - window) % len, 0);
            assert!(n - window >= len);
            assert!(n < want.max(window + len) + len);
        }
    }
}
