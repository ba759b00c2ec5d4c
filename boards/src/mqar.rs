//! The MQAR task generator of `docs/mqar.md` without allocation: the same
//! splitmix64 stream and draw order as `tools/src/mqar.rs` (the host's
//! `ferrite eval --mqar`), producing one sequence at a time into fixed arrays.

/// First key token; keys are `KEYS..KEYS + RANGE`.
pub const KEYS: u32 = 0;
/// First value token.
pub const VALUES: u32 = 64;
/// First noise token.
pub const NOISE: u32 = 128;
/// Size of each token range (and the most pairs a sequence can have).
pub const RANGE: usize = 64;

/// The splitmix64 stream of `docs/mqar.md`.
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting at `seed`.
    pub const fn new(seed: u64) -> Self {
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
pub struct Sequence {
    /// Key-value pairs.
    pub pairs: usize,
    /// `keys[i]`, `values[i]`: pair `i` (i < pairs).
    pub keys: [u32; RANGE],
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
