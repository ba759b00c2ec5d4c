//! Fuzz long sessions on valid images (docs/fuzzing.md): thousands of
//! tokens, `seek` anywhere up to `u64::MAX`, `reset`, `reset_pinned` and
//! tokens outside the vocabulary, in the order the input says.
//!
//! Input layout: `[image: u8][pinned_max: u8][ops...]`; `image` picks one of
//! the committed seed images (`fuzz/seeds/`, finite weights), `pinned_max %
//! 9` the session's pinned capacity. Each op is one byte (`% 8`) and its
//! argument: 0 feed `u16` (may be out of range), 1 feed `n + 1` tokens of
//! an LCG seeded by `s` (`[n: u8][s: u8]`), 2 seek `u64`, 3 seek
//! `u64::MAX - k` (`[k: u8]`), 4 reset, 5 reset_pinned `p % 16`, 6 replay
//! the stream, 7 shift the stream. At most [`MAX_TOKENS`] tokens per input.
//!
//! Asserted: an in-range token at a position below `u64::MAX` is accepted
//! and its logits are the vocabulary's length and finite; a refused feed
//! (out of range, position overflow) or pinned count changes neither the
//! state nor the position; the position counts the tokens fed; replaying
//! the stream on a fresh session gives bit-identical logits (a reset or seek
//! leaves nothing of the stream before it); the same tokens from position 0
//! give the same logits up to RoPE angle rounding ([`SHIFT_TOLERANCE_FLOAT`],
//! [`SHIFT_TOLERANCE_INTEGER`]).
#![no_main]

use std::sync::OnceLock;

use ferrite::{Error, Model, Session, StepError};
use libfuzzer_sys::fuzz_target;

/// Most tokens fed per input (all ops together, replays included).
const MAX_TOKENS: usize = 512;
/// Largest |difference| of a shifted stream's logits from position 0's,
/// relative to `1 + |logit|`, for images without tiled tensors: RoPE
/// phases are exact 64-bit fixed point, the difference is f32 angle
/// rounding carried through the stream (at most 6e-7 seen).
const SHIFT_TOLERANCE_FLOAT: f32 = 1e-4;
/// The same on the integer path (tiled tensors): a difference that small
/// can move an int8 activation across a rounding boundary, one step of
/// 1/127 of its row's largest value, for one token (2.4e-3 seen).
const SHIFT_TOLERANCE_INTEGER: f32 = 2e-2;

const SEEDS: [&[u8]; 6] = [
    include_bytes!("../seeds/mini_f32.fer"),
    include_bytes!("../seeds/mini_f16.fer"),
    include_bytes!("../seeds/mini_int8.fer"),
    include_bytes!("../seeds/mini_int4.fer"),
    include_bytes!("../seeds/mini_int8_phi_table.fer"),
    include_bytes!("../seeds/bpe_int4.fer"),
];

/// The seed images, loaded once into 16-byte aligned buffers, each with
/// whether it has tiled tensors (the integer path).
fn models() -> &'static [(Model<'static>, bool)] {
    static MODELS: OnceLock<Vec<(Model<'static>, bool)>> = OnceLock::new();
    MODELS.get_or_init(|| {
        SEEDS
            .iter()
            .map(|bytes| {
                let mut words = vec![0u128; bytes.len().div_ceil(16)];
                bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()]
                    .copy_from_slice(bytes);
                let words: &'static [u128] = Vec::leak(words);
                let image = &bytemuck::cast_slice::<u128, u8>(words)[..bytes.len()];
                let model = Model::load(image).expect("a committed seed image loads");
                model
                    .check_values()
                    .expect("seed images have finite weights");
                let tiled = (0..model.tensor_count()).any(|i| model.tensor(i).unwrap().is_tiled());
                (model, tiled)
            })
            .collect()
    })
}

/// The stream since the last reset or seek: where it started, what is
/// pinned, the tokens fed and the last logits.
#[derive(Default)]
struct Stream {
    start: u64,
    pinned: usize,
    tokens: Vec<u32>,
    last: Vec<f32>,
}

struct Run {
    model: Model<'static>,
    pinned_max: usize,
    fed: usize,
}

impl Run {
    fn session<'b>(&self, buf: &'b mut Vec<f32>) -> Session<'static, 'b> {
        let words = self.model.session_len(self.pinned_max).unwrap();
        buf.resize(words, f32::NAN);
        Session::with_pinned_capacity(self.model, buf, self.pinned_max).unwrap()
    }

    /// Feeds `token` and checks the outcome against the contract.
    fn feed(&mut self, s: &mut Session<'_, '_>, stream: &mut Stream, token: u32) {
        let vocab = self.model.config().vocab_size;
        let pos = s.position();
        let refused = token >= vocab || pos == u64::MAX;
        let state = if refused {
            s.state().to_vec()
        } else {
            Vec::new()
        };
        self.fed += 1;
        match s.feed(token) {
            Ok(logits) => {
                assert!(!refused, "feed({token}) at {pos} was accepted");
                assert_eq!(logits.len(), vocab as usize);
                if let Some(l) = logits.iter().find(|l| !l.is_finite()) {
                    panic!(
                        "logit {l} at position {pos} (stream token {})",
                        stream.tokens.len()
                    );
                }
                stream.last.clear();
                stream.last.extend_from_slice(logits);
                stream.tokens.push(token);
                assert_eq!(s.position(), pos + 1);
                assert_eq!(s.stream_len(), stream.tokens.len() as u64);
            }
            Err(e) => {
                match e {
                    StepError::TokenOutOfRange { .. } => assert!(token >= vocab),
                    StepError::PositionOverflow => assert!(token < vocab && pos == u64::MAX),
                    other => panic!("feed({token}) at {pos}: unexpected error {other}"),
                }
                assert_eq!(s.position(), pos, "a refused token moved the position");
                assert!(s.state() == &state[..], "a refused token changed the state");
            }
        }
    }

    /// Feeds `stream`'s tokens on a fresh session started at `start`;
    /// returns the last logits.
    fn replay(&mut self, stream: &Stream, start: u64) -> Vec<f32> {
        let mut buf = Vec::new();
        let mut s = self.session(&mut buf);
        s.reset_pinned(stream.pinned).unwrap();
        s.seek(start);
        let mut last = Vec::new();
        for &t in &stream.tokens {
            self.fed += 1;
            last = s.feed(t).unwrap().to_vec();
        }
        last
    }
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn take<const N: usize>(ops: &mut &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = N.min(ops.len());
    out[..n].copy_from_slice(&ops[..n]);
    *ops = &ops[n..];
    out
}

fuzz_target!(|data: &[u8]| {
    let [image, pinned_max, ops @ ..] = data else {
        return;
    };
    let mut ops: &[u8] = ops;
    let models = models();
    let (model, tiled) = models[usize::from(*image) % models.len()];
    let tolerance = if tiled {
        SHIFT_TOLERANCE_INTEGER
    } else {
        SHIFT_TOLERANCE_FLOAT
    };
    let mut run = Run {
        model,
        pinned_max: usize::from(*pinned_max % 9),
        fed: 0,
    };
    let vocab = run.model.config().vocab_size;
    let mut buf = Vec::new();
    let mut s = run.session(&mut buf);
    let mut stream = Stream::default();
    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        if run.fed >= MAX_TOKENS {
            break;
        }
        match op % 8 {
            0 => {
                let token = u16::from_le_bytes(take(&mut ops));
                run.feed(&mut s, &mut stream, u32::from(token));
            }
            1 => {
                let [n, seed] = take(&mut ops);
                let mut x = u32::from(seed);
                for _ in 0..=n {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    run.feed(&mut s, &mut stream, (x >> 8) % vocab);
                }
            }
            2 | 3 => {
                let pos = if op % 8 == 2 {
                    u64::from_le_bytes(take(&mut ops))
                } else {
                    u64::MAX - u64::from(take::<1>(&mut ops)[0])
                };
                s.seek(pos);
                assert!(s.state().iter().all(|&b| b == 0));
                assert_eq!((s.position(), s.stream_len()), (pos, 0));
                stream = Stream {
                    start: pos,
                    pinned: stream.pinned,
                    ..Stream::default()
                };
            }
            4 => {
                s.reset();
                assert_eq!(s.position(), 0);
                stream = Stream {
                    pinned: stream.pinned,
                    ..Stream::default()
                };
            }
            5 => {
                let p = usize::from(take::<1>(&mut ops)[0] % 16);
                let (pos, state) = (s.position(), s.state().to_vec());
                match s.reset_pinned(p) {
                    Ok(()) => {
                        assert!(p <= run.pinned_max);
                        assert_eq!(s.position(), 0);
                        stream = Stream {
                            pinned: p,
                            ..Stream::default()
                        };
                    }
                    Err(Error::TooManyPinned { asked, max }) => {
                        assert_eq!((asked, max), (p, run.pinned_max));
                        assert!(p > run.pinned_max);
                        assert_eq!(s.position(), pos);
                        assert_eq!(s.state(), &state[..]);
                    }
                    Err(e) => panic!("reset_pinned({p}): unexpected error {e}"),
                }
            }
            6 => {
                if !stream.tokens.is_empty() {
                    let again = run.replay(&stream, stream.start);
                    assert!(
                        same_bits(&again, &stream.last),
                        "a fresh session fed the same stream gives other logits"
                    );
                }
            }
            _ => {
                if !stream.tokens.is_empty() && stream.start != 0 {
                    let at0 = run.replay(&stream, 0);
                    for (a, b) in stream.last.iter().zip(&at0) {
                        assert!(
                            (a - b).abs() <= tolerance * (1.0 + b.abs()),
                            "from position {}: logit {a}, from 0: {b} ({} tokens)",
                            stream.start,
                            stream.tokens.len()
                        );
                    }
                }
            }
        }
    }
});
