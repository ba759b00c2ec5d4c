//! Generates text from the image embedded in flash, on every target: feeds
//! the build-time prompt, samples `N` tokens, streams their text, prints the
//! token ids, a checksum of the final-step logits and a `run:` line of
//! measurements (see `ferrite_boards::generate`) that `cargo xtask board`
//! turns into the `stats:` line. All memory is static and sized at compile
//! time from the image: the session buffer is exactly
//! `ferrite::session_len(image, 0)` words.
#![no_std]
#![no_main]

use ferrite::Model;
use ferrite_boards::{platform, status, Platform, IMAGE, SESSION_LEN, TOKEN_LOG};

static mut SESSION_BUF: [f32; SESSION_LEN] = [0.0; SESSION_LEN];
static mut TOKENS: [u32; TOKEN_LOG] = [0; TOKEN_LOG];

const _: () = assert!(
    ferrite_boards::config::N >= 1,
    "FERRITE_N must be at least 1"
);

#[platform::entry]
fn main() -> ! {
    let mut p = platform::init();
    // SAFETY: the only references to SESSION_BUF and TOKENS, taken once.
    let (buf, log) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(SESSION_BUF),
            &mut *core::ptr::addr_of_mut!(TOKENS),
        )
    };
    let generated =
        Model::load(&IMAGE.0).and_then(|model| ferrite_boards::generate(&mut p, model, buf, log));
    match generated {
        Ok(_) => platform::exit(status::OK),
        Err(e) => {
            p.line(format_args!("error: {e}"));
            platform::exit(status::RUNTIME_ERROR)
        }
    }
}
