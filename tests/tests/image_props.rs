//! Any single byte flip or truncation of a valid image is refused with an
//! `Error` or (re-sealed flips only) loads and decodes without panicking.
//! Without re-sealing, every flip must be caught by the CRC (or the header
//! checks in front of it); re-sealed flips reach the config, the tensor table
//! and the session code.

use std::sync::OnceLock;

use ferrite::image::{DType, CRC_FIELD, HEADER_LEN};
use ferrite::{Error, Model, Session};
use ferrite_tests::random_model;
use ferrite_tools::run::AlignedImage;
use ferrite_tools::writer::{build_image, seal, WriteOptions};
use proptest::prelude::*;

/// Small valid images, one per dtype: one of each mixer family, hidden 8.
fn images() -> &'static [Vec<u8>] {
    static IMAGES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let json = serde_json::json!({
            "vocab_size": 256, "hidden_size": 8, "intermediate_size": 16,
            "tie_word_embeddings": false, "tokenizer": "bytes",
            "layers": [
                {"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0, "conv_size": 2},
                {"mixer": "gsa", "num_heads": 2, "num_kv_heads": 1, "num_slots": 2},
                {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1, "head_dim": 4, "window": 3, "sinks": 1},
                {"mixer": "bla", "num_heads": 1, "head_dim": 8, "period": 4, "modes": 1}
            ]
        });
        let config = ferrite_tools::config_json::parse(&json).expect("valid config");
        let dir = random_model(config, 11);
        [DType::F32, DType::F16, DType::I8, DType::I4]
            .into_iter()
            .map(|dtype| {
                let opts = WriteOptions {
                    dtype,
                    group_size: Some(8),
                    rules: Vec::new(),
                    ..Default::default()
                };
                build_image(&dir, &opts, |_, _| {}).unwrap().bytes
            })
            .collect()
    })
}

/// Loads `bytes`; when it loads, runs a few tokens (and an out-of-range one).
fn load_and_run(bytes: &[u8]) -> Result<(), Error> {
    let image = AlignedImage::new(bytes);
    let model = Model::load(image.bytes())?;
    let words = ferrite::session_len(image.bytes(), 0)?;
    // Flipped config words may ask for absurd buffers: refuse those here.
    if words > 1 << 22 {
        return Ok(());
    }
    let mut buf = vec![0.0f32; words];
    let mut session = Session::new(model, &mut buf)?;
    for t in [1, 200, 3] {
        session.feed(t)?;
    }
    assert!(session.feed(model.config().vocab_size).is_err());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_flipped_byte_is_caught_by_the_crc(which in 0usize..4, pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut b = images()[which].clone();
        let i = pos.index(b.len());
        b[i] ^= 1 << bit;
        let err = load_and_run(&b).expect_err("a flipped image loaded");
        // Header words are checked by the header parser first (a flipped
        // offset may be out of bounds); the CRC field and every byte after
        // the header are caught by the CRC.
        if i >= HEADER_LEN || (CRC_FIELD..CRC_FIELD + 4).contains(&i) {
            prop_assert!(matches!(err, Error::CrcMismatch { .. }), "byte {i}: {err}");
        }
    }

    #[test]
    fn a_truncated_image_is_refused(which in 0usize..4, keep in any::<prop::sample::Index>()) {
        let b = images()[which].clone();
        let n = keep.index(b.len());
        let err = load_and_run(&b[..n]).expect_err("a truncated image loaded");
        prop_assert!(
            matches!(err, Error::Truncated { .. } | Error::BadMagic),
            "{n} bytes: {err}"
        );
    }

    #[test]
    fn a_resealed_flip_is_refused_or_runs(
        which in 0usize..4,
        pos in any::<prop::sample::Index>(),
        value in any::<u8>(),
        in_metadata in any::<bool>(),
    ) {
        let mut b = images()[which].clone();
        // Half the cases hit the header, config and tensor table (where a
        // flip matters most), half anywhere.
        let data_off = u32::from_le_bytes(b[48..52].try_into().unwrap()) as usize;
        let i = if in_metadata { pos.index(data_off) } else { pos.index(b.len()) };
        b[i] = value;
        seal(&mut b);
        // Either outcome is fine; panicking is not (proptest reports panics).
        let _ = load_and_run(&b);
    }

    #[test]
    fn resealed_word_writes_in_the_table_are_refused_or_run(
        which in 0usize..4,
        pos in any::<prop::sample::Index>(),
        value in prop_oneof![any::<u32>(), Just(0u32), Just(u32::MAX), 0u32..64, Just(0x8000_0000)],
    ) {
        let mut b = images()[which].clone();
        let data_off = u32::from_le_bytes(b[48..52].try_into().unwrap()) as usize;
        let i = pos.index(data_off / 4) * 4;
        b[i..i + 4].copy_from_slice(&value.to_le_bytes());
        seal(&mut b);
        let _ = load_and_run(&b);
    }
}

#[test]
fn every_base_image_loads_and_runs() {
    for b in images() {
        load_and_run(b).unwrap();
    }
}
