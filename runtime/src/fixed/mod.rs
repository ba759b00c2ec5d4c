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
//! - [`wide`]: multiplications whose products need more than 32 bits, in
//!   the cheapest exact form for each core (Cortex-M0 has no 64-bit product).
//!
//! Every function is exact integer arithmetic with a stated error against
//! the real function, tested against f64 (exhaustively where the domain
//! allows). Nothing here allocates, panics on input or uses `f32` arithmetic.

pub mod activation;
pub mod block;
pub mod scalar;
pub mod wide;

pub use block::Block;
pub use scalar::Fx;
