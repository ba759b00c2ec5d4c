//! The MQAR task generator of `docs/mqar.md` (mirrored in
//! `tools/python/ferrite_ref/mqar.py`): seeded, identical in both languages.

use anyhow::{bail, Result};

/// First key token; keys are `KEYS..KEYS + RANGE`.
pub const KEYS: u32 = 0;
/// First value token.
pub const VALUES: u32 = 64;
/// First noise token.
pub const NOISE: u32 = 128;
/// Size of each token range.
pub const RANGE: u32 = 64;

/// The splitmix64 stream of `docs/mqar.md`.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting at `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `next() % n`.
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % n as u64) as u32
    }
}

/// Task shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MqarParams {
    /// Key-value pairs per sequence.
    pub pairs: usize,
    /// Tokens per sequence (>= 4 * pairs).
    pub seq_len: usize,
}

impl Default for MqarParams {
    fn default() -> Self {
        MqarParams {
            pairs: 8,
            seq_len: 64,
        }
    }
}

/// One sequence with the positions at which the model is scored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MqarSequence {
    /// The tokens.
    pub tokens: Vec<u32>,
    /// `(position of a query key, expected value)`: the logits after reading
    /// `tokens[position]` must put the value first.
    pub targets: Vec<(usize, u32)>,
}

/// Partial Fisher-Yates: the first `k` items of a shuffle of `0..n`.
fn shuffle_prefix(rng: &mut SplitMix64, n: u32, k: usize) -> Vec<u32> {
    let mut a: Vec<u32> = (0..n).collect();
    for j in 0..k {
        let r = j + rng.below(n - j as u32) as usize;
        a.swap(j, r);
    }
    a.truncate(k);
    a
}

/// The splitmix64 increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    /// Skips `k` draws in O(1): the state after `k` draws is `seed + k * GAMMA`.
    pub fn skip(&mut self, k: u64) {
        self.0 = self.0.wrapping_add(k.wrapping_mul(GAMMA));
    }
}

/// One token of a sequence and whether the model is scored after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MqarToken {
    /// The token.
    pub token: u32,
    /// `Some(value)` at a query key: the logits after reading it must put
    /// `value` first.
    pub expect: Option<u32>,
}

/// The task's sequences, one token at a time, in memory independent of the
/// number of sequences and their length (the board's `eval` firmware draws
/// them the same way). [`generate`] collects them.
#[derive(Clone, Debug)]
pub struct MqarStream {
    rng: SplitMix64,
    params: MqarParams,
    left: usize,
}

impl MqarStream {
    /// `n` sequences of the task from `seed`; checks the parameters.
    pub fn new(seed: u64, n: usize, p: MqarParams) -> Result<MqarStream> {
        if p.pairs == 0 || p.pairs > RANGE as usize {
            bail!("pairs must be in 1..=64, got {}", p.pairs);
        }
        if p.seq_len < 4 * p.pairs {
            bail!(
                "seq_len {} is shorter than 4 * pairs = {}",
                p.seq_len,
                4 * p.pairs
            );
        }
        Ok(MqarStream {
            rng: SplitMix64::new(seed),
            params: p,
            left: n,
        })
    }

    /// The next sequence's tokens, or `None` after the last. Dropping it
    /// part-way leaves the stream where the whole sequence would have.
    pub fn next_sequence(&mut self) -> Option<SequenceTokens<'_>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let p = self.params;
        let rng = &mut self.rng;
        let keys: Vec<u32> = shuffle_prefix(rng, RANGE, p.pairs)
            .iter()
            .map(|k| KEYS + k)
            .collect();
        let values: Vec<u32> = (0..p.pairs).map(|_| VALUES + rng.below(RANGE)).collect();
        Some(SequenceTokens {
            rng,
            keys,
            values,
            order: Vec::new(),
            noise_left: p.seq_len - 4 * p.pairs,
            next: 0,
        })
    }
}

/// The tokens of one sequence (see [`MqarStream::next_sequence`]), in
/// layout order `k1 v1 .. kP vP | noise | q1 a1 .. qP aP`, drawn in the
/// generator's order: keys and values, noise as it comes, then the queries.
#[derive(Debug)]
pub struct SequenceTokens<'s> {
    rng: &'s mut SplitMix64,
    keys: Vec<u32>,
    values: Vec<u32>,
    /// Query order, drawn after the noise (empty until then).
    order: Vec<u32>,
    noise_left: usize,
    /// Index within the pairs (`0..2P`) and then within the queries.
    next: usize,
}

impl SequenceTokens<'_> {
    fn draw_order(&mut self) {
        let pairs = self.keys.len();
        self.order = shuffle_prefix(self.rng, pairs as u32, pairs);
        self.next = 0;
    }
}

impl Iterator for SequenceTokens<'_> {
    type Item = MqarToken;

    fn next(&mut self) -> Option<MqarToken> {
        let pairs = self.keys.len();
        let plain = |token| {
            Some(MqarToken {
                token,
                expect: None,
            })
        };
        if self.order.is_empty() {
            if self.next < 2 * pairs {
                let (i, value) = (self.next / 2, self.next % 2 == 1);
                self.next += 1;
                return plain(if value { self.values[i] } else { self.keys[i] });
            }
            if self.noise_left > 0 {
                self.noise_left -= 1;
                return plain(NOISE + self.rng.below(RANGE));
            }
            self.draw_order();
        }
        let (q, value) = (self.next / 2, self.next % 2 == 1);
        let &pair = self.order.get(q)?;
        self.next += 1;
        let (k, v) = (self.keys[pair as usize], self.values[pair as usize]);
        Some(if value {
            MqarToken {
                token: v,
                expect: None,
            }
        } else {
            MqarToken {
                token: k,
                expect: Some(v),
            }
        })
    }
}

impl Drop for SequenceTokens<'_> {
    fn drop(&mut self) {
        // Keep the stream in step: the rest of the noise, then the query order.
        if self.order.is_empty() {
            self.rng.skip(self.noise_left as u64);
            self.draw_order();
        }
    }
}

/// `n` sequences of the task from `seed`, collected from [`MqarStream`].
pub fn generate(seed: u64, n: usize, p: MqarParams) -> Result<Vec<MqarSequence>> {
    let mut stream = MqarStream::new(seed, n, p)?;
    let mut out = Vec::new();
    while let Some(seq) = stream.next_sequence() {
        let (mut tokens, mut targets) = (Vec::new(), Vec::new());
        for t in seq {
            if let Some(value) = t.expect {
                targets.push((tokens.len(), value));
            }
            tokens.push(t.token);
        }
        out.push(MqarSequence { tokens, targets });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_published_reference_values() {
        // First outputs of splitmix64 seeded with 0 (Vigna's reference implementation).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn skipping_equals_drawing() {
        let (mut a, mut b) = (SplitMix64::new(5), SplitMix64::new(5));
        for _ in 0..1000 {
            a.next_u64();
        }
        b.skip(1000);
        assert_eq!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn a_sequence_dropped_part_way_leaves_the_stream_in_step() {
        let p = MqarParams::default();
        let all = generate(9, 3, p).unwrap();
        for stop in [0, 5, 16, 40, 48, 63, 64] {
            let mut s = MqarStream::new(9, 3, p).unwrap();
            let first: Vec<u32> = s
                .next_sequence()
                .unwrap()
                .take(stop)
                .map(|t| t.token)
                .collect();
            assert_eq!(first, all[0].tokens[..stop]);
            let second: Vec<u32> = s.next_sequence().unwrap().map(|t| t.token).collect();
            assert_eq!(second, all[1].tokens, "stopped after {stop}");
        }
        // Any length streams: the first tokens of a sequence of 2^64 - 1.
        let huge = MqarParams {
            pairs: 8,
            seq_len: usize::MAX,
        };
        let mut s = MqarStream::new(9, usize::MAX, huge).unwrap();
        let head: Vec<u32> = s
            .next_sequence()
            .unwrap()
            .take(48)
            .map(|t| t.token)
            .collect();
        assert_eq!(head, all[0].tokens[..48]);
    }

    #[test]
    fn sequences_follow_the_layout() {
        let p = MqarParams::default();
        for s in generate(3, 20, p).unwrap() {
            assert_eq!(s.tokens.len(), p.seq_len);
            let keys: Vec<u32> = s.tokens[..2 * p.pairs].iter().step_by(2).copied().collect();
            let mut distinct = keys.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), p.pairs, "keys are distinct");
            for &(pos, value) in &s.targets {
                let k = s.tokens[pos];
                let i = keys.iter().position(|&x| x == k).expect("a query is a key");
                assert_eq!(s.tokens[2 * i + 1], value);
                assert_eq!(s.tokens[pos + 1], value);
            }
            assert!(s.tokens[2 * p.pairs..p.seq_len - 2 * p.pairs]
                .iter()
                .all(|&t| (NOISE..NOISE + RANGE).contains(&t)));
        }
        assert_eq!(generate(3, 5, p).unwrap(), generate(3, 5, p).unwrap());
        assert_ne!(generate(3, 1, p).unwrap(), generate(4, 1, p).unwrap());
        assert!(generate(
            0,
            1,
            MqarParams {
                pairs: 8,
                seq_len: 31
            }
        )
        .is_err());
    }
}
