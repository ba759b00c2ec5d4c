//! Board support shared by the firmware binaries: console, exit status,
//! instruction counter, stack measurement, panic and fault handlers.
//!
//! One crate serves every board: the ISA comes from the target
//! (`cortex_m` / `riscv`), the board from `FERRITE_BOARD` (a row of the board
//! table in `ferrite_common::board`: memory map and clock ratio, see `build.rs`). Everything reaches the host through
//! semihosting, which QEMU implements on both ISAs.
#![no_std]

#[cfg_attr(target_arch = "arm", path = "platform/cortex_m.rs")]
#[cfg_attr(target_arch = "riscv32", path = "platform/riscv.rs")]
pub mod platform;

pub mod console;
/// The MQAR generator, shared with the host's `ferrite eval --mqar`.
pub use ferrite_common::mqar;
/// Process exit statuses the host (xtask) tells apart.
pub use ferrite_common::status;
/// FNV-1a over 32-bit words, the checksum the firmware prints for logits
/// (over their f32 bit patterns) and token ids; xtask computes the same.
pub use ferrite_common::Fnv1a;

/// Build-time configuration: board, prompt, N, sampler, eval parameters (see `build.rs`).
pub mod config {
    include!(concat!(env!("OUT_DIR"), "/build_config.rs"));
}

/// Ends the program: QEMU exits with `code` (semihosting SYS_EXIT_EXTENDED).
pub fn exit(code: i32) -> ! {
    console::flush();
    semihosting::process::exit(code)
}

/// Instructions retired since [`platform::init`] (exact on RISC-V; in steps
/// of one SysTick tick on Cortex-M). Only meaningful under QEMU's
/// `-icount shift=0,sleep=off`, where one instruction takes one nanosecond.
pub fn instructions() -> u64 {
    let (num, den) = config::INSTR_PER_TICK;
    platform::ticks() * num / den
}

/// What one generation produced, beyond the streamed text.
pub struct Outcome {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Tokens fed to the model (prompt + generated - 1).
    pub fed: usize,
    /// Instructions from the first feed to the last sample.
    pub instructions: u64,
    /// FNV-1a of all generated ids.
    pub ids: Fnv1a,
    /// FNV-1a of the final step's logits (f32 bit patterns) and their f32 sum.
    pub logits_fnv: Fnv1a,
    pub logits_sum: f32,
}

/// Feeds `prompt` and samples `n` tokens (greedily, or with the build-time
/// sampler [`config::SAMPLER`], as `ferrite generate --temperature .. --seed ..`), streaming their text and
/// keeping the first `log.len()` ids in `log`. The same steps as
/// `Session::generate`, unrolled to see the last step's logits. The prompt is
/// encoded and the tokens decoded with the model's own tokenizer (bytes or
/// the image's BPE); decoded bytes are streamed as they come, so a UTF-8
/// character split across tokens is printed whole once its last byte is out.
pub fn generate(
    session: &mut ferrite::Session<'_, '_>,
    prompt: &[u8],
    n: usize,
    log: &mut [u32],
) -> ferrite::Result<Outcome> {
    let tokenizer = session.model().tokenizer();
    // No tokenizer makes more ids than bytes.
    let mut ids = [0u32; config::PROMPT.len()];
    let k = tokenizer.encode(prompt, &mut ids)?;
    let (&last, head) = ids[..k]
        .split_last()
        .ok_or(ferrite::Error::BadPrompt("the prompt is empty"))?;
    let mut sampler = ferrite::Sampler::new(config::SAMPLER)?;
    console::text(prompt);

    let start = instructions();
    for &t in head {
        session.feed(t)?;
    }
    let mut token = last;
    let mut out = Outcome {
        prompt_tokens: k,
        fed: head.len() + n,
        instructions: 0,
        ids: Fnv1a::new(),
        logits_fnv: Fnv1a::new(),
        logits_sum: 0.0,
    };
    for i in 0..n {
        let logits = session.feed(token)?;
        if i + 1 == n {
            for &l in logits {
                out.logits_fnv.word(l.to_bits());
                out.logits_sum += l;
            }
        }
        token = sampler.sample(logits);
        out.ids.word(token);
        if let Some(slot) = log.get_mut(i) {
            *slot = token;
        }
        console::text(tokenizer.decode(token));
    }
    out.instructions = instructions() - start;
    console::text(b"\n");
    Ok(out)
}

/// Prints the `tokens:`, `tokens_hash:` and `checksum:` lines of a run of
/// `n` tokens whose first ids are in `log`.
/// The lines are `ferrite_common::report`'s, which xtask parses.
pub fn print_outcome(out: &Outcome, log: &[u32], n: usize) {
    use ferrite_common::{checksum_line, report::Tokens, tokens_hash_line};
    let shown = &log[..n.min(log.len())];
    say!("tokens: {}", Tokens(shown, n > shown.len()));
    console::line(tokens_hash_line!(out.ids.0, n));
    console::line(checksum_line!(out.logits_fnv.0, out.logits_sum.to_bits()));
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    console::panic_message(info);
    exit(status::PANIC)
}
