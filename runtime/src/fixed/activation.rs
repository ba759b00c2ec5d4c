//! Sigmoid and `e^-a` of one value in fixed point, for the element-wise
//! activations of the integer token path (SiLU of the short convolutions,
//! the output gates and the MLP; GDN's beta). 32-bit multiplies only (one
//! `MULS` each on a Cortex-M0), no table, no division.
//!
//! Inputs are Q16 (`t / 2^16`), outputs Q15 (`0..=32768` for `[0, 1]`):
//!
//! - `e^-a` for `a >= 0`: `a = k ln 2 + r`, `r` in `[0, ln 2)`; `e^-r` a
//!   degree-4 polynomial (Chebyshev nodes, 2.0e-6 from `e^-r`) by Horner's
//!   rule in unsigned Q16; then `>> k`.
//! - `sigmoid(t) = 1 / (1 + e^-|t|)` (or one minus that for `t < 0`): the
//!   reciprocal by three Newton steps from a linear first guess.
//!
//! Measured over every Q16 input in `[-23, 23]` against f64 (the tests):
//! `exp_neg` within 1.22 units of Q16 (1.9e-5), `sigmoid` within 1.06
//! units of Q15 (3.2e-5).

/// `ln 2` in Q16.
const LN2_Q16: u32 = 45_426;
/// `1 / ln 2` in Q11, rounded down: the quotient estimate is at most one
/// too small (corrected after), never too large.
const INV_LN2_Q11: u32 = 2_954;
/// Inputs at or beyond this magnitude (Q16) saturate: `e^-22` is under
/// 2^-31, so `sigmoid(±22)` is 0 or 1 to far under a unit of Q15. (It also
/// keeps `a * INV_LN2_Q11` below 2^32.)
const SATURATE_Q16: u32 = 22 << 16;

/// `e^-r ≈ C0 - r (C1 - r (C2 - r (C3 - r C4)))` on `[0, ln 2)`, Q16.
const C0: u32 = 65_536;
const C1: u32 = 65_527;
const C2: u32 = 32_660;
const C3: u32 = 10_472;
const C4: u32 = 1_941;

/// One in Q15.
pub const ONE_Q15: u32 = 1 << 15;

/// `e^-a` for `a >= 0` in Q16 (`a` up to `2^31`), as Q16 (`0..=65536`).
#[inline]
pub fn exp_neg_q16(a: u32) -> u32 {
    if a >= SATURATE_Q16 {
        // e^-22 < 2^-31: zero in Q16.
        return 0;
    }
    // k = floor(a / ln 2), from an estimate that is at most one too small.
    let mut k = (a * INV_LN2_Q11) >> 27;
    let mut r = a - k * LN2_Q16;
    if r >= LN2_Q16 {
        r -= LN2_Q16;
        k += 1;
    }
    // Every bracket is positive on [0, ln 2) and r < 2^15.5, so each
    // product stays below 2^32.
    let mut p = C3 - ((C4 * r) >> 16);
    p = C2 - ((p * r) >> 16);
    p = C1 - ((p * r) >> 16);
    p = C0 - ((p * r + (1 << 15)) >> 16);
    // p in (2^15, 2^16]; e^-a = p 2^-k, rounded.
    if k == 0 {
        p
    } else {
        (p + (1 << (k - 1))) >> k
    }
}

/// `1 / (1 + e)` for `e` in Q16 in `[0, 2^16]` (`[0, 1]`), as Q16 (`[2^15, 2^16]`).
#[inline]
fn recip_one_plus_q16(e: u32) -> u32 {
    // First guess 24/17 - 8/17 d for d = 1 + e (within 1/17 of 1/d on
    // [1, 2]); three Newton steps y <- y + y (1 - d y), each squaring the
    // relative error (1/17 -> 3.5e-3 -> 1.2e-5 -> rounding). `d y` is
    // formed as `y + e y` so that no bit of `d` is dropped.
    let d15 = ((1 << 16) + e) >> 1;
    let mut y = (92_521 - ((d15 * 61_681) >> 16)) as i32; // Q16
    for _ in 0..3 {
        // e y <= 2^31 (y is about 2^32 / (2^16 + e)).
        let dy = y + ((e * y as u32 + (1 << 15)) >> 16) as i32;
        let err = (1 << 16) - dy; // 1 - d y, Q16, |err| < 2^12
        y += (y * err + (1 << 15)) >> 16;
    }
    y as u32
}

/// `sigmoid(t)` for `t` in Q16, as Q15 (`0..=32768`).
#[inline]
pub fn sigmoid_q15(t: i32) -> u32 {
    let e = exp_neg_q16(t.unsigned_abs()); // e^-|t|, Q16
    let y = recip_one_plus_q16(e); // 1 / (1 + e^-|t|), Q16 in [2^15, 2^16]
    let s = (y + 1) >> 1; // Q15
    if t >= 0 {
        s.min(ONE_Q15)
    } else {
        ONE_Q15 - s.min(ONE_Q15)
    }
}

/// A value `m × 2^e` (any i32 mantissa) as Q16, saturated to
/// `±2^31 - 1` (the activations then saturate too).
#[inline]
pub fn to_q16(m: i32, e: i32) -> i32 {
    let s = e + 16;
    if s >= 0 {
        if s >= 31 {
            return if m > 0 {
                i32::MAX
            } else if m < 0 {
                -i32::MAX
            } else {
                0
            };
        }
        let wide = (m as i64) << s;
        wide.clamp(-(i32::MAX as i64), i32::MAX as i64) as i32
    } else {
        super::block::shr_round(m, (-s) as u32)
    }
}

/// SiLU of a normal block in place, `x sigmoid(x)`; returns the exponent
/// of the (normal) result.
pub fn silu_block(m: &mut [i32], e: i32) -> i32 {
    let mut max = 0u32;
    for v in m.iter_mut() {
        let s = sigmoid_q15(to_q16(*v, e)) as i32; // <= 2^15
                                                   // |v >> 15| <= 2^15: the product is at most 2^30.
        *v = (*v >> super::block::TO_15) * s;
        max = max.max(v.unsigned_abs());
    }
    // value = (v >> 15) s 2^(e + 15 - 15)
    super::block::normalize_with_max(m, e, max)
}

/// The 15-bit SiLU of one element `v × 2^e` of a normal block: the result
/// is `silu15(v, e) × 2^(e + 15)`, `|silu15| <= 2^15`.
#[inline(always)]
pub fn silu15(v: i32, e: i32) -> i32 {
    let s = sigmoid_q15(to_q16(v, e)) as i32;
    ((v >> super::block::TO_15) * s) >> 15
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    const Q15: f64 = 32768.0;
    const Q16: f64 = 65536.0;

    #[test]
    fn exp_neg_is_within_1_22_units_everywhere() {
        let mut worst = 0.0f64;
        for a in 0..(23u32 << 16) {
            let want = (-(a as f64) / Q16).exp() * Q16;
            let err = (exp_neg_q16(a) as f64 - want).abs();
            worst = worst.max(err);
        }
        assert!(worst <= 1.22, "worst {worst} units of Q16");
        assert_eq!(exp_neg_q16(0), 65536);
        assert_eq!(exp_neg_q16(u32::MAX), 0);
    }

    #[test]
    fn sigmoid_is_within_1_06_units_of_q15_everywhere() {
        let mut worst = 0.0f64;
        let mut t = -(25i32 << 16);
        while t <= 25 << 16 {
            let x = t as f64 / Q16;
            let want = Q15 / (1.0 + (-x).exp());
            let got = sigmoid_q15(t);
            worst = worst.max((got as f64 - want).abs());
            t += 1;
        }
        assert!(worst <= 1.06, "worst {worst} units of Q15");
        assert_eq!(sigmoid_q15(0), 16384);
        assert_eq!(sigmoid_q15(i32::MAX), 32768);
        assert_eq!(sigmoid_q15(i32::MIN + 1), 0);
        assert_eq!(sigmoid_q15(i32::MIN), 0);
    }

    #[test]
    fn sigmoid_is_monotone_and_symmetric() {
        let mut last = 0;
        for t in (-(20i32 << 16)..=(20 << 16)).step_by(7) {
            let s = sigmoid_q15(t);
            assert!(s >= last, "{t}");
            last = s;
            let mirror = sigmoid_q15(-t);
            assert!((s + mirror).abs_diff(32768) <= 1, "{t}");
        }
    }

    #[test]
    fn silu_of_a_block_matches_f64() {
        let x: Vec<f32> = (0..200).map(|i| (i as f32 - 100.0) * 0.173).collect();
        let mut m = vec![0; 200];
        let e = super::super::block::from_f32(&x, &mut m);
        let e2 = silu_block(&mut m, e);
        for (i, &v) in x.iter().enumerate() {
            let v = v as f64;
            let want = v / (1.0 + (-v).exp());
            let got = m[i] as f64 * 2f64.powi(e2);
            // Q15 sigmoid and 15-bit views: within 2^-14 of the largest value.
            assert!(
                (got - want).abs() <= 17.3 * 2f64.powi(-13),
                "{v}: {got} {want}"
            );
        }
    }

    #[test]
    fn q16_conversion_rounds_and_saturates() {
        assert_eq!(to_q16(3, -1), 3 << 15);
        assert_eq!(to_q16(3, -17), 2); // 1.5 rounds up
        assert_eq!(to_q16(1 << 29, 0), i32::MAX);
        assert_eq!(to_q16(-(1 << 29), 3), -i32::MAX);
        assert_eq!(to_q16(-5, 20), -i32::MAX);
    }
}
