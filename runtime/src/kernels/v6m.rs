//! Cortex-M0/M0+ tile kernels: int8 in the Thumb-1 assembly of the
//! `ferrite-asm` crate (`LDRSB` + `MULS` + `ADD`, the activation of a column loaded
//! once for four rows), int4 in the portable code. Should the wrapper
//! refuse its inputs, the portable kernel computes the same result.

use super::tile::{QVec, TILE_ROWS};
use super::{calls, portable};
use ferrite_asm::v6m;

/// The kernels read `QVec::q`; no widened copy.
pub const WIDE: bool = false;

/// Nothing to prepare.
pub fn prepare(_q: &[i8], _wide: &mut [i16]) {}

/// Four dot products of the rows of int8 tiles with the activations.
#[inline]
pub fn dot4_i8(tiles: &[i8], x: &QVec<'_>) -> [i32; TILE_ROWS] {
    let mut out = [0i32; TILE_ROWS];
    if v6m::rows_i8(tiles, x.q, &mut out) {
        out
    } else {
        calls::fell_back();
        portable::dot4_i8(tiles, x)
    }
}

/// The row sums of whole row blocks of int8 tiles, in one call of the assembly.
#[inline]
pub fn rows_i8(weights: &[i8], x: &QVec<'_>, out: &mut [i32]) {
    if !calls::rows(v6m::rows_i8(weights, x.q, out)) {
        portable::rows_i8(weights, x, out);
    }
}

pub use portable::dot4_i4;
