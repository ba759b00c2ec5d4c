//! `exp`, `sigmoid` and `silu` in f32 arithmetic without a library call:
//! the `fast-math` feature's versions for cores whose FPU does f32 (see
//! [`crate::math`]).
//!
//! `libm::expf` is a call of about 51 instructions on the Cortex-M4F and
//! M55; this one makes no call (a few range checks, then straight-line), so it is
//! inlined into the loops that use it (4% and 8% fewer instructions per
//! token there). `exp(x) = 2^k * e^r` with `k = round(x / ln 2)` (the
//! 1.5 * 2^23 rounding trick), `r = x - k ln 2` in two steps (Cody and Waite:
//! `k * LN2_HI` is exact), `e^r` a degree-6 polynomial (minimax for relative
//! error, 2^-27.9 on [-ln 2 / 2, ln 2 / 2]) and `2^k` added to the exponent
//! bits. `sigmoid` and `silu` are the definitions on top of it. Only f32
//! additions, multiplications and one division, each rounded as IEEE 754
//! says, so every target (and the host) computes the same bits; on a core
//! without an FPU each is a soft-float call, which is why those cores get
//! [`super::fast_int`] instead.
//!
//! Results below 2^-126 are flushed to zero. Error bounds:
//! `runtime/tests/fast_math.rs`, docs/design.md (Numerics).

/// log2(e), rounded to f32.
const LOG2E: f32 = core::f32::consts::LOG2_E;
/// 1.5 * 2^23: adding it rounds a value of magnitude below 2^22 to an integer.
const SHIFTER: f32 = 12_582_912.0;
/// ln 2 in two parts; `LN2_HI` has 16 significant bits, so `k * LN2_HI` is
/// exact for |k| <= 256.
const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
/// `e^r = 1 + r * (C1 + r * (C2 + ... + r * C6))`.
const C1: f32 = f32::from_bits(0x3f80_0001);
const C2: f32 = f32::from_bits(0x3f00_0000);
const C3: f32 = f32::from_bits(0x3e2a_a9c6);
const C4: f32 = f32::from_bits(0x3d2a_aa38);
const C5: f32 = f32::from_bits(0x3c09_50f6);
const C6: f32 = f32::from_bits(0x3ab6_d3b6);

/// |x| below 2^-25: `exp(x)` rounds to 1.
const TINY: u32 = 0x3300_0000;
/// 104.0: below -104 `exp` is 0.
const HUGE: u32 = 0x42d0_0000;
/// 88.72284: the smallest x whose `exp` overflows f32 (as in `libm::expf`).
const EXP_OVERFLOW: u32 = 0x42b1_7218;

/// `e^x`. Results below 2^-126 (x < -87.34) are 0; NaN gives NaN, x >=
/// 88.72284 gives +inf.
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
    let t = x * LOG2E + SHIFTER;
    let kf = t - SHIFTER;
    let k = t.to_bits() as i32 - SHIFTER.to_bits() as i32; // -150..=128
    let r = (x - kf * LN2_HI) - kf * LN2_LO;
    let p = 1.0 + r * (C1 + r * (C2 + r * (C3 + r * (C4 + r * (C5 + r * C6)))));
    // p is in [0.70, 1.42]: its biased exponent is 126 or 127.
    let e = (p.to_bits() >> 23) as i32 + k;
    if e <= 0 {
        return 0.0;
    }
    f32::from_bits((p.to_bits() as i32 + (k << 23)) as u32)
}

/// `1 / (1 + e^-x)` with this module's [`exp`].
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `x * sigmoid(x)` (SiLU) with this module's [`sigmoid`].
#[inline]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}
