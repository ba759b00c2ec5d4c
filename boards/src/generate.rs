//! The one generation path of every target, [`generate`].

use core::fmt;

use ferrite::{Model, Session, StepError};
use ferrite_common::{checksum_line, report::Tokens, tokens_hash_line, Fnv1a};

use crate::config;
use crate::image::{SNAPSHOT, SNAPSHOT_BYTES};
use crate::io::Platform;

/// What one generation measured.
pub struct Outcome {
    /// Prompt length in tokens (with a baked snapshot: the tokens it covers).
    pub prompt_tokens: usize,
    /// Tokens fed to the model (prompt + generated - 1; baked: generated - 1;
    /// at least 1).
    pub fed: usize,
    /// [`Platform::now`] from the first feed to the last token's text.
    pub elapsed: u64,
}

/// The generation path of every target: feeds the build-time prompt and
/// samples [`config::N`] tokens with the build-time sampler (greedy, or as
/// `ferrite generate --temperature .. --seed ..`) in a session of `model`
/// over `buf`, streaming their text (the model's own tokenizer: bytes or the
/// image's BPE); then prints `tokens:` (the first `log.len()` ids),
/// `tokens_hash:`, `checksum:` (FNV-1a of the last step's logits and their
/// f32 sum; `ferrite_common::report`'s lines, which xtask compares with the
/// host) and the target's `run:` line; with the `roofline` feature (QEMU
/// boards) also the `roofline:` line.
///
/// With [`config::MEMORY`] `n > 0` (`FERRITE_MEMORY`) the session attends
/// to baked memory `n` of its `cross` layers, as `ferrite generate --memory
/// n` does.
///
/// With a baked snapshot in flash ([`SNAPSHOT`], `FERRITE_SNAPSHOT`) it
/// restores it instead of feeding the prompt (printing a `baked:` line, not
/// the prompt's text) and samples the first token from the snapshot's
/// logits; the time measured includes the restore. With
/// [`config::SNAPSHOT_AT`] `k > 0` it also writes the stream's snapshot
/// after `k` generated tokens (the `k`-th fed, as `ferrite generate
/// --save-state` does), in hex on a `snapshot:` line, and does not count
/// the time that takes.
pub fn generate<P: Platform>(
    p: &mut P,
    model: Model<'_>,
    buf: &mut [f32],
    log: &mut [u32],
) -> ferrite::Result<Outcome> {
    let baked = !SNAPSHOT_BYTES.is_empty();
    let state_bytes = model.state_bytes(0)?;
    let session_bytes = 4 * buf.len();
    let mut session = Session::new(model, buf)?;
    // A build-time constant: without FERRITE_MEMORY no selection is linked.
    if config::MEMORY != 0 && !baked {
        session.select_memory(config::MEMORY)?;
    }
    let tokenizer = model.tokenizer();
    // No tokenizer makes more ids than bytes.
    let mut ids = [0u32; config::PROMPT.len()];
    let mut k = 0;
    if !baked {
        k = tokenizer.encode(config::PROMPT, &mut ids)?;
        p.text(config::PROMPT);
    }
    let mut sampler = ferrite::Sampler::new(config::SAMPLER)?;
    #[cfg(all(feature = "roofline", feature = "_qemu"))]
    let (macs_per_token, overhead) = (model.macs_per_token()?, crate::roofline::start());

    let n = config::N;
    let (mut ids_fnv, mut logits_fnv, mut sum) = (Fnv1a::new(), Fnv1a::new(), 0f32);
    let mut start = p.now();
    let mut end = start;
    // The token to feed next (the prompt's last before any is generated).
    let mut token = 0;
    if baked {
        session.restore(&SNAPSHOT.0)?;
        k = session.stream_len() as usize;
    } else {
        let (&last, head) = ids[..k].split_last().ok_or(StepError::EmptyPrompt)?;
        for &t in head {
            session.feed(t)?;
        }
        token = last;
    }
    for index in 0..n {
        let logits = if index == 0 && baked {
            session.last_logits().ok_or(StepError::NoLogits)?
        } else if index > 0 && index == config::SNAPSHOT_AT {
            session.feed(token)?;
            let paused = p.now();
            // On a line of its own, the text going on after it.
            p.text(b"\n");
            p.line(format_args!(
                "snapshot: at={index} bytes={} hex={}",
                session.snapshot_len(),
                Hex(&session)
            ));
            start += p.now() - paused;
            session.last_logits().ok_or(StepError::NoLogits)?
        } else {
            session.feed(token)?
        };
        token = sampler.sample(logits);
        if index + 1 == n {
            for &l in logits {
                logits_fnv.word(l.to_bits());
                sum += l;
            }
        }
        ids_fnv.word(token);
        if let Some(slot) = log.get_mut(index) {
            *slot = token;
        }
        p.text(tokenizer.decode(token));
        end = p.now();
    }
    p.text(b"\n");
    if baked {
        p.line(format_args!(
            "baked: restored a snapshot of {k} prompt tokens ({} bytes)",
            SNAPSHOT_BYTES.len()
        ));
    }
    let fed = if baked { n - 1 } else { k - 1 + n };
    let out = Outcome {
        prompt_tokens: k,
        fed: fed.max(1),
        elapsed: end - start,
    };
    let shown = &log[..n.min(log.len())];
    p.line(format_args!("tokens: {}", Tokens(shown, n > shown.len())));
    p.line(tokens_hash_line!(ids_fnv.0, n));
    p.line(checksum_line!(logits_fnv.0, sum.to_bits()));
    run_line(p, &out, state_bytes, session_bytes);
    #[cfg(all(feature = "roofline", feature = "_qemu"))]
    crate::roofline::line(p, macs_per_token, overhead, out.fed, out.elapsed);
    // On the integer token path every product is a tiled one: say which
    // kernels ran it (the suite requires the assembly and no fallback).
    #[cfg(feature = "int-path")]
    p.line(format_args!(
        "kernel_calls: module={} assembly={} fallback={}",
        ferrite::kernels::arch::NAME,
        ferrite::kernels::calls::assembly(),
        ferrite::kernels::calls::fallback()
    ));
    Ok(out)
}

/// A session's snapshot as hex digits ([`Session::snapshot_to`]: no buffer
/// of its size, so the smallest boards can send theirs).
struct Hex<'s, 'a, 'b>(&'s Session<'a, 'b>);

impl fmt::Display for Hex<'_, '_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut written = Ok(());
        self.0
            .snapshot_to(|bytes| {
                for b in bytes {
                    if written.is_ok() {
                        written = write!(f, "{b:02x}");
                    }
                }
            })
            .map_err(|_| fmt::Error)?;
        written
    }
}

/// The `run:` line of a QEMU board: instructions and the stack's peak.
#[cfg(feature = "_qemu")]
fn run_line<P: Platform>(p: &mut P, out: &Outcome, state_bytes: usize, session_bytes: usize) {
    p.line(ferrite_common::generate_run_line!(
        config::NAME,
        out.prompt_tokens,
        config::N,
        out.elapsed,
        out.elapsed / out.fed as u64,
        crate::platform::stack_peak_checked(),
        state_bytes,
        session_bytes
    ));
}

/// The `run:` line of a chip: its kernels, clock and time per token.
#[cfg(not(feature = "_qemu"))]
fn run_line<P: Platform>(p: &mut P, out: &Outcome, state_bytes: usize, session_bytes: usize) {
    let per_token = out.elapsed / out.fed as u64;
    p.line(format_args!(
        "run: chip={} kernels={} clock_hz={} prompt_tokens={} tokens={} us_per_token={} tokens_per_s={}.{:02} state_bytes={} session_bytes={}",
        config::NAME,
        ferrite::kernels::arch::NAME,
        config::CLOCK_HZ,
        out.prompt_tokens,
        config::N,
        per_token,
        1_000_000 / per_token.max(1),
        (100_000_000 / per_token.max(1)) % 100,
        state_bytes,
        session_bytes
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{IMAGE, SESSION_LEN, TOKEN_LOG};
    use core::fmt;
    use ferrite_common::report::{parse_tokens, Checksum, TokensHash};

    /// Records what the firmware prints; the counter steps 1,000 per read.
    #[derive(Default)]
    struct Host {
        text: Vec<u8>,
        lines: Vec<String>,
        now: u64,
    }

    impl Platform for Host {
        fn text(&mut self, bytes: &[u8]) {
            self.text.extend_from_slice(bytes);
        }
        fn line(&mut self, args: fmt::Arguments<'_>) {
            self.lines.push(args.to_string());
        }
        fn now(&mut self) -> u64 {
            self.now += 1000;
            self.now
        }
    }

    /// The line starting with `prefix`, without it.
    fn line<'a>(h: &'a Host, prefix: &str) -> &'a str {
        h.lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {:?}", h.lines))
    }

    /// The generation path generates what the runtime's own
    /// `Session::generate` does with the same prompt, N and sampler, streams
    /// the prompt and each token's text, and prints report lines the host
    /// parsers read back (ids, their FNV-1a, time per token).
    #[test]
    fn generates_what_the_runtime_generates_and_reports_it() {
        let mut h = Host::default();
        let mut buf = vec![0f32; SESSION_LEN];
        let mut log = [0u32; TOKEN_LOG];
        let model = Model::load(&IMAGE.0).unwrap();
        let out = generate(&mut h, model, &mut buf, &mut log).unwrap();

        let tokenizer = model.tokenizer();
        let mut ids = vec![0u32; config::PROMPT.len()];
        let k = tokenizer.encode(config::PROMPT, &mut ids).unwrap();
        let mut buf2 = vec![0f32; SESSION_LEN];
        let mut session = Session::new(model, &mut buf2).unwrap();
        let mut sampler = ferrite::Sampler::new(config::SAMPLER).unwrap();
        let mut want = Vec::new();
        session
            .generate(&ids[..k], config::N, &mut sampler, |t| {
                want.push(t);
                true
            })
            .unwrap();

        let mut got = Vec::new();
        let truncated = parse_tokens(line(&h, "tokens: "), |id| got.push(id)).unwrap();
        assert_eq!(truncated, config::N > TOKEN_LOG);
        assert_eq!(got, want[..config::N.min(TOKEN_LOG)]);
        let hash = TokensHash::parse(line(&h, "tokens_hash: ")).unwrap();
        assert_eq!(hash.fnv, ferrite_common::fnv1a(want.iter().copied()));
        assert!(Checksum::parse(line(&h, "checksum: ")).is_some());

        let mut text = config::PROMPT.to_vec();
        for &t in &want {
            text.extend_from_slice(tokenizer.decode(t));
        }
        text.push(b'\n');
        assert_eq!(h.text, text);

        assert_eq!(out.prompt_tokens, k);
        assert_eq!(out.fed, k - 1 + config::N);
        // One read before the loop and one per token, 1,000 apart.
        assert_eq!(out.elapsed, 1000 * config::N as u64);
        let run = line(&h, "run: ");
        assert!(run.contains("chip=host kernels=portable"), "{run}");
        let per_token = 1000 * config::N / out.fed;
        assert!(
            run.contains(&format!(" us_per_token={per_token} ")),
            "{run}"
        );
    }
}
