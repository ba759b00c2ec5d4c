//! Fixed-point arithmetic of the integer token path (image format 6,
//! `docs/integer-path.md`): integer code only, the same bits on every
//! target whatever its FPU and whatever `fast-math` module the build has.
//!
//! - [`scalar`]: [`Fx`], a real number as a 32-bit mantissa and an
//!   exponent, for the few scalars per vector, row or head (norm scales,
//!   quantization scales, gates, decays) and for f32 values read from flash
//!   through their bit patterns;
//! - [`activation`]: sigmoid, SiLU and `e^-a` element by element in Q16/Q15;
//! - [`block`]: block floating point vectors (i32 mantissas with one
//!   power-of-two exponent) and their operations: normalization, residual
//!   adds, RMS scales, int8 quantization, conversions from and to f32 bits;
//! - [`trig`]: sines and cosines of exact angles `pi * num / den` (BLA's
//!   write weights), the angles reduced in integers;
//! - [`wide`]: multiplications whose products need more than 32 bits, in
//!   the cheapest exact form for each core (Cortex-M0 has no 64-bit product).
//!
//! Every function is exact integer arithmetic with a stated error against
//! the real function, tested against f64 (exhaustively where the domain
//! allows). Nothing here allocates, panics on input or uses `f32` arithmetic.

pub mod activation;
pub mod block;
pub mod scalar;
#[cfg(test)]
pub(crate) mod test_rng;
#[cfg(test)]
pub(crate) mod testing;
pub mod trig;
pub mod wide;

pub use block::Block;
pub use scalar::Fx;

/// The largest exponent magnitude an integer state's stored exponent word
/// is read with ([`stored_exponent`]).
pub const STORED_EXP_LIMIT: i32 = 1 << 24;

/// An exponent word of an integer state, as a step reads it: clamped to
/// `±STORED_EXP_LIMIT`. A word the step wrote is far inside (a block's or an
/// [`Fx`]'s exponent, at most `2^20`); a state restored from a hostile
/// snapshot may hold any `i32`, and clamped it cannot overflow the exponent
/// sums that follow (the output is then garbage, never a panic).
#[inline]
pub fn stored_exponent(word: i32) -> i32 {
    word.clamp(-STORED_EXP_LIMIT, STORED_EXP_LIMIT)
}
