//! The MQAR task generator of `docs/mqar.md` (mirrored in
//! `tools/python/ferrite_ref/mqar.py`), without allocation: one sequence at
//! a time into fixed arrays. The board's `eval` firmware and the host's
//! `ferrite eval --mqar` (tools/src/mqar.rs) both draw with it.

/// First key token; keys are `KEYS..KEYS + RANGE`.
pub const KEYS: u32 = 0;
/// First value token.
pub const VALUES: u32 = 64;
/// First noise token.
pub const NOISE: u32 = 128;
/// Size of each token range (and the most pairs a sequence can have).
pub const RANGE: usize = 64;

/// The splitmix64 increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The splitmix64 stream of `docs/mqar.md`.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting at `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Skips `k` draws in O(1): the state after `k` draws is `seed + k * GAMMA`.
    pub fn skip(&mut self, k: u64) {
        self.0 = self.0.wrapping_add(k.wrapping_mul(GAMMA));
    }

    /// `next() % n`.
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % n as u64) as u32
    }

    /// Partial Fisher-Yates: `a[..k]` becomes the first `k` items of a shuffle of `0..n`.
    fn shuffle_prefix(&mut self, a: &mut [u32; RANGE], n: usize, k: usize) {
        for (i, x) in a.iter_mut().enumerate().take(n) {
            *x = i as u32;
        }
        for j in 0..k {
            let r = j + self.below((n - j) as u32) as usize;
            a.swap(j, r);
        }
    }
}

/// One sequence's pairs and query order. The stream is drawn in the
/// generator's order — keys, values, noise, query order — and the tokens are
/// fed in layout order `k1 v1 .. kP vP | noise | q1 a1 .. qP aP`, which
/// happens to be the same: [`Sequence::pairs`], then one [`SplitMix64::noise`]
/// per filler token (fed as drawn), then [`Sequence::draw_order`].
#[derive(Clone, Debug)]
pub struct Sequence {
    /// Key-value pairs.
    pub pairs: usize,
    /// `keys[i]`: the key of pair `i` (i < pairs).
    pub keys: [u32; RANGE],
    /// `values[i]`: the value of pair `i` (i < pairs).
    pub values: [u32; RANGE],
    /// `order[i]`: the pair query `i` asks for (after [`Sequence::draw_order`]).
    pub order: [u32; RANGE],
}

impl Sequence {
    /// Draws the keys (distinct) and values of the next sequence.
    pub fn pairs(rng: &mut SplitMix64, pairs: usize) -> Sequence {
        let mut s = Sequence {
            pairs,
            keys: [0; RANGE],
            values: [0; RANGE],
            order: [0; RANGE],
        };
        rng.shuffle_prefix(&mut s.keys, RANGE, pairs);
        for k in &mut s.keys[..pairs] {
            *k += KEYS;
        }
        for v in &mut s.values[..pairs] {
            *v = VALUES + rng.below(RANGE as u32);
        }
        s
    }

    /// Draws the query order (after the noise).
    pub fn draw_order(&mut self, rng: &mut SplitMix64) {
        rng.shuffle_prefix(&mut self.order, self.pairs, self.pairs);
    }
}

impl SplitMix64 {
    /// Draws one filler token.
    pub fn noise(&mut self) -> u32 {
        NOISE + self.below(RANGE as u32)
    }
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
    fn keys_are_distinct_and_in_range_and_the_order_is_a_permutation() {
        let mut rng = SplitMix64::new(3);
        for pairs in [1, 8, 64] {
            let mut s = Sequence::pairs(&mut rng, pairs);
            s.draw_order(&mut rng);
            let mut seen = [false; RANGE];
            for i in 0..pairs {
                let k = s.keys[i] as usize;
                assert!(k < RANGE && !seen[k]);
                seen[k] = true;
                assert!((VALUES..VALUES + RANGE as u32).contains(&s.values[i]));
            }
            let mut asked = [false; RANGE];
            for &o in &s.order[..pairs] {
                assert!((o as usize) < pairs && !asked[o as usize]);
                asked[o as usize] = true;
            }
            let n = rng.noise();
            assert!((NOISE..NOISE + RANGE as u32).contains(&n));
        }
    }
}
