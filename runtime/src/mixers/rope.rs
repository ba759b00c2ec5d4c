//! RoPE tables from 64-bit fixed-point phases (docs/spec.md, Numerics,
//! "Positions"), shared by `swa` and `mla`.

use crate::math::{cos_poly, sin_poly};

/// Radians per unit of a 32-bit phase (`2 pi / 2^32`).
const RAD_PER_UNIT: f32 = core::f32::consts::TAU / 4_294_967_296.0;

/// Fills `cs` (`[dim]`: `dim / 2` cosines then `dim / 2` sines) for
/// position `pos`, taken modulo 2^64 (so `pos.wrapping_neg()` rotates back
/// by `pos`).
///
/// Frequency `i` turns `theta^(-2i/dim) / 2 pi` times per token; as a 0.64
/// fixed-point number of turns `step_i`, the phase at `pos` is
/// `pos * step_i mod 2^64` exactly, and its top 32 bits are the angle
/// ([`cos_sin`]). The angle between two positions therefore depends only on
/// their distance, at every `u64`.
pub(crate) fn table(theta: f32, dim: u32, pos: u64, cs: &mut [f32]) {
    /// One turn as a 0.64 fixed-point number, in f64.
    const TURN: f64 = 18_446_744_073_709_551_616.0;
    let half = cs.len() / 2;
    // theta^(-2/dim) as exp(ln theta * -2/dim): f64 `exp` and `log` are
    // smaller than `pow` in soft-float firmware.
    let ratio = libm::exp(libm::log(theta as f64) * (-2.0 / dim as f64));
    let mut turns_per_token = 1.0 / core::f64::consts::TAU;
    let (cos, sin) = cs.split_at_mut(half);
    for (c, s) in cos.iter_mut().zip(sin.iter_mut()) {
        // In [0, 2^64 / 2 pi]: the conversion neither saturates nor wraps.
        let step = (turns_per_token * TURN) as u64;
        (*c, *s) = cos_sin((pos.wrapping_mul(step) >> 32) as u32);
        turns_per_token *= ratio;
    }
}

/// `(cos a, sin a)` of the angle `a = phase * 2 pi / 2^32`.
///
/// The phase is an exact fixed-point angle, so the reduction is exact
/// integer work: the nearest quarter turn `q` and the rest `r`, `|r| <= pi/4`
/// (rounded to f32, within 5e-8 rad); then the minimax polynomials of
/// Cephes' `sinf`/`cosf` on `[-pi/4, pi/4]` (within 1e-7) in f32 operations
/// of a fixed order — the same bits on every target — and the quadrant's
/// signs. No library call, no `rem_pio2`: a few hundred bytes of code.
pub(crate) fn cos_sin(phase: u32) -> (f32, f32) {
    let q = phase.wrapping_add(1 << 29) >> 30;
    let r = phase.wrapping_sub(q << 30) as i32;
    let x = r as f32 * RAD_PER_UNIT;
    let (s, c) = (sin_poly(x), cos_poly(x));
    match q & 3 {
        0 => (c, s),
        1 => (-s, c),
        2 => (-c, -s),
        _ => (s, -c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against f64 `cos`/`sin` of the same angle, over every quadrant and
    /// both edges of each: within 1.5e-7.
    #[test]
    fn cos_sin_is_accurate_everywhere() {
        let mut worst = 0f64;
        let mut phase = 0u32;
        for _ in 0..200_000 {
            let (c, s) = cos_sin(phase);
            let a = phase as f64 * core::f64::consts::TAU / 4_294_967_296.0;
            worst = worst
                .max((c as f64 - libm::cos(a)).abs())
                .max((s as f64 - libm::sin(a)).abs());
            phase = phase.wrapping_add(21_474_836 + (phase & 0xFF));
        }
        for edge in [
            0u32,
            1 << 29,
            (1 << 29) - 1,
            1 << 30,
            1 << 31,
            u32::MAX,
            3 << 30,
        ] {
            let (c, s) = cos_sin(edge);
            let a = edge as f64 * core::f64::consts::TAU / 4_294_967_296.0;
            worst = worst
                .max((c as f64 - libm::cos(a)).abs())
                .max((s as f64 - libm::sin(a)).abs());
        }
        assert!(worst < 1.5e-7, "worst {worst:e}");
    }
}
