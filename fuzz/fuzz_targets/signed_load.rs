//! Fuzz signed images (docs/fuzzing.md, docs/signing.md): the format-7
//! header words, the signature section's parser and the verification
//! before the loader, `signature::verify` and `Model::load_signed`, on
//! arbitrary bytes and on a signed seed (`fuzz/seeds-signed/
//! mini_int8_signed.fer`, test key `tests/keys/test-signer`, security
//! counter 3) with bytes patched.
//!
//! Input layout: `[mode: u8][min_counter: u8][rest]`. `mode % 4`: 0 takes
//! `rest` as the image; 1 the seed with `rest` read as patches `(at: u16,
//! byte: u8)` (little-endian, `at` modulo the seed's length); 2 the same,
//! the CRC sealed again after the patches (what an attacker can do); 3 the
//! seed with its last 96 bytes (the section: key, signature) replaced by
//! the start of `rest`. The policy trusts the seed's key alone, with
//! `min_counter` as the lowest counter accepted.
//!
//! Asserted: nothing panics; an image `verify` accepts has exactly the
//! seed's signed bytes and section (no patch survives a signature), names
//! the trusted key and a counter at or above the minimum; `load_signed`
//! accepts exactly what `verify` accepts and `Model::load` loads, and the
//! model it returns is the seed's.
#![no_main]

use ferrite::image::{Header, CRC, CRC_FIELD, CRC_START};
use ferrite::signature::{self, LoadError, TrustPolicy};
use ferrite::Model;
use libfuzzer_sys::fuzz_target;

static SEED: &[u8] = include_bytes!("../seeds-signed/mini_int8_signed.fer");

/// 16-byte aligned copy of `bytes` (the runtime reads images in place).
fn aligned(bytes: &[u8]) -> Vec<u128> {
    let mut words = vec![0u128; bytes.len().div_ceil(16)];
    bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    words
}

fn reseal(b: &mut [u8]) {
    let end = Header::parse(b).map_or(b.len(), |h| h.signed_len() as usize);
    if end > CRC_START && end <= b.len() {
        let crc = CRC.checksum(&b[CRC_START..end]);
        b[CRC_FIELD..CRC_FIELD + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

fuzz_target!(|data: &[u8]| {
    let (Some(&mode), Some(&min)) = (data.first(), data.get(1)) else {
        return;
    };
    let rest = &data[2..];
    let image: Vec<u8> = match mode % 4 {
        0 => rest.to_vec(),
        1 | 2 => {
            let mut b = SEED.to_vec();
            for p in rest.chunks_exact(3) {
                let at = u16::from_le_bytes([p[0], p[1]]) as usize % b.len();
                b[at] = p[2];
            }
            if mode % 4 == 2 {
                reseal(&mut b);
            }
            b
        }
        _ => {
            let mut b = SEED.to_vec();
            let at = b.len() - 96;
            let n = rest.len().min(96);
            b[at..at + n].copy_from_slice(&rest[..n]);
            b
        }
    };
    let words = aligned(&image);
    let bytes = &bytemuck::cast_slice::<u128, u8>(&words)[..image.len()];
    let seed_header = Header::parse(SEED).expect("the seed parses");
    let key = *signature::section(SEED, &seed_header)
        .expect("the seed is signed")
        .public_key;
    let keys = [key];
    let policy = TrustPolicy {
        keys: &keys,
        min_counter: u32::from(min),
    };
    if let Ok(h) = Header::parse(bytes) {
        if let Some(s) = signature::section(bytes, &h) {
            assert_eq!(s.signed.len() + 96, h.file_len as usize);
        }
    }
    let verified = signature::verify(bytes, &policy);
    if let Ok(v) = &verified {
        let len = Header::parse(bytes).unwrap().file_len as usize;
        assert_eq!(&bytes[..len], SEED, "a patched image passed verification");
        assert!(v.security_counter >= u32::from(min));
    }
    match Model::load_signed(bytes, &policy) {
        Ok(model) => {
            assert!(verified.is_ok());
            assert_eq!(model.image(), SEED);
        }
        Err(LoadError::Signature(_)) => assert!(verified.is_err()),
        Err(LoadError::Invalid(_)) => {
            // Either the header does not parse (verify fails the same way),
            // or the signature passed and the loader refused: not the seed.
            assert!(verified.is_err() || Model::load(bytes).is_err());
        }
    }
});
