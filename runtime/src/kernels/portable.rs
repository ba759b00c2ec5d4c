//! Portable tile kernels in safe Rust: the integer path on cores without a
//! faster module (Cortex-M0/M3, RV32, the host). Columns are the outer loop,
//! so each activation is loaded once for the four rows of a tile.

use super::tile::{QVec, TILE_COLS, TILE_ROWS};

/// This module reads `QVec::q`; it needs no widened copy.
pub const WIDE: bool = false;

/// Nothing to prepare: the kernels read the int8 activations directly.
pub fn prepare(_q: &[i8], _wide: &mut [i16]) {}

/// Four dot products of the rows of int8 tiles (`64 * n` bytes) with `x.q`
/// (`16 * n` values).
#[inline]
pub fn dot4_i8(tiles: &[i8], x: &QVec<'_>) -> [i32; TILE_ROWS] {
    let mut acc = [0i32; TILE_ROWS];
    for (tile, xs) in tiles
        .chunks_exact(TILE_ROWS * TILE_COLS)
        .zip(x.q.chunks_exact(TILE_COLS))
    {
        let (r0, rest) = tile.split_at(TILE_COLS);
        let (r1, rest) = rest.split_at(TILE_COLS);
        let (r2, r3) = rest.split_at(TILE_COLS);
        for c in 0..TILE_COLS {
            let xv = i32::from(xs[c]);
            acc[0] += i32::from(r0[c]) * xv;
            acc[1] += i32::from(r1[c]) * xv;
            acc[2] += i32::from(r2[c]) * xv;
            acc[3] += i32::from(r3[c]) * xv;
        }
    }
    acc
}

/// The row sums of whole row blocks of int8 tiles (one group spanning all
/// columns): `out[4 b + r]`.
#[inline]
pub fn rows_i8(weights: &[i8], x: &QVec<'_>, out: &mut [i32]) {
    let block = (x.q.len() * TILE_ROWS).max(1);
    for (sums, tiles) in out
        .chunks_exact_mut(TILE_ROWS)
        .zip(weights.chunks_exact(block))
    {
        sums.copy_from_slice(&dot4_i8(tiles, x));
    }
}

/// Low (even byte position) and high nibble of a packed int4 byte, signed.
#[inline]
fn nibbles(b: u8) -> (i32, i32) {
    (i32::from(((b << 4) as i8) >> 4), i32::from((b as i8) >> 4))
}

/// As [`dot4_i8`] for int4 tiles (`32 * n` bytes; per 8 columns, byte `j`
/// holds column `j` low and `j + 4` high).
#[inline]
pub fn dot4_i4(tiles: &[u8], x: &QVec<'_>) -> [i32; TILE_ROWS] {
    let mut acc = [0i32; TILE_ROWS];
    for (tile, xs) in tiles
        .chunks_exact(TILE_ROWS * TILE_COLS / 2)
        .zip(x.q.chunks_exact(TILE_COLS))
    {
        for (a, row) in acc.iter_mut().zip(tile.chunks_exact(TILE_COLS / 2)) {
            let mut s = 0i32;
            for (half, xh) in row.chunks_exact(4).zip(xs.chunks_exact(8)) {
                for j in 0..4 {
                    let (lo, hi) = nibbles(half[j]);
                    s += lo * i32::from(xh[j]) + hi * i32::from(xh[j + 4]);
                }
            }
            *a += s;
        }
    }
    acc
}
