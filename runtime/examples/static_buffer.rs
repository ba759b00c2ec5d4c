//! A model embedded in the program, its session buffer a `static` sized at
//! compile time from the image itself — the shape of every board's `main`.
//!
//! ```text
//! cargo run -p ferrite-lm --example static_buffer
//! ```
//!
//! The image is `tests/images/tiny_int8.fer` (4 layers, one per mixer family,
//! int8 weights; regenerate with the command in `tests/images/README.md`).
//! On a board the buffer would be a `static mut` or a `StaticCell`; here a
//! `Mutex` keeps the example free of `unsafe`.

use std::sync::Mutex;

use ferrite::{Aligned, ByteTokenizer, Model, Session};

/// The image, 16-byte aligned so its tensors are used in place.
static IMAGE: Aligned<[u8; IMAGE_LEN]> =
    Aligned(*include_bytes!("../../tests/images/tiny_int8.fer"));
const IMAGE_LEN: usize = include_bytes!("../../tests/images/tiny_int8.fer").len();

/// f32 words of state + scratch, computed by the compiler from the image's
/// header and config (a bad image fails the build here).
const SESSION_WORDS: usize = match ferrite::session_len(&IMAGE.0, 0) {
    Ok(n) => n,
    Err(_) => panic!("tests/images/tiny_int8.fer is not a valid ferrite image"),
};

/// The whole RAM the model needs, reserved statically.
static BUF: Mutex<[f32; SESSION_WORDS]> = Mutex::new([0.0; SESSION_WORDS]);

fn main() -> Result<(), ferrite::Error> {
    let model = Model::load(&IMAGE.0)?;
    assert_eq!(model.session_len(0)?, SESSION_WORDS);
    println!(
        "flash {} bytes (used in place), RAM {} bytes static ({} of them state)",
        IMAGE_LEN,
        4 * SESSION_WORDS,
        model.state_bytes(0)?
    );
    let mut buf = BUF.lock().expect("only this thread uses the buffer");
    let mut session = Session::new(model, &mut buf[..])?;
    let mut next = 0;
    for &b in b"Hi" {
        next = argmax(session.feed(u32::from(b))?);
    }
    let mut out = Vec::new();
    for _ in 0..8 {
        out.push(next);
        next = argmax(session.feed(next)?);
    }
    println!("greedy tokens after \"Hi\": {out:?}");
    let text: Vec<u8> = out
        .iter()
        .flat_map(|&t| ByteTokenizer.decode(t).iter().copied())
        .collect();
    println!("as bytes: {:?}", String::from_utf8_lossy(&text));
    Ok(())
}

fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}
