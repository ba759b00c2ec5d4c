//! The MQAR task generator of `docs/mqar.md` (mirrored in
//! `tools/python/ferrite_ref/mqar.py`): seeded, identical in both languages.
//! The draws are `ferrite_common::mqar`'s, the very code the board's `eval`
//! firmware runs; this module streams and collects them.

use anyhow::{bail, Result};

use ferrite_common::mqar::{Sequence, Slot, SpreadSlots, RANGE as RANGE_USIZE};
pub use ferrite_common::mqar::{SplitMix64, KEYS, NOISE, VALUES};

/// Size of each token range.
pub const RANGE: u32 = RANGE_USIZE as u32;

/// Where the queries go (`docs/mqar.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Queries {
    /// `k1 v1 .. kP vP | noise | q1 a1 .. qP aP`: all queries at the end.
    #[default]
    End,
    /// `k1 v1 .. kP vP | slot 0 | .. | slot S-1`: the queries in `P` of the
    /// `S = (L - 2P) / 2` two-token slots, chosen uniformly at random
    /// (`L` even).
    Spread,
}

impl Queries {
    /// The name the CLI and the Python generator use.
    pub fn name(self) -> &'static str {
        match self {
            Queries::End => "end",
            Queries::Spread => "spread",
        }
    }
}

impl std::fmt::Display for Queries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Task shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MqarParams {
    /// Key-value pairs per sequence.
    pub pairs: usize,
    /// Tokens per sequence (>= 4 * pairs; even with [`Queries::Spread`]).
    pub seq_len: usize,
    /// The layout of the queries.
    pub queries: Queries,
}

impl Default for MqarParams {
    fn default() -> Self {
        MqarParams {
            pairs: 8,
            seq_len: 64,
            queries: Queries::End,
        }
    }
}

impl MqarParams {
    /// Checks the parameters (what [`MqarStream::new`] refuses).
    pub fn check(&self) -> Result<()> {
        if self.pairs == 0 || self.pairs > RANGE as usize {
            bail!("pairs must be in 1..=64, got {}", self.pairs);
        }
        if self.seq_len < 4 * self.pairs {
            bail!(
                "seq_len {} is shorter than 4 * pairs = {}",
                self.seq_len,
                4 * self.pairs
            );
        }
        if self.queries == Queries::Spread && self.seq_len % 2 != 0 {
            bail!(
                "seq_len {} must be even with spread queries (two-token slots)",
                self.seq_len
            );
        }
        Ok(())
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
        p.check()?;
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
        let mut seq = Sequence::pairs(rng, p.pairs);
        let spread = match p.queries {
            Queries::End => None,
            Queries::Spread => {
                // The spread layout draws the query order before its slots.
                seq.draw_order(rng);
                Some(SpreadSlots::new(p.pairs, p.seq_len).expect("checked by MqarStream::new"))
            }
        };
        Some(SequenceTokens {
            rng,
            seq,
            ordered: false,
            noise_left: p.seq_len - 4 * p.pairs,
            next: 0,
            spread,
            second: None,
        })
    }
}

/// The tokens of one sequence (see [`MqarStream::next_sequence`]), in
/// layout order, drawn in the generator's order. `end`:
/// `k1 v1 .. kP vP | noise | q1 a1 .. qP aP`; keys and values, noise as it
/// comes, then the queries. `spread`: `k1 v1 .. kP vP | slot 0 | .. |
/// slot S-1`; keys, values and query order, then each slot as it comes.
#[derive(Debug)]
pub struct SequenceTokens<'s> {
    rng: &'s mut SplitMix64,
    /// Keys, values and (once `ordered`, or from the start with `spread`)
    /// the query order.
    seq: Sequence,
    /// `end`: whether the query order is drawn (after the noise).
    ordered: bool,
    /// `end`: filler tokens still to draw.
    noise_left: usize,
    /// Index within the pairs (`0..2P`) and then (`end`) within the queries.
    next: usize,
    /// `spread`: the slots still to draw.
    spread: Option<SpreadSlots>,
    /// `spread`: the second token of the slot whose first was the last out.
    second: Option<u32>,
}

impl SequenceTokens<'_> {
    /// The next token of `k1 v1 .. kP vP`, or `None` after them.
    fn pair_token(&mut self) -> Option<u32> {
        if self.next >= 2 * self.seq.pairs {
            return None;
        }
        let (i, value) = (self.next / 2, self.next % 2 == 1);
        self.next += 1;
        Some(if value {
            self.seq.values[i]
        } else {
            self.seq.keys[i]
        })
    }

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
        if self.spread.is_some() || !self.ordered {
            if let Some(t) = self.pair_token() {
                return plain(t);
            }
        }
        if let Some(slots) = &mut self.spread {
            if let Some(t) = self.second.take() {
                return plain(t);
            }
            return match slots.next_slot(self.rng)? {
                Slot::Query(q) => {
                    let (k, v) = self.seq.query(q);
                    self.second = Some(v);
                    Some(MqarToken {
                        token: k,
                        expect: Some(v),
                    })
                }
                Slot::Noise(n1, n2) => {
                    self.second = Some(n2);
                    plain(n1)
                }
            };
        }
        if !self.ordered {
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
        // Keep the stream in step. spread: the slots not yet drawn (the
        // order came first); end: the rest of the noise, then the query order.
        if let Some(slots) = &mut self.spread {
            slots.skip_rest(self.rng);
        } else if !self.ordered {
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
            seq_len: usize::MAX,
            ..p
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
        assert!(generate(0, 1, MqarParams { seq_len: 31, ..p }).is_err());
    }

    fn spread(pairs: usize, seq_len: usize) -> MqarParams {
        MqarParams {
            pairs,
            seq_len,
            queries: Queries::Spread,
        }
    }

    #[test]
    fn spread_sequences_follow_the_layout() {
        for (pairs, seq_len, seed) in [
            (8, 64, 0),
            (8, 64, 1_000_000),
            (1, 4, 2),
            (4, 40, 3),
            (3, 100, 4),
        ] {
            let p = spread(pairs, seq_len);
            let slots = (seq_len - 2 * pairs) / 2;
            for s in generate(seed, 30, p).unwrap() {
                assert_eq!(s.tokens.len(), seq_len);
                let keys: Vec<u32> = s.tokens[..2 * pairs].iter().step_by(2).copied().collect();
                let values: Vec<u32> = s.tokens[1..2 * pairs].iter().step_by(2).copied().collect();
                let mut distinct = keys.clone();
                distinct.sort();
                distinct.dedup();
                assert_eq!(distinct.len(), pairs, "keys are distinct");
                assert!(values.iter().all(|v| (VALUES..VALUES + RANGE).contains(v)));
                // P targets, at the first token of a slot, in increasing order,
                // asking for every key once.
                assert_eq!(s.targets.len(), pairs);
                let mut asked = Vec::new();
                for w in s.targets.windows(2) {
                    assert!(w[0].0 < w[1].0);
                }
                for &(pos, value) in &s.targets {
                    assert!(pos >= 2 * pairs && (pos - 2 * pairs) % 2 == 0);
                    let k = s.tokens[pos];
                    let i = keys.iter().position(|&x| x == k).expect("a query is a key");
                    assert_eq!(values[i], value);
                    assert_eq!(s.tokens[pos + 1], value);
                    asked.push(k);
                }
                asked.sort();
                assert_eq!(asked, distinct, "the queries are a permutation of the keys");
                // Every other slot is two noise tokens.
                let query_slots: Vec<usize> = s
                    .targets
                    .iter()
                    .map(|&(pos, _)| (pos - 2 * pairs) / 2)
                    .collect();
                for slot in (0..slots).filter(|i| !query_slots.contains(i)) {
                    let at = 2 * pairs + 2 * slot;
                    assert!(s.tokens[at..at + 2]
                        .iter()
                        .all(|t| (NOISE..NOISE + RANGE).contains(t)));
                }
            }
        }
        // With P = S every slot is a query.
        let full = &generate(5, 1, spread(4, 16)).unwrap()[0];
        assert_eq!(
            full.targets.iter().map(|t| t.0).collect::<Vec<_>>(),
            [8, 10, 12, 14]
        );
        // The queries land in different places from sequence to sequence.
        let firsts: std::collections::BTreeSet<usize> = generate(0, 50, spread(8, 64))
            .unwrap()
            .iter()
            .map(|s| s.targets[0].0)
            .collect();
        assert!(firsts.len() > 5, "{firsts:?}");
    }

    #[test]
    fn spread_sequences_use_3p_plus_3s_draws_each() {
        let p = spread(4, 40);
        let per = 3 * 4 + 3 * ((40 - 2 * 4) / 2);
        let two = generate(21, 2, p).unwrap();
        // The second sequence is the first of a stream started `per` draws in.
        let mut rng = SplitMix64::new(21);
        rng.skip(per as u64);
        let mut s = MqarStream {
            rng,
            params: p,
            left: 1,
        };
        let second_alone: Vec<u32> = s.next_sequence().unwrap().map(|t| t.token).collect();
        assert_eq!(second_alone, two[1].tokens);
    }

    #[test]
    fn spread_streaming_equals_generate_and_a_drop_keeps_step() {
        let p = spread(8, 64);
        let all = generate(9, 3, p).unwrap();
        for stop in [0, 1, 5, 16, 17, 18, 33, 40, 63, 64] {
            let mut s = MqarStream::new(9, 3, p).unwrap();
            let first: Vec<MqarToken> = s.next_sequence().unwrap().take(stop).collect();
            let tokens: Vec<u32> = first.iter().map(|t| t.token).collect();
            assert_eq!(tokens, all[0].tokens[..stop]);
            let targets: Vec<(usize, u32)> = first
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.expect.map(|v| (i, v)))
                .collect();
            let want: Vec<(usize, u32)> = all[0]
                .targets
                .iter()
                .copied()
                .filter(|t| t.0 < stop)
                .collect();
            assert_eq!(targets, want);
            let second: Vec<u32> = s.next_sequence().unwrap().map(|t| t.token).collect();
            assert_eq!(second, all[1].tokens, "stopped after {stop}");
        }
        // Any even length streams: the first tokens of a sequence of 2^64 - 2,
        // and dropping it part-way skips its ~2^63 slots in O(1).
        let huge = spread(8, usize::MAX - 1);
        let mut s = MqarStream::new(9, 2, huge).unwrap();
        let head: Vec<u32> = s
            .next_sequence()
            .unwrap()
            .take(40)
            .map(|t| t.token)
            .collect();
        assert_eq!(head[..16], all[0].tokens[..16]);
        assert!(s.next_sequence().is_some());
        assert!(s.next_sequence().is_none());
    }

    #[test]
    fn spread_differs_from_end_and_needs_an_even_length() {
        let end = generate(0, 1, MqarParams::default()).unwrap();
        let spread64 = generate(0, 1, spread(8, 64)).unwrap();
        assert_eq!(end[0].tokens[..16], spread64[0].tokens[..16], "same pairs");
        assert_ne!(end, spread64);
        let e = generate(0, 1, spread(8, 65)).unwrap_err().to_string();
        assert!(e.contains("even"), "{e}");
        assert!(generate(0, 1, spread(8, 30)).is_err());
        assert!(generate(0, 1, spread(0, 30)).is_err());
        assert!(generate(
            0,
            1,
            MqarParams {
                seq_len: 65,
                ..MqarParams::default()
            }
        )
        .is_ok());
    }

    #[test]
    fn first_spread_sequence_of_the_evaluation_seed_is_pinned() {
        // As tools/python/tests/test_mqar.py pins it (ferrite_ref/mqar.py).
        let want = "47,67,37,102,35,73,31,118,11,123,8,111,53,89,30,107,187,128,150,178,8,111,30,107,\
                    35,73,170,142,183,184,173,137,37,102,31,118,133,129,47,67,176,157,142,131,53,89,\
                    128,175,11,123,136,183,146,168,180,161,167,138,173,168,175,181,167,166";
        let s = &generate(0, 1, spread(8, 64)).unwrap()[0];
        let got: Vec<String> = s.tokens.iter().map(u32::to_string).collect();
        assert_eq!(got.join(","), want);
        assert_eq!(
            s.targets,
            [
                (20, 111),
                (22, 107),
                (24, 73),
                (32, 102),
                (34, 118),
                (38, 67),
                (44, 89),
                (48, 123)
            ]
        );
    }
}
