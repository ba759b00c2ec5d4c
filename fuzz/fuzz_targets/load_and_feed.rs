//! Fuzz `Model::load`, the image's tokenizer and a few `Session::feed` steps
//! (docs/fuzzing.md).
//!
//! Each input is tried twice: as is (almost always refused by the CRC check,
//! which is the point: that path must never panic) and re-sealed with a fresh
//! CRC, so that mutations reach the header, config, tensor-table and session
//! code behind it. Nothing may panic; every refusal must be an `Error`.
#![no_main]

use ferrite::image::{CRC, CRC_FIELD, CRC_START, HEADER_LEN};
use ferrite::{Model, Session};
use libfuzzer_sys::fuzz_target;

/// Largest session buffer the target allocates (f32 words): 16 MiB.
const MAX_SESSION_WORDS: usize = 4 << 20;
/// Tokens fed per loaded model.
const STEPS: u32 = 3;

/// Copies `bytes` into a 16-byte aligned buffer, as `Model::load` requires.
fn aligned(bytes: &[u8]) -> Vec<u128> {
    let mut words = vec![0u128; bytes.len().div_ceil(16)];
    bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    words
}

fn view(words: &[u128], len: usize) -> &[u8] {
    &bytemuck::cast_slice::<u128, u8>(words)[..len]
}

fn exercise(image: &[u8]) {
    let Ok(model) = Model::load(image) else {
        return;
    };
    // Everything the tools print must be computable without panicking.
    let _ = (model.state_bytes(0), model.session_bytes(0));
    // The tokenizer (bytes or the image's BPE) on the image's own bytes as
    // text: encode must fit `len` ids and decode must give the text back.
    let tokenizer = model.tokenizer();
    let text = &image[..image.len().min(512)];
    let mut ids = vec![0u32; text.len()];
    let n = tokenizer
        .encode(text, &mut ids)
        .expect("len(text) ids always suffice");
    let back: Vec<u8> = ids[..n]
        .iter()
        .flat_map(|&t| tokenizer.decode(t).iter().copied())
        .collect();
    assert_eq!(back, text);
    for i in 0..model.tensor_count() {
        let _ = model.tensor(i);
    }
    let Ok(words) = ferrite::session_len(image, 0) else {
        return;
    };
    if words > MAX_SESSION_WORDS {
        return;
    }
    let mut buf = vec![0.0f32; words];
    // A buffer one word short must be refused, not overrun.
    if words > 0 {
        assert!(Session::new(model, &mut buf[..words - 1]).is_err());
    }
    let Ok(mut session) = Session::new(model, &mut buf) else {
        return;
    };
    let vocab = model.config().vocab_size;
    for t in 0..STEPS {
        let _ = session.feed(t.wrapping_mul(97) % vocab.max(1));
    }
    let _ = session.feed(vocab);
    // Baked memories of `cross` layers (issue 32): a selection is taken or
    // refused with the state unchanged, and the stream goes on either way.
    for m in [1u32, 0, 7, 8, u32::MAX] {
        let before = session.state().to_vec();
        if session.select_memory(m).is_err() {
            assert_eq!(
                session.state(),
                &before[..],
                "a refused selection changed the state"
            );
        }
        let _ = session.feed(m % vocab.max(1));
    }
    // Caller-owned memories (issue 32 stage 2): the device encoder writes
    // exactly `memory_len` words (and `memory_rows` scales for int8) or refuses, and a step with the memory it
    // wrote, or one a word short, never panics.
    for slots in [1usize, 3] {
        let Ok(len) = ferrite::memory_len(image, slots) else {
            continue;
        };
        if len > MAX_SESSION_WORDS {
            continue;
        }
        let tokens: Vec<u32> = (0..slots as u32).map(|t| t % vocab.max(1)).collect();
        let mut out = vec![0.0f32; len];
        if let Ok(memory) = session.encode_memory(&tokens, &mut out) {
            let _ = session.feed_with_memory(1 % vocab.max(1), &memory);
        }
        assert!(ferrite::Memory::new(&model, slots, &out[..len - 1]).is_err());
        // int8 words with a scale a row: the same, and a scale short refused.
        let Ok(rows) = ferrite::memory_rows(image, slots) else {
            continue;
        };
        let (mut q, mut scales) = (vec![0i8; len], vec![0.0f32; rows]);
        if let Ok(memory) = session.encode_memory_i8(&tokens, &mut q, &mut scales) {
            let _ = session.feed_with_memory(1 % vocab.max(1), &memory);
        }
        assert!(
            ferrite::Memory::new_i8(&model, slots, &q, &scales[..rows.saturating_sub(1)]).is_err()
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut words = aligned(data);
    exercise(view(&words, data.len()));
    if data.len() >= HEADER_LEN {
        // Re-seal over the bytes the header claims (or all there are).
        let claimed = u32::from_le_bytes([data[16], data[17], data[18], data[19]]) as usize;
        let end = claimed.clamp(CRC_START, data.len());
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        let crc = CRC.checksum(&bytes[CRC_START..end]);
        bytes[CRC_FIELD..CRC_FIELD + 4].copy_from_slice(&crc.to_le_bytes());
        exercise(view(&words, data.len()));
    }
});
