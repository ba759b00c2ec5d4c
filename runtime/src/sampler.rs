//! Token sampling: greedy, temperature, top-k and top-p, with a seeded PCG32
//! so that host and board draw the same tokens for the same seed.
//!
//! A sampler's whole state is plain data ([`SamplerState`]: its options, its
//! seed and how many numbers it has drawn), so it can go into a snapshot
//! with the stream ([`crate::Session::snapshot_with_sampler`]) and come back
//! exactly ([`Sampler::from_state`]: the generator is reseeded and advanced
//! by the draw count in at most 64 steps, whatever the count).
//!
//! No allocation: top-k keeps its candidates in a `heapless::Vec`; top-p alone
//! finds the nucleus threshold by bisection over the logits (exact up to
//! logits closer than one f32 ulp), so it works for any vocabulary size.

use heapless::Vec;
use rand_core::{RngCore, SeedableRng};
use rand_pcg::Pcg32;

use crate::error::{Error, Result};

/// Largest `top_k` supported.
pub const MAX_TOP_K: usize = 64;

/// Sampling options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature; 0 means greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens (0 = off, at most [`MAX_TOP_K`]).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1 = off).
    pub top_p: f32,
    /// PRNG seed.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// A configured sampler with its random state.
#[derive(Clone, Debug)]
pub struct Sampler {
    config: SamplerConfig,
    rng: Pcg32,
    /// Numbers drawn from `rng` since it was seeded, modulo 2^64 (the
    /// generator's period, so the count always names its state).
    draws: u64,
}

/// A sampler's whole state as plain data ([`Sampler::state`],
/// [`Sampler::from_state`]): its options as their bits, its seed and the
/// number of values drawn from its generator since it was seeded. What a
/// snapshot's sampler section holds (docs/snapshot-format.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SamplerState {
    /// `SamplerConfig::temperature`'s f32 bits.
    pub temperature_bits: u32,
    /// `SamplerConfig::top_k`.
    pub top_k: u32,
    /// `SamplerConfig::top_p`'s f32 bits.
    pub top_p_bits: u32,
    /// `SamplerConfig::seed`.
    pub seed: u64,
    /// Values drawn from the generator since it was seeded with `seed`,
    /// modulo 2^64 (one per sample that is not greedy).
    pub draws: u64,
}

impl SamplerState {
    /// The options this state holds (not checked: [`Sampler::from_state`]
    /// checks them).
    pub fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: f32::from_bits(self.temperature_bits),
            top_k: self.top_k as usize,
            top_p: f32::from_bits(self.top_p_bits),
            seed: self.seed,
        }
    }

    /// Whether a sampler of these options ever draws: not when it is
    /// greedy (temperature 0 or top-k 1), whose draw count stays 0.
    pub fn draws_numbers(&self) -> bool {
        let c = self.config();
        c.temperature != 0.0 && c.top_k != 1
    }
}

impl Sampler {
    /// Greedy decoding (argmax).
    pub fn greedy() -> Sampler {
        Sampler {
            config: SamplerConfig::default(),
            rng: Pcg32::seed_from_u64(0),
            draws: 0,
        }
    }

    /// A sampler with checked options.
    pub fn new(config: SamplerConfig) -> Result<Sampler> {
        let t = config.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return Err(Error::BadSampler("temperature must be finite and >= 0"));
        }
        if config.top_k > MAX_TOP_K {
            return Err(Error::BadSampler("top_k is larger than MAX_TOP_K (64)"));
        }
        if !(config.top_p > 0.0 && config.top_p <= 1.0) {
            return Err(Error::BadSampler("top_p must be in (0, 1]"));
        }
        Ok(Sampler {
            config,
            rng: Pcg32::seed_from_u64(config.seed),
            draws: 0,
        })
    }

    /// The options this sampler was made with.
    pub fn config(&self) -> SamplerConfig {
        self.config
    }

    /// This sampler's whole state: its options, seed and draw count. A
    /// sampler rebuilt from it ([`Sampler::from_state`]) samples exactly
    /// the tokens this one samples next.
    pub fn state(&self) -> SamplerState {
        SamplerState {
            temperature_bits: self.config.temperature.to_bits(),
            // `new` refuses more than MAX_TOP_K (64).
            top_k: self.config.top_k as u32,
            top_p_bits: self.config.top_p.to_bits(),
            seed: self.config.seed,
            draws: self.draws,
        }
    }

    /// The sampler whose state is `state`: its options checked as
    /// [`Sampler::new`] checks them, its generator seeded with `state.seed`
    /// and advanced by `state.draws` values (in at most 64 steps, whatever
    /// the count: every count is a state of the generator, whose period is
    /// 2^64). Refuses, with [`Error::BadSampler`], the options `new`
    /// refuses and a nonzero draw count for options that never draw
    /// (temperature 0 or top-k 1: greedy). No allocation, no panic.
    pub fn from_state(state: SamplerState) -> Result<Sampler> {
        if state.top_k > MAX_TOP_K as u32 {
            return Err(Error::BadSampler("top_k is larger than MAX_TOP_K (64)"));
        }
        let mut s = Sampler::new(state.config())?;
        if state.draws != 0 && !state.draws_numbers() {
            return Err(Error::BadSampler(
                "a greedy sampler (temperature 0 or top_k 1) never draws",
            ));
        }
        s.rng.advance(state.draws);
        s.draws = state.draws;
        Ok(s)
    }

    /// A uniform draw in [0, 1).
    fn uniform(&mut self) -> f32 {
        self.draws = self.draws.wrapping_add(1);
        (self.rng.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
    }

    /// Picks the next token from `logits` (NaN logits are never picked,
    /// unless all are).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let c = self.config;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let inv_t = 1.0 / c.temperature;
        // Greedy, and the limits where the softmax is the argmax: an
        // infinite logit takes all the mass (none above -inf: no mass to
        // draw from), and so does the largest logit when 1 / T overflows.
        if c.temperature == 0.0 || c.top_k == 1 || !max.is_finite() || !inv_t.is_finite() {
            return argmax(logits);
        }
        let weight = |l: f32| {
            if l.is_nan() {
                0.0
            } else {
                crate::math::exp((l - max) * inv_t)
            }
        };
        if c.top_k > 0 {
            let mut cands = top_k(logits, c.top_k);
            let total: f32 = cands.iter().map(|&(l, _)| weight(l)).sum();
            // Nucleus within the (descending) candidates.
            let mut kept = 0.0;
            let mut n = 0;
            for &(l, _) in cands.iter() {
                kept += weight(l);
                n += 1;
                if kept >= c.top_p * total {
                    break;
                }
            }
            cands.truncate(n);
            let mut u = self.uniform() * kept;
            for &(l, id) in cands.iter() {
                u -= weight(l);
                if u < 0.0 {
                    return id;
                }
            }
            return cands.last().map_or(0, |&(_, id)| id);
        }
        let threshold = if c.top_p < 1.0 {
            nucleus_threshold(logits, c.top_p, &weight)
        } else {
            f32::NEG_INFINITY
        };
        let kept: f32 = logits
            .iter()
            .filter(|&&l| l >= threshold)
            .map(|&l| weight(l))
            .sum();
        let mut u = self.uniform() * kept;
        let mut last = argmax(logits);
        for (id, &l) in logits.iter().enumerate() {
            if l >= threshold && !l.is_nan() {
                last = id as u32;
                u -= weight(l);
                if u < 0.0 {
                    return id as u32;
                }
            }
        }
        last
    }
}

/// Index of the largest logit (the first on ties; NaN logits are skipped;
/// 0 when all are NaN or the slice is empty).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if !l.is_nan() && best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map_or(0, |(i, _)| i as u32)
}

/// The `k` largest logits with their ids, in descending order.
fn top_k(logits: &[f32], k: usize) -> Vec<(f32, u32), MAX_TOP_K> {
    let mut v: Vec<(f32, u32), MAX_TOP_K> = Vec::new();
    for (id, &l) in logits.iter().enumerate() {
        if l.is_nan() || (v.len() == k && v.last().is_some_and(|&(m, _)| l <= m)) {
            continue;
        }
        if v.len() == k {
            v.pop();
        }
        let at = v.iter().position(|&(m, _)| l > m).unwrap_or(v.len());
        // Cannot fail: one slot was freed above or len < k <= capacity.
        let _ = v.insert(at, (l, id as u32));
    }
    v
}

/// Largest logit threshold whose tokens (logit >= threshold) hold at least
/// `p` of the probability mass.
fn nucleus_threshold(logits: &[f32], p: f32, weight: &impl Fn(f32) -> f32) -> f32 {
    let mass = |t: f32| -> f32 { logits.iter().filter(|&&l| l >= t).map(|&l| weight(l)).sum() };
    let total = mass(f32::NEG_INFINITY);
    // Over the finite logits: -inf has no mass (and would make the
    // midpoint NaN, a loop without end); +inf never gets here.
    let (mut lo, mut hi) = logits
        .iter()
        .filter(|l| l.is_finite())
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &l| {
            (a.min(l), b.max(l))
        });
    if lo > hi {
        return f32::NEG_INFINITY;
    }
    if mass(hi) >= p * total {
        return hi;
    }
    // Invariant: mass(lo) >= p * total > mass(hi).
    loop {
        let mid = lo + (hi - lo) * 0.5;
        if mid <= lo || mid >= hi {
            return lo;
        }
        if mass(mid) >= p * total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Sampler {
        Sampler::new(SamplerConfig {
            temperature,
            top_k,
            top_p,
            seed,
        })
        .unwrap()
    }

    #[test]
    fn greedy_picks_the_argmax() {
        assert_eq!(Sampler::greedy().sample(&[0.1, 3.0, -1.0, 2.9]), 1);
    }

    #[test]
    fn top_k_never_leaves_the_k_best() {
        let logits = [0.0, 5.0, 1.0, 4.0, 3.0];
        let mut s = sampler(10.0, 2, 1.0, 7);
        for _ in 0..500 {
            let t = s.sample(&logits);
            assert!(t == 1 || t == 3, "sampled {t}");
        }
    }

    #[test]
    fn top_p_keeps_the_nucleus_only() {
        // Probabilities ~ [0.64, 0.24, 0.09, 0.03]: top_p 0.8 keeps ids 0 and 1.
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let mut s = sampler(1.0, 0, 0.8, 3);
        let mut seen = [0usize; 4];
        for _ in 0..2000 {
            seen[s.sample(&logits) as usize] += 1;
        }
        assert!(
            seen[0] > 0 && seen[1] > 0 && seen[2] == 0 && seen[3] == 0,
            "{seen:?}"
        );
    }

    #[test]
    fn temperature_sampling_follows_the_distribution() {
        let logits = [0.0f32, (3.0f32).ln()]; // p = [0.25, 0.75]
        let mut s = sampler(1.0, 0, 1.0, 11);
        let ones = (0..4000).filter(|_| s.sample(&logits) == 1).count();
        assert!((2800..3200).contains(&ones), "{ones}");
    }

    /// The frequencies of 40,000 draws against the exact probabilities of
    /// each configuration, within 0.01 (four standard deviations at p = 0.5):
    /// logits `ln 1..4` (ids in ascending order), at T = 1; at T = 0.5 (the
    /// ratios squared); top-k 3; top-k 3 with top-p 0.5 (the nucleus within
    /// the candidates); top-p 0.65 alone (the nucleus ids after the others);
    /// the logits near 50 and at T = 0.01 (where a softmax not shifted by
    /// the largest logit overflows f32); 100 tokens without top-k (more than
    /// `MAX_TOP_K` candidates).
    #[test]
    fn sampling_follows_the_exact_distribution() {
        let ln: Vec<f32, 4> = (1..=4).map(|i| (i as f32).ln()).collect();
        let shifted =
            |base: f32, scale: f32| -> [f32; 4] { core::array::from_fn(|i| base + scale * ln[i]) };
        let mut wide = [0f32; 100];
        wide[99] = 100f32.ln();
        let (ln4, high, cold) = (shifted(0.0, 1.0), shifted(50.0, 1.0), shifted(0.0, 0.01));
        let all = [0.1, 0.2, 0.3, 0.4];
        let squared = [1.0 / 30.0, 4.0 / 30.0, 0.3, 16.0 / 30.0];
        let top3 = [0.0, 2.0 / 9.0, 3.0 / 9.0, 4.0 / 9.0];
        let top2 = [0.0, 0.0, 3.0 / 7.0, 4.0 / 7.0];
        let one = 1.0 / 199.0;
        let spike = [one, one, one, 100.0 / 199.0];
        // Logits, temperature, top-k, top-p and the probabilities of ids 0, 1, 2, last.
        type Case<'a> = (&'a [f32], f32, usize, f32, [f32; 4]);
        let cases: [Case<'_>; 8] = [
            (&ln4, 1.0, 0, 1.0, all),
            (&ln4, 0.5, 0, 1.0, squared),
            (&ln4, 1.0, 3, 1.0, top3),
            (&ln4, 1.0, 3, 0.5, top2),
            (&ln4, 1.0, 0, 0.65, top2),
            (&high, 1.0, 0, 1.0, all),
            (&cold, 0.01, 3, 1.0, top3),
            (&wide, 1.0, 0, 1.0, spike),
        ];
        for (case, (logits, t, k, p, want)) in cases.into_iter().enumerate() {
            let mut s = sampler(t, k, p, 100 + case as u64);
            let mut seen = [0u32; 100];
            for _ in 0..40_000 {
                seen[s.sample(logits) as usize] += 1;
            }
            // The first three ids and the last one (id 3 or id 99).
            let ids = [0, 1, 2, logits.len() - 1];
            for (&id, &w) in ids.iter().zip(&want) {
                let got = seen[id] as f32 / 40_000.0;
                assert!(
                    (got - w).abs() <= 0.01,
                    "case {case}: id {id} {got} for {w}"
                );
            }
        }
    }

    #[test]
    fn same_seed_same_tokens() {
        let logits = [0.3f32, 0.1, 0.2, 0.4];
        let mut a = sampler(1.0, 3, 0.9, 42);
        let mut b = sampler(1.0, 3, 0.9, 42);
        for _ in 0..100 {
            assert_eq!(a.sample(&logits), b.sample(&logits));
        }
    }

    /// Found by `fuzz/fuzz_targets/sampler.rs`: a -inf logit (a masked
    /// token) with top_p < 1 looped for ever; +inf logits and a temperature
    /// whose inverse overflows drew tokens of zero probability; greedy
    /// picked a NaN logit at index 0 when the others were -inf.
    #[test]
    fn infinite_logits_and_tiny_temperatures() {
        let inf = f32::INFINITY;
        let mut s = sampler(1.0, 0, 0.9, 1);
        for _ in 0..100 {
            assert!(s.sample(&[1.0, 0.0, -inf]) < 2);
        }
        for (t, k, p) in [(1.0, 0, 1.0), (1.0, 0, 0.5), (0.7, 3, 1.0)] {
            let mut s = sampler(t, k, p, 3);
            for _ in 0..100 {
                assert_eq!(s.sample(&[1.0, inf, 2.0, inf]), 1);
            }
        }
        let mut s = sampler(1e-40, 0, 1.0, 5);
        for _ in 0..100 {
            assert_eq!(s.sample(&[3.0, 2.0, 0.5]), 0);
        }
        assert_eq!(argmax(&[f32::NAN, -inf, -inf]), 1);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[]), 0);
    }

    /// A sampler rebuilt from its state at any point samples what the
    /// original samples next; so does one of a huge draw count (the
    /// generator's period is 2^64: 2^64 - 1 draws and one more are the
    /// seed's state).
    #[test]
    fn a_sampler_rebuilt_from_its_state_goes_on_exactly() {
        let logits = [0.3f32, 0.1, 0.2, 0.4, -1.0, 0.25];
        for (t, k, p) in [(1.0, 0, 1.0), (0.8, 3, 0.9), (1.3, 0, 0.7), (0.0, 0, 1.0)] {
            let mut a = sampler(t, k, p, 9);
            for cut in 0..40 {
                let mut b = Sampler::from_state(a.state()).unwrap();
                assert_eq!(b.state(), a.state());
                let mut ahead = a.clone();
                for _ in 0..5 {
                    assert_eq!(b.sample(&logits), ahead.sample(&logits));
                }
                a.sample(&logits);
                let want = if t == 0.0 { 0 } else { cut + 1 };
                assert_eq!(a.state().draws, want);
            }
        }
        let fresh = sampler(1.0, 0, 1.0, 77);
        let mut last = Sampler::from_state(SamplerState {
            draws: u64::MAX,
            ..fresh.state()
        })
        .unwrap();
        last.sample(&logits);
        assert_eq!(last.state().draws, 0);
        let (mut x, mut y) = (last, fresh);
        for _ in 0..50 {
            assert_eq!(x.sample(&logits), y.sample(&logits));
        }
    }

    #[test]
    fn hostile_states_are_refused() {
        let good = sampler(1.0, 3, 0.9, 5).state();
        for bad in [
            SamplerState {
                temperature_bits: f32::NAN.to_bits(),
                ..good
            },
            SamplerState {
                temperature_bits: (-0.5f32).to_bits(),
                ..good
            },
            SamplerState {
                temperature_bits: f32::INFINITY.to_bits(),
                ..good
            },
            SamplerState { top_k: 65, ..good },
            SamplerState {
                top_k: u32::MAX,
                ..good
            },
            SamplerState {
                top_p_bits: 0f32.to_bits(),
                ..good
            },
            SamplerState {
                top_p_bits: 1.5f32.to_bits(),
                ..good
            },
            SamplerState {
                top_p_bits: f32::NAN.to_bits(),
                ..good
            },
            SamplerState {
                temperature_bits: 0,
                draws: 1,
                ..good
            },
            SamplerState {
                top_k: 1,
                draws: u64::MAX,
                ..good
            },
        ] {
            assert!(
                matches!(Sampler::from_state(bad), Err(Error::BadSampler(_))),
                "{bad:?}"
            );
        }
        assert!(Sampler::from_state(SamplerState {
            draws: u64::MAX,
            ..good
        })
        .is_ok());
    }

    #[test]
    fn bad_options_are_refused() {
        for (t, k, p) in [
            (-1.0, 0, 1.0),
            (f32::NAN, 0, 1.0),
            (1.0, 65, 1.0),
            (1.0, 0, 0.0),
            (1.0, 0, 1.5),
        ] {
            assert!(Sampler::new(SamplerConfig {
                temperature: t,
                top_k: k,
                top_p: p,
                seed: 0
            })
            .is_err());
        }
    }
}
