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
/// per filler token (fed as drawn), then [`Sequence::draw_order`]. The spread
/// layout draws the order right after the pairs, then its slots
/// ([`SpreadSlots`]).
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

    /// `next() % n` for any `n > 0` (the spread layout's slot counts need not
    /// fit 32 bits).
    pub fn below_u64(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

impl Sequence {
    /// Query `q`'s key and value (after [`Sequence::draw_order`]): the pair
    /// `order[q]`.
    pub fn query(&self, q: usize) -> (u32, u32) {
        let pair = self.order[q] as usize;
        (self.keys[pair], self.values[pair])
    }
}

/// What one two-token slot of the spread layout holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Query number `q` (0-based, in position order): the tokens are
    /// [`Sequence::query`]`(q)`, key then value; the model is scored after
    /// reading the key.
    Query(usize),
    /// Two filler tokens.
    Noise(u32, u32),
}

/// The slots of the spread layout (`docs/mqar.md`),
/// `k1 v1 .. kP vP | slot 0 | .. | slot S-1` with `S = (L - 2P) / 2`: `P`
/// of the `S` two-token slots hold `q a`, the rest two noise tokens.
/// Selection sampling, in position order: slot `i` draws `r = below(S - i)`,
/// then two noise tokens (always all three draws) and holds the next query
/// iff `r` is below the number of queries still to place, so every set of
/// `P` slots is equally likely and all `P` are placed by the last slot.
///
/// Per sequence the stream is drawn as [`Sequence::pairs`],
/// [`Sequence::draw_order`] (both before any slot), then one
/// [`SpreadSlots::next_slot`] per slot: `3P + 3S` draws in all. State is a
/// few counters, whatever `L`.
#[derive(Clone, Debug)]
pub struct SpreadSlots {
    /// Slots not yet drawn.
    left: usize,
    /// Queries not yet placed.
    queries_left: usize,
    /// Queries placed so far (the next query's number).
    placed: usize,
}

impl SpreadSlots {
    /// The slots of a sequence of `pairs` pairs and `seq_len` tokens; `None`
    /// unless `seq_len` is even and at least `4 * pairs` (the parameters the
    /// spread layout allows).
    pub fn new(pairs: usize, seq_len: usize) -> Option<SpreadSlots> {
        if !seq_len.is_multiple_of(2) || seq_len / 4 < pairs {
            return None;
        }
        Some(SpreadSlots {
            left: (seq_len - 2 * pairs) / 2,
            queries_left: pairs,
            placed: 0,
        })
    }

    /// Slots not yet drawn.
    pub fn left(&self) -> usize {
        self.left
    }

    /// Draws the next slot (three draws), or `None` after the last.
    pub fn next_slot(&mut self, rng: &mut SplitMix64) -> Option<Slot> {
        if self.left == 0 {
            return None;
        }
        let r = rng.below_u64(self.left as u64);
        let (n1, n2) = (rng.noise(), rng.noise());
        self.left -= 1;
        if r < self.queries_left as u64 {
            let q = self.placed;
            self.placed += 1;
            self.queries_left -= 1;
            Some(Slot::Query(q))
        } else {
            Some(Slot::Noise(n1, n2))
        }
    }

    /// Skips the draws of the slots left in O(1), leaving the stream where
    /// drawing them would have.
    pub fn skip_rest(&mut self, rng: &mut SplitMix64) {
        rng.skip((self.left as u64).wrapping_mul(3));
        self.left = 0;
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

    #[test]
    fn spread_slots_need_an_even_length_of_at_least_4p() {
        assert!(SpreadSlots::new(8, 64).is_some());
        assert!(SpreadSlots::new(8, 66).is_some());
        assert!(SpreadSlots::new(8, 65).is_none());
        assert!(SpreadSlots::new(8, 30).is_none());
        assert_eq!(SpreadSlots::new(8, 64).unwrap().left(), 24);
        assert_eq!(
            SpreadSlots::new(1, usize::MAX - 1).unwrap().left(),
            usize::MAX / 2 - 1
        );
    }

    #[test]
    fn spread_slots_place_every_query_in_order_with_three_draws_a_slot() {
        for (pairs, seq_len, seed) in [(8, 64, 0), (1, 4, 1), (4, 16, 2), (3, 100, 3), (64, 256, 4)]
        {
            let mut rng = SplitMix64::new(seed);
            let mut slots = SpreadSlots::new(pairs, seq_len).unwrap();
            let s = slots.left();
            let mut queries = 0;
            for i in 0..s {
                let before = rng.clone();
                match slots.next_slot(&mut rng).unwrap() {
                    Slot::Query(q) => {
                        assert_eq!(q, queries, "queries come in order");
                        queries += 1;
                    }
                    Slot::Noise(a, b) => {
                        for n in [a, b] {
                            assert!((NOISE..NOISE + RANGE as u32).contains(&n));
                        }
                    }
                }
                let mut skipped = before;
                skipped.skip(3);
                assert_eq!(
                    skipped.next_u64(),
                    rng.clone().next_u64(),
                    "slot {i}: three draws"
                );
            }
            assert_eq!(queries, pairs, "every query is placed");
            assert_eq!(slots.next_slot(&mut rng), None);
        }
    }

    #[test]
    fn spread_slots_follow_the_documented_draws() {
        // By hand: r = below(S - i), n1, n2; a query iff r < P - placed.
        let (pairs, seq_len) = (3, 20);
        let mut rng = SplitMix64::new(7);
        let mut raw = rng.clone();
        let mut slots = SpreadSlots::new(pairs, seq_len).unwrap();
        let s = (seq_len - 2 * pairs) / 2;
        let mut placed = 0;
        for i in 0..s {
            let r = raw.next_u64() % (s - i) as u64;
            let n1 = 128 + (raw.next_u64() % 64) as u32;
            let n2 = 128 + (raw.next_u64() % 64) as u32;
            let want = if r < (pairs - placed) as u64 {
                placed += 1;
                Slot::Query(placed - 1)
            } else {
                Slot::Noise(n1, n2)
            };
            assert_eq!(slots.next_slot(&mut rng), Some(want));
        }
    }

    #[test]
    fn skipping_the_rest_of_the_slots_equals_drawing_them() {
        for stop in [0, 1, 5, 24] {
            let (mut a, mut b) = (SplitMix64::new(11), SplitMix64::new(11));
            let (mut sa, mut sb) = (
                SpreadSlots::new(8, 64).unwrap(),
                SpreadSlots::new(8, 64).unwrap(),
            );
            while sa.next_slot(&mut a).is_some() {}
            for _ in 0..stop {
                sb.next_slot(&mut b);
            }
            sb.skip_rest(&mut b);
            assert_eq!(sb.left(), 0);
            assert_eq!(a.next_u64(), b.next_u64(), "stopped after {stop}");
        }
    }
}
