//! Cortex-M55 tile kernels: the Helium (MVE) assembly of the `ferrite-asm`
//! crate, int8 with `VMLAVA.S8` (16 multiply-accumulates per instruction),
//! int4 with `VMLAVA.S16` over nibbles widened in registers. Should a
//! wrapper refuse its inputs, the portable kernel computes the same result.

use super::tile::{QVec, TILE_COLS, TILE_ROWS};
use super::{calls, portable};
use ferrite_asm::helium;

/// The int4 kernel reads activations from `QVec::wide`, permuted to the
/// nibble order of a tile row (see [`prepare`]).
pub const WIDE: bool = true;

/// Writes the activations as i16 in the order of an int4 tile row's
/// nibbles: per 16 columns, the low nibbles of its 8 bytes are columns
/// 0-3 and 8-11, the high nibbles 4-7 and 12-15.
pub fn prepare(q: &[i8], wide: &mut [i16]) {
    const ORDER: [usize; TILE_COLS] = [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15];
    for (xs, out) in q
        .chunks_exact(TILE_COLS)
        .zip(wide.chunks_exact_mut(TILE_COLS))
    {
        for (o, &src) in out.iter_mut().zip(&ORDER) {
            *o = i16::from(xs[src]);
        }
    }
}

/// Four dot products of the rows of int8 tiles (`64 * n` bytes) with `x.q`.
#[inline]
pub fn dot4_i8(tiles: &[i8], x: &QVec<'_>) -> [i32; TILE_ROWS] {
    helium::dot4_i8(tiles, x.q).unwrap_or_else(|| {
        calls::fell_back();
        portable::dot4_i8(tiles, x)
    })
}

/// The row sums of whole row blocks of int8 tiles, in one call of the assembly.
#[inline]
pub fn rows_i8(weights: &[i8], x: &QVec<'_>, out: &mut [i32]) {
    if !calls::rows(helium::rows_i8(weights, x.q, out)) {
        portable::rows_i8(weights, x, out);
    }
}

/// As [`dot4_i8`] for int4 tiles (`32 * n` bytes), against `x.wide`.
#[inline]
pub fn dot4_i4(tiles: &[u8], x: &QVec<'_>) -> [i32; TILE_ROWS] {
    helium::dot4_i4(tiles, x.wide).unwrap_or_else(|| {
        calls::fell_back();
        portable::dot4_i4(tiles, x)
    })
}
