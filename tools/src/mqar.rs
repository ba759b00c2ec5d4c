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

/// `n` sequences of the task from `seed`.
pub fn generate(seed: u64, n: usize, p: MqarParams) -> Result<Vec<MqarSequence>> {
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
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let keys: Vec<u32> = shuffle_prefix(&mut rng, RANGE, p.pairs)
            .iter()
            .map(|k| KEYS + k)
            .collect();
        let values: Vec<u32> = (0..p.pairs).map(|_| VALUES + rng.below(RANGE)).collect();
        let mut tokens = Vec::with_capacity(p.seq_len);
        for (k, v) in keys.iter().zip(&values) {
            tokens.extend([*k, *v]);
        }
        tokens.extend((0..p.seq_len - 4 * p.pairs).map(|_| NOISE + rng.below(RANGE)));
        let order = shuffle_prefix(&mut rng, p.pairs as u32, p.pairs);
        let mut targets = Vec::with_capacity(p.pairs);
        for &i in &order {
            targets.push((tokens.len(), values[i as usize]));
            tokens.extend([keys[i as usize], values[i as usize]]);
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
