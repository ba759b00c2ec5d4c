//! Sines and cosines of exact angles `pi * num / den` in integer code
//! ([`SinPiFx`]): BLA's write weights on the integer token path
//! (`mixers/bla_int.rs`), the integer twin of `math::SinPi`.
//!
//! The angle is reduced exactly in integers (one turn, then the nearest
//! quarter turn and the rest, `|rest| <= den` units of `pi / (4 den)`, as
//! `math::SinPi`); only the rest becomes a real number, `x = rest × pi /
//! (4 den)` as an [`Fx`] (the step `pi / (4 den)` rounded once, the
//! product once: within 2^-30 of `x`, relative). Then Taylor polynomials in
//! Q30 on `[-pi/4, pi/4]` (`sin x = x S(x^2)` to `x^11`, `cos x` to `x^10`,
//! truncation below 2^-33), evaluated by Horner with 32-bit reciprocals of
//! the factorial steps (multiplications only, no division). So a whole
//! multiple of a quarter turn gives exactly `0` or `±1`, two angles that
//! differ by whole half turns give values of exactly opposite sign, a sine
//! is within 2^-28 of the true value relative to it (however small: `x`
//! keeps its own exponent), and a cosine within 2^-28 absolute.

use super::Fx;

/// One in Q30.
const ONE_Q30: u64 = 1 << 30;

/// `pi / 4` as an [`Fx`]: `3373259426 × 2^-32` (to 32 bits).
const PI_4: Fx = Fx::from_u64(3_373_259_426, -32, false);

/// `round(2^32 / k)` for the sine's Horner steps `k = 6, 20, 42, 72, 110`
/// (`(2n)(2n+1)`), innermost last.
const SIN_STEPS: [u64; 5] = [
    715_827_883,
    214_748_365,
    102_261_126,
    59_652_324,
    39_045_157,
];

/// `round(2^32 / k)` for the cosine's Horner steps `k = 2, 12, 30, 56, 90`
/// (`(2n-1)(2n)`), innermost last.
const COS_STEPS: [u64; 5] = [
    2_147_483_648,
    357_913_941,
    143_165_577,
    76_695_845,
    47_721_859,
];

/// `1 - z/k_1 (1 - z/k_2 (... (1 - z/k_5)))` in Q30 for `z` in Q30, `z <=
/// (pi/4)^2`: every partial value lies in `(0, 1]`, every product below
/// 2^61.
fn horner(z: u64, steps: &[u64; 5]) -> u64 {
    let mut t = ONE_Q30;
    for &r in steps.iter().rev() {
        // z t < 2^60; (z t >> 30) r < 2^30 × 2^31.
        t = ONE_Q30 - ((((z * t) >> 30) * r) >> 32);
    }
    t
}

/// `sin(pi * num / den)` and `cos(pi * num / den)` in integer code for a
/// fixed denominator (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SinPiFx {
    /// The denominator `b`, `1..=MAX_DEN`.
    den: u64,
    /// `pi / (4 den)`: the angle of one unit of the rest.
    step: Fx,
}

impl SinPiFx {
    /// Largest denominator: eight times it (a turn in the reduction's
    /// units) fits a `u64`.
    pub const MAX_DEN: u64 = 1 << 60;

    /// The functions for denominator `den`, or `None` unless
    /// `1 <= den <= MAX_DEN`.
    pub fn new(den: u64) -> Option<SinPiFx> {
        if den == 0 || den > Self::MAX_DEN {
            return None;
        }
        let step = PI_4 * Fx::from_u64(den, 0, false).recip();
        Some(SinPiFx { den, step })
    }

    /// `sin(pi * num / den)`.
    pub fn sin(&self, num: u64) -> Fx {
        self.eval(num, false)
    }

    /// `cos(pi * num / den)`, as `sin` a quarter turn further.
    pub fn cos(&self, num: u64) -> Fx {
        self.eval(num, true)
    }

    /// `sin(pi * num / den + (pi / 2 if quarter))`.
    fn eval(&self, num: u64, quarter: bool) -> Fx {
        let b = self.den;
        // One turn is 2b units of pi / b (`checked_rem`: `b >= 1`, which
        // `new` checked, stated without a panic branch).
        let a = num.checked_rem(2 * b).unwrap_or(0);
        // 4a (+ a quarter turn, 2b) mod 8b, in units of pi / (4b).
        let mut w = 4 * a;
        if quarter {
            w = if w >= 6 * b { w - 6 * b } else { w + 2 * b };
        }
        let q: u64 = if w < b {
            0
        } else if w < 3 * b {
            1
        } else if w < 5 * b {
            2
        } else if w < 7 * b {
            3
        } else {
            4
        };
        let centre = 2 * b * q;
        let (rest, neg) = if w >= centre {
            (w - centre, false)
        } else {
            (centre - w, true)
        };
        let x = Fx::from_u64(rest, 0, neg) * self.step; // |x| <= pi/4
        let xq = x.abs().to_fixed(30) as u64; // < 2^30
        let z = (xq * xq) >> 30;
        let sin = || x * Fx::from_u64(horner(z, &SIN_STEPS), -30, false);
        let cos = || Fx::from_u64(horner(z, &COS_STEPS), -30, false);
        match q & 3 {
            0 => sin(),
            1 => cos(),
            2 => -sin(),
            _ => -cos(),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::fixed::testing::fx64;

    /// The stated bounds: over many denominators (up to 2^40, BLA's largest
    /// `N P`) and numerators, a sine within 2^-28 of the f64 value relative
    /// to it (plus 2^-50 absolute for the f64 reference's own rounding of
    /// the angle), a cosine within 2^-28 absolute; quarter turns exact.
    #[test]
    fn sines_and_cosines_match_f64() {
        let mut worst = [0f64; 2];
        let dens = [
            1u64,
            2,
            3,
            7,
            64,
            576,
            960,
            4095,
            1 << 20,
            12_345_677,
            1 << 40,
        ];
        for &den in &dens {
            let f = SinPiFx::new(den).unwrap();
            let nums = (0..2000u64).map(|i| {
                if den <= 1000 {
                    i % (2 * den + 3)
                } else {
                    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % (2 * den) + [0, 1][(i % 2) as usize]
                }
            });
            for num in nums.chain([1, den - 1, den, den + 1, 2 * den - 1]) {
                let angle = core::f64::consts::PI * ((num % (2 * den)) as f64 / den as f64);
                let (s, c) = (libm::sin(angle), libm::cos(angle));
                let (gs, gc) = (fx64(f.sin(num)), fx64(f.cos(num)));
                // In units of the bound: sin within 2^-28 |s| + 2^-50.
                let es = (gs - s).abs() / (2f64.powi(-28) * s.abs() + 2f64.powi(-50));
                let ec = (gc - c).abs() / 2f64.powi(-28);
                assert!(es <= 1.0, "den {den} num {num}: sin {gs} vs {s}");
                assert!(ec <= 1.0, "den {den} num {num}: cos {gc} vs {c}");
                worst[0] = worst[0].max(es);
                worst[1] = worst[1].max(ec);
                if (4 * num) % (2 * den) == 0 {
                    // A whole quarter turn: exactly 0 or ±1.
                    assert!(gs == s.round() && gc == c.round(), "den {den} num {num}");
                }
            }
        }
        std::println!(
            "worst, in units of the bounds: sin {:.3}, cos {:.3}",
            worst[0],
            worst[1]
        );
        assert!(
            worst[0] > 0.0 && worst[1] > 0.0,
            "the measure measures nothing"
        );
    }

    /// Half turns apart: exactly opposite values (BLA's one-hot rows need it).
    #[test]
    fn half_turns_negate_exactly() {
        for den in [5u64, 64, 960, 1 << 33] {
            let f = SinPiFx::new(den).unwrap();
            for num in [1u64, 3, 17, den / 3 + 1] {
                assert_eq!(f.sin(num), -f.sin(num + den));
                assert_eq!(f.cos(num), -f.cos(num + den));
            }
        }
        assert_eq!(SinPiFx::new(0), None);
        assert_eq!(SinPiFx::new(SinPiFx::MAX_DEN + 1), None);
    }
}
