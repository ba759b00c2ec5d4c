//! `ferrite::update` on real images (docs/design.md, "Model updates"): a
//! good image is received in chunks and validated; a cut, a flipped bit, a
//! session larger than the RAM reserved for it and a hostile image with a
//! valid CRC (`tests/corrupt/`) are refused with their reason.

use std::path::Path;

use ferrite::update::{receive, validate, Refusal};
use ferrite::Error;
use ferrite_tests::{fixtures_dir, image_of};
use ferrite_tools::writer::WriteOptions;

/// A 16-byte aligned slot of `n` bytes.
fn slot(n: usize) -> Vec<u128> {
    vec![0u128; n.div_ceil(16)]
}

fn bytes(words: &mut [u128]) -> &mut [u8] {
    bytemuck::cast_slice_mut(words)
}

/// Receives `data` in 512-byte chunks into a 1 MiB slot and validates it
/// against a session budget of `session_words`.
fn update(data: &[u8], session_words: usize) -> Result<usize, Refusal> {
    let mut words = slot(1 << 20);
    let slot = bytes(&mut words);
    let mut at = 0;
    let len = receive(slot, 512, |buf| {
        let n = buf.len().min(data.len() - at);
        buf[..n].copy_from_slice(&data[at..at + n]);
        at += n;
        Ok(n)
    })?;
    let model = validate(&slot[..len], session_words)?;
    Ok(model.session_len(0).unwrap())
}

fn good_image() -> Vec<u8> {
    let dir = fixtures_dir().join("hybrid_all4_untied");
    image_of(&dir, &WriteOptions::default()).bytes().to_vec()
}

#[test]
fn a_good_image_is_accepted_when_its_session_fits() {
    let image = good_image();
    let words = update(&image, 1 << 20).unwrap();
    assert_eq!(update(&image, words), Ok(words));
    assert_eq!(
        update(&image, words - 1),
        Err(Refusal::SessionTooLarge {
            needed: 4 * words,
            available: 4 * (words - 1)
        })
    );
}

#[test]
fn broken_images_are_refused() {
    let image = good_image();
    let half = image.len() / 2;
    assert_eq!(
        update(&image[..half], 1 << 20),
        Err(Refusal::Interrupted {
            got: half,
            claimed: image.len()
        })
    );
    let mut flipped = image.clone();
    flipped[half] ^= 0x40;
    assert!(matches!(
        update(&flipped, 1 << 20),
        Err(Refusal::Invalid(Error::CrcMismatch { .. }))
    ));
    // Hostile: valid CRC, impossible records (each refused by name).
    let corrupt = Path::new(env!("CARGO_MANIFEST_DIR")).join("corrupt");
    let mut hostile = 0;
    for entry in std::fs::read_dir(&corrupt).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "fer") {
            let data = std::fs::read(&path).unwrap();
            let r = update(&data, 1 << 20);
            assert!(r.is_err(), "{} was accepted", path.display());
            hostile += 1;
        }
    }
    assert!(hostile >= 20, "only {hostile} corrupt images");
}
