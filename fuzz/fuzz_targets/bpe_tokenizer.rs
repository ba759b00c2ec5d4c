//! Fuzz the image's BPE tokenizer section on its own (docs/fuzzing.md):
//! `BpeTokenizer::parse` of arbitrary section bytes, then encode and decode
//! of arbitrary text with every section that parses.
//!
//! Input layout: `[vocab_size: u16 LE][text_len: u8][text][section]`. The
//! section is copied into a 4-byte aligned buffer, as an image places it.
//! Nothing may panic; every refusal must be an `Error`; a tokenizer that
//! parses must encode any text into at most `len(text)` ids whose decoded
//! bytes are the text.
#![no_main]

use ferrite::BpeTokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [v0, v1, text_len, rest @ ..] = data else {
        return;
    };
    let vocab_size = u32::from(u16::from_le_bytes([*v0, *v1]));
    let (text, section) = rest.split_at(rest.len().min(usize::from(*text_len)));
    let mut words = vec![0u32; section.len().div_ceil(4)];
    let aligned = &mut bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..section.len()];
    aligned.copy_from_slice(section);
    let Ok(tokenizer) = BpeTokenizer::parse(aligned, vocab_size) else {
        return;
    };
    let _ = (tokenizer.vocab_len(), tokenizer.merge_count());
    let mut ids = vec![0u32; text.len()];
    let n = tokenizer
        .encode(text, &mut ids)
        .expect("len(text) ids always suffice");
    let back: Vec<u8> = ids[..n]
        .iter()
        .flat_map(|&t| tokenizer.decode(t).iter().copied())
        .collect();
    assert_eq!(back, text, "decode(encode(text)) must be the text");
    // Too small an output buffer is an error, never an overrun.
    if n > 0 {
        let mut short = vec![0u32; n - 1];
        assert!(tokenizer.encode(text, &mut short).is_err());
    }
    // Ids outside the vocabulary decode to nothing rather than panic.
    let _ = tokenizer.decode(u32::MAX);
});
