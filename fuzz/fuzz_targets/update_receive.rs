//! Fuzz the A/B update (docs/fuzzing.md): `ferrite::update::receive` over
//! arbitrary chunkings, cut and failing transfers and bytes corrupted in
//! transit, then `validate`, while model A (`fuzz/seeds/mini_int8.fer`)
//! serves.
//!
//! Input layout: `[base: u8][flags: u8][chunk: u16][pieces: u8][piece: u16
//! x (pieces % 8)][fail_at: u16][patches: u8][(at: u16, byte: u8) x
//! (patches % 16)][corrupt: u8][(at: u16, xor: u8) x (corrupt % 4)][rest]`
//! (little-endian). `base % 8` below 6 takes that seed image as B, with the
//! patches written into it (and re-sealed when flag bit 0 is set); 6 and 7
//! take `rest` as B. Flag bits 1-2 size the slot (B's length, +64, -1 - n,
//! tiny), bits 3-4 the session buffer (ample, B's need, B's need - 1, A's).
//! The source delivers B in the pieces given, cycled (a 0 piece ends the
//! transfer there), fails at byte `fail_at` (`0xffff`: never) and XORs the
//! corruptions into the bytes it sends.
//!
//! Asserted: `receive` never asks past the claimed length (only the 20
//! header bytes when it refuses a length larger than the slot), and each
//! outcome is the one the transfer calls for (its byte counts included);
//! the slot then holds exactly the bytes sent. `validate` accepts a pristine
//! seed delivered whole exactly when the buffer holds its session, refuses
//! an image that loads with one byte corrupted in transit from the CRC
//! field on, and a model it accepts loads, has finite values, and runs in
//! the buffer it was validated for. Model A keeps answering, bit for bit, after every refusal.
#![no_main]

use std::sync::OnceLock;

use ferrite::image::{CRC, CRC_FIELD, CRC_START};
use ferrite::update::{receive, validate, Refusal};
use ferrite::{Model, Session};
use libfuzzer_sys::fuzz_target;

const SEEDS: [&[u8]; 6] = [
    include_bytes!("../seeds/mini_f32.fer"),
    include_bytes!("../seeds/mini_f16.fer"),
    include_bytes!("../seeds/mini_int8.fer"),
    include_bytes!("../seeds/mini_int4.fer"),
    include_bytes!("../seeds/mini_int8_phi_table.fer"),
    include_bytes!("../seeds/bpe_int4.fer"),
];
/// Bytes of the header up to and including `file_len`.
const LEN_PREFIX: usize = 20;
/// Tokens model A answers before and after the update.
const A_TOKENS: [u32; 4] = [1, 72, 101, 255];
/// The session buffer when flags say "ample".
const AMPLE_WORDS: usize = 1 << 16;

/// Bytes in a 16-byte aligned buffer.
struct Aligned {
    words: Vec<u128>,
    len: usize,
}

impl Aligned {
    fn new(bytes: &[u8], len: usize, fill: u8) -> Aligned {
        let mut a = Aligned {
            words: vec![u128::from_ne_bytes([fill; 16]); len.div_ceil(16)],
            len,
        };
        let n = bytes.len().min(len);
        a.bytes_mut()[..n].copy_from_slice(&bytes[..n]);
        a
    }
    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// Model A and its logits for [`A_TOKENS`] from a fresh session.
fn model_a() -> &'static (Model<'static>, Vec<Vec<f32>>) {
    static A: OnceLock<(Model<'static>, Vec<Vec<f32>>)> = OnceLock::new();
    A.get_or_init(|| {
        let image: &'static Aligned =
            Box::leak(Box::new(Aligned::new(SEEDS[2], SEEDS[2].len(), 0)));
        let model = Model::load(image.bytes()).unwrap();
        let mut buf = vec![0.0; model.session_len(0).unwrap()];
        let mut s = Session::new(model, &mut buf).unwrap();
        let logits = A_TOKENS
            .iter()
            .map(|&t| s.feed(t).unwrap().to_vec())
            .collect();
        (model, logits)
    })
}

/// Reads little-endian fields off the front of the input (zeros past its end).
struct Input<'d>(&'d [u8]);

impl Input<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }
}

/// What the source did: bytes delivered, and how it stopped.
#[derive(Default)]
struct Sent {
    bytes: Vec<u8>,
    ended: bool,
    failed: bool,
}

fn file_len(prefix: &[u8]) -> usize {
    u32::from_le_bytes(prefix[16..20].try_into().unwrap()) as usize
}

fuzz_target!(|data: &[u8]| {
    let (a, a_logits) = model_a();
    let mut input = Input(data);
    let base = input.u8() % 8;
    let flags = input.u8();
    let chunk = usize::from(input.u16());
    let pieces: Vec<usize> = (0..input.u8() % 8)
        .map(|_| usize::from(input.u16()))
        .collect();
    let fail_at = match input.u16() {
        0xffff => usize::MAX,
        f => usize::from(f),
    };
    let patches: Vec<(u16, u8)> = (0..input.u8() % 16)
        .map(|_| (input.u16(), input.u8()))
        .collect();
    let corrupt: Vec<(usize, u8)> = (0..input.u8() % 4)
        .map(|_| (usize::from(input.u16()), input.u8()))
        .filter(|&(_, x)| x != 0)
        .collect();
    let mut image = match SEEDS.get(usize::from(base)) {
        Some(seed) => seed.to_vec(),
        None => input.0.to_vec(),
    };
    let pristine = base < 6 && patches.is_empty();
    if base < 6 {
        let n = image.len();
        for &(at, b) in &patches {
            image[usize::from(at) % n] = b;
        }
        if flags & 1 != 0 {
            let crc = CRC.checksum(&image[CRC_START..]);
            image[CRC_FIELD..CRC_FIELD + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let cap = match (flags >> 1) & 3 {
        0 => image.len(),
        1 => image.len() + 64,
        2 => image.len().saturating_sub(1 + usize::from(input.u8())),
        _ => usize::from(input.u8() % 32),
    };
    let words = match (flags >> 3) & 3 {
        0 => AMPLE_WORDS,
        b => {
            let need = Model::load(Aligned::new(&image, image.len(), 0).bytes())
                .and_then(|m| m.session_len(0))
                .unwrap_or(AMPLE_WORDS);
            match b {
                1 => need,
                2 => need.saturating_sub(1),
                _ => a.session_len(0).unwrap(),
            }
        }
    };

    // A serves while B arrives; the session lives on after a refusal.
    let mut buf = vec![0.0f32; words.max(a.session_len(0).unwrap())];
    let mut serving = Session::new(*a, &mut buf).unwrap();
    for (t, want) in A_TOKENS.iter().zip(a_logits).take(2) {
        assert_eq!(serving.feed(*t).unwrap(), &want[..]);
    }

    let mut slot = Aligned::new(&[], cap, 0xa5);
    let mut sent = Sent::default();
    let mut piece = 0;
    let got = receive(slot.bytes_mut(), chunk, |dst| {
        let at = sent.bytes.len();
        if at >= fail_at {
            sent.failed = true;
            return Err(());
        }
        let p = pieces.get(piece % pieces.len().max(1)).copied();
        piece += 1;
        let n = dst.len().min(p.unwrap_or(usize::MAX)).min(image.len() - at);
        if n == 0 {
            sent.ended = true;
            return Ok(0);
        }
        dst[..n].copy_from_slice(&image[at..at + n]);
        for &(c, x) in &corrupt {
            if (at..at + n).contains(&c) {
                dst[c - at] ^= x;
            }
        }
        sent.bytes.extend_from_slice(&dst[..n]);
        Ok(n)
    });
    let delivered = sent.bytes.len();
    let claimed = (delivered >= LEN_PREFIX).then(|| file_len(&sent.bytes).max(LEN_PREFIX));
    assert!(
        delivered <= claimed.unwrap_or(LEN_PREFIX),
        "read past the claimed length"
    );
    // A seed sent whole, uncut, into a slot that holds it, is received.
    let whole = base < 6
        && !pieces.contains(&0)
        && fail_at >= image.len()
        && cap >= image.len()
        && file_len(&image) == image.len()
        && !corrupt.iter().any(|&(c, _)| (16..20).contains(&c));
    assert!(!whole || got == Ok(image.len()), "{got:?}");
    let outcome = match got {
        Ok(len) => {
            assert_eq!(Some(len), claimed);
            assert!(len <= cap && delivered == len);
            assert_eq!(
                &slot.bytes()[..len],
                &sent.bytes[..],
                "the slot holds other bytes"
            );
            let corrupted = corrupt.iter().any(|&(c, _)| c < len);
            let result = validate(&slot.bytes()[..len], words);
            if pristine && !corrupted {
                let need = Model::load(slot.bytes()).unwrap().session_len(0).unwrap();
                assert_eq!(result.is_ok(), words >= need, "{:?}", result.err());
            }
            // One byte of a valid image changed in transit (a patch left
            // unsealed could be undone by it: only a source that loads).
            if let [(c, _)] = corrupt[..] {
                let source_loads =
                    Model::load(Aligned::new(&image, image.len(), 0).bytes()).is_ok();
                if source_loads && (CRC_FIELD..len).contains(&c) {
                    assert!(result.is_err(), "a byte corrupted at {c} was accepted");
                }
            }
            result.map(|b| (b, len))
        }
        Err(r) => {
            match r {
                Refusal::TooLarge {
                    claimed: c,
                    capacity,
                } => {
                    assert_eq!(capacity, cap);
                    assert!(c > cap);
                    if cap >= LEN_PREFIX {
                        assert_eq!((delivered, Some(c)), (LEN_PREFIX, claimed));
                    }
                }
                Refusal::NoHeader { got } => {
                    assert!(sent.ended && got == delivered && got < LEN_PREFIX)
                }
                Refusal::Interrupted { got, claimed: c } => {
                    assert!(sent.ended && got == delivered && Some(c) == claimed && got < c)
                }
                Refusal::ReadError { got } => assert!(sent.failed && got == delivered),
                other => panic!("receive refused with {other}"),
            }
            Err(r)
        }
    };
    match outcome {
        Ok((b, len)) => {
            // B serves in the same buffer; A's session is not used again.
            assert!(Model::load(&slot.bytes()[..len]).is_ok() && b.check_values().is_ok());
            let mut s = Session::new(b, &mut buf[..words]).expect("validated for this buffer");
            let vocab = b.config().vocab_size;
            for t in [0, vocab / 2, vocab.saturating_sub(1)] {
                assert_eq!(s.feed(t).unwrap().len(), vocab as usize);
            }
        }
        Err(_) => {
            // A keeps serving: the answers of an undisturbed session.
            for (t, want) in A_TOKENS.iter().zip(a_logits).skip(2) {
                assert_eq!(serving.feed(*t).unwrap(), &want[..]);
            }
        }
    }
});
