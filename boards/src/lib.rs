//! What every firmware shares, on every target: the embedded image, the
//! build-time configuration, the [`Platform`] a target supplies (console and
//! counter) and the one generation path, [`generate`] (feed the prompt,
//! sample N tokens, stream their text, print the ids, a checksum of the last
//! logits and a `run:` line).
//!
//! The target is the one target feature enabled (a row of the target table,
//! `ferrite_common::target`; see `build.rs`); it picks the [`platform`]
//! module by a `path` attribute, as embassy picks a chip. QEMU boards reach
//! the host through semihosting (console, exit status, files); real chips
//! print through defmt over RTT (or, on the ESP32-C3, esp-println).
#![cfg_attr(not(test), no_std)]

use core::fmt;

use ferrite::{Aligned, Model, Session};

#[cfg_attr(
    all(feature = "_qemu", target_arch = "arm"),
    path = "platform/qemu_arm.rs"
)]
#[cfg_attr(
    all(feature = "_qemu", target_arch = "riscv32"),
    path = "platform/qemu_riscv.rs"
)]
#[cfg_attr(feature = "rp2350", path = "platform/rp2350.rs")]
#[cfg_attr(feature = "rp2350-riscv", path = "platform/rp2350_riscv.rs")]
#[cfg_attr(feature = "nrf52840", path = "platform/nrf52840.rs")]
#[cfg_attr(feature = "stm32f411", path = "platform/stm32f411.rs")]
#[cfg(not(any(feature = "host", feature = "esp32c3")))]
pub mod platform;

#[cfg(feature = "_chip-arm")]
pub mod arm_chip;
#[cfg(feature = "_qemu")]
pub mod console;
#[cfg(feature = "_rtt")]
pub mod rtt;

/// The runtime, for the packages that build on this library (esp32c3/).
pub use ferrite;
/// The MQAR generator, shared with the host's `ferrite eval --mqar`.
pub use ferrite_common::mqar;
/// Process exit statuses the host (xtask) tells apart.
pub use ferrite_common::status;
/// FNV-1a over 32-bit words, the checksum the firmware prints for logits
/// (over their f32 bit patterns) and token ids; xtask computes the same.
pub use ferrite_common::Fnv1a;

/// Build-time configuration: target, prompt, N, sampler, eval parameters (see `build.rs`).
pub mod config {
    include!(concat!(env!("OUT_DIR"), "/build_config.rs"));
}

/// The image, as xtask (`FERRITE_IMAGE`) gave it.
pub const IMAGE_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/model.fer"));

/// The image in flash, 16-byte aligned for the runtime's in-place casts.
pub static IMAGE: Aligned<[u8; IMAGE_BYTES.len()]> =
    Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/model.fer")));

/// f32 words of state + scratch the image needs, at compile time: the
/// firmware's session buffer is exactly this long.
pub const SESSION_LEN: usize = match ferrite::session_len(IMAGE_BYTES, 0) {
    Ok(n) => n,
    Err(_) => panic!(
        "FERRITE_IMAGE is missing or not a ferrite image (build through `cargo xtask board|chip`)"
    ),
};

/// Ids shown on the `tokens:` line; longer runs print these and a hash of
/// all, so that RAM does not depend on N.
pub const TOKEN_LOG: usize = 256;

/// What a target supplies to the generation path: text out and a counter.
pub trait Platform {
    /// Streams model output (bytes of UTF-8 text, possibly split
    /// mid-character); control bytes but `\n` and `\t` are shown as `\xNN`.
    fn text(&mut self, bytes: &[u8]);
    /// Writes one line.
    fn line(&mut self, args: fmt::Arguments<'_>);
    /// A monotonic counter in the unit of the `run:` line: instructions
    /// under QEMU, microseconds on a chip. [`generate`] reads it once per
    /// token, so a 32-bit hardware counter may be widened here.
    fn now(&mut self) -> u64;
}

/// What one generation measured.
pub struct Outcome {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Tokens fed to the model (prompt + generated - 1).
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
/// host) and the target's `run:` line.
pub fn generate<P: Platform>(
    p: &mut P,
    model: Model<'_>,
    buf: &mut [f32],
    log: &mut [u32],
) -> ferrite::Result<Outcome> {
    use ferrite_common::{checksum_line, report::Tokens, tokens_hash_line};

    let state_bytes = model.state_bytes(0)?;
    let session_bytes = 4 * buf.len();
    let mut session = Session::new(model, buf)?;
    let tokenizer = model.tokenizer();
    // No tokenizer makes more ids than bytes.
    let mut ids = [0u32; config::PROMPT.len()];
    let k = tokenizer.encode(config::PROMPT, &mut ids)?;
    let mut sampler = ferrite::Sampler::new(config::SAMPLER)?;
    p.text(config::PROMPT);

    let n = config::N;
    let (mut ids_fnv, mut logits_fnv, mut sum) = (Fnv1a::new(), Fnv1a::new(), 0f32);
    let start = p.now();
    let mut end = start;
    session.generate_with(&ids[..k], n, &mut sampler, |step| {
        if step.index + 1 == n {
            for &l in step.logits {
                logits_fnv.word(l.to_bits());
                sum += l;
            }
        }
        ids_fnv.word(step.token);
        if let Some(slot) = log.get_mut(step.index) {
            *slot = step.token;
        }
        p.text(tokenizer.decode(step.token));
        end = p.now();
        true
    })?;
    p.text(b"\n");
    let out = Outcome {
        prompt_tokens: k,
        fed: k - 1 + n,
        elapsed: end - start,
    };
    let shown = &log[..n.min(log.len())];
    p.line(format_args!("tokens: {}", Tokens(shown, n > shown.len())));
    p.line(tokens_hash_line!(ids_fnv.0, n));
    p.line(checksum_line!(logits_fnv.0, sum.to_bits()));
    run_line(p, &out, state_bytes, session_bytes);
    Ok(out)
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
        platform::stack_peak(),
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

/// The QEMU boards' [`Platform`]: the semihosting console and the
/// instruction counter.
#[cfg(feature = "_qemu")]
pub struct Qemu;

#[cfg(feature = "_qemu")]
impl Platform for Qemu {
    fn text(&mut self, bytes: &[u8]) {
        console::text(bytes)
    }

    fn line(&mut self, args: fmt::Arguments<'_>) {
        console::line(args)
    }

    fn now(&mut self) -> u64 {
        instructions()
    }
}

/// Ends the program: QEMU exits with `code` (semihosting SYS_EXIT_EXTENDED).
#[cfg(feature = "_qemu")]
pub fn exit(code: i32) -> ! {
    console::flush();
    semihosting::process::exit(code)
}

/// Reports a runtime error and exits with [`status::RUNTIME_ERROR`].
#[cfg(feature = "_qemu")]
pub fn fail(e: ferrite::Error) -> ! {
    say!("error: {}", e);
    exit(status::RUNTIME_ERROR)
}

/// Instructions retired since [`platform::init`] (exact on RISC-V; in steps
/// of one SysTick tick on Cortex-M). Only meaningful under QEMU's
/// `-icount shift=0,sleep=off`, where one instruction takes one nanosecond.
#[cfg(feature = "_qemu")]
pub fn instructions() -> u64 {
    let (num, den) = config::INSTR_PER_TICK;
    platform::ticks() * num / den
}

#[cfg(not(any(test, feature = "host", feature = "esp32c3")))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    platform::panic(info)
}

#[cfg(test)]
mod tests {
    use super::*;
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
