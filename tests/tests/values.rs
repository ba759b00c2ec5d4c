//! `Model::check_values`: an image whose CRC is valid but whose numbers are
//! not finite is refused by name (what an A/B update checks before it
//! switches), for f32, f16 and int8 (scales) tensors; every committed
//! fixture passes.

use ferrite::image::{DType, CRC, CRC_FIELD, CRC_START};
use ferrite::Error;
use ferrite_tests::{fixture_dirs, fixtures_dir, image_of};
use ferrite_tools::run::AlignedImage;
use ferrite_tools::writer::WriteOptions;

/// `bytes` with `value` written at byte `at` and the CRC re-sealed.
fn poisoned(bytes: &[u8], at: usize, value: &[u8]) -> AlignedImage {
    let mut b = bytes.to_vec();
    b[at..at + value.len()].copy_from_slice(value);
    let crc = CRC.checksum(&b[CRC_START..]);
    b[CRC_FIELD..CRC_FIELD + 4].copy_from_slice(&crc.to_le_bytes());
    AlignedImage::new(&b)
}

#[test]
fn every_fixture_has_finite_values() {
    for dir in fixture_dirs() {
        for dtype in [DType::F32, DType::F16, DType::I8, DType::I4] {
            let opts = WriteOptions {
                dtype,
                ..WriteOptions::default()
            };
            let image = image_of(&dir, &opts);
            let model = image.model().unwrap();
            assert_eq!(model.check_values(), Ok(()), "{} {dtype:?}", dir.display());
        }
    }
}

#[test]
fn a_nan_or_infinity_with_a_valid_crc_is_refused() {
    let dir = fixtures_dir().join("hybrid_all4_untied");
    for (dtype, poison) in [
        (DType::F32, f32::NAN.to_le_bytes().to_vec()),
        (DType::F32, f32::INFINITY.to_le_bytes().to_vec()),
        (DType::F16, half::f16::NAN.to_le_bytes().to_vec()),
        (DType::I8, f32::NEG_INFINITY.to_le_bytes().to_vec()),
    ] {
        let opts = WriteOptions {
            dtype,
            ..WriteOptions::default()
        };
        let image = image_of(&dir, &opts);
        let model = image.model().unwrap();
        // The last tensor of the dtype: its last value (f32/f16) or its first
        // row scale (int8, tiled: row scales come first).
        let (index, entry) = (0..model.tensor_count())
            .map(|i| (i, model.entry(i).unwrap()))
            .rfind(|(_, e)| e.dtype == dtype)
            .unwrap();
        let at = match dtype {
            DType::I8 => entry.scale_off,
            _ => entry.data_off + entry.data_len - poison.len() as u32,
        } as usize;
        let bad = poisoned(image.bytes(), at, &poison);
        let model = bad.model().expect("structure is intact: it loads");
        assert_eq!(
            model.check_values(),
            Err(Error::BadTensor {
                index,
                reason: "a value or scale is NaN or infinite"
            }),
            "{dtype:?}"
        );
    }
}
