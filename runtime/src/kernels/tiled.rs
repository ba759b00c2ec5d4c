//! The integer path: int8 activations, the tiled weight layout
//! ([`crate::image::Layout::Tiled`]) and the matrix-vector driver that runs
//! an architecture's tile kernel over it.
//!
//! ```text
//! x (f32) ──quantize──▶ q = round(127 x / max|x|) (i8), scale = max|x| / 127
//! per row block (4 rows), per group g:   acc[r] = Σ_c W[r][c] q[c]        (i32, tile kernel)
//!                                        total[r] += m[r][g] · acc[r]     (i64)
//! y[r] = total[r] · (d[r] · scale)                                         (one f32 multiply per row)
//! ```
//! Every step but the first and the last is integer arithmetic, so FPU-less
//! cores pay soft float per element of `x` and per row of `W`, never per
//! product or per group, and every kernel gives bit-identical results.

use super::arch;
pub use super::tile::{QVec, TILE_COLS, TILE_ROWS};

/// Largest group of the tiled layout: keeps a group's i32 accumulator of
/// int8 x int8 products (`|q| <= 128`, `|x| <= 127`) far from overflow
/// (`4096 * 128 * 127 < 2^26`; int4 kernels may scale products by 16).
pub const MAX_TILED_GROUP: usize = 4096;
/// Widest single-group int8 matrix whose row sums times a multiplier fit
/// an i32: `255 * 128 * 127 * 512 < 2^31`.
const I32_FINISH_COLS: usize = 512;

/// Bytes of activation scratch per input column: the int8 values plus one
/// i16 copy that some architectures' kernels read (see [`QVec::wide`]).
pub const ACT_BYTES_PER_COL: usize = 3;

/// `rows` rounded up to whole tiles.
pub const fn padded_rows(rows: usize) -> usize {
    rows.div_ceil(TILE_ROWS) * TILE_ROWS
}

/// Byte offset of element `(r, c)` in an int8 tiled payload with `cols` columns.
#[inline]
pub const fn i8_offset(r: usize, c: usize, cols: usize) -> usize {
    let tile = (r / TILE_ROWS) * (cols / TILE_COLS) + c / TILE_COLS;
    tile * TILE_ROWS * TILE_COLS + (r % TILE_ROWS) * TILE_COLS + c % TILE_COLS
}

/// Byte offset and nibble (false: low, true: high) of element `(r, c)` in
/// an int4 tiled payload: per 8 columns, byte `j` holds columns `j` and `j + 4`.
#[inline]
pub const fn i4_offset(r: usize, c: usize, cols: usize) -> (usize, bool) {
    let tile = (r / TILE_ROWS) * (cols / TILE_COLS) + c / TILE_COLS;
    let within = c % TILE_COLS;
    let byte = (within / 8) * 4 + within % 4;
    (
        tile * TILE_ROWS * TILE_COLS / 2 + (r % TILE_ROWS) * TILE_COLS / 2 + byte,
        within % 8 >= 4,
    )
}

/// Quantizes `x` into `q` (same length) and returns the scale `max|x| / 127`:
/// `q[i] = round(127 x[i] / max|x|)`, the exact quotient rounded half away
/// from zero, so every target gets the same `q`. A zero vector gives all
/// zeros and scale 0; with an infinity or a NaN, `q` is all zeros and the
/// scale carries it to the output, as on the f32 path.
///
/// Cores without an FPU compute each quotient in integer arithmetic on the
/// f32 bit patterns (one 32-bit division per value: no soft float); cores
/// with one multiply by `127 / max|x|` in f32, whose result is within
/// 2^-16 of the exact quotient, and take the integer route only for the
/// values that land within 2^-15 of a half, where the product could round
/// the other way.
pub fn quantize(x: &[f32], q: &mut [i8]) -> f32 {
    // The largest magnitude, compared as bits (a NaN's exceed infinity's).
    let abits = x.iter().fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff));
    let amax = f32::from_bits(abits);
    if abits == 0 || abits >= 0x7f80_0000 {
        q.fill(0);
        return amax / 127.0;
    }
    let (ma, ea) = significand(abits);
    let inv = 127.0 / amax;
    // (A maximum below about 4e-37 makes 127 / max overflow: exact route.)
    if cfg!(ferrite_hard_float) && inv.is_finite() {
        // One branch-free pass (it vectorizes where the core can), noting
        // whether any value came near a half; then, only if one did, the
        // exact route for those.
        let mut near_half = false;
        for (qi, &xi) in q.iter_mut().zip(x) {
            let v = (xi * inv).abs();
            let t = v as u32; // <= 127: truncation of a value in [0, 127 + 2^-16]
            let frac = v - t as f32; // exact
            near_half |= (frac - 0.5).abs() <= NEAR_HALF;
            let m = (t + u32::from(frac > 0.5)) as i8;
            *qi = if xi < 0.0 { -m } else { m };
        }
        if near_half {
            for (qi, &xi) in q.iter_mut().zip(x) {
                let v = (xi * inv).abs();
                if (v - (v as u32) as f32 - 0.5).abs() <= NEAR_HALF {
                    let m = exact_step(xi.to_bits() & 0x7fff_ffff, ma, ea) as i8;
                    *qi = if xi < 0.0 { -m } else { m };
                }
            }
        }
    } else {
        for (qi, &xi) in q.iter_mut().zip(x) {
            let bits = xi.to_bits();
            let m = exact_step(bits & 0x7fff_ffff, ma, ea) as i8;
            *qi = if bits >> 31 == 0 { m } else { -m };
        }
    }
    amax / 127.0
}

/// How close to a half the f32 quotient of [`quantize`] may come before the
/// exact route decides: twice its worst error (`127 * 2^-23`, under 2^-16).
const NEAR_HALF: f32 = 1.0 / 32768.0;

/// `round(127 |x| / max|x|)` exactly, from the bits of `|x|` and the
/// significand and exponent of `max|x|` (a normal or subnormal finite
/// value no smaller than `|x|`): at most 127.
#[inline]
fn exact_step(xbits: u32, ma: u32, ea: i32) -> u32 {
    let (mx, ex) = significand(xbits);
    // |x| <= max|x|, so ex <= ea; the ratio is mx / (ma 2^d) <= 1.
    let d = ea - ex;
    if mx == 0 || d > 8 {
        // ma >= 2^23 (a normal maximum) and mx < 2^24: 127 x / max < 0.5.
        return 0;
    }
    let num = 127 * mx; // < 2^31
    let den = ma << d; // < 2^32, and > 0
    let Some(quo) = num.checked_div(den) else {
        return 0; // not reached: den > 0
    };
    let rem = num - quo * den;
    quo + u32::from(rem >= den - rem)
}

/// Significand (with the hidden bit) and biased exponent of a non-negative
/// finite f32's bits: the value is `m * 2^(e - 150)`, subnormals included.
#[inline]
fn significand(bits: u32) -> (u32, i32) {
    let e = (bits >> 23) as i32;
    let m = bits & 0x7f_ffff;
    if e == 0 {
        (m, 1)
    } else {
        (m | 0x80_0000, e)
    }
}

/// An int8 matrix in the tiled layout. Invariants (checked when the view is
/// made, `crate::tensor`): `cols % TILE_COLS == 0`, `group % TILE_COLS == 0`,
/// `group <= MAX_TILED_GROUP`, `cols % group == 0`, `q.len() ==
/// padded_rows(rows) * cols`, `row_scales.len() == padded_rows(rows)`,
/// `mults.len() == padded_rows(rows) * cols / group`.
#[derive(Clone, Copy, Debug)]
pub struct TiledI8<'a> {
    /// Rows (outputs), before padding.
    pub rows: usize,
    /// Columns (inputs).
    pub cols: usize,
    /// Group size (a multiple of 16).
    pub group: usize,
    /// Values in tiles.
    pub q: &'a [i8],
    /// `d`: one f32 scale per padded row.
    pub row_scales: &'a [f32],
    /// `m`: one u8 multiplier per padded row and group, row-major.
    pub mults: &'a [u8],
}

/// An int4 matrix in the tiled layout: as [`TiledI8`] with `q` packed two
/// values per byte (`q.len() == padded_rows(rows) * cols / 2`).
#[derive(Clone, Copy, Debug)]
pub struct TiledI4<'a> {
    /// Rows (outputs), before padding.
    pub rows: usize,
    /// Columns (inputs).
    pub cols: usize,
    /// Group size (a multiple of 16).
    pub group: usize,
    /// Packed values in tiles.
    pub q: &'a [u8],
    /// `d`: one f32 scale per padded row.
    pub row_scales: &'a [f32],
    /// `m`: one u8 multiplier per padded row and group, row-major.
    pub mults: &'a [u8],
}

/// `total * (d * scale)`, the last step of every row: `total` rounded to
/// f32 once (through i32 when it fits, which rounds the same and is one
/// instruction on an FPU, where i64 is a library call).
#[inline]
pub fn finish(total: i64, d: f32, scale: f32) -> f32 {
    let t = match i32::try_from(total) {
        Ok(t) => t as f32,
        Err(_) => wide_to_f32(total),
    };
    t * (d * scale)
}

/// `total as f32` out of line: the compiler would otherwise compute both
/// conversions of [`finish`] and keep one, paying the i64 library call on
/// every row.
#[cold]
#[inline(never)]
fn wide_to_f32(total: i64) -> f32 {
    total as f32
}

/// Writes `y[r]` for the rows of block `rb` that exist.
#[inline]
fn store(y: &mut [f32], rb: usize, total: &[i64; TILE_ROWS], d: &[f32], scale: f32) {
    let base = rb * TILE_ROWS;
    for (r, &t) in total.iter().enumerate() {
        if let (Some(yr), Some(&dr)) = (y.get_mut(base + r), d.get(base + r)) {
            *yr = finish(t, dr, scale);
        }
    }
}

/// Adds `m[r][g] * acc[r]` to the block's totals.
#[inline]
fn combine(
    total: &mut [i64; TILE_ROWS],
    acc: [i32; TILE_ROWS],
    mults: &[u8],
    rb: usize,
    g: usize,
    groups: usize,
) {
    for (r, (t, a)) in total.iter_mut().zip(acc).enumerate() {
        let m = mults
            .get((rb * TILE_ROWS + r) * groups + g)
            .copied()
            .unwrap_or(0);
        *t += i64::from(m) * i64::from(a);
    }
}

/// `y = W x` for a tiled int8 matrix, with the architecture's tile kernel.
/// `x` must have `w.cols` values and `y` at least `w.rows` (checked by the
/// caller; shorter slices compute less, never panic).
pub fn matvec_i8(w: &TiledI8<'_>, x: &QVec<'_>, y: &mut [f32]) {
    let tile_bytes = TILE_ROWS * TILE_COLS;
    let groups = w.cols / w.group.max(1);
    let group_bytes = w.group * TILE_ROWS;
    let block_bytes = (w.cols * TILE_ROWS).max(1);
    let mut first = 0;
    if groups == 1 {
        // One group per row (the int8 default): the whole blocks in one
        // call of the tile kernel, their i32 sums parked in y's own words.
        let full = (w.rows / TILE_ROWS)
            .min(y.len() / TILE_ROWS)
            .min(w.q.len() / block_bytes);
        let rows = full * TILE_ROWS;
        // `full` fits both slices (the `min`s above); `get` states it
        // without a panic branch (`None` is not reached).
        let (Some(q), Some(ys)) = (w.q.get(..full * block_bytes), y.get_mut(..rows)) else {
            return;
        };
        // Fewer than 4 rows: no whole block (an empty call would be refused).
        if full > 0 {
            arch::rows_i8(q, x, bytemuck::cast_slice_mut(ys));
        }
        let scale = x.scale;
        if w.cols <= I32_FINISH_COLS {
            // m * acc fits an i32 here, and i32 -> f32 rounds as i64 -> f32
            // does: the same bits, in a loop that vectorizes (Helium) and
            // needs no 64-bit product.
            for ((yr, &m), &d) in ys.iter_mut().zip(w.mults).zip(w.row_scales) {
                let acc = yr.to_bits() as i32;
                *yr = (i32::from(m) * acc) as f32 * (d * scale);
            }
        } else {
            for ((yr, &m), &d) in ys.iter_mut().zip(w.mults).zip(w.row_scales) {
                let acc = yr.to_bits() as i32;
                *yr = finish(i64::from(m) * i64::from(acc), d, scale);
            }
        }
        first = full;
    }
    for (rb, block) in w.q.chunks_exact(block_bytes).enumerate().skip(first) {
        let mut total = [0i64; TILE_ROWS];
        for (g, tiles) in block.chunks_exact(group_bytes.max(tile_bytes)).enumerate() {
            let acc = arch::dot4_i8(tiles, &x.slice(g * w.group, w.group));
            combine(&mut total, acc, w.mults, rb, g, groups);
        }
        store(y, rb, &total, w.row_scales, x.scale);
    }
}

/// `y = W x` for a tiled int4 matrix, with the architecture's tile kernel.
pub fn matvec_i4(w: &TiledI4<'_>, x: &QVec<'_>, y: &mut [f32]) {
    let tile_bytes = TILE_ROWS * TILE_COLS / 2;
    let groups = w.cols / w.group.max(1);
    let group_bytes = w.group * TILE_ROWS / 2;
    for (rb, block) in
        w.q.chunks_exact((w.cols * TILE_ROWS / 2).max(1))
            .enumerate()
    {
        let mut total = [0i64; TILE_ROWS];
        for (g, tiles) in block.chunks_exact(group_bytes.max(tile_bytes)).enumerate() {
            let acc = arch::dot4_i4(tiles, &x.slice(g * w.group, w.group));
            combine(&mut total, acc, w.mults, rb, g, groups);
        }
        store(y, rb, &total, w.row_scales, x.scale);
    }
}

/// The right shift that keeps every row total of a tiled matrix with
/// `cols` columns and weights of magnitude up to `qmax` within an i32:
/// `|total| <= qmax * 127 * 255 * cols` (0 for int8 up to 516 columns).
pub const fn total_shift(cols: usize, qmax: u64) -> u32 {
    let bound = qmax * 127 * 255 * cols as u64;
    let bits = 64 - bound.leading_zeros();
    bits.saturating_sub(31)
}

/// The integer token path's products: `out[r] = (Σ_g m[r][g] Σ_{c in g}
/// W[r][c] x.q[c]) >> shift`, exact integers before the shift (which is
/// [`total_shift`], returned). `out` needs `w.rows` words.
pub fn totals_i8(w: &TiledI8<'_>, x: &QVec<'_>, out: &mut [i32]) -> u32 {
    let (shift, pending) = totals_i8_pending(w, x, out);
    for (o, &m) in out.iter_mut().take(pending).zip(w.mults) {
        *o *= i32::from(m);
    }
    shift
}

/// [`totals_i8`] without the multipliers of its first rows: returns the
/// shift and the number `n` of leading rows whose `out[r]` is still to be
/// multiplied by `w.mults[r]` (one group a row, shift 0: the whole tile
/// blocks of one kernel call), so that a caller's own pass over the rows
/// can apply them.
pub fn totals_i8_pending(w: &TiledI8<'_>, x: &QVec<'_>, out: &mut [i32]) -> (u32, usize) {
    let shift = total_shift(w.cols, 128);
    let tile_bytes = TILE_ROWS * TILE_COLS;
    let groups = w.cols / w.group.max(1);
    let group_bytes = w.group * TILE_ROWS;
    let block_bytes = (w.cols * TILE_ROWS).max(1);
    let (mut first, mut pending) = (0, 0);
    if groups == 1 && shift == 0 {
        // The whole blocks in one call; m * acc fits an i32 (shift 0).
        let full = (w.rows / TILE_ROWS)
            .min(out.len() / TILE_ROWS)
            .min(w.q.len() / block_bytes);
        let rows = full * TILE_ROWS;
        // As in `matvec_i8`: both fit, `None` is not reached.
        let (Some(q), Some(head)) = (w.q.get(..full * block_bytes), out.get_mut(..rows)) else {
            return (shift, 0);
        };
        if full > 0 {
            arch::rows_i8(q, x, head);
        }
        pending = rows;
        first = full;
    }
    for (rb, block) in w.q.chunks_exact(block_bytes).enumerate().skip(first) {
        let mut total = [0i64; TILE_ROWS];
        for (g, tiles) in block.chunks_exact(group_bytes.max(tile_bytes)).enumerate() {
            let acc = arch::dot4_i8(tiles, &x.slice(g * w.group, w.group));
            combine(&mut total, acc, w.mults, rb, g, groups);
        }
        store_totals(out, rb, &total, shift);
    }
    (shift, pending)
}

/// [`totals_i8`] for a tiled int4 matrix.
pub fn totals_i4(w: &TiledI4<'_>, x: &QVec<'_>, out: &mut [i32]) -> u32 {
    let shift = total_shift(w.cols, 8);
    let tile_bytes = TILE_ROWS * TILE_COLS / 2;
    let groups = w.cols / w.group.max(1);
    let group_bytes = w.group * TILE_ROWS / 2;
    for (rb, block) in
        w.q.chunks_exact((w.cols * TILE_ROWS / 2).max(1))
            .enumerate()
    {
        let mut total = [0i64; TILE_ROWS];
        for (g, tiles) in block.chunks_exact(group_bytes.max(tile_bytes)).enumerate() {
            let acc = arch::dot4_i4(tiles, &x.slice(g * w.group, w.group));
            combine(&mut total, acc, w.mults, rb, g, groups);
        }
        store_totals(out, rb, &total, shift);
    }
    shift
}

/// Writes `total >> shift` of the rows of block `rb` that exist.
#[inline]
fn store_totals(out: &mut [i32], rb: usize, total: &[i64; TILE_ROWS], shift: u32) {
    for (r, &t) in total.iter().enumerate() {
        if let Some(o) = out.get_mut(rb * TILE_ROWS + r) {
            // Within an i32 by the bound of `total_shift`.
            *o = (t >> shift) as i32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `exact_step` (the route of every value on cores without an FPU)
    /// against the quotient in f64, where `127 |x|` is exact and the one
    /// rounding of the division cannot move a value across a half: for
    /// maxima subnormal, normal and the largest finite, and values from the
    /// maximum down to 0, through exponents more than 8 below the maximum's
    /// (step 0 without a division; a shift of the maximum's significand by
    /// that many bits would overflow).
    #[test]
    fn exact_step_is_the_rounded_quotient_at_every_distance() {
        for abits in [
            0x0000_00fe_u32, // 254 * 2^-149: 127 k / 254 = k / 2, ties
            0x007f_ffff,     // largest subnormal
            0x0080_0000,     // smallest normal
            0x3f80_0000,     // 1
            0x3f9d_f3b6,     // 1.2339
            0x7f7f_ffff,     // f32::MAX
        ] {
            let (ma, ea) = significand(abits);
            let amax = f64::from(f32::from_bits(abits));
            let mut xbits = abits;
            let mut far = 0;
            loop {
                let x = f64::from(f32::from_bits(xbits));
                let want = (127.0 * x / amax).round() as u32;
                assert_eq!(exact_step(xbits, ma, ea), want, "x {x:e}, max {amax:e}");
                if significand(xbits).1 + 8 < ea {
                    far += 1;
                }
                if xbits == 0 {
                    break;
                }
                xbits -= (xbits / 7).max(1);
            }
            assert!(abits < 0x0500_0000 || far > 10, "{abits:#x}");
        }
    }
}
