//! What every chip firmware shares: the embedded image, the session length,
//! the build-time configuration and the generation loop of the QEMU boards'
//! `generate` (feed the prompt, sample N tokens, stream their text, print the
//! ids, a checksum of the last logits and a `run:` line). Each chip brings a
//! [`Platform`]: its console (defmt over RTT, or esp-println) and a cycle or
//! microsecond counter. No semihosting: nothing here needs a debugger to run.
#![cfg_attr(not(test), no_std)]

use core::fmt;

use ferrite::{Aligned, Session};
use ferrite_common::Fnv1a;

#[cfg(feature = "rtt")]
pub mod rtt;

/// Build-time configuration: chip, clock, prompt, N, sampler (see `build.rs`).
pub mod config {
    include!(concat!(env!("OUT_DIR"), "/build_config.rs"));
}

/// The image, as `cargo xtask chip --image` (`FERRITE_IMAGE`) gave it.
pub const IMAGE_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/model.fer"));

/// The image in flash, 16-byte aligned for the runtime's in-place casts.
pub static IMAGE: Aligned<[u8; IMAGE_BYTES.len()]> =
    Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/model.fer")));

/// f32 words of state + scratch the image needs, at compile time: the
/// firmware's session buffer is exactly this long.
pub const SESSION_LEN: usize = match ferrite::session_len(IMAGE_BYTES, 0) {
    Ok(n) => n,
    Err(_) => {
        panic!("FERRITE_IMAGE is missing or not a ferrite image (build through `cargo xtask chip`)")
    }
};

/// The tile-kernel module this build runs (`dsp`, `rv32`, ...), picked by
/// runtime/build.rs from the target and `-C target-cpu`.
pub const KERNELS: &str = ferrite::kernels::arch::NAME;

/// Whether two strings are equal, in a const context.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

// The kernels runtime/build.rs picked for this target and `-C target-cpu`
// are the ones the chip table (and docs/chips.md) promise, or the build fails.
const _: () = assert!(
    same(KERNELS, config::EXPECTED_KERNELS),
    "the runtime picked other tile kernels than the chip table's `kernels` for this chip"
);

/// Ids shown on the `tokens:` line (longer runs end it with `,...`).
pub const TOKEN_LOG: usize = 256;

/// What a chip provides: text out and a counter.
pub trait Platform {
    /// Frequency of [`Platform::ticks`], Hz.
    const TICK_HZ: u32;
    /// Streams model output (bytes of UTF-8 text, possibly split mid-character).
    fn text(&mut self, bytes: &[u8]);
    /// Writes one line.
    fn line(&mut self, args: fmt::Arguments<'_>);
    /// A free-running counter at [`Platform::TICK_HZ`], wrapping at 2^32
    /// (read at least once per wrap: every token).
    fn ticks(&mut self) -> u32;
}

/// What one generation measured.
pub struct Outcome {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Tokens fed to the model (prompt + generated - 1).
    pub fed: usize,
    /// Counter ticks from the first feed to the last sample.
    pub ticks: u64,
}

/// Feeds the build-time prompt and samples [`config::N`] tokens with the
/// build-time sampler, streaming their text; then prints `tokens:`,
/// `tokens_hash:` and `checksum:` (the QEMU boards' lines, so the ids and the
/// logits' checksum can be compared with `ferrite generate` / `logits` on the
/// host) and a `run:` line with the chip, its kernels and the time per token.
pub fn generate<P: Platform>(
    p: &mut P,
    buf: &mut [f32],
    log: &mut [u32; TOKEN_LOG],
) -> ferrite::Result<Outcome> {
    use ferrite_common::{checksum_line, report::Tokens, tokens_hash_line};

    let model = ferrite::Model::load(&IMAGE.0)?;
    let state_bytes = model.state_bytes(0)?;
    let mut session = Session::new(model, buf)?;
    let tokenizer = model.tokenizer();
    // No tokenizer makes more ids than bytes.
    let mut ids = [0u32; config::PROMPT.len()];
    let k = tokenizer.encode(config::PROMPT, &mut ids)?;
    let (&last, head) = ids[..k]
        .split_last()
        .ok_or(ferrite::Error::BadPrompt("the prompt is empty"))?;
    let mut sampler = ferrite::Sampler::new(config::SAMPLER)?;
    p.text(config::PROMPT);

    let mut ticks = 0u64;
    let mut t0 = p.ticks();
    let mut tick = |p: &mut P| {
        let t = p.ticks();
        ticks += u64::from(t.wrapping_sub(t0));
        t0 = t;
    };
    for &t in head {
        session.feed(t)?;
        tick(p);
    }
    let n = config::N;
    let (mut token, mut ids_fnv, mut logits_fnv, mut sum) =
        (last, Fnv1a::new(), Fnv1a::new(), 0f32);
    for i in 0..n {
        let logits = session.feed(token)?;
        if i + 1 == n {
            for &l in logits {
                logits_fnv.word(l.to_bits());
                sum += l;
            }
        }
        token = sampler.sample(logits);
        ids_fnv.word(token);
        if let Some(slot) = log.get_mut(i) {
            *slot = token;
        }
        tick(p);
        p.text(tokenizer.decode(token));
    }
    p.text(b"\n");
    let out = Outcome {
        prompt_tokens: k,
        fed: head.len() + n,
        ticks,
    };
    let shown = &log[..n.min(TOKEN_LOG)];
    p.line(format_args!("tokens: {}", Tokens(shown, n > shown.len())));
    p.line(tokens_hash_line!(ids_fnv.0, n));
    p.line(checksum_line!(logits_fnv.0, sum.to_bits()));
    let us = out.ticks * 1_000_000 / u64::from(P::TICK_HZ);
    let per_token = us / out.fed as u64;
    p.line(format_args!(
        "run: chip={} kernels={} clock_hz={} prompt_tokens={} tokens={} us_per_token={} tokens_per_s={}.{:02} state_bytes={} session_bytes={}",
        config::CHIP,
        KERNELS,
        config::CLOCK_HZ,
        out.prompt_tokens,
        n,
        per_token,
        1_000_000 / per_token.max(1),
        (100_000_000 / per_token.max(1)) % 100,
        state_bytes,
        4 * SESSION_LEN
    ));
    Ok(out)
}

#[cfg(feature = "arm")]
pub mod arm;

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_common::report::{parse_tokens, Checksum, TokensHash};

    /// Records what the firmware prints; the counter steps 1,000 per read.
    #[derive(Default)]
    struct Host {
        text: Vec<u8>,
        lines: Vec<String>,
        now: u32,
    }

    impl Platform for Host {
        const TICK_HZ: u32 = 1_000_000;
        fn text(&mut self, bytes: &[u8]) {
            self.text.extend_from_slice(bytes);
        }
        fn line(&mut self, args: fmt::Arguments<'_>) {
            self.lines.push(args.to_string());
        }
        fn ticks(&mut self) -> u32 {
            // Starts near the wrap, so the sum has to handle one.
            self.now = self.now.wrapping_add(1000);
            self.now.wrapping_sub(2500)
        }
    }

    /// The line starting with `prefix`, without it.
    fn line<'a>(h: &'a Host, prefix: &str) -> &'a str {
        h.lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {:?}", h.lines))
    }

    /// The chips' loop generates what the runtime's own
    /// `Session::generate` does with the same prompt, N and sampler, streams
    /// the prompt and each token's text, and prints report lines the host
    /// parsers read back (ids, their FNV-1a, time per token).
    #[test]
    fn generates_what_the_runtime_generates_and_reports_it() {
        let mut h = Host::default();
        let mut buf = vec![0f32; SESSION_LEN];
        let mut log = [0u32; TOKEN_LOG];
        let out = generate(&mut h, &mut buf, &mut log).unwrap();

        let model = ferrite::Model::load(&IMAGE.0).unwrap();
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
        // One read before the loop and one per token fed, 1,000 ticks apart.
        assert_eq!(out.ticks, 1000 * out.fed as u64);
        let run = line(&h, "run: ");
        assert!(run.contains("chip=host kernels=portable"), "{run}");
        assert!(
            run.contains(" us_per_token=1000 tokens_per_s=1000.00 "),
            "{run}"
        );
    }
}
