//! Cortex-M4/M7 (and M33-class) tile kernels: the SMLAD/SXTB16 assembly of
//! the `ferrite-asm` crate behind its checking wrappers. The activations are
//! widened to i16 once per input vector and paired the way `SXTB16` splits a
//! word of weights (see [`prepare`]); should a wrapper refuse its inputs
//! (a misaligned or odd-length slice, which the runtime never passes), the
//! portable kernel computes the same result.

use super::tile::{QVec, TILE_ROWS};
use super::{calls, portable};
use ferrite_asm::dsp;

/// The kernels read activations from `QVec::wide`.
pub const WIDE: bool = true;

/// Widens the activations to i16 in `ferrite-asm`'s pair order: per 4
/// columns `x0, x2, x1, x3`.
pub fn prepare(q: &[i8], wide: &mut [i16]) {
    dsp::widen_pairs(q, wide);
}

/// Four dot products of the rows of int8 tiles with the activations.
#[inline]
pub fn dot4_i8(tiles: &[i8], x: &QVec<'_>) -> [i32; TILE_ROWS] {
    dsp::dot4_i8(tiles, x.wide).unwrap_or_else(|| {
        calls::fell_back();
        portable::dot4_i8(tiles, x)
    })
}

/// As [`dot4_i8`] for int4 tiles.
#[inline]
pub fn dot4_i4(tiles: &[u8], x: &QVec<'_>) -> [i32; TILE_ROWS] {
    dsp::dot4_i4(tiles, x.wide).unwrap_or_else(|| {
        calls::fell_back();
        portable::dot4_i4(tiles, x)
    })
}

/// The row sums of whole row blocks of int8 tiles (one group spanning all
/// columns): `out[4 b + r]`, in one call of the assembly.
#[inline]
pub fn rows_i8(weights: &[i8], x: &QVec<'_>, out: &mut [i32]) {
    if !calls::rows(dsp::rows_i8(weights, x.wide, out)) {
        portable::rows_i8(weights, x, out);
    }
}
