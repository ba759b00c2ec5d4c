//! Block floating point vectors: i32 mantissas with one power-of-two
//! exponent, `value_i = m_i × 2^e`. Every vector of the integer token path
//! between two steps is one.
//!
//! A block is **normal** when its largest `|m_i|` lies in
//! `[2^29, 2^30)` ([`TOP_BITS`]), or when all are 0. The functions here take
//! and return normal blocks, so a consumer reads a 15-bit view of any
//! element as `m_i >> 15` without scanning first, the sum of two aligned
//! blocks fits an i32, and the product of two 15-bit views fits one too.
//!
//! The f32 values of an image (norm weights, convolution kernels, row
//! scales) are read through their bits: [`F32Bits`] gives their mantissas
//! aligned to the largest exponent of the vector.

use super::scalar::Fx;

/// Bits of a normal block's largest mantissa: `[2^(TOP_BITS-1), 2^TOP_BITS)`.
pub const TOP_BITS: u32 = 30;
/// The right shift from a normal mantissa to its 15-bit view (`|v| <= 2^15`).
pub const TO_15: u32 = TOP_BITS - 15;
/// The exponent a block of zeros is given.
pub const ZERO_EXP: i32 = 0;

/// A shared view of a block: mantissas and their exponent.
#[derive(Clone, Copy, Debug)]
pub struct Block<'a> {
    /// The mantissas (normal: the largest in `[2^29, 2^30)`).
    pub m: &'a [i32],
    /// The exponent: `value_i = m[i] × 2^e`.
    pub e: i32,
}

/// `v / 2^s` rounded half up (`s` of 32 or more gives 0 for every `v`
/// whose magnitude is below 2^31, which is all of them but `i32::MIN`).
#[inline(always)]
pub fn shr_round(v: i32, s: u32) -> i32 {
    match s {
        0 => v,
        1..=31 => (v >> s) + ((v >> (s - 1)) & 1),
        _ => 0,
    }
}

/// `v / 2^s` rounded half up, for `s` in `0..=31` and `|v| + 2^(s-1)`
/// below 2^31 (a product of two 15-bit views, say): no branch.
#[inline(always)]
pub fn shr_round_small(v: i32, s: u32) -> i32 {
    (v + ((1u32 << s) >> 1) as i32) >> s
}

/// The largest `|m_i|`.
#[inline]
pub fn max_abs(m: &[i32]) -> u32 {
    // Four values a step (`max_mapped`): the same number.
    let bits: &[u32] = bytemuck::cast_slice(m);
    super::wide::max_mapped(bits, |b| (b as i32).unsigned_abs())
}

/// The left shift (negative: right) that brings `max` into
/// `[2^29, 2^30)`; 0 for `max == 0`.
#[inline]
pub fn shift_to_top(max: u32) -> i32 {
    if max == 0 {
        return 0;
    }
    let bits = 32 - super::wide::lz32(max) as i32; // max in [2^(bits-1), 2^bits)
    TOP_BITS as i32 - bits
}

/// Shifts `m` left by `s` (right, rounded, for negative `s`).
#[inline]
fn shift_all(m: &mut [i32], s: i32) {
    if s > 0 {
        each_by4(m, |v| *v <<= s);
    } else if s < 0 {
        let r = (-s) as u32;
        each_by4(m, |v| *v = shr_round(*v, r));
    }
}

/// `f` on every value, four a step where [`super::wide::STEP4`] (RV32's
/// LLVM does not unroll: one pointer step and one branch for four values).
#[inline(always)]
fn each_by4(m: &mut [i32], f: impl Fn(&mut i32)) {
    if !super::wide::STEP4 {
        m.iter_mut().for_each(f);
        return;
    }
    let mut chunks = m.chunks_exact_mut(4);
    for c in &mut chunks {
        f(&mut c[0]);
        f(&mut c[1]);
        f(&mut c[2]);
        f(&mut c[3]);
    }
    chunks.into_remainder().iter_mut().for_each(f);
}

/// Makes `(m, e)` normal, given `max = max_abs(m)` (any mantissas below
/// 2^31 in magnitude); returns the new exponent.
pub fn normalize_with_max(m: &mut [i32], e: i32, max: u32) -> i32 {
    if max == 0 {
        return ZERO_EXP;
    }
    let s = shift_to_top(max);
    shift_all(m, s);
    // A right shift can round the largest up to 2^30 (rounding is monotone
    // in the magnitude, and rounds a positive value up at least as far as a
    // negative one): once more.
    if s < 0 && shr_round(max as i32, (-s) as u32).unsigned_abs() >= 1 << TOP_BITS {
        shift_all(m, -1);
        return e - s + 1;
    }
    e - s
}

/// Makes `(m, e)` normal; returns the new exponent.
pub fn normalize(m: &mut [i32], e: i32) -> i32 {
    let max = max_abs(m);
    normalize_with_max(m, e, max)
}

/// `h += y` for normal blocks `(h, eh)` and `(y, ey)` of one length; returns
/// the exponent of the normal sum.
pub fn add_into(h: &mut [i32], eh: i32, y: Block<'_>) -> i32 {
    if max_abs(y.m) == 0 {
        return eh;
    }
    let e = eh.max(y.e);
    let (sh, sy) = ((e - eh) as u32, (e - y.e) as u32);
    // Four values a step (`update_max`).
    let max = super::wide::update_max(h, y.m, |a, b| {
        // Both below 2^30 after the shifts: the sum fits.
        *a = shr_round(*a, sh) + shr_round(b, sy);
        a.unsigned_abs()
    });
    normalize_with_max(h, e, max)
}

/// `sum (m_i >> shift)^2`, exactly (`|m_i >> shift| < 2^16`).
#[inline]
pub fn sum_squares(m: &[i32], shift: u32) -> u64 {
    m.iter()
        .map(|&v| {
            let u = (v >> shift).unsigned_abs();
            (u * u) as u64
        })
        .sum()
}

/// `1 / sqrt(mean(value^2) + eps)` of a normal block (the RMSNorm scale).
pub fn rms_inv(b: Block<'_>, eps: Fx) -> Fx {
    let n = b.m.len().max(1) as i64;
    let ss = Fx::from_u64(sum_squares(b.m, TO_15), 2 * (b.e + TO_15 as i32), false);
    let mean = ss * Fx::from_i64(n, 0).recip();
    (mean + eps).rsqrt()
}

/// Quantizes a normal block to int8, `q_i = round(127 v_i / max|v|)` (on
/// the 15-bit views; half up), and returns the scale `max|v| / 127` so that
/// `v_i ≈ q_i × scale`. A zero block gives zeros and scale 0.
pub fn quantize(b: Block<'_>, q: &mut [i8]) -> Fx {
    let top = max_abs(b.m) >> TO_15; // [2^14, 2^15], or 0
    if top == 0 {
        q.fill(0);
        return Fx::ZERO;
    }
    // 127 / top in Q24: at most 127 * 2^10, so |v| * r < 2^32.
    let r = (127u32 << 24) / top;
    // Four values a step (`for_each_pair`).
    super::wide::for_each_pair(q, b.m, |qi, v| {
        let a = v.unsigned_abs() >> TO_15;
        // a <= top, so a r <= 127 × 2^24 and the rounded quotient is at
        // most 127: no clamp.
        let mag = ((a * r + (1 << 23)) >> 24) as i8;
        *qi = if v < 0 { -mag } else { mag };
    });
    // scale = top * 2^(e + 15) / 127.
    Fx::from_i64(top as i64, b.e + TO_15 as i32) * INV_127
}

/// 1/127 to 32 bits.
const INV_127: Fx = Fx::from_u64(((1u64 << 63) + 63) / 127, -63, false);

/// The nearest f32 of `m × 2^e`, as bits (integer code; ties to even;
/// below 2^-126 a signed zero, beyond f32's range an infinity).
#[inline]
pub fn to_f32_bits(m: i32, e: i32) -> u32 {
    let sign = if m < 0 { 0x8000_0000 } else { 0 };
    let mag = m.unsigned_abs();
    if mag == 0 {
        return 0;
    }
    let lz = super::wide::lz32(mag);
    let norm = mag << lz; // [2^31, 2^32)
    let mut q = norm >> 8; // 24 bits
    let rest = norm & 0xff;
    // value = norm 2^(e - lz); f32 exponent e - lz + 31. An `e` beyond
    // ±2^12 gives a biased exponent beyond 0..0xff either way (a zero or an
    // infinity, below): clamped first, the sum stays in an i32.
    let mut biased = e.clamp(-(1 << 12), 1 << 12) - lz as i32 + 31 + 127;
    if rest > 0x80 || (rest == 0x80 && q & 1 == 1) {
        q += 1;
        if q == 1 << 24 {
            q >>= 1;
            biased += 1;
        }
    }
    if biased >= 0xff {
        return sign | 0x7f80_0000;
    }
    if biased <= 0 {
        return sign;
    }
    sign | ((biased as u32) << 23) | (q & 0x7f_ffff)
}

/// Writes the values of a block as f32 into `out` (by their bits).
pub fn to_f32(b: Block<'_>, out: &mut [f32]) {
    for (o, &m) in out.iter_mut().zip(b.m) {
        *o = f32::from_bits(to_f32_bits(m, b.e));
    }
}

/// The signed mantissa and exponent of the f32 with bits `bits`:
/// `value = m × 2^e`, `|m| < 2^24` (an infinity or NaN reads as `±2^128`).
#[inline(always)]
pub fn f32_parts(bits: u32) -> (i32, i32) {
    let biased = ((bits >> 23) & 0xff) as i32;
    let frac = (bits & 0x7f_ffff) as i32;
    let (m, e) = match biased {
        0 => (frac, -149),
        0xff => (1 << 23, 105),
        _ => (frac | 0x80_0000, biased - 150),
    };
    if bits >> 31 != 0 {
        (-m, e)
    } else {
        (m, e)
    }
}

/// A normal block from f32 values given by their bits: every value exact
/// but for the bits below 2^-30 of the largest. Returns the exponent.
pub fn from_f32_bits(bits: impl Iterator<Item = u32> + Clone, out: &mut [i32]) -> i32 {
    let emax = bits
        .clone()
        .map(|b| {
            if b & 0x7fff_ffff == 0 {
                i32::MIN
            } else {
                f32_parts(b).1
            }
        })
        .max()
        .unwrap_or(i32::MIN);
    if emax == i32::MIN {
        out.fill(0);
        return ZERO_EXP;
    }
    let mut max = 0u32;
    for (o, b) in out.iter_mut().zip(bits) {
        let (m, e) = f32_parts(b);
        // m < 2^24: six bits up keeps every mantissa below 2^30.
        let d = (emax - e) as u32;
        *o = shr_round(m << 6, d);
        max = max.max(o.unsigned_abs());
    }
    normalize_with_max(out, emax - 6, max)
}

/// A normal block from f32 values.
pub fn from_f32(x: &[f32], out: &mut [i32]) -> i32 {
    from_f32_bits(x.iter().map(|v| v.to_bits()), out)
}

/// A vector of f32 values stored in the image, read through its bits:
/// each value as a 15-bit mantissa aligned to the vector's largest
/// exponent, `value_i ≈ at15(i) × 2^exp15()`. (The integer token path
/// stores its vectors as f32: checked at load.)
#[derive(Clone, Copy, Debug)]
pub struct F32Bits<'a> {
    bits: &'a [u32],
    /// `emax + 159`: the shift that takes a value of biased exponent `b`
    /// to the 15-bit mantissa is `shift_base - b`.
    shift_base: i32,
    emax: i32,
}

impl<'a> F32Bits<'a> {
    /// The view of f32 values (one pass to find the largest exponent).
    pub fn new(v: &'a [f32]) -> F32Bits<'a> {
        let bits: &[u32] = bytemuck::cast_slice(v);
        // The largest exponent of a normal value (subnormals read as 0):
        // `(b >> 23) & 0xff` is `(b << 1) >> 24`, monotone in `b << 1`.
        let biased = super::wide::max_mapped(bits, |b| b << 1) >> 24;
        let emax = if biased == 0 {
            i32::MIN
        } else {
            biased as i32 - 150
        };
        F32Bits {
            bits,
            shift_base: biased as i32 + 9,
            emax,
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.bits.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }

    /// The f32 bits of value `i` (0 past the end).
    #[inline(always)]
    pub fn bits(&self, i: usize) -> u32 {
        self.bits.get(i).copied().unwrap_or(0)
    }

    /// Value `i` as a mantissa of at most 15 bits (`|m| <= 2^15`) aligned to
    /// the vector's largest exponent, rounded (a subnormal reads as 0, an
    /// index past the end as 0).
    #[inline(always)]
    pub fn at15(&self, i: usize) -> i32 {
        Self::decode(self.bits(i), self.shift_base)
    }

    /// The bits and the shift base [`F32Bits::decode`] takes, for loops
    /// that walk the values with their own stride.
    pub fn raw(&self) -> (&'a [u32], i32) {
        (self.bits, self.shift_base)
    }

    /// [`F32Bits::at15`] of the bits `bits` of a vector with shift base
    /// `shift_base` ([`F32Bits::raw`]). No branch: a subnormal (biased
    /// exponent 0) is its mantissa at exponent 1, which is exact.
    #[inline(always)]
    pub fn decode(bits: u32, shift_base: i32) -> i32 {
        let biased = (bits >> 23) & 0xff;
        let normal = (biased != 0) as u32;
        let m = ((bits & 0x7f_ffff) | (normal << 23)) as i32; // < 2^24
                                                              // emax - e + 9 = shift_base - max(biased, 1), at least 9; at 31
                                                              // every mantissa below 2^24 gives 0.
        let d = (shift_base - (biased | (1 - normal)) as i32).clamp(9, 31) as u32;
        let v = shr_round_small(m, d);
        let sign = (bits as i32) >> 31; // 0 or -1
        (v ^ sign) - sign
    }

    /// Shift bases from which [`F32Bits::decode_wide`] applies: the
    /// vector's largest biased exponent 17 or more (its largest value at
    /// least 2^-110), so every subnormal decodes to 0 either way.
    pub const WIDE_BASE: i32 = 26;

    /// [`F32Bits::decode`] for a vector whose shift base is at least
    /// [`F32Bits::WIDE_BASE`], in fewer instructions and to the same bits:
    /// every value's shift `shift_base - biased` is at least 9 (no value's
    /// exponent exceeds the vector's largest), and a subnormal or zero
    /// (biased 0), read here as a normal mantissa of exponent 0, is shifted
    /// by `shift_base >= 26` to 0 as `decode` shifts it; `(m + 2^(d-1)) >>
    /// d` is computed as `((m >> (d - 1)) + 1) >> 1`, the same for every `m`.
    #[inline(always)]
    pub fn decode_wide(bits: u32, shift_base: i32) -> i32 {
        let biased = (bits >> 23) & 0xff;
        let m = (bits & 0x7f_ffff) | 0x80_0000; // < 2^24
                                                // d - 1, at least 8; from 24 on every m gives 0, so 31 stands for
                                                // any larger.
                                                // (At least 8: no value's `biased` exceeds the vector's largest.)
        let d1 = super::wide::shift_up_to_31(shift_base - 1 - biased as i32);
        let v = (((m >> d1) + 1) >> 1) as i32;
        let sign = (bits as i32) >> 31; // 0 or -1
        (v ^ sign) - sign
    }

    /// The values `start..start + out.len()` as [`F32Bits::at15`] gives
    /// them, into `out` (0 past the end).
    #[inline(always)]
    pub fn at15_into(&self, start: usize, out: &mut [i32]) {
        let src = self.bits.get(start..).unwrap_or(&[]);
        for (o, &b) in out.iter_mut().zip(src.iter().chain(core::iter::repeat(&0))) {
            *o = Self::decode(b, self.shift_base);
        }
    }

    /// The exponent of [`F32Bits::at15`]'s mantissas (all zero: `ZERO_EXP`).
    pub fn exp15(&self) -> i32 {
        if self.emax == i32::MIN {
            ZERO_EXP
        } else {
            self.emax + 9
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn value(m: i32, e: i32) -> f64 {
        m as f64 * 2f64.powi(e)
    }

    fn assert_normal(m: &[i32]) {
        let max = max_abs(m);
        assert!(max == 0 || ((1 << 29)..(1 << 30)).contains(&max), "{max}");
    }

    fn sample(n: usize, seed: u64, spread: i32) -> Vec<f32> {
        (0..n as u64)
            .map(|i| {
                let h = (i + seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
                let u = h as f64 / (1u64 << 24) as f64 - 0.5;
                (u * 2f64.powi((i % spread as u64) as i32 - spread / 2)) as f32
            })
            .collect()
    }

    #[test]
    fn f32_conversion_is_the_nearest() {
        for e in [-170, -150, -30, 0, 5, 100] {
            for m in [
                1,
                -1,
                3,
                0x7fff_ffff,
                -0x7fff_ffff,
                0x0100_0001,
                0x0180_0000,
                0x0180_0001,
                12345,
            ] {
                let want = Fx::from_i64(m as i64, e).to_f32_bits();
                assert_eq!(to_f32_bits(m, e), want, "{m} {e}");
            }
        }
        assert_eq!(to_f32_bits(0, 7), 0);
    }

    /// The conversion as it was, its exponent in an i64.
    fn to_f32_bits_i64(m: i32, e: i32) -> u32 {
        let sign = if m < 0 { 0x8000_0000 } else { 0 };
        let mag = m.unsigned_abs();
        if mag == 0 {
            return 0;
        }
        let lz = mag.leading_zeros();
        let norm = mag << lz;
        let mut q = norm >> 8;
        let rest = norm & 0xff;
        let mut biased = e as i64 - lz as i64 + 31 + 127;
        if rest > 0x80 || (rest == 0x80 && q & 1 == 1) {
            q += 1;
            if q == 1 << 24 {
                q >>= 1;
                biased += 1;
            }
        }
        if biased >= 0xff {
            return sign | 0x7f80_0000;
        }
        if biased <= 0 {
            return sign;
        }
        sign | ((biased as u32) << 23) | (q & 0x7f_ffff)
    }

    /// The clamped i32 exponent gives the i64 form's bits at every exponent
    /// (the extremes, the clamp's edges, the f32 range's) and mantissa
    /// (every bit length, the rounding points, random ones).
    #[test]
    fn f32_conversion_with_a_clamped_exponent_is_the_same() {
        let mut exps: Vec<i32> = (-300..=300).collect();
        for b in [12, 20, 30] {
            for d in -2..=2 {
                exps.push((1 << b) + d);
                exps.push(-(1 << b) + d);
            }
        }
        exps.extend([i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1, i32::MIN / 2]);
        let mut rng = crate::fixed::test_rng::Rng(0x1234_5678_9abc_def1);
        let mut mants = vec![
            1i32,
            -1,
            0x7fff_ffff,
            -0x7fff_ffff,
            i32::MIN,
            0x0100_0080,
            0x0180_0080,
        ];
        for bits in 1..31 {
            mants.extend([(1 << bits) - 1, 1 << bits, (1 << bits) + 1, -(1 << bits)]);
        }
        for _ in 0..200 {
            mants.push((rng.next() * 2f64.powi(31)) as i32);
        }
        for &e in &exps {
            for &m in &mants {
                assert_eq!(to_f32_bits(m, e), to_f32_bits_i64(m, e), "{m} {e}");
            }
        }
    }

    #[test]
    fn the_wide_decode_is_the_decode() {
        // Every biased exponent and sign, mantissas at and around the
        // rounding points, every shift base from WIDE_BASE to 255 + 9.
        let mants = [
            0u32, 1, 2, 3, 0x40_0000, 0x3f_ffff, 0x40_0001, 0x7f_ffff, 0x12_3456,
        ];
        for base in F32Bits::WIDE_BASE..=264 {
            for biased in 0..=(base - 9).min(255) as u32 {
                for &m in &mants {
                    for sign in [0u32, 1 << 31] {
                        let b = sign | (biased << 23) | m;
                        assert_eq!(
                            F32Bits::decode_wide(b, base),
                            F32Bits::decode(b, base),
                            "{b:#x} {base}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn shifts_round_half_up() {
        assert_eq!(shr_round(5, 1), 3);
        assert_eq!(shr_round(-5, 1), -2);
        assert_eq!(shr_round(i32::MAX, 31), 1);
        assert_eq!(shr_round(-7, 40), 0);
        assert_eq!(shr_round(9, 0), 9);
    }

    #[test]
    fn f32_vectors_convert_exactly_to_30_bits() {
        for seed in 0..50 {
            let x = sample(64, seed, 12);
            let mut m = vec![0; 64];
            let e = from_f32(&x, &mut m);
            assert_normal(&m);
            let max = x.iter().fold(0f64, |a, v| a.max(v.abs() as f64));
            for (v, &mi) in x.iter().zip(&m) {
                let err = (value(mi, e) - *v as f64).abs();
                assert!(err <= max * 2f64.powi(-29), "{v} -> {}", value(mi, e));
            }
            let mut back = vec![0f32; 64];
            to_f32(Block { m: &m, e }, &mut back);
            for (a, b) in x.iter().zip(&back) {
                assert!(((a - b).abs() as f64) <= max * 2f64.powi(-29));
            }
        }
        let mut m = [7; 3];
        assert_eq!(from_f32(&[0.0, -0.0, 0.0], &mut m), ZERO_EXP);
        assert_eq!(m, [0; 3]);
    }

    #[test]
    fn adds_are_within_2_pow_minus_29_of_the_larger() {
        for seed in 0..100 {
            let (a, b) = (sample(32, seed, 8), sample(32, seed + 1000, 20));
            let (mut ma, mut mb) = (vec![0; 32], vec![0; 32]);
            let ea = from_f32(&a, &mut ma);
            let eb = from_f32(&b, &mut mb);
            let va: Vec<f64> = ma.iter().map(|&m| value(m, ea)).collect();
            let vb: Vec<f64> = mb.iter().map(|&m| value(m, eb)).collect();
            let e = add_into(&mut ma, ea, Block { m: &mb, e: eb });
            assert_normal(&ma);
            let scale = va.iter().chain(&vb).fold(0f64, |s, v| s.max(v.abs()));
            for i in 0..32 {
                let err = (value(ma[i], e) - (va[i] + vb[i])).abs();
                assert!(err <= scale * 2f64.powi(-28), "{i}");
            }
        }
    }

    #[test]
    fn rms_and_quantization_match_f64() {
        for seed in 0..100 {
            let x = sample(96, seed, 10);
            let mut m = vec![0; 96];
            let e = from_f32(&x, &mut m);
            let b = Block { m: &m, e };
            let eps = 1e-6;
            let ms: f64 = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / 96.0;
            let want = 1.0 / (ms + eps).sqrt();
            let got = Fx::from_f32_bits((eps as f32).to_bits());
            let inv = rms_inv(b, got);
            let inv = inv.mantissa() as f64 * 2f64.powi(inv.exponent());
            assert!(((inv - want) / want).abs() < 2e-4, "{inv} {want}");

            let mut q = vec![0i8; 96];
            let s = quantize(b, &mut q);
            let s = s.mantissa() as f64 * 2f64.powi(s.exponent());
            let max = x.iter().fold(0f64, |a, v| a.max(v.abs() as f64));
            assert!(((s - max / 127.0) / (max / 127.0)).abs() < 2f64.powi(-14));
            for (&qi, &v) in q.iter().zip(&x) {
                // The 15-bit views: within 127 / 2^14 of the exact quotient.
                let exact = 127.0 * v as f64 / max;
                assert!(
                    (qi as f64 - exact).abs() <= 0.5 + 127.0 / 16384.0,
                    "{qi} {exact}"
                );
            }
        }
    }

    #[test]
    fn stored_vectors_read_through_their_bits() {
        let x = [0.5f32, -0.25, 3.0, 1e-9, 0.0, -2.75];
        let w = F32Bits::new(&x);
        assert_eq!(w.exp15(), 1 - 23 + 9);
        for (i, &v) in x.iter().enumerate() {
            let got = value(w.at15(i), w.exp15());
            assert!((got - v as f64).abs() <= 2f64.powi(1 - 15), "{v} {got}");
            assert_eq!(w.bits(i), v.to_bits());
        }
        let mut four = [0; 4];
        w.at15_into(2, &mut four);
        assert_eq!(four, [w.at15(2), w.at15(3), w.at15(4), w.at15(5)]);
        w.at15_into(4, &mut four);
        assert_eq!(four, [w.at15(4), w.at15(5), 0, 0]);
        assert_eq!(F32Bits::new(&[0.0; 4]).exp15(), ZERO_EXP);
        assert_eq!(f32_parts(f32::INFINITY.to_bits()), (1 << 23, 105));
    }
}
