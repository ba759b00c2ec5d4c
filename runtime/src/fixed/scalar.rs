//! [`Fx`]: a real number as `±m × 2^e`, a normalized 32-bit mantissa and an
//! exponent, computed in integer code. The integer token path uses it for
//! the few scalars of each vector, row or head (norm scales, quantization
//! scales, gates and decays) and to read the f32 values of an image (norm
//! weights, row scales, `A_log`, ...) through their bit patterns, never
//! through f32 arithmetic.
//!
//! Each operation rounds its result to 32 significant bits (relative error
//! at most 2^-31; a sum (`+`) of nearly equal values of opposite signs
//! loses the bits that cancel, as any float does), so `Fx` is more precise
//! than f32. There is no infinity or NaN: magnitudes saturate at
//! `(2^32 - 1) × 2^E_MAX` and flush to zero below `2^E_MIN`; an f32 NaN or
//! infinity reads as that largest magnitude.

use super::wide::{div_u64_u32, mul_u32};

/// Smallest exponent of a nonzero [`Fx`] (values below `2^(E_MIN + 31)` are 0).
pub const E_MIN: i32 = -(1 << 20);
/// Largest exponent of an [`Fx`] (larger values saturate).
pub const E_MAX: i32 = 1 << 20;

/// `±m × 2^e` with `m` in `[2^31, 2^32)`, or zero (`m = 0`, `e = 0`, not negative).
///
/// Every value that is not zero has `e` in `[E_MIN, E_MAX]` (every
/// constructor goes through `normal`, which saturates), so the exponent
/// sums of a product, a sum or a reciprocal (at most a few times `2^20`)
/// cannot leave an `i32`: they are plain wrapping adds, no saturation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fx {
    m: u32,
    e: i32,
    neg: bool,
}

/// 2^31, the smallest normalized mantissa.
const TOP: u32 = 1 << 31;

impl Fx {
    /// Zero.
    pub const ZERO: Fx = Fx {
        m: 0,
        e: 0,
        neg: false,
    };
    /// One.
    pub const ONE: Fx = Fx {
        m: TOP,
        e: -31,
        neg: false,
    };
    /// The largest magnitude (what an overflow saturates to).
    pub const MAX: Fx = Fx {
        m: u32::MAX,
        e: E_MAX,
        neg: false,
    };

    /// The mantissa (`[2^31, 2^32)`, or 0 for zero).
    pub const fn mantissa(self) -> u32 {
        self.m
    }

    /// The exponent: the value is `±mantissa × 2^exponent`.
    pub const fn exponent(self) -> i32 {
        self.e
    }

    /// Whether the value is below zero.
    pub const fn is_negative(self) -> bool {
        self.neg
    }

    /// Whether the value is zero.
    pub const fn is_zero(self) -> bool {
        self.m == 0
    }

    /// `2^k`.
    pub const fn pow2(k: i32) -> Fx {
        Fx::normal(TOP, k.saturating_sub(31), false)
    }

    /// A normalized `m` (`[2^31, 2^32)`) with exponent `e`, saturating or
    /// flushing an exponent outside `E_MIN..=E_MAX`.
    const fn normal(m: u32, e: i32, neg: bool) -> Fx {
        if m == 0 || e < E_MIN {
            Fx::ZERO
        } else if e > E_MAX {
            Fx {
                m: u32::MAX,
                e: E_MAX,
                neg,
            }
        } else {
            Fx { m, e, neg }
        }
    }

    /// `±v × 2^e` for an unsigned magnitude `v`, rounded to 32 bits (half up).
    #[inline(always)]
    pub const fn from_u64(v: u64, e: i32, neg: bool) -> Fx {
        if v == 0 {
            return Fx::ZERO;
        }
        let lz = super::wide::lz64(v) as i32;
        if lz >= 32 {
            // Fits 32 bits: shift left, exact.
            let s = lz - 32;
            Fx::normal((v as u32) << s, e.saturating_sub(s), neg)
        } else {
            let s = 32 - lz; // bits to drop, 1..=32
            let kept = (v >> s) as u32; // in [2^31, 2^32)
            let half = (v >> (s - 1)) & 1;
            let (m, carry) = kept.overflowing_add(half as u32);
            if carry {
                Fx::normal(TOP, e.saturating_add(s + 1), neg)
            } else {
                Fx::normal(m, e.saturating_add(s), neg)
            }
        }
    }

    /// [`Fx::from_u64`] of a `v` in `[2^31, 2^32)`, already a normal
    /// mantissa (a stored scale record's): the same bits. Where the core
    /// has no count-leading-zeros instruction ([`super::wide::NO_CLZ`]:
    /// RV32 without Zbb, ARMv6-M) without the 64-bit bit count (`from_u64`
    /// finds 32 leading zeros and shifts by 0); elsewhere `from_u64` itself
    /// (the shorter form cost the M4F and the M55 instructions a token: the
    /// loops around it compiled otherwise).
    #[inline(always)]
    pub(crate) const fn from_normal(m: u32, e: i32, neg: bool) -> Fx {
        debug_assert!(m >> 31 != 0);
        if super::wide::NO_CLZ {
            Fx::normal(m, e, neg)
        } else {
            Fx::from_u64(m as u64, e, neg)
        }
    }

    /// [`Fx::from_u64`] of a `v` in `[2^62, 2^64)` (the product of two
    /// normal mantissas, the sum of two with the same sign and 31 guard
    /// bits), to the same bits without finding the bit length: it is 63 or
    /// 64, and the 32 bits kept start at bit 31 or 32. (Finding it is a
    /// 64-bit count of leading zeros, some 50 instructions where the core
    /// has no `CLZ`: the RV32IMAC.) `e` within a few times `2^20` (the
    /// exponents of values: see [`Fx`]), so its adds do not wrap.
    #[inline(always)]
    const fn from_top2(v: u64, e: i32, neg: bool) -> Fx {
        debug_assert!(v >> 62 != 0);
        let hi = (v >> 32) as u32;
        let lo = v as u32;
        // s = 32 (v >= 2^63: `hi` kept, bit 31 of `lo` the half) or 31
        // (`hi << 1 | lo >> 31` kept, bit 30 the half).
        let (s, kept, half) = if hi >> 31 != 0 {
            (32, hi, lo >> 31)
        } else {
            (31, (hi << 1) | (lo >> 31), (lo >> 30) & 1)
        };
        let (m, carry) = kept.overflowing_add(half);
        if carry {
            Fx::normal(TOP, e.wrapping_add(s + 1), neg)
        } else {
            Fx::normal(m, e.wrapping_add(s), neg)
        }
    }

    /// `v × 2^e`.
    pub const fn from_i64(v: i64, e: i32) -> Fx {
        Fx::from_u64(v.unsigned_abs(), e, v < 0)
    }

    /// The value of the f32 with bits `bits`, exactly (subnormals included;
    /// an infinity or NaN gives the largest magnitude of its sign).
    pub const fn from_f32_bits(bits: u32) -> Fx {
        let neg = bits >> 31 != 0;
        let exp = ((bits >> 23) & 0xff) as i32;
        let frac = bits & 0x7f_ffff;
        if exp == 0xff {
            return Fx {
                m: u32::MAX,
                e: E_MAX,
                neg,
            };
        }
        if exp == 0 {
            return Fx::from_u64(frac as u64, -149, neg);
        }
        Fx::normal((frac | 0x80_0000) << 8, exp - 127 - 31, neg)
    }

    /// The nearest f32 (ties to even), as bits: values below 2^-126 in
    /// magnitude flush to a signed zero, values beyond f32's range give
    /// an infinity.
    pub const fn to_f32_bits(self) -> u32 {
        let sign = if self.neg { 0x8000_0000 } else { 0 };
        if self.m == 0 {
            return 0;
        }
        // Value = m * 2^e with m in [2^31, 2^32): f32 exponent e + 31.
        let mut m = self.m >> 8; // 24 bits
        let rest = self.m & 0xff;
        let mut biased = self.e + 31 + 127;
        if rest > 0x80 || (rest == 0x80 && m & 1 == 1) {
            m += 1;
            if m == 1 << 24 {
                m >>= 1;
                biased += 1;
            }
        }
        if biased >= 0xff {
            return sign | 0x7f80_0000;
        }
        if biased <= 0 {
            return sign;
        }
        sign | ((biased as u32) << 23) | (m & 0x7f_ffff)
    }

    /// `-self` (also the `Neg` operator).
    pub const fn negated(self) -> Fx {
        if self.m == 0 {
            self
        } else {
            Fx {
                neg: !self.neg,
                ..self
            }
        }
    }

    /// `|self|`.
    pub const fn abs(self) -> Fx {
        Fx { neg: false, ..self }
    }

    /// `self × 2^k`.
    pub const fn shl(self, k: i32) -> Fx {
        if self.m == 0 {
            return self;
        }
        Fx::normal(self.m, self.e.saturating_add(k), self.neg)
    }

    /// `self × other`, rounded (the `*` operator).
    fn times(self, other: Fx) -> Fx {
        if self.m == 0 || other.m == 0 {
            return Fx::ZERO;
        }
        let p = mul_u32(self.m, other.m); // [2^62, 2^64)
        let e = self.e.wrapping_add(other.e);
        Fx::from_top2(p, e, self.neg != other.neg)
    }

    /// `self + other`, rounded (the `+` operator).
    fn plus(self, other: Fx) -> Fx {
        if other.m == 0 {
            return self;
        }
        if self.m == 0 {
            return other;
        }
        // `a` the larger magnitude.
        let (a, b) = if (self.e, self.m) >= (other.e, other.m) {
            (self, other)
        } else {
            (other, self)
        };
        let d = a.e.abs_diff(b.e); // a.e >= b.e
        if a.neg == b.neg {
            return Fx::plus_same_sign(a.m, b.m, d, a.e.wrapping_sub(31), a.neg);
        }
        // Both with 31 guard bits below the mantissa: the difference is
        // exact below 2^63.
        let d = d as u64;
        let wa = (a.m as u64) << 31;
        let wb = if d >= 63 {
            0
        } else {
            ((b.m as u64) << 31) >> d
        };
        Fx::from_u64(wa - wb, a.e.saturating_sub(31), a.neg)
    }

    /// [`Fx::plus`] of two values neither of which is negative (zero
    /// allowed), inlined: the same bits (its zero tests, its larger
    /// magnitude first, its same-sign sum), without the sign test, the
    /// opposite signs' 64-bit path and a call. `ln1p_unit`'s Horner steps,
    /// `softplus`'s sum and the softmax sums of the slot and SWA reads:
    /// ~250 sums a token on `lm/small`.
    #[inline(always)]
    pub(crate) fn plus_nonneg(self, other: Fx) -> Fx {
        debug_assert!(!self.neg && !other.neg);
        if other.m == 0 {
            return self;
        }
        if self.m == 0 {
            return other;
        }
        let (a, b) = if (self.e, self.m) >= (other.e, other.m) {
            (self, other)
        } else {
            (other, self)
        };
        Fx::plus_same_sign(a.m, b.m, a.e.abs_diff(b.e), a.e.wrapping_sub(31), false)
    }

    /// [`Fx::plus_nonneg`] where `self < c` (or `self` is zero) is known,
    /// `self >= 0`, `c > 0`: `c` is the larger magnitude without the test
    /// (`plus` would choose it), and a zero `self` adds nothing (its
    /// mantissa 0 gives no bits at any distance).
    #[inline(always)]
    fn plus_below(self, c: Fx) -> Fx {
        debug_assert!(!self.neg && !c.neg && c.m != 0);
        debug_assert!(self.m == 0 || (self.e, self.m) < (c.e, c.m));
        Fx::plus_same_sign(
            c.m,
            self.m,
            c.e.abs_diff(self.e),
            c.e.wrapping_sub(31),
            false,
        )
    }

    /// The rounded sum of two magnitudes of one sign, `a >= b` (normal
    /// mantissas), `b` `d` octaves below `a`: what `from_top2(w, e, neg)`
    /// makes of `w = a 2^31 + floor(b 2^31 / 2^d)`, in 32-bit words. Only
    /// the bits of `w` from bit 30 up reach `from_top2` (the 32 kept and the
    /// one below), and `a 2^31` has none below bit 31, so `w >> 30 = 2 (a +
    /// q) + h` with `q = b >> d` and `h` bit `d - 1` of `b` (`d` in
    /// `1..=32`; `h = 0` for `d = 0` and from `d = 33`, where `q` is 0 too).
    /// Where `a + q` carries past 32 bits (`w >= 2^63`) the 32 bits kept are
    /// `(a + q) >> 1` and the half below is its lowest bit; else `a + q` and
    /// `h`.
    #[inline(always)]
    fn plus_same_sign(a: u32, b: u32, d: u32, e: i32, neg: bool) -> Fx {
        let (q, h) = match d {
            0 => (b, 0),
            1..=31 => (b >> d, (b >> (d - 1)) & 1),
            32 => (0, b >> 31),
            _ => (0, 0),
        };
        let (sum, carry) = a.overflowing_add(q);
        let (s, kept, half) = if carry {
            (32, (sum >> 1) | TOP, sum & 1)
        } else {
            (31, sum, h)
        };
        let (m, up) = kept.overflowing_add(half);
        if up {
            Fx::normal(TOP, e.wrapping_add(s + 1), neg)
        } else {
            Fx::normal(m, e.wrapping_add(s), neg)
        }
    }

    /// `1 / self`; the reciprocal of zero is [`Fx::MAX`].
    pub fn recip(self) -> Fx {
        if self.m == 0 {
            return Fx::MAX;
        }
        // 2^63 / m in (2^31, 2^32], rounded: (2^63 + m / 2) / m, where the
        // quotient has 33 bits only for m = 2^31.
        let m = self.m;
        let e = (-63i32).wrapping_sub(self.e);
        if m == TOP {
            return Fx::normal(TOP, e.wrapping_add(1), self.neg); // 2^32
        }
        // In (2^31, 2^32): already a normal mantissa (what `from_u64`
        // would make of it, without its bit count).
        Fx::normal(div_u64_u32(1 << 31, m >> 1, m), e, self.neg)
    }

    /// `1 / sqrt(self)` for a positive value; zero and negative values give
    /// [`Fx::MAX`].
    pub fn rsqrt(self) -> Fx {
        self.sqrt_abs().recip()
    }

    /// `sqrt(|self|)`, to 32 bits (the integer square root, truncated).
    pub fn sqrt_abs(self) -> Fx {
        if self.m == 0 {
            return Fx::ZERO;
        }
        // Value m * 2^e as M * 2^E with E even and M in [2^62, 2^64).
        let (wide, e) = if self.e.rem_euclid(2) == 0 {
            ((self.m as u64) << 32, self.e as i64 - 32)
        } else {
            ((self.m as u64) << 31, self.e as i64 - 31)
        };
        let root = wide.isqrt(); // in [2^31, 2^32)
        Fx::from_u64(root, (e / 2) as i32, false)
    }

    /// Whether `self > other`.
    pub const fn gt(self, other: Fx) -> bool {
        match (self.neg, other.neg) {
            (false, true) => !(self.m == 0 && other.m == 0),
            (true, false) => false,
            (false, false) => self.magnitude_gt(other),
            (true, true) => other.magnitude_gt(self),
        }
    }

    /// Whether `|self| > |other|`.
    const fn magnitude_gt(self, other: Fx) -> bool {
        if self.m == 0 {
            return false;
        }
        if other.m == 0 {
            return true;
        }
        self.e > other.e || (self.e == other.e && self.m > other.m)
    }

    /// `self × 2^frac` rounded to an integer (half away from zero),
    /// saturating at `±(2^62)`.
    pub const fn to_fixed(self, frac: i32) -> i64 {
        if self.m == 0 {
            return 0;
        }
        let s = self.e as i64 + frac as i64; // value * 2^frac = m * 2^s
        let mag: i64 = if s >= 31 {
            1 << 62
        } else if s >= 0 {
            (self.m as i64) << s
        } else if s <= -33 {
            0
        } else {
            let k = (-s) as u32;
            (((self.m as u64) + (1u64 << (k - 1))) >> k) as i64
        };
        if self.neg {
            -mag
        } else {
            mag
        }
    }

    /// `e^self`, within `2^-28 + |self| 2^-31` relative (the fraction's polynomial:
    /// [`crate::math::fast_int`]'s, minimax for `2^f`); below `2^E_MIN`
    /// the result is 0, above `2^E_MAX` the largest magnitude.
    pub fn exp(self) -> Fx {
        let t = self * LOG2_E;
        if t.m == 0 {
            return Fx::ONE;
        }
        // |t| >= 2^20 saturates either way.
        if t.e + 31 >= 20 {
            return if t.neg { Fx::ZERO } else { Fx::MAX };
        }
        let q32 = t.to_fixed(32); // |q32| < 2^52
        let k = (q32 >> 32) as i32; // floor
        let f = q32 as u32; // the fraction in [0, 1), Q32
        let frac = crate::math::fast_int::exp2_frac(f); // 2^f - 1, Q32
                                                        // 2^f in Q31: 2^31 + frac / 2, rounded; at most 2^32 - 1.
        let m = TOP + (frac >> 1) + (frac & 1);
        if m < TOP {
            // (frac >> 1) + 1 carried past 2^32: 2^f rounds to 2.
            return Fx::pow2(k + 1);
        }
        Fx::normal(m, k - 31, false)
    }

    /// `ln(1 + self)` for `self` in `[0, 1]`: `2 atanh(s)` with
    /// `s = self / (2 + self)` in `[0, 1/3]`, nine terms of the series
    /// (truncation below 2^-33), so small arguments keep their relative
    /// precision. Arguments outside `[0, 1]` are clamped into it.
    pub fn ln1p_unit(self) -> Fx {
        let u = if self.neg || self.m == 0 {
            return Fx::ZERO;
        } else if self.gt(Fx::ONE) {
            Fx::ONE
        } else {
            self
        };
        // Every sum below is of values >= 0 (`u`, `s`, the odd terms), the
        // second the larger: `plus_below`, `plus`'s bits. (`u <= 1 < 2`;
        // `s <= 1/3`, so `s2 <= 1/9` and each step's `acc` stays below the
        // next term, `(acc + 1/k) s2 < 2/(9k) < 1/(k - 2)`, and below 1.)
        let s = u * u.plus_below(Fx::pow2(1)).recip();
        let s2 = s * s;
        // s (1 + s^2/3 + s^4/5 + ... + s^16/17), by Horner from the last
        // term (the first step's `0 + 1/17` is `1/17` exactly).
        let mut acc = INV_ODD[7] * s2;
        let mut k = 15;
        while k >= 3 {
            acc = acc.plus_below(INV_ODD[(k - 3) / 2]) * s2;
            k -= 2;
        }
        (acc.plus_below(Fx::ONE) * s).shl(1)
    }

    /// `ln(1 + e^self)` (PyTorch's softplus: `self` itself above 20).
    pub fn softplus(self) -> Fx {
        if self.gt(Fx::from_i64(20, 0)) {
            return self;
        }
        let pos = if self.neg { Fx::ZERO } else { self };
        // Both >= 0 (`ln1p_unit` of a value >= 0).
        pos.plus_nonneg((-self.abs()).exp().ln1p_unit())
    }
}

impl core::ops::Mul for Fx {
    type Output = Fx;
    fn mul(self, other: Fx) -> Fx {
        self.times(other)
    }
}

impl core::ops::Add for Fx {
    type Output = Fx;
    fn add(self, other: Fx) -> Fx {
        self.plus(other)
    }
}

impl core::ops::Sub for Fx {
    type Output = Fx;
    fn sub(self, other: Fx) -> Fx {
        self.plus(other.negated())
    }
}

impl core::ops::Neg for Fx {
    type Output = Fx;
    fn neg(self) -> Fx {
        self.negated()
    }
}

/// log2(e), to 32 bits (rounded).
const LOG2_E: Fx = Fx {
    m: 0xb8aa_3b2a,
    e: -31,
    neg: false,
};

/// `1 / k` for k = 3, 5, ..., 17, to 32 bits (built at compile time).
const INV_ODD: [Fx; 8] = {
    let mut t = [Fx::ZERO; 8];
    let mut i = 0;
    while i < 8 {
        let k = 3 + 2 * i as u64;
        t[i] = Fx::from_u64(((1u64 << 63) + k / 2) / k, -63, false);
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn val(x: Fx) -> f64 {
        let v = x.mantissa() as f64 * 2f64.powi(x.exponent());
        if x.is_negative() {
            -v
        } else {
            v
        }
    }

    fn fx(v: f64) -> Fx {
        // Exact for an f64 with at most 32 significant bits: via its bits.
        if v == 0.0 {
            return Fx::ZERO;
        }
        let e = v.abs().log2().floor() as i32;
        let m = (v.abs() / 2f64.powi(e - 31)).round() as u64;
        Fx::from_u64(m, e - 31, v < 0.0)
    }

    /// The stated bound of [`Fx::exp`]: the polynomial's 2^-28, and the
    /// rounding of `x log2 e` and of the constant (under 2^-31 of `x`).
    fn exp_bound(x: f64) -> f64 {
        2f64.powi(-28) + x.abs() * 2f64.powi(-31)
    }

    fn rel(a: f64, b: f64) -> f64 {
        ((a - b) / b).abs()
    }

    /// Deterministic values over many magnitudes, both signs.
    fn samples() -> impl Iterator<Item = f64> {
        (0..4000u64).map(|i| {
            let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11;
            let u = h as f64 / (1u64 << 53) as f64; // [0, 1)
            let v = (1.0 + u) * 2f64.powi((i % 81) as i32 - 40);
            if i % 3 == 0 {
                -v
            } else {
                v
            }
        })
    }

    /// The forms `times`, `plus` and `recip` had before they skipped the
    /// bit count ([`Fx::from_top2`]): every result through `from_u64`.
    fn times_by_count(a: Fx, b: Fx) -> Fx {
        if a.m == 0 || b.m == 0 {
            return Fx::ZERO;
        }
        Fx::from_u64(mul_u32(a.m, b.m), a.e.saturating_add(b.e), a.neg != b.neg)
    }

    fn plus_by_count(x: Fx, y: Fx) -> Fx {
        if y.m == 0 {
            return x;
        }
        if x.m == 0 {
            return y;
        }
        let (a, b) = if (x.e, x.m) >= (y.e, y.m) {
            (x, y)
        } else {
            (y, x)
        };
        let d = (a.e as i64 - b.e as i64) as u64;
        let wa = (a.m as u64) << 31;
        let wb = if d >= 63 {
            0
        } else {
            ((b.m as u64) << 31) >> d
        };
        let w = if a.neg == b.neg { wa + wb } else { wa - wb };
        Fx::from_u64(w, a.e.saturating_sub(31), a.neg)
    }

    fn recip_by_count(x: Fx) -> Fx {
        if x.m == 0 {
            return Fx::MAX;
        }
        let q = if x.m == TOP {
            1u64 << 32
        } else {
            div_u64_u32(1 << 31, x.m >> 1, x.m) as u64
        };
        Fx::from_u64(q, (-63i32).saturating_sub(x.e), x.neg)
    }

    /// `from_normal` is `from_u64` on `[2^31, 2^32)` at every exponent
    /// (the saturation and the flush included), in both its forms.
    #[test]
    fn a_normal_mantissa_is_from_u64() {
        let mut m = 1u32 << 31;
        for i in 0..5000u32 {
            for e in [
                E_MIN - 40,
                E_MIN - 1,
                E_MIN,
                -1000,
                -64,
                -32,
                0,
                17,
                E_MAX,
                E_MAX + 1,
                E_MAX + 40,
                i32::MAX / 2,
                i32::MIN / 2,
            ] {
                let want = Fx::from_u64(m as u64, e, i % 2 == 0);
                // The form of the cores without CLZ, and this core's.
                assert_eq!(Fx::normal(m, e, i % 2 == 0), want, "{m} {e}");
                assert_eq!(Fx::from_normal(m, e, i % 2 == 0), want, "{m} {e}");
            }
            m = m.wrapping_mul(2_654_435_761).wrapping_add(i) | (1 << 31);
        }
        assert_eq!(
            Fx::from_normal(u32::MAX, -3, false),
            Fx::from_u64(u32::MAX as u64, -3, false)
        );
    }

    /// [`Fx::ln1p_unit`] as it was before its sums took `plus_nonneg`:
    /// every sum by `+`, Horner's first step from zero.
    fn ln1p_unit_by_plus(x: Fx) -> Fx {
        let u = if x.neg || x.m == 0 {
            return Fx::ZERO;
        } else if x.gt(Fx::ONE) {
            Fx::ONE
        } else {
            x
        };
        let s = u * (Fx::pow2(1) + u).recip();
        let s2 = s * s;
        let mut acc = Fx::ZERO;
        let mut k = 17;
        while k >= 3 {
            acc = (acc + INV_ODD[(k - 3) / 2]) * s2;
            k -= 2;
        }
        ((acc + Fx::ONE) * s).shl(1)
    }

    /// `plus_nonneg` is `plus` on values >= 0 (zeros, equal exponents,
    /// every gap up to past 64, carries and saturation), and `ln1p_unit`
    /// and `softplus` give the bits they gave with `+`.
    #[test]
    fn the_nonnegative_sum_is_plus() {
        let mut h = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            h
        };
        let mut vals = vec![Fx::ZERO, Fx::ONE, Fx::MAX, Fx::pow2(E_MIN + 31)];
        for i in 0..4000 {
            let r = next();
            let m = (r as u32) | TOP;
            let m = match i % 7 {
                0 => u32::MAX,
                1 => TOP,
                _ => m,
            };
            let e = match i % 5 {
                0 => ((r >> 32) % 80) as i32 - 60,
                1 => E_MAX - ((r >> 40) % 3) as i32,
                _ => ((r >> 32) % 8) as i32 - 35,
            };
            vals.push(Fx::normal(m, e, false));
        }
        for (i, &a) in vals.iter().enumerate() {
            for &b in vals.iter().skip(i % 97).step_by(53) {
                assert_eq!(a.plus_nonneg(b), a + b, "{a:?} {b:?}");
            }
        }
        // Tiny arguments too: `s2` (and so each `acc`) flushed to zero.
        for k in (0..64).chain((1..40).map(|j| j * 26_000)) {
            let x = Fx::pow2(E_MIN + 31 + k);
            assert_eq!(x.ln1p_unit(), ln1p_unit_by_plus(x), "{x:?}");
        }
        for &x in &vals {
            let x = Fx::normal(x.m, x.e.clamp(-80, 2), false);
            assert_eq!(x.ln1p_unit(), ln1p_unit_by_plus(x), "{x:?}");
            for neg in [false, true] {
                let y = Fx::normal(x.m, x.e.clamp(-80, 0), neg);
                let pos = if y.neg { Fx::ZERO } else { y };
                let want = if y.gt(Fx::from_i64(20, 0)) {
                    y
                } else {
                    pos + ln1p_unit_by_plus((-y.abs()).exp())
                };
                assert_eq!(y.softplus(), want, "{y:?}");
            }
        }
    }

    /// `from_top2` is `from_u64` on `[2^62, 2^64)`, and `times`, `plus`
    /// and `recip` give the bits they gave through `from_u64`: random
    /// mantissas (and the carries' edges) at exponents across the whole
    /// range, the saturations included.
    #[test]
    fn skipping_the_bit_count_gives_the_same_bits() {
        let mut h = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            h
        };
        let edges = [
            1u64 << 62,
            (1 << 63) - 1,
            1 << 63,
            u64::MAX,
            0xffff_ffff_8000_0000,
            0xffff_ffff_7fff_ffff,
            0x7fff_ffff_c000_0000,
            0x7fff_ffff_bfff_ffff,
        ];
        let exps = [
            E_MIN - 40,
            E_MIN - 1,
            E_MIN,
            -200,
            -31,
            0,
            17,
            E_MAX - 33,
            E_MAX,
            E_MAX + 5,
        ];
        for i in 0..200_000u32 {
            let v = match i as usize % 16 {
                k if k < edges.len() => edges[k],
                _ => next() | (1 << 62) >> (next() & 1),
            };
            let v = if v >> 62 == 0 { v | 1 << 62 } else { v };
            let e = match i % 3 {
                0 => exps[(next() % exps.len() as u64) as usize],
                _ => (next() % 400) as i32 - 200,
            };
            let neg = next() & 1 == 1;
            assert_eq!(
                Fx::from_top2(v, e, neg),
                Fx::from_u64(v, e, neg),
                "{v:#x} {e}"
            );
            let mant = |r: u64| match r % 7 {
                0 => TOP,
                1 => u32::MAX,
                _ => (r >> 8) as u32 | TOP,
            };
            let fx = |r: u64, e: i32, neg: bool| match r % 23 {
                0 => Fx::ZERO,
                _ => Fx::normal(mant(r >> 5), e, neg),
            };
            let (ea, eb) = if i % 5 == 0 {
                (
                    exps[(next() % exps.len() as u64) as usize],
                    exps[(next() % exps.len() as u64) as usize],
                )
            } else {
                ((next() % 140) as i32 - 70, (next() % 140) as i32 - 70)
            };
            let a = fx(next(), ea, next() & 1 == 1);
            let b = fx(next(), eb, next() & 1 == 1);
            assert_eq!(a * b, times_by_count(a, b), "{a:?} {b:?}");
            assert_eq!(a + b, plus_by_count(a, b), "{a:?} {b:?}");
            assert_eq!(a.recip(), recip_by_count(a), "{a:?}");
        }
    }

    #[test]
    fn f32_bits_round_trip_exactly() {
        let mut bits = 0u32;
        // Every 4099th f32 pattern (all exponents, both signs, subnormals).
        while let Some(next) = bits.checked_add(4099) {
            let f = f32::from_bits(bits);
            let x = Fx::from_f32_bits(bits);
            if f.is_finite() {
                assert_eq!(val(x), f as f64, "{bits:#x}");
                let back = f32::from_bits(x.to_f32_bits());
                if f.abs() >= f32::MIN_POSITIVE || f == 0.0 {
                    assert_eq!(back.to_bits(), if f == 0.0 { 0 } else { bits }, "{bits:#x}");
                } else {
                    assert_eq!(back.abs(), 0.0, "subnormals flush: {bits:#x}");
                }
            } else {
                assert_eq!(x.mantissa(), u32::MAX);
            }
            bits = next;
        }
    }

    #[test]
    fn to_f32_rounds_to_nearest_even() {
        for v in samples() {
            let x = fx(v);
            let want = val(x) as f32;
            assert_eq!(f32::from_bits(x.to_f32_bits()), want, "{v}");
        }
    }

    #[test]
    fn arithmetic_is_within_2_pow_minus_31() {
        let xs: Vec<f64> = samples().collect();
        for (i, &a) in xs.iter().enumerate() {
            let b = xs[(i * 7 + 3) % xs.len()];
            let (fa, fb) = (fx(a), fx(b));
            let (a, b) = (val(fa), val(fb));
            assert!(rel(val(fa * fb), a * b) <= 2f64.powi(-31), "{a} * {b}");
            let sum = a + b;
            // An add is exact to 2^-31 of the larger operand.
            let err = (val(fa + fb) - sum).abs();
            assert!(err <= a.abs().max(b.abs()) * 2f64.powi(-31), "{a} + {b}");
            assert!(rel(val(fa.recip()), 1.0 / a) <= 2f64.powi(-31), "1/{a}");
            let r = val(fa.abs().rsqrt());
            assert!(rel(r, 1.0 / a.abs().sqrt()) <= 2f64.powi(-30), "rsqrt {a}");
        }
    }

    #[test]
    fn exp_is_within_2_pow_minus_28() {
        for i in -4000..=4000 {
            let x = i as f64 / 64.0; // -62.5 ..= 62.5
            let got = val(fx(x).exp());
            assert!(rel(got, x.exp()) <= exp_bound(x), "exp {x}: {got}");
        }
        for v in samples() {
            let x = val(fx(v.clamp(-80.0, 80.0)));
            assert!(rel(val(fx(x).exp()), x.exp()) <= exp_bound(x), "{x}");
        }
        assert_eq!(fx(-2e6).exp(), Fx::ZERO);
        assert_eq!(fx(2e6).exp(), Fx::MAX);
    }

    #[test]
    fn ln1p_and_softplus_match_f64() {
        for i in 0..=2000 {
            let u = i as f64 / 2000.0;
            let got = val(fx(u).ln1p_unit());
            let want = u.ln_1p();
            assert!(
                (got - want).abs() <= 2f64.powi(-30) * want.max(1e-300) + 1e-300,
                "ln1p {u}"
            );
        }
        for k in 1..60 {
            // Tiny arguments keep their relative precision.
            let u = 2f64.powi(-k);
            assert!(
                rel(val(fx(u).ln1p_unit()), u.ln_1p()) <= 2f64.powi(-28),
                "ln1p 2^-{k}"
            );
        }
        for i in -3000..=3000 {
            let z = i as f64 / 100.0;
            let want = if z > 20.0 { z } else { z.exp().ln_1p() };
            let bound = exp_bound(z) + 2f64.powi(-30);
            assert!(rel(val(fx(z).softplus()), want) <= bound, "softplus {z}");
        }
    }

    #[test]
    fn saturation_and_zero_are_defined() {
        assert_eq!(Fx::MAX * Fx::MAX, Fx::MAX);
        assert_eq!(Fx::pow2(E_MIN) * Fx::pow2(-40), Fx::ZERO);
        assert_eq!(Fx::ZERO.recip(), Fx::MAX);
        assert_eq!(Fx::ZERO.rsqrt(), Fx::MAX);
        assert_eq!(Fx::ONE - Fx::ONE, Fx::ZERO);
        assert_eq!(Fx::from_f32_bits(f32::NAN.to_bits()).mantissa(), u32::MAX);
        assert_eq!(Fx::from_f32_bits(0x8000_0000), Fx::ZERO);
        assert_eq!(Fx::MAX.to_f32_bits(), f32::INFINITY.to_bits());
        assert_eq!(fx(-3.5).to_fixed(4), -56);
        assert_eq!(fx(1e30).to_fixed(0), 1 << 62);
        assert!(fx(2.0).gt(fx(1.5)) && fx(-1.0).gt(fx(-2.0)) && !fx(-1.0).gt(Fx::ZERO));
        assert!(Fx::ZERO.gt(fx(-1e-30)) && !Fx::ZERO.gt(Fx::ZERO));
    }
}
