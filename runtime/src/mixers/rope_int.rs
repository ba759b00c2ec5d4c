//! RoPE in integer code for the integer token path (docs/integer-path.md,
//! "SWA on the integer path"): the phase steps, cos/sin in Q15 of an exact
//! 32-bit phase, and the rotation of a head's 15-bit views.
//!
//! The phases are those of [`super::rope::table`] (`pos × step_i mod 2^64`,
//! the top 32 bits the angle), with `step_i = theta^(-2i/d) / 2 pi` in 0.64
//! fixed point computed by [`Fx`] code instead of f64 ([`phase_step_over`];
//! `ln theta` once per table, [`ln_theta`]).

use crate::fixed::block::{normalize_with_max, TO_15};
use crate::fixed::Fx;

/// `ln 2` to 32 bits.
const LN_2: Fx = Fx::from_u64(12_786_308_645_202_655_660, -64, false);
/// `2^64 / 2 pi` to 32 bits.
const TURNS_PER_RAD_64: Fx = Fx::from_u64(2_935_890_503_282_001_226, 0, false);
/// `pi / 2` in Q30.
const HALF_PI_Q30: i64 = 1_686_629_713;
/// One in Q30.
const ONE_Q30: i64 = 1 << 30;

/// `ln theta` of a RoPE base (f32 bits), or `None` for a base that is not
/// finite and positive (refused at load): the part of [`phase_step`] that
/// does not depend on the frequency, so a table computes it once.
pub(crate) fn ln_theta(theta_bits: u32) -> Option<Fx> {
    let theta = Fx::from_f32_bits(theta_bits);
    if theta.is_zero() || theta.is_negative() {
        return None;
    }
    // theta = 2^(e + 31) (1 + u), u = m / 2^31 - 1 in [0, 1).
    let u = Fx::from_u64((theta.mantissa() - (1 << 31)) as u64, -31, false);
    Some(Fx::from_i64(theta.exponent() as i64 + 31, 0) * LN_2 + u.ln1p_unit())
}

/// `1 / dim`, the factor of every phase step of a head of size `dim`.
fn inv_dim(dim: u32) -> Fx {
    Fx::from_i64(dim as i64, 0).recip()
}

/// The phase step of frequency `i` (`phase_step`'s bits) from `ln theta`
/// ([`ln_theta`]) and `1 / dim` ([`inv_dim`]), both taken once a table
/// (the reciprocal was once a frequency before: the same product).
#[inline(always)]
fn phase_step_over(ln_theta: Option<Fx>, dim: u32, inv_dim: Fx, i: u32) -> u64 {
    let Some(ln_theta) = ln_theta.filter(|_| dim != 0) else {
        return 0;
    };
    let a = ln_theta * Fx::from_i64(2 * i as i64, 0) * inv_dim;
    // At most 2^64 / 2 pi < 2^62: no saturation.
    ((-a).exp() * TURNS_PER_RAD_64).to_fixed(0) as u64
}

/// The 0.64 fixed-point turns per token of frequency `i` of a head of
/// size `dim` with RoPE base `theta` (f32 bits, finite and positive:
/// checked at load): `theta^(-2i/dim) / 2 pi`, within about 2^-27
/// relative of the f64 value [`super::rope::table`] uses.
#[cfg(test)]
pub(crate) fn phase_step(theta_bits: u32, dim: u32, i: u32) -> u64 {
    phase_step_over(ln_theta(theta_bits), dim, inv_dim(dim), i)
}

/// Fills `cos`, `sin` (`[dim/2]` each, Q15) for position `pos` (mod 2^64)
/// of a head of size `dim` with RoPE base `theta_bits` (f32 bits): the
/// phases of [`super::rope::table`], `ln theta` taken once.
pub(crate) fn table_q15(theta_bits: u32, dim: u32, pos: u64, cos: &mut [i32], sin: &mut [i32]) {
    let ln_theta = ln_theta(theta_bits);
    let inv_dim = inv_dim(dim);
    for (i, (co, si)) in cos.iter_mut().zip(sin.iter_mut()).enumerate() {
        let step = phase_step_over(ln_theta, dim, inv_dim, i as u32);
        (*co, *si) = cos_sin_q15((pos.wrapping_mul(step) >> 32) as u32);
    }
}

/// `(cos a, sin a)` in Q15 of the angle `a = phase × 2 pi / 2^32`: the
/// exact quarter-turn reduction of [`super::rope::cos_sin`], then Taylor
/// polynomials in Q30 on `[-pi/4, pi/4]` (sin to `x^7`, cos to `x^8`:
/// truncation below 4e-7), rounded to Q15: within 1 unit of Q15.
pub(crate) fn cos_sin_q15(phase: u32) -> (i32, i32) {
    let q = phase.wrapping_add(1 << 29) >> 30;
    let r = phase.wrapping_sub(q << 30) as i32; // [-2^29, 2^29]
    let x = (r as i64 * HALF_PI_Q30) >> 30; // radians in Q30, |x| < 2^30
    let x2 = (x * x) >> 30;
    // x2 t >> 30 lies in [0, 2^30): the division by the small constant k
    // runs in 32 bits (a multiply on every core; an i64 division is a
    // library call on 32-bit ones), the same quotient.
    let step = |t: i64, k: i32| ONE_Q30 - i64::from(((x2 * t) >> 30) as i32 / k);
    let sin = (x * step(step(step(ONE_Q30, 42), 20), 6)) >> 30;
    let cos = step(step(step(step(ONE_Q30, 56), 30), 12), 2);
    let q15 = |v: i64| ((v + (1 << 14)) >> 15) as i32;
    let (c, s) = (q15(cos), q15(sin));
    match q & 3 {
        0 => (c, s),
        1 => (-s, c),
        2 => (-c, -s),
        _ => (s, -c),
    }
}

/// Rotates every head of the normal block `(m, e)` (heads of size `2 half`,
/// the first half against the second as in `SwaConfig::rotate`) by the
/// Q15 tables `cos`, `sin` (`[half]` each), on the 15-bit views; returns
/// the exponent of the rotated block (normal again).
pub(crate) fn rotate(m: &mut [i32], e: i32, cos: &[i32], sin: &[i32]) -> i32 {
    let half = cos.len();
    if half == 0 {
        return e;
    }
    let mut max = 0u32;
    for head in m.chunks_exact_mut(2 * half) {
        let (lo, hi) = head.split_at_mut(half);
        for (((a, b), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
            let (x0, x1) = (*a >> TO_15, *b >> TO_15);
            // |x0 c - x1 s| <= |(x0, x1)| × |(c, s)| < 2^15.5 × 2^15.
            *a = x0 * c - x1 * s;
            *b = x1 * c + x0 * s;
            max = max.max(a.unsigned_abs()).max(b.unsigned_abs());
        }
    }
    // (x15 2^(e + 15)) (c 2^-15): exponent e.
    normalize_with_max(m, e + TO_15 as i32 - 15, max)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::fixed::block::normalize;
    use std::vec::Vec;

    #[test]
    fn cos_sin_q15_within_one_unit() {
        let mut worst = 0f64;
        let mut phase = 0u32;
        for _ in 0..300_000 {
            let (c, s) = cos_sin_q15(phase);
            let a = phase as f64 * core::f64::consts::TAU / 4_294_967_296.0;
            worst = worst
                .max((c as f64 - 32768.0 * libm::cos(a)).abs())
                .max((s as f64 - 32768.0 * libm::sin(a)).abs());
            phase = phase.wrapping_add(14_316_557 + (phase & 0xFF));
        }
        for edge in [
            0u32,
            (1 << 29) - 1,
            1 << 29,
            1 << 30,
            1 << 31,
            3 << 30,
            u32::MAX,
        ] {
            let (c, s) = cos_sin_q15(edge);
            let a = edge as f64 * core::f64::consts::TAU / 4_294_967_296.0;
            worst = worst
                .max((c as f64 - 32768.0 * libm::cos(a)).abs())
                .max((s as f64 - 32768.0 * libm::sin(a)).abs());
        }
        std::println!("cos/sin: worst {worst:.3} units of Q15");
        assert!(worst <= 1.0, "worst {worst} units of Q15");
    }

    /// The table as it was, each frequency's step with its own `1 / dim`.
    fn table_by_steps(theta_bits: u32, dim: u32, pos: u64, cos: &mut [i32], sin: &mut [i32]) {
        let ln_theta = ln_theta(theta_bits);
        for (i, (co, si)) in cos.iter_mut().zip(sin.iter_mut()).enumerate() {
            let step = match ln_theta.filter(|_| dim != 0) {
                Some(l) => {
                    let a = l * Fx::from_i64(2 * i as i64, 0) * Fx::from_i64(dim as i64, 0).recip();
                    ((-a).exp() * TURNS_PER_RAD_64).to_fixed(0) as u64
                }
                None => 0,
            };
            (*co, *si) = cos_sin_q15((pos.wrapping_mul(step) >> 32) as u32);
        }
    }

    /// `1 / dim` taken once a table gives the bits of the table by steps.
    #[test]
    fn one_reciprocal_a_table_is_the_same_table() {
        for theta in [1.5f32, 10.0, 10_000.0, 500_000.0, 1.0e6, 0.0, -2.0] {
            for dim in [0u32, 2, 8, 16, 32, 64, 128, 24] {
                for pos in [0u64, 1, 7, 511, 123_456_789, u64::MAX] {
                    let half = (dim / 2).max(1) as usize;
                    let (mut c, mut s) = (std::vec![0; half], std::vec![0; half]);
                    let (mut c0, mut s0) = (std::vec![0; half], std::vec![0; half]);
                    table_q15(theta.to_bits(), dim, pos, &mut c, &mut s);
                    table_by_steps(theta.to_bits(), dim, pos, &mut c0, &mut s0);
                    assert_eq!((c, s), (c0, s0), "{theta} {dim} {pos}");
                }
            }
        }
    }

    /// Against the f64 steps of `rope::table`: within 2^-26 relative.
    #[test]
    fn phase_steps_match_f64() {
        const TURN: f64 = 18_446_744_073_709_551_616.0;
        let mut worst = 0f64;
        for theta in [1.5f32, 10.0, 10_000.0, 500_000.0, 1.0e6] {
            for dim in [2u32, 8, 16, 64, 128] {
                let ratio = libm::exp(libm::log(theta as f64) * (-2.0 / dim as f64));
                let mut turns = 1.0 / core::f64::consts::TAU;
                for i in 0..dim / 2 {
                    let want = turns * TURN;
                    let got = phase_step(theta.to_bits(), dim, i) as f64;
                    let rel = (got - want).abs() / want;
                    assert!(rel <= 2f64.powi(-26), "{theta} {dim} {i}: {rel:e}");
                    worst = worst.max(rel);
                    turns *= ratio;
                }
            }
        }
        std::println!("phase steps: worst relative {worst:.3e}");
    }

    /// Rotating a block: within 2^-13 of its largest value from the f64
    /// rotation by the exact angles.
    #[test]
    fn rotate_matches_f64() {
        let half = 8;
        let x: Vec<f64> = (0..4 * half)
            .map(|i| libm::sin(i as f64 * 1.7) * (1.0 + (i % 3) as f64))
            .collect();
        let mut m: Vec<i32> = x.iter().map(|v| (v * 2f64.powi(26)) as i32).collect();
        let e0 = normalize(&mut m, -26);
        let x: Vec<f64> = m.iter().map(|&v| v as f64 * 2f64.powi(e0)).collect();
        let phases: Vec<u32> = (0..half as u32)
            .map(|i| i.wrapping_mul(0x3779_b97f))
            .collect();
        let (cos, sin): (Vec<i32>, Vec<i32>) = phases.iter().map(|&p| cos_sin_q15(p)).unzip();
        let e = rotate(&mut m, e0, &cos, &sin);
        let xmax = x.iter().fold(0f64, |a, v| a.max(v.abs()));
        for (h, head) in x.chunks_exact(2 * half).enumerate() {
            for i in 0..half {
                let a = phases[i] as f64 * core::f64::consts::TAU / 4_294_967_296.0;
                let (c, s) = (libm::cos(a), libm::sin(a));
                let want0 = head[i] * c - head[i + half] * s;
                let want1 = head[i + half] * c + head[i] * s;
                let got0 = m[h * 2 * half + i] as f64 * 2f64.powi(e);
                let got1 = m[h * 2 * half + i + half] as f64 * 2f64.powi(e);
                assert!((got0 - want0).abs() <= xmax * 2f64.powi(-13), "{h} {i}");
                assert!((got1 - want1).abs() <= xmax * 2f64.powi(-13), "{h} {i}");
            }
        }
    }
}
