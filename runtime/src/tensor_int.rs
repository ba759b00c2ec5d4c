//! Products and lookups of the integer token path (format 6,
//! `docs/integer-path.md`): the same tiled tensors and tile kernels as the
//! f32 path's integer products ([`crate::kernels::tiled`]), with every step
//! around the kernels in integer code, and block floating point vectors
//! ([`crate::fixed::block`]) in and out.
//!
//! ```text
//! x (normal block) ──quantize──▶ q (int8), scale s (Fx)
//! total[r] = Σ_g m[r][g] Σ_c W[r][c] q[c]                     (tile kernels, exact)
//! y[r] = total[r] · d[r] · s    as one block: d[r] read through its f32 bits,
//!        each row shifted to the largest row's exponent, 15-16 significant bits
//! ```

use crate::error::{Error, Result};
use crate::fixed::block::{self, f32_parts, shr_round, Block, F32Bits, ZERO_EXP};
use crate::fixed::wide::shift_up_to_31;
use crate::fixed::Fx;
use crate::kernels::generic::{tiled_i4_at, tiled_i8_at};
use crate::kernels::tiled::QVec;
use crate::kernels::{arch, tiled};
use crate::tensor::Tensor;
use crate::tensor::{ActBuf, TensorData};

/// The input of a product on the integer token path: int8 values (and the
/// copy a kernel may read) with their scale, `x ≈ q × scale`.
#[derive(Clone, Copy, Debug)]
pub struct IntInput<'a> {
    /// The int8 values as the tile kernels take them (`scale` unused: 0).
    pub q: QVec<'a>,
    /// `max|x| / 127`.
    pub scale: Fx,
}

impl<'s> ActBuf<'s> {
    /// Quantizes the normal block `x` as the input of the next products on
    /// the integer token path. Errors when `x` is wider than the scratch
    /// was sized for (a bug in the session's sizing).
    pub fn input_int<'b>(&'b mut self, x: Block<'_>) -> Result<IntInput<'b>> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut *self.words);
        let n = x.m.len();
        if bytes.len() < n * tiled::ACT_BYTES_PER_COL {
            return Err(Error::Internal("activation scratch too small"));
        }
        let wide_len = if arch::WIDE { 2 * n } else { 0 };
        let internal = || Error::Internal("activation scratch too small");
        let (wide_bytes, rest) = bytes.split_at_mut_checked(wide_len).ok_or_else(internal)?;
        let q: &mut [i8] = bytemuck::cast_slice_mut(rest.get_mut(..n).ok_or_else(internal)?);
        let scale = block::quantize(x, q);
        let wide: &mut [i16] = bytemuck::try_cast_slice_mut(wide_bytes)
            .map_err(|_| Error::Internal("activation scratch misaligned"))?;
        arch::prepare(q, wide);
        let (q, wide) = (&*q, &*wide);
        Ok(IntInput {
            q: QVec {
                q,
                wide,
                scale: 0.0,
            },
            scale,
        })
    }
}

impl<'a> Tensor<'a> {
    /// `y = W x` on the integer token path, `y` as a normal block of
    /// `rows` mantissas; returns its exponent. Only tiled tensors run it
    /// (an image on the integer token path has every matrix tiled: checked
    /// at load). Timed and counted with the `roofline` feature.
    pub fn matvec_int(&self, x: &IntInput<'_>, y: &mut [i32]) -> Result<i32> {
        if x.q.q.len() != self.cols() || y.len() != self.rows() {
            return Err(Error::Internal(
                "matrix-vector product of mismatched lengths",
            ));
        }
        #[cfg(feature = "roofline")]
        let _timed = crate::roofline::Product::start(self.len());
        let (shift, d, mults) = match *self.data() {
            TensorData::TiledI8(w) => {
                let (shift, pending) = tiled::totals_i8_pending(&w, &x.q, y);
                let mults = w.mults.get(..pending).unwrap_or(w.mults);
                (shift, w.row_scales, mults)
            }
            TensorData::TiledI4(w) => (tiled::totals_i4(&w, &x.q, y), w.row_scales, &[][..]),
            _ => {
                return Err(Error::Internal(
                    "the integer token path needs tiled matrices",
                ))
            }
        };
        Ok(finish(y, d, mults, x.scale, shift))
    }

    /// The values of an f32 vector (a norm weight, a convolution kernel,
    /// `A_log`, ...) read through their bits. The integer token path keeps
    /// its vectors f32 (checked at load).
    pub fn stored_vector(&self) -> Result<F32Bits<'a>> {
        match *self.data() {
            TensorData::F32(v) => Ok(F32Bits::new(v)),
            _ => Err(Error::Internal("an integer-path vector that is not f32")),
        }
    }

    /// Row `r` (an embedding) as a normal block into `out` (`cols` values);
    /// returns its exponent. Tiled int8/int4, f32 and f16 tensors.
    pub fn row_int(&self, r: usize, out: &mut [i32]) -> Result<i32> {
        // Loading checked every payload against its shape: a missing row is
        // a bug, an error rather than a panic.
        let row_missing = || Error::Internal("row lookup out of range");
        let cols = self.cols();
        if r >= self.rows() || out.len() != cols {
            return Err(Error::Internal("row lookup out of range"));
        }
        match *self.data() {
            TensorData::TiledI8(w) => {
                let groups = cols / w.group.max(1);
                let at = |c| i32::from(tiled_i8_at(&w, r, c));
                let (Some(&d), Some(mults)) = (w.row_scales.get(r), w.mults.get(r * groups..))
                else {
                    return Err(row_missing());
                };
                Ok(tiled_row(out, d, mults, w.group, at))
            }
            TensorData::TiledI4(w) => {
                let groups = cols / w.group.max(1);
                let at = |c| i32::from(tiled_i4_at(&w, r, c));
                let (Some(&d), Some(mults)) = (w.row_scales.get(r), w.mults.get(r * groups..))
                else {
                    return Err(row_missing());
                };
                Ok(tiled_row(out, d, mults, w.group, at))
            }
            TensorData::F32(v) => {
                let row = v.get(r * cols..(r + 1) * cols).ok_or_else(row_missing)?;
                Ok(block::from_f32(row, out))
            }
            TensorData::F16(v) => {
                let row = v.get(r * cols..(r + 1) * cols).ok_or_else(row_missing)?;
                Ok(block::from_f32_bits(
                    row.iter().map(|h| h.to_f32().to_bits()),
                    out,
                ))
            }
            _ => Err(Error::Internal(
                "the integer token path reads tiled, f32 or f16 embeddings",
            )),
        }
    }
}

/// A tiled row `q[c] · m[c / group] · d` as a normal block.
fn tiled_row(
    out: &mut [i32],
    d: f32,
    mults: &[u8],
    group: usize,
    at: impl Fn(usize) -> i32,
) -> i32 {
    let (dm, de) = f32_parts(d.to_bits());
    let d15 = dm >> 9; // |d15| < 2^15
    let mut max = 0u32;
    for (c, o) in out.iter_mut().enumerate() {
        let m = i32::from(mults.get(c / group.max(1)).copied().unwrap_or(0));
        // |q m| <= 128 * 255 < 2^15: the product stays below 2^30.
        *o = at(c) * m * d15;
        max = max.max(o.unsigned_abs());
    }
    block::normalize_with_max(out, de + 9, max)
}

/// The rows' totals `t[r]` (already `>> shift`; the first `mults.len()`
/// rows still to be multiplied by `mults[r]`, which this does first) times
/// `d[r] · s`, as one normal block in place; returns its exponent.
///
/// Each row is shifted right by its exponent's distance to the largest row
/// scale's, and all rows by one more shift chosen from the largest such
/// aligned total, so the largest output keeps 15-16 significant bits
/// whatever the spread of the row scales. Rows whose scale is zero give 0.
/// A row scale's f32 bits are read as the mantissa `(bits & 0x7f_ffff) |
/// 2^23` and the biased exponent `bits >> 23` (`d = m × 2^(b - 150)`); row
/// scales are non-negative finite values (`d = max|w| / (qmax 255)`), and a
/// hostile image's other bit patterns give wrong but deterministic numbers
/// (a sign bit reads as a huge exponent, a subnormal as a normal), never a
/// panic.
fn finish(t: &mut [i32], d: &[f32], mults: &[u8], s: Fx, shift: u32) -> i32 {
    let d: &[u32] = bytemuck::cast_slice(d);
    // The largest row-scale exponent (a zero scale's bits give 0, below or
    // equal to every other): the largest bits' (`>> 23` is monotone).
    let dmax = crate::fixed::wide::max_mapped(d, |bits| bits) >> 23;
    // A zero scale's row (exponent 0) is `dmax` octaves below the largest:
    // from 31 on, the alignment's shift (31) and the scaling's (`sh - 1` of
    // 31, which leaves 0 of any total after the rounding) already give it
    // 0, as every image's row scales do (dmax about 120): no mask.
    if dmax >= 31 {
        finish_with::<false>(t, d, dmax, mults, s, shift)
    } else {
        finish_with::<true>(t, d, dmax, mults, s, shift)
    }
}

/// [`finish`] after its largest row-scale exponent `dmax`, zero-scale rows
/// masked where `MASK` (where unmasked, `dmax >= 31`).
#[inline(always)]
fn finish_with<const MASK: bool>(
    t: &mut [i32],
    d: &[u32],
    dmax: u32,
    mults: &[u8],
    s: Fx,
    shift: u32,
) -> i32 {
    // All ones or 0.
    let mask = |bits: u32| 0u32.wrapping_sub(u32::from(bits != 0));
    let live = |bits: u32| if MASK { mask(bits) } else { u32::MAX };
    // The distance of a row's exponent to the largest (>= 0).
    let gap = |bits: u32| dmax.wrapping_sub(bits >> 23);
    // The bits of the largest total aligned to the largest exponent: only
    // its bit length matters (`ta`, and whether it is 0), and an OR of
    // magnitudes has the bit length of the largest of them. Branch-free
    // passes (the OR's applies the multipliers still to apply); the same
    // numbers as aligning row by row (for totals above `i32::MIN`, which no
    // product gives: a row gap of 32 or more shifts by 31, which leaves 0
    // of any other total).
    // (`dmax` is the largest `bits >> 23` of `d`: no gap is below 0.)
    let aligned = |v: i32, bits: u32| {
        let g = shift_up_to_31(dmax as i32 - (bits >> 23) as i32); // gap, at most 31
        (v.unsigned_abs() >> g) & live(bits)
    };
    let n = mults.len().min(t.len());
    let (head, tail) = t.split_at_mut(n);
    let (dh, dt) = d.split_at(n.min(d.len()));
    // Four rows a step (`update_reduce3`).
    let top = crate::fixed::wide::update_reduce3(
        head,
        dh,
        mults,
        |v, bits, m| {
            *v *= i32::from(m);
            aligned(*v, bits)
        },
        |a, b| a | b,
    );
    // Rows without a scale (none in a loaded image) still take theirs.
    for (v, &m) in head.iter_mut().zip(mults).skip(dh.len()) {
        *v *= i32::from(m);
    }
    let top = tail
        .iter()
        .zip(dt)
        .fold(top, |top, (&v, &bits)| top | aligned(v, bits));
    let dmax = dmax as i32;
    if top == 0 || s.is_zero() {
        t.fill(0);
        return ZERO_EXP;
    }
    // |a| <= 2^15 after `ta` more bits.
    let ta = (32 - crate::fixed::wide::lz32(top)).saturating_sub(15);
    let s16 = s.mantissa() >> 16; // [2^15, 2^16)
                                  // ds in [2^14, 2^16): 16-bit mantissa of d times s (0 for d = 0
                                  // where `m` masks); |a| <= 2^15, ds < 2^16: the product below 2^31.
    let ds = |bits: u32, m: u32| (((((bits & 0x7f_ffff) | 0x80_0000) & m) >> 8) * s16) >> 16;
    let mut max = 0u32;
    if ta > 0 {
        // Every shift `ta + gap` clamped to 32, less one: `ta - 1 + dmax -
        // e` in 0..=31 (one saturation), and `((v >> (sh - 1)) + 1) >> 1`
        // is `shr_round` (a live row's `v >> (sh - 1)` is below 2^16; a
        // zero-scale row's may wrap, and is multiplied by 0 or, unmasked,
        // shifted by 31 to 0).
        // (`c - e >= ta - 1 >= 0`: no row's exponent `e` exceeds `dmax`.)
        let c = ta as i32 - 1 + dmax;
        // Four rows a step (`update_max`).
        max = crate::fixed::wide::update_max(t, d, |v, bits| {
            let sh1 = shift_up_to_31(c - (bits >> 23) as i32);
            let a = (*v >> sh1).wrapping_add(1) >> 1;
            let p = a * ds(bits, live(bits)) as i32;
            *v = p;
            p.unsigned_abs()
        });
    } else {
        for (v, &bits) in t.iter_mut().zip(d) {
            let a = shr_round(*v, gap(bits)); // 0 for a gap of 32 or more
            let p = a * ds(bits, mask(bits)) as i32;
            *v = p;
            max = max.max(p.unsigned_abs());
        }
    }
    // value = a · ds · 2^(ta + gap + 8 + (e - 150) + 16 + 16 + e_s), e = dmax - gap.
    let e = (ta + shift) as i32 + dmax - 150 + 40 + s.exponent();
    block::normalize_with_max(t, e, max)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::fixed::testing::Rng;
    use std::vec::Vec;

    /// The row-by-row finish the branch-free [`finish`] replaced: each row
    /// aligned as it comes, then shifted and scaled.
    fn finish_by_rows(t: &mut [i32], d: &[f32], s: Fx, shift: u32) -> i32 {
        let parts = |bits: u32| {
            if bits == 0 {
                (0, 0)
            } else {
                ((bits & 0x7f_ffff) | 0x80_0000, (bits >> 23) as i32)
            }
        };
        let d: &[u32] = bytemuck::cast_slice(d);
        let (mut dmax, mut top) = (i32::MIN, 0u32);
        for (&v, &bits) in t.iter().zip(d) {
            let (m, e) = parts(bits);
            if m == 0 {
                continue;
            }
            if e > dmax {
                top = if dmax == i32::MIN {
                    0
                } else {
                    top.checked_shr((e - dmax) as u32).unwrap_or(0)
                };
                dmax = e;
            }
            top = top.max(v.unsigned_abs().checked_shr((dmax - e) as u32).unwrap_or(0));
        }
        if top == 0 || s.is_zero() {
            t.fill(0);
            return ZERO_EXP;
        }
        let ta = (32 - top.leading_zeros()).saturating_sub(15);
        let s16 = s.mantissa() >> 16;
        let mut max = 0u32;
        for (v, &bits) in t.iter_mut().zip(d) {
            let (m, e) = parts(bits);
            let a = shr_round(*v, ta + (dmax - e).clamp(0, 32) as u32);
            let p = a * (((m >> 8) * s16) >> 16) as i32;
            *v = p;
            max = max.max(p.unsigned_abs());
        }
        let e = (ta + shift) as i32 + dmax - 150 + 40 + s.exponent();
        block::normalize_with_max(t, e, max)
    }

    /// The same bits as the row-by-row finish on totals of every size
    /// (up to i32's edges) and row scales as images hold them and as hostile
    /// ones could (zero, subnormal, negative, spread over 2^-60..2^60).
    #[test]
    fn the_finish_is_the_row_by_row_one() {
        let mut rng = Rng(0x5eed_f1a1);
        for case in 0..3000i32 {
            let rows = 1 + case % 37;
            let bits_of_t = 1 + case % 31;
            let t: Vec<i32> = (0..rows)
                .map(|_| (rng.next() * 2f64.powi(bits_of_t)).clamp(-2.147e9, 2.147e9) as i32)
                .collect();
            let d: Vec<f32> = (0..rows)
                .map(|r| match (case + r) % 11 {
                    0 => 0.0,
                    1 if case % 5 == 0 => f32::from_bits(1 + (case as u32 % 1000)),
                    2 if case % 7 == 0 => -0.5,
                    // Every scale below 2^-96 in a tenth of the cases (the
                    // largest biased exponent below 31: zero rows masked).
                    _ if case % 10 == 3 => {
                        (rng.next().abs() + 0.01) as f32 * 2f32.powi(-100 - case % 40)
                    }
                    _ => (rng.next().abs() + 0.01) as f32 * 2f32.powi(case % 121 / 2 - 30),
                })
                .collect();
            let s = Fx::from_i64(1 + (case as i64 * 7919) % 100_000, -(case % 40));
            let shift = (case % 3) as u32;
            // Every other case with multipliers still to apply to its first
            // rows (totals small enough for them, as the products' are).
            let mults: Vec<u8> = if case % 2 == 0 && bits_of_t <= 22 {
                (0..rows / 2 + case % 3)
                    .map(|_| (rng.next().abs() * 255.0) as u8)
                    .collect()
            } else {
                Vec::new()
            };
            let (mut got, mut want) = (t.clone(), t.clone());
            for (w, &m) in want.iter_mut().zip(&mults) {
                *w *= i32::from(m);
            }
            let eg = finish(&mut got, &d, &mults, s, shift);
            let ew = finish_by_rows(&mut want, &d, s, shift);
            assert_eq!((eg, &got), (ew, &want), "case {case}");
        }
        let (mut ones, mut maxed) = ([i32::MAX, i32::MIN + 1, 7], [i32::MAX, i32::MIN + 1, 7]);
        let d = [1e-3f32, 0.0, 3e2];
        assert_eq!(
            finish(&mut ones, &d, &[], Fx::ONE, 0),
            finish_by_rows(&mut maxed, &d, Fx::ONE, 0)
        );
        assert_eq!(ones, maxed);
    }
}
