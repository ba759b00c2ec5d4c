//! RoPE tables from 64-bit fixed-point phases (docs/spec.md, Numerics,
//! "Positions"), shared by `swa` and `mla`.

/// Fills `cs` (`[dim]`: `dim / 2` cosines then `dim / 2` sines) for
/// position `pos`, taken modulo 2^64 (so `pos.wrapping_neg()` rotates back
/// by `pos`).
///
/// Frequency `i` turns `theta^(-2i/dim) / 2 pi` times per token; as a 0.64
/// fixed-point number of turns `step_i`, the phase at `pos` is
/// `pos * step_i mod 2^64` exactly, and its top 32 bits give the angle in
/// `[-pi, pi)` (rounded to 24 bits when converted to f32). The angle between
/// two positions therefore depends only on their distance, at every `u64`.
pub(crate) fn table(theta: f32, dim: u32, pos: u64, cs: &mut [f32]) {
    /// One turn as a 0.64 fixed-point number, in f64.
    const TURN: f64 = 18_446_744_073_709_551_616.0;
    /// Radians per unit of the phase's top 32 bits.
    const RAD_PER_UNIT: f32 = core::f32::consts::TAU / 4_294_967_296.0;
    let half = cs.len() / 2;
    // theta^(-2/dim) as exp(ln theta * -2/dim): f64 `exp` and `log` are
    // smaller than `pow` in soft-float firmware (and the eval firmware links
    // them anyway).
    let ratio = libm::exp(libm::log(theta as f64) * (-2.0 / dim as f64));
    let mut turns_per_token = 1.0 / core::f64::consts::TAU;
    let (cos, sin) = cs.split_at_mut(half);
    for (c, s) in cos.iter_mut().zip(sin.iter_mut()) {
        // In [0, 2^64 / 2 pi]: the conversion neither saturates nor wraps.
        let step = (turns_per_token * TURN) as u64;
        let phase = pos.wrapping_mul(step);
        let angle = ((phase >> 32) as u32 as i32) as f32 * RAD_PER_UNIT;
        *c = libm::cosf(angle);
        *s = libm::sinf(angle);
        turns_per_token *= ratio;
    }
}
