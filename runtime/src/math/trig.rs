//! Sines and cosines of exact angles, in f32 operations of a fixed order
//! (the same bits on every target, soft float included).
//!
//! Both users know their angle exactly as an integer fraction of a turn:
//! RoPE as a 32-bit phase (`mixers::rope`), BLA's computed write weights as
//! `pi * num / den` ([`SinPi`]). So the reduction to `[-pi/4, pi/4]` is
//! exact integer work, and only the rest goes through the minimax
//! polynomials of Cephes' `sinf`/`cosf` ([`sin_poly`], [`cos_poly`]: within
//! 1e-7 of the true values there, `sin_poly` within a few ulp relative).
//! No library call: Rust never contracts `a * b + c` into a fused
//! multiply-add, so these are plain IEEE `+ - *` in the order written.

/// `sin x` for `|x| <= pi/4` (Cephes `sinf`'s polynomial; `sin_poly(0) = 0`).
#[inline]
pub(crate) fn sin_poly(x: f32) -> f32 {
    let z = x * x;
    ((-1.951_529_6e-4 * z + 8.332_161e-3) * z - 1.666_665_5e-1) * z * x + x
}

/// `cos x` for `|x| <= pi/4` (Cephes `cosf`'s polynomial; `cos_poly(0) = 1`).
#[inline]
pub(crate) fn cos_poly(x: f32) -> f32 {
    let z = x * x;
    ((2.443_315_7e-5 * z - 1.388_731_6e-3) * z + 4.166_664_6e-2) * z * z - 0.5 * z + 1.0
}

/// `sin(pi * num / den)` and `cos(pi * num / den)` for integers `num` and a
/// fixed denominator `den` (BLA's computed write weights, docs/spec.md
/// §3.4 and §4).
///
/// The angle is reduced exactly: `num mod 2 den` (one turn), then the
/// nearest quarter turn `q` and the rest `r`, an integer number of units of
/// `pi / (4 den)` with `|r| <= den` (at most an eighth of a turn), found by
/// comparisons. Only the rest is rounded, once, to the f32 angle
/// `r * (pi / 4 / den)` (`r` converted to f32 times an f32 step fixed by
/// `den`), and then the minimax polynomial of Cephes' `sinf` or `cosf` (the
/// ones RoPE uses) gives the value with the quadrant's sign.
/// So an angle that is a whole multiple of a quarter turn gives exactly
/// `0` or `±1`, two angles that differ by a whole number of half turns
/// give values of exactly opposite sign, and every value is within 1.2e-7
/// of the true one, a small sine within 2 ulp of it (relative; measured:
/// 9.6e-8 and 1.4 ulp).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SinPi {
    /// The denominator `b`, `1..=MAX_DEN`.
    den: u64,
    /// `pi / 4 / den` in f32: the angle of one unit of the rest (in
    /// quarter-`den`ths of a half turn).
    step: f32,
}

/// Generates the reduction in one integer width: `a` (`< 2b`, in units of
/// `pi / b`) plus `quarters` quarter turns, as the nearest quarter turn `q`
/// (mod 4) and the rest `r` (`|r| <= b`, in units of `pi / (4 b)`, so that
/// the eighths of a turn are whole: a turn is `8 b`), converted to f32.
macro_rules! reduction {
    ($name:ident, $t:ty) => {
        fn $name(a: $t, quarters: $t, b: $t) -> (u32, f32) {
            // `4 a + 2 b quarters` mod `8 b`, without passing `8 b`.
            let mut w = 4 * a;
            if quarters != 0 {
                w = if w >= 6 * b { w - 6 * b } else { w + 2 * b };
            }
            // The nearest quarter turn (a quarter is `2 b`), without a division.
            let q: $t = if w < b {
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
            let quarter = 2 * b * q;
            // The f32 nearest to the exact rest (negation is exact).
            let rest = if w >= quarter {
                (w - quarter) as f32
            } else {
                -((quarter - w) as f32)
            };
            (q as u32 & 3, rest)
        }
    };
}

// 32 bits where a turn (`8 b`) fits them (BLA's `N P < 2^29`: half the
// instructions on 32-bit cores, and the conversion one instruction where f32
// is in hardware), else 64 (`8 b <= 2^63`). The same result either way.
reduction!(reduce32, u32);
reduction!(reduce64, u64);

impl SinPi {
    /// Largest denominator: eight times it (a turn in the reduction's
    /// units) fits a `u64`.
    pub const MAX_DEN: u64 = 1 << 60;

    /// The functions for denominator `den`, or `None` unless
    /// `1 <= den <= MAX_DEN`.
    pub fn new(den: u64) -> Option<SinPi> {
        if den == 0 || den > Self::MAX_DEN {
            return None;
        }
        Some(SinPi {
            den,
            step: core::f32::consts::FRAC_PI_4 / den as f32,
        })
    }

    /// `sin(pi * num / den)`.
    pub fn sin(&self, num: u64) -> f32 {
        self.eval(num, 0)
    }

    /// `cos(pi * num / den)`, as `sin` a quarter turn further.
    pub fn cos(&self, num: u64) -> f32 {
        self.eval(num, 1)
    }

    /// `sin(pi * num / den + quarters * pi / 2)`, `quarters` 0 or 1.
    fn eval(&self, num: u64, quarters: u64) -> f32 {
        let b = self.den;
        // One turn is `2 b` units of `pi / b`.
        let turn = 2 * b;
        // `checked_rem`: `turn >= 2` (`new` refuses `den == 0`), stated
        // without a panic branch.
        let a = if num < turn {
            num
        } else {
            num.checked_rem(turn).unwrap_or(0)
        };
        let (q, rest) = if b < 1 << 29 {
            reduce32(a as u32, quarters as u32, b as u32)
        } else {
            reduce64(a, quarters, b)
        };
        let x = rest * self.step;
        match q {
            0 => sin_poly(x),
            1 => cos_poly(x),
            2 => -sin_poly(x),
            _ => -cos_poly(x),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::vec::Vec;

    /// `|got - want|` in ulp of f32 at `|want|` (2^-23 relative).
    fn ulps(got: f32, want: f64) -> f64 {
        (got as f64 - want).abs() / (want.abs() * f32::EPSILON as f64)
    }

    /// `sin(pi * num / den)` in f64, relative to the value even near the
    /// multiples of pi (folded in integers first).
    fn exact_sin(num: u64, den: u64) -> f64 {
        let a = num % (2 * den);
        let (sign, a) = if a >= den { (-1.0, a - den) } else { (1.0, a) };
        let a = if 2 * a > den { den - a } else { a };
        sign * libm::sin(core::f64::consts::PI * (a as f64 / den as f64))
    }

    /// Against f64 `sin`/`cos` of the same angle, over many denominators and
    /// every numerator of a few turns: within 1.2e-7 absolute (measured
    /// 9.6e-8), and `sin` within 2 ulp relative where `|sin| < 0.5`
    /// (measured 1.4 ulp), so that the BLA kernels can divide by it.
    #[test]
    fn sin_pi_is_accurate_and_exact_at_quarter_turns() {
        let mut worst_abs = 0f64;
        let mut worst_rel = 0f64;
        for den in (1u64..=200).chain([997, 1984, 4096, 65_521, 1 << 30, (1 << 40) + 7]) {
            let f = SinPi::new(den).unwrap();
            let nums: Vec<u64> = if den <= 200 {
                (0..6 * den).collect()
            } else {
                (0..4000u64)
                    .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % (4 * den))
                    .chain([
                        0,
                        1,
                        den - 1,
                        den,
                        den + 1,
                        2 * den - 1,
                        2 * den,
                        5 * den / 2,
                    ])
                    .collect()
            };
            for num in nums {
                let angle = core::f64::consts::PI * (num % (2 * den)) as f64 / den as f64;
                let (s, c) = (exact_sin(num, den), libm::cos(angle));
                let (gs, gc) = (f.sin(num), f.cos(num));
                worst_abs = worst_abs
                    .max((gs as f64 - s).abs())
                    .max((gc as f64 - c).abs());
                // Relative accuracy of small sines (the BLA kernels divide
                // by them).
                if s.abs() < 0.5 && s != 0.0 {
                    worst_rel = worst_rel.max(ulps(gs, s));
                }
                // Whole quarter turns are exact.
                if (2 * num) % den == 0 {
                    let quarter = (2 * num / den) % 4;
                    let want = [(0.0, 1.0), (1.0, 0.0), (0.0, -1.0), (-1.0, 0.0)][quarter as usize];
                    assert_eq!((gs, gc), want, "den {den} num {num}");
                }
                // Half a turn further: exactly the opposite sign.
                assert_eq!(f.sin(num + den), -gs, "den {den} num {num}");
            }
        }
        assert!(worst_abs < 1.2e-7, "worst absolute error {worst_abs:e}");
        assert!(worst_rel < 2.0, "worst relative error {worst_rel} ulp");
    }

    /// The 32-bit reduction gives the 64-bit one's result wherever it is
    /// used (`b < 2^29`), up to the largest such `b`.
    #[test]
    fn both_reductions_agree() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for b in (1u32..300).chain([(1 << 29) - 1, (1 << 29) - 2, 65_536, 1_000_003]) {
            for i in 0..400u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let a = if i < 8 {
                    [0, 1, b - 1, b, b + 1, 2 * b - 1, b / 2, b / 4][i as usize]
                } else {
                    (x % (2 * b as u64)) as u32
                };
                for quarters in [0, 1] {
                    assert_eq!(
                        reduce32(a, quarters, b),
                        reduce64(a as u64, quarters as u64, b as u64),
                        "a {a} b {b} quarters {quarters}"
                    );
                }
            }
        }
    }

    #[test]
    fn denominators_out_of_range_are_refused() {
        assert_eq!(SinPi::new(0), None);
        assert!(SinPi::new(SinPi::MAX_DEN).is_some());
        assert_eq!(SinPi::new(SinPi::MAX_DEN + 1), None);
        // The largest denominator and numerator reduce without overflow.
        let f = SinPi::new(SinPi::MAX_DEN).unwrap();
        assert_eq!(f.sin(u64::MAX), f.sin(u64::MAX % (2 * SinPi::MAX_DEN)));
        assert_eq!(f.sin(SinPi::MAX_DEN), 0.0);
        assert_eq!(f.cos(SinPi::MAX_DEN), -1.0);
        assert!(f.cos(2 * SinPi::MAX_DEN - 1) > 0.999_999);
        assert!(f.cos(u64::MAX) > 0.999_999);
    }
}
