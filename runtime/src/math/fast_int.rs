//! `exp`, `sigmoid` and `silu` of f32 in integer arithmetic: the `fast-math`
//! feature's versions for cores without hardware f32, and for any target
//! with `fast-math-int` (see [`crate::math`]).
//!
//! On a core without an FPU every f32 add, multiply or divide is a
//! soft-float call of 40 to 100 instructions, and `libm::expf` makes about a
//! dozen of them. These functions take the f32 apart and work on its bits
//! with 32x32->64-bit integer multiplies (`UMULL` on the M3, `MULHU` on
//! RV32IM): no f32 operation on the common path, nothing from `libm`, no
//! table. The same integer steps run on every target, so the host and the
//! boards compute the same bits.
//!
//! - `exp(x) = 2^k * 2^f` with `t = x * log2(e)` in 32.32 fixed point
//!   (log2(e) to 64 bits), `k = floor(t)`, `f = t - k`; `2^f - 1` is a
//!   degree-6 polynomial (minimax for relative error, 2^-28.9 on [0, 1)),
//!   evaluated in Q32 by Horner's rule.
//! - `sigmoid(x)`: `E = exp(-|x|)` as above, `1 / (1 + E)` by three
//!   Newton steps from a linear first guess (relative error below 2^-30),
//!   times `E` for negative x.
//! - `silu(x) = x * sigmoid(x)` with the product taken on the mantissas, so
//!   that only the last step rounds.
//!
//! Results below 2^-126 (x below -87.34 for `exp`) are flushed to zero
//! (signed), not made subnormal. Error bounds, measured over every f32 of the
//! ranges that matter by `fast_math_error_bounds` (`runtime/tests/fast_math.rs`)
//! against f64: docs/design.md, Numerics.

/// log2(e) * 2^62, high and low words.
const LOG2E_HI: u32 = 0x5c55_1d94;
const LOG2E_LO: u32 = 0xae0b_f85e;

/// `2^f - 1 = f * (C1 + f * (C2 + ... + f * C6))` for f in [0, 1), in Q32.
const C1: u32 = 0xb172_15af;
const C2: u32 = 0x3d7f_aaf3;
const C3: u32 = 0x0e34_488a;
const C4: u32 = 0x027a_1724;
const C5: u32 = 0x0051_b593;
const C6: u32 = 0x000e_2a0c;

/// |x| below 2^-25: `exp(x)` rounds to 1, `sigmoid(x)` to 1/2.
const TINY: u32 = 0x3300_0000;
/// 104.0: beyond it every result here is 0, 1, +inf or x itself.
const HUGE: u32 = 0x42d0_0000;
/// 88.72284: the smallest x whose `exp` overflows f32 (as in `libm::expf`).
const EXP_OVERFLOW: u32 = 0x42b1_7218;

/// The high word of a 32x32-bit product.
#[inline(always)]
fn mulhi(a: u32, b: u32) -> u32 {
    ((a as u64 * b as u64) >> 32) as u32
}

/// `x * log2(e)` split as `(k, f)`: `t = k + f / 2^32`, `k = floor(t)`.
/// Only for `2^-25 <= |x| < 128` (`bits` are those of x).
#[inline(always)]
fn log2e_times(bits: u32) -> (i32, u32) {
    let a = bits & 0x7fff_ffff;
    let e = (a >> 23) as i32 - 127; // -25..=6
    let m = ((a & 0x7f_ffff) | 0x80_0000) as u64; // |x| = m * 2^(e - 23)
                                                  // m * log2(e) * 2^30 (the low word's product contributes its high half).
    let p = m * LOG2E_HI as u64 + ((m * LOG2E_LO as u64) >> 32);
    // |t| * 2^32 = p * 2^(e - 21).
    let t = (p >> (21 - e) as u32) as i64;
    let t = if bits >> 31 != 0 { -t } else { t };
    ((t >> 32) as i32, t as u32)
}

/// `2^f - 1` in Q32 for `f / 2^32` in [0, 1).
#[inline(always)]
pub(crate) fn exp2_frac(f: u32) -> u32 {
    let mut acc = C6;
    acc = C5 + mulhi(acc, f);
    acc = C4 + mulhi(acc, f);
    acc = C3 + mulhi(acc, f);
    acc = C2 + mulhi(acc, f);
    acc = C1 + mulhi(acc, f);
    mulhi(acc, f)
}

/// f32 bits of `m * 2^(e - 31)` (m in [2^31, 2^32)), rounded to nearest
/// (ties up, which the approximations never produce exactly), with `sign`
/// (0 or 0x8000_0000). Below 2^-126: a signed zero. `e` must be at most 127.
#[inline(always)]
fn pack(sign: u32, m: u32, e: i32) -> f32 {
    if e < -126 {
        return f32::from_bits(sign);
    }
    // 24 significant bits, rounded; a carry out of them lands in the
    // exponent field, which is then right.
    let q = (m >> 8) + ((m >> 7) & 1);
    f32::from_bits(sign | ((((e + 126) as u32) << 23) + q))
}

/// `e^x`. Within one unit in the last place of the exact value for every x
/// whose result is a normal f32; below 2^-126 (x < -87.34) the result is 0.
/// NaN gives NaN, x >= 88.72284 gives +inf.
#[inline]
pub fn exp(x: f32) -> f32 {
    let bits = x.to_bits();
    let a = bits & 0x7fff_ffff;
    if a < TINY {
        return 1.0;
    }
    if a >= EXP_OVERFLOW {
        if a > 0x7f80_0000 {
            return x;
        }
        if bits >> 31 == 0 {
            return f32::INFINITY;
        }
        if a >= HUGE {
            return 0.0;
        }
    }
    let (k, f) = log2e_times(bits);
    if k < -126 {
        return 0.0;
    }
    let frac = exp2_frac(f);
    let q = (frac >> 9) + ((frac >> 8) & 1);
    f32::from_bits((((k + 127) as u32) << 23) + q)
}

/// `sigmoid(x) = 1 / (1 + e^-x)` as `(m, e)`, `m * 2^(e - 31)` with m in
/// [2^31, 2^32), for `2^-25 <= |x| < 104`.
#[inline(always)]
fn sigmoid_parts(bits: u32) -> (u32, i32) {
    // E = e^-|x| = m_e * 2^(k - 31), k <= -1.
    let (k, f) = log2e_times(bits | 0x8000_0000);
    let m_e = 0x8000_0000 | (exp2_frac(f) >> 1);
    // d = (1 + E) / 2 in Q32, in [1/2, 1).
    let d = 0x8000_0000 + m_e.checked_shr((-k) as u32).unwrap_or(0);
    // r = 1 / d in Q30, in (1, 2]: r0 = 48/17 - 32/17 d (error below
    // 1/17), then r <- r (2 - d r) three times (error below 2^-32 before
    // the truncations, which keep it below 2^-30).
    let mut r = 0xb4b4_b4b5 - mulhi(0x7878_7878, d);
    for _ in 0..3 {
        let e = 0x8000_0000 - mulhi(d, r);
        r = ((r as u64 * e as u64) >> 30) as u32;
    }
    // 1/(1 + E) is at least 1/2: r at least 1.
    let r = r.max(0x4000_0000);
    if bits >> 31 == 0 {
        // sigmoid = r / 2 in [1/2, 1].
        if r >= 0x8000_0000 {
            (0x8000_0000, 0)
        } else {
            (r << 1, -1)
        }
    } else {
        // sigmoid = E * r / 2 = m_e * r * 2^(k - 62).
        let p = m_e as u64 * r as u64;
        if p >> 62 != 0 {
            ((p >> 31) as u32, k)
        } else {
            ((p >> 30) as u32, k - 1)
        }
    }
}

/// `1 / (1 + e^-x)`. Within one unit in the last place of the exact value
/// for every x whose result is a normal f32; below 2^-126 (x < -87.34) the
/// result is 0. NaN gives NaN.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    let bits = x.to_bits();
    let a = bits & 0x7fff_ffff;
    if a < TINY {
        return 0.5;
    }
    if a >= HUGE {
        if a > 0x7f80_0000 {
            return x;
        }
        return if bits >> 31 == 0 { 1.0 } else { 0.0 };
    }
    let (m, e) = sigmoid_parts(bits);
    pack(0, m, e)
}

/// `x * sigmoid(x)` (SiLU). Within one unit in the last place of the exact
/// value for every x whose result is a normal f32; results below 2^-126 in
/// magnitude (x < -91.86) are a signed zero. NaN gives NaN; beyond |x| = 104
/// the result is `x * 1` or `x * 0` (so -inf gives NaN, as `x * sigmoid(x)`
/// does).
#[inline]
pub fn silu(x: f32) -> f32 {
    let bits = x.to_bits();
    let a = bits & 0x7fff_ffff;
    if a < TINY {
        // x * (1/2 + x/4 + ...) rounds to x / 2 here (a subnormal x too).
        return x * 0.5;
    }
    if a >= HUGE {
        return x * if bits >> 31 == 0 { 1.0 } else { 0.0 };
    }
    let (m_s, e_s) = sigmoid_parts(bits);
    let m_x = ((a & 0x7f_ffff) | 0x80_0000) << 8;
    let e_x = (a >> 23) as i32 - 127;
    let p = m_x as u64 * m_s as u64;
    let (m, e) = if p >> 63 != 0 {
        ((p >> 32) as u32, e_x + e_s + 1)
    } else {
        ((p >> 31) as u32, e_x + e_s)
    };
    pack(bits & 0x8000_0000, m, e)
}
