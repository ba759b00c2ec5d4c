//! Portable reference kernels, written as the definition: the f32-activation
//! kernels of row-major tensors (quantized weights decoded on the fly, no
//! dequantized copy is ever made), and the integer path of tiled tensors
//! element by element, which every fast tile kernel must match bit for bit.

use half::f16;

use super::tiled::{i4_offset, i8_offset, QVec, TiledI4, TiledI8};
use crate::math::dot;

/// `y = W x` for f32 weights.
pub fn matvec_f32(w: &[f32], cols: usize, x: &[f32], y: &mut [f32]) {
    // No chunk of zero length (loading refuses `cols == 0`): the return
    // states it without a panic branch.
    if cols == 0 {
        return;
    }
    for (yi, row) in y.iter_mut().zip(w.chunks_exact(cols)) {
        *yi = dot(row, x);
    }
}

/// `y = W x` for f16 weights.
pub fn matvec_f16(w: &[f16], cols: usize, x: &[f32], y: &mut [f32]) {
    if cols == 0 {
        return; // as in `matvec_f32`
    }
    for (yi, row) in y.iter_mut().zip(w.chunks_exact(cols)) {
        *yi = row.iter().zip(x).map(|(a, b)| a.to_f32() * b).sum();
    }
}

/// `y = W x` for int8 weights with one scale per `group` inputs.
pub fn matvec_i8(w: &[i8], scales: &[f32], cols: usize, group: usize, x: &[f32], y: &mut [f32]) {
    // Loading checked `group` (> 0, dividing `cols`); the returns state it,
    // so the division and the chunk sizes have no panic branch.
    if cols == 0 || group == 0 || cols < group {
        return;
    }
    // `max(1)`: `group` divides `cols` (checked at load, and above); stated
    // so that the chunk size below has no panic branch.
    let groups_per_row = (cols / group).max(1);
    for ((yi, row), row_scales) in y
        .iter_mut()
        .zip(w.chunks_exact(cols))
        .zip(scales.chunks_exact(groups_per_row))
    {
        let mut acc = 0.0f32;
        for ((qs, xs), s) in row
            .chunks_exact(group)
            .zip(x.chunks_exact(group))
            .zip(row_scales)
        {
            let part: f32 = qs.iter().zip(xs).map(|(&q, &v)| q as f32 * v).sum();
            acc += s * part;
        }
        *yi = acc;
    }
}

/// Decodes the signed 4-bit value in the low nibble of `b`.
#[inline]
pub fn i4_low(b: u8) -> i8 {
    ((b << 4) as i8) >> 4
}

/// Decodes the signed 4-bit value in the high nibble of `b`.
#[inline]
pub fn i4_high(b: u8) -> i8 {
    (b as i8) >> 4
}

/// `y = W x` for int4 weights (two per byte, low nibble first; `cols` and
/// `group` even) with one scale per `group` inputs.
pub fn matvec_i4(w: &[u8], scales: &[f32], cols: usize, group: usize, x: &[f32], y: &mut [f32]) {
    // As in `matvec_i8`: loading checked `cols` and `group` (even, > 0).
    if cols < 2 || group < 2 || cols < group {
        return;
    }
    // `max(1)`: `group` divides `cols` (checked at load, and above); stated
    // so that the chunk size below has no panic branch.
    let groups_per_row = (cols / group).max(1);
    for ((yi, row), row_scales) in y
        .iter_mut()
        .zip(w.chunks_exact(cols / 2))
        .zip(scales.chunks_exact(groups_per_row))
    {
        let mut acc = 0.0f32;
        for ((qs, xs), s) in row
            .chunks_exact(group / 2)
            .zip(x.chunks_exact(group))
            .zip(row_scales)
        {
            let mut part = 0.0f32;
            for (&b, pair) in qs.iter().zip(xs.chunks_exact(2)) {
                if let [lo, hi] = *pair {
                    part += i4_low(b) as f32 * lo + i4_high(b) as f32 * hi;
                }
            }
            acc += s * part;
        }
        *yi = acc;
    }
}

/// Element `(r, c)` of a tiled int8 matrix (0 outside it).
pub fn tiled_i8_at(w: &TiledI8<'_>, r: usize, c: usize) -> i8 {
    w.q.get(i8_offset(r, c, w.cols)).copied().unwrap_or(0)
}

/// Element `(r, c)` of a tiled int4 matrix (0 outside it).
pub fn tiled_i4_at(w: &TiledI4<'_>, r: usize, c: usize) -> i8 {
    let (byte, high) = i4_offset(r, c, w.cols);
    match w.q.get(byte) {
        Some(&b) if high => i4_high(b),
        Some(&b) => i4_low(b),
        None => 0,
    }
}

/// The integer path's definition: `y[r] = (Σ_g m[r][g] Σ_{c in g} W[r][c] x.q[c])
/// * (d[r] * x.scale)`, the sums exact (i64).
fn tiled_reference(
    (rows, cols, group): (usize, usize, usize),
    d: &[f32],
    m: &[u8],
    at: impl Fn(usize, usize) -> i8,
    x: &QVec<'_>,
    y: &mut [f32],
) {
    let groups = cols / group.max(1);
    for (r, yr) in y.iter_mut().enumerate().take(rows) {
        let mut total = 0i64;
        for g in 0..groups {
            let mut acc = 0i64;
            for c in g * group..(g + 1) * group {
                let xv = x.q.get(c).copied().unwrap_or(0);
                acc += i64::from(at(r, c)) * i64::from(xv);
            }
            total += i64::from(m.get(r * groups + g).copied().unwrap_or(0)) * acc;
        }
        // `total as f32` rounds once, as `tiled::finish` does.
        *yr = total as f32 * (d.get(r).copied().unwrap_or(0.0) * x.scale);
    }
}

/// `y = W x` for a tiled int8 matrix, element by element (the reference).
pub fn matvec_tiled_i8(w: &TiledI8<'_>, x: &QVec<'_>, y: &mut [f32]) {
    let at = |r, c| tiled_i8_at(w, r, c);
    tiled_reference((w.rows, w.cols, w.group), w.row_scales, w.mults, at, x, y);
}

/// `y = W x` for a tiled int4 matrix, element by element (the reference).
pub fn matvec_tiled_i4(w: &TiledI4<'_>, x: &QVec<'_>, y: &mut [f32]) {
    let at = |r, c| tiled_i4_at(w, r, c);
    tiled_reference((w.rows, w.cols, w.group), w.row_scales, w.mults, at, x, y);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibbles_decode_signed() {
        assert_eq!(i4_low(0x0F), -1);
        assert_eq!(i4_low(0x07), 7);
        assert_eq!(i4_high(0x80), -8);
        assert_eq!(i4_high(0x70), 7);
    }

    #[test]
    fn quantized_kernels_match_dense() {
        // 2 x 4, group 2: int values times scales.
        let q: [i8; 8] = [1, -2, 3, -4, 5, 6, -7, 0];
        let scales = [0.5f32, 2.0, 1.0, 0.25];
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let dense: [f32; 8] = [0.5, -1.0, 6.0, -8.0, 5.0, 6.0, -1.75, 0.0];
        let mut want = [0.0; 2];
        matvec_f32(&dense, 4, &x, &mut want);
        let mut got = [0.0; 2];
        matvec_i8(&q, &scales, 4, 2, &x, &mut got);
        assert_eq!(got, want);
        let packed: [u8; 4] = [
            (q[0] as u8 & 0xF) | ((q[1] as u8) << 4),
            (q[2] as u8 & 0xF) | ((q[3] as u8) << 4),
            (q[4] as u8 & 0xF) | ((q[5] as u8) << 4),
            (q[6] as u8 & 0xF) | ((q[7] as u8) << 4),
        ];
        matvec_i4(&packed, &scales, 4, 2, &x, &mut got);
        assert_eq!(got, want);
    }
}
