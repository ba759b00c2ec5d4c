//! Generates text from the image embedded in flash.
//!
//! Feeds the build-time prompt, then samples `N` tokens greedily, streaming
//! their text (the prompt encoded and the tokens decoded with the model's own
//! tokenizer: bytes, or the image's byte-level BPE); prints the token ids, a
//! checksum of the final-step logits and a `run:` line of measurements that
//! `cargo xtask board` turns into the `stats:` line. All memory is static and sized at compile time from the
//! image: the session buffer is exactly `ferrite::session_len(image, 0)` words.
#![no_std]
#![no_main]

use ferrite::{Aligned, Model, Session};
use ferrite_boards::{config, platform, say, status};

/// The image, as `cargo xtask board --image` gave it (see build.rs).
const IMAGE_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/model.fer"));
static IMAGE: Aligned<[u8; IMAGE_BYTES.len()]> =
    Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/model.fer")));

/// f32 words of state + scratch, from the image at compile time.
const SESSION_LEN: usize = match ferrite::session_len(IMAGE_BYTES, 0) {
    Ok(n) => n,
    Err(_) => panic!(
        "FERRITE_IMAGE is missing or not a ferrite image (build through `cargo xtask board`)"
    ),
};
static mut SESSION_BUF: [f32; SESSION_LEN] = [0.0; SESSION_LEN];

/// Ids printed on the `tokens:` line; longer runs print these and a hash of
/// all, so that RAM does not depend on N.
const TOKEN_LOG: usize = 256;
static mut TOKENS: [u32; TOKEN_LOG] = [0; TOKEN_LOG];

const _: () = assert!(config::N >= 1, "FERRITE_N must be at least 1");

fn fail(e: ferrite::Error) -> ! {
    say!("error: {}", e);
    ferrite_boards::exit(status::RUNTIME_ERROR)
}

#[platform::entry]
fn main() -> ! {
    platform::init();

    let model = Model::load(&IMAGE.0).unwrap_or_else(|e| fail(e));
    let state_bytes = model.state_bytes(0).unwrap_or_else(|e| fail(e));
    // SAFETY: the only references to SESSION_BUF and TOKENS, taken once.
    let (buf, log) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(SESSION_BUF),
            &mut *core::ptr::addr_of_mut!(TOKENS),
        )
    };
    let mut session = Session::new(model, buf).unwrap_or_else(|e| fail(e));

    let out = ferrite_boards::generate(&mut session, config::PROMPT, config::N, log)
        .unwrap_or_else(|e| fail(e));
    ferrite_boards::print_outcome(&out, log, config::N);
    ferrite_boards::console::line(ferrite_common::generate_run_line!(
        config::BOARD,
        out.prompt_tokens,
        config::N,
        out.instructions,
        out.instructions / out.fed as u64,
        platform::stack_peak(),
        state_bytes,
        4 * SESSION_LEN
    ));
    ferrite_boards::exit(status::OK)
}
