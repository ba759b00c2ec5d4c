//! The MQAR task generator of `docs/mqar.md` (mirrored in
//! `tools/python/ferrite_ref/mqar.py`): seeded, identical in both languages.
//! The draws are `ferrite_common::mqar`'s, the very code the board's `eval`
//! firmware runs; this module streams and collects them.

use anyhow::{bail, Result};

use ferrite_common::mqar::{Sequence, RANGE as RANGE_USIZE};
pub use ferrite_common::mqar::{SplitMix64, KEYS, NOISE, VALUES};

/// Size of each token range.
pub const RANGE: u32 = RANGE_USIZE as u32;

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
        let seq = Sequence::pairs(rng, p.pairs);
        Some(SequenceTokens {
            rng,
            seq,
            ordered: false,
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
    /// Keys, values and (once `ordered`) the query order.
    seq: Sequence,
    /// Whether the query order is drawn (after the noise).
    ordered: bool,
    noise_left: usize,
    /// Index within the pairs (`0..2P`) and then within the queries.
    next: usize,
}

impl SequenceTokens<'_> {
    fn draw_order(&mut self) {
        self.seq.draw_order(self.rng);
        self.ordered = true;
        self.next = 0;
    }
}

impl Iterator for SequenceTokens<'_> {
    type Item = MqarToken;

    fn next(&mut self) -> Option<MqarToken> {
        let pairs = self.seq.pairs;
        let plain = |token| {
            Some(MqarToken {
                token,
                expect: None,
            })
        };
        if !self.ordered {
            if self.next < 2 * pairs {
                let (i, value) = (self.next / 2, self.next % 2 == 1);
                self.next += 1;
                return plain(if value {
                    self.seq.values[i]
                } else {
                    self.seq.keys[i]
                });
            }
            if self.noise_left > 0 {
                self.noise_left -= 1;
                return plain(self.rng.noise());
            }
            self.draw_order();
        }
        let (q, value) = (self.next / 2, self.next % 2 == 1);
        let &pair = self.seq.order[..pairs].get(q)?;
        self.next += 1;
        let (k, v) = (self.seq.keys[pair as usize], self.seq.values[pair as usize]);
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
        if !self.ordered {
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
