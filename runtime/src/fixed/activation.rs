//! Sigmoid and `e^-a` of one value in fixed point, for the element-wise
//! activations of the integer token path (SiLU of the short convolutions,
//! the output gates and the MLP; GDN's beta). 32-bit multiplies only (one
//! `MULS` each on a Cortex-M0), no division.
//!
//! Inputs are Q16 (`t / 2^16`), outputs Q15 (`0..=32768` for `[0, 1]`):
//!
//! - `sigmoid(t)`: a table of 513 values on `[0, 16]` (1 KB of flash),
//!   interpolated linearly; `1 - sigmoid(|t|)` below zero.
//! - `e^-a` for `a >= 0` (GDN's `elu + 1`): `a = k ln 2 + r`, `r` in
//!   `[0, ln 2)`; `e^-r` a degree-4 polynomial (Chebyshev nodes, 2.0e-6
//!   from `e^-r`) by Horner's rule in unsigned Q16; then `>> k`.
//!
//! Measured over every Q16 input in `[-23, 23]` against f64 (the tests):
//! `exp_neg` within 1.22 units of Q16 (1.9e-5), `sigmoid` within 0.99
//! units of Q15 (3.0e-5).

/// `ln 2` in Q16.
const LN2_Q16: u32 = 45_426;
/// `1 / ln 2` in Q11, rounded down: the quotient estimate is at most one
/// too small (corrected after), never too large.
const INV_LN2_Q11: u32 = 2_954;
/// Inputs at or beyond this magnitude (Q16) saturate: `e^-22` is under
/// 2^-31, so `sigmoid(±22)` is 0 or 1 to far under a unit of Q15. (It also
/// keeps `a * INV_LN2_Q11` below 2^32.)
const SATURATE_Q16: u32 = 22 << 16;

/// `e^-r ≈ C0 - r (C1 - r (C2 - r (C3 - r C4)))` on `[0, ln 2)`, Q16.
const C0: u32 = 65_536;
const C1: u32 = 65_527;
const C2: u32 = 32_660;
const C3: u32 = 10_472;
const C4: u32 = 1_941;

/// One in Q15.
pub const ONE_Q15: u32 = 1 << 15;

/// `e^-a` for `a >= 0` in Q16 (`a` up to `2^31`), as Q16 (`0..=65536`).
#[inline]
pub fn exp_neg_q16(a: u32) -> u32 {
    if a >= SATURATE_Q16 {
        // e^-22 < 2^-31: zero in Q16.
        return 0;
    }
    // k = floor(a / ln 2), from an estimate that is at most one too small.
    let mut k = (a * INV_LN2_Q11) >> 27;
    let mut r = a - k * LN2_Q16;
    if r >= LN2_Q16 {
        r -= LN2_Q16;
        k += 1;
    }
    // Every bracket is positive on [0, ln 2) and r < 2^15.5, so each
    // product stays below 2^32.
    let mut p = C3 - ((C4 * r) >> 16);
    p = C2 - ((p * r) >> 16);
    p = C1 - ((p * r) >> 16);
    p = C0 - ((p * r + (1 << 15)) >> 16);
    // p in (2^15, 2^16]; e^-a = p 2^-k, rounded.
    if k == 0 {
        p
    } else {
        (p + (1 << (k - 1))) >> k
    }
}

/// `sigmoid(i / 32) - 1/2` in Q16 for i = 0..=512 (`x` in `[0, 16]`),
/// rounded (generated in f64; a test checks every entry).
const SIGMOID_Q16: [u16; 513] = [
    0, 512, 1024, 1535, 2045, 2555, 3063, 3570, 4075, 4578, 5079, 5577, 6073, 6566, 7056, 7542,
    8025, 8505, 8980, 9452, 9919, 10382, 10840, 11294, 11743, 12186, 12625, 13058, 13486, 13909,
    14326, 14737, 15143, 15542, 15936, 16324, 16706, 17082, 17452, 17816, 18173, 18525, 18870,
    19209, 19542, 19869, 20189, 20504, 20813, 21115, 21411, 21702, 21986, 22265, 22538, 22804,
    23066, 23321, 23571, 23815, 24054, 24287, 24516, 24738, 24956, 25168, 25376, 25578, 25776,
    25969, 26157, 26340, 26519, 26694, 26864, 27029, 27191, 27348, 27502, 27651, 27797, 27938,
    28076, 28211, 28341, 28469, 28592, 28713, 28830, 28944, 29055, 29163, 29268, 29370, 29470,
    29566, 29660, 29751, 29840, 29926, 30010, 30091, 30170, 30247, 30322, 30394, 30465, 30533,
    30600, 30664, 30727, 30788, 30847, 30904, 30960, 31014, 31067, 31118, 31167, 31215, 31262,
    31307, 31351, 31394, 31435, 31476, 31515, 31553, 31589, 31625, 31659, 31693, 31726, 31757,
    31788, 31817, 31846, 31874, 31901, 31928, 31953, 31978, 32002, 32025, 32048, 32070, 32091,
    32112, 32132, 32151, 32170, 32188, 32206, 32223, 32240, 32256, 32271, 32287, 32301, 32316,
    32329, 32343, 32356, 32368, 32381, 32392, 32404, 32415, 32426, 32436, 32447, 32456, 32466,
    32475, 32484, 32493, 32501, 32509, 32517, 32525, 32532, 32540, 32547, 32553, 32560, 32566,
    32573, 32579, 32584, 32590, 32596, 32601, 32606, 32611, 32616, 32620, 32625, 32629, 32634,
    32638, 32642, 32646, 32649, 32653, 32657, 32660, 32663, 32667, 32670, 32673, 32676, 32678,
    32681, 32684, 32686, 32689, 32691, 32694, 32696, 32698, 32700, 32702, 32704, 32706, 32708,
    32710, 32712, 32714, 32715, 32717, 32718, 32720, 32721, 32723, 32724, 32726, 32727, 32728,
    32729, 32731, 32732, 32733, 32734, 32735, 32736, 32737, 32738, 32739, 32740, 32741, 32741,
    32742, 32743, 32744, 32745, 32745, 32746, 32747, 32747, 32748, 32749, 32749, 32750, 32750,
    32751, 32751, 32752, 32752, 32753, 32753, 32754, 32754, 32755, 32755, 32755, 32756, 32756,
    32757, 32757, 32757, 32758, 32758, 32758, 32759, 32759, 32759, 32759, 32760, 32760, 32760,
    32760, 32761, 32761, 32761, 32761, 32762, 32762, 32762, 32762, 32762, 32762, 32763, 32763,
    32763, 32763, 32763, 32763, 32764, 32764, 32764, 32764, 32764, 32764, 32764, 32764, 32765,
    32765, 32765, 32765, 32765, 32765, 32765, 32765, 32765, 32765, 32765, 32766, 32766, 32766,
    32766, 32766, 32766, 32766, 32766, 32766, 32766, 32766, 32766, 32766, 32766, 32766, 32766,
    32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767,
    32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767,
    32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32767, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768, 32768,
    32768, 32768,
];

/// [`SIGMOID_Q16`] as one word a step, for one load a value: step `i`
/// holds `32_769 + lo` in its low 17 bits (the table's value plus the 1/2
/// of Q16 and the rounding's 1 of [`sigmoid_q15`]: at most 65,537) and
/// `hi - lo` (at most 512) above them, `lo` and `hi` the values at `i` and
/// `i + 1`.
static SIGMOID_STEPS: [u32; 512] = {
    let mut t = [0u32; 512];
    let mut i = 0;
    while i < 512 {
        let (lo, hi) = (SIGMOID_Q16[i] as u32, SIGMOID_Q16[i + 1] as u32);
        t[i] = (32_769 + lo) | ((hi - lo) << 17);
        i += 1;
    }
    t
};

/// `sigmoid(t)` for `t` in Q16, as Q15 (`0..=32768`): the table
/// `SIGMOID_Q16` interpolated linearly (steps of 1/32: within 0.4 units
/// of Q15 of the function before rounding), rounded to Q15; `|t| >= 16`
/// gives 0 or 1. The table read as `SIGMOID_STEPS` (one word a step):
/// the same sums.
#[inline]
pub fn sigmoid_q15(t: i32) -> u32 {
    let a = t.unsigned_abs();
    let s = if a >= 16 << 16 {
        ONE_Q15
    } else {
        let (i, f) = ((a >> 11) as usize, a & 0x7ff);
        // `a < 2^20`: `i < 512`.
        let step = SIGMOID_STEPS.get(i).copied().unwrap_or(0);
        // hi - lo <= 512, f < 2^11: the product is below 2^20.
        // (32_768 + lo + ((hi - lo) f + 1024 >> 11) + 1) >> 1.
        ((step & 0x1_ffff) + (((step >> 17) * f + 1024) >> 11)) >> 1
    };
    if t >= 0 {
        s
    } else {
        ONE_Q15 - s
    }
}

/// A value `m × 2^e` (any i32 mantissa) as Q16, saturated to
/// `±2^31 - 1` (the activations then saturate too).
#[inline]
pub fn to_q16(m: i32, e: i32) -> i32 {
    let s = e + 16;
    if s >= 0 {
        if s >= 31 {
            return if m > 0 {
                i32::MAX
            } else if m < 0 {
                -i32::MAX
            } else {
                0
            };
        }
        let wide = (m as i64) << s;
        wide.clamp(-(i32::MAX as i64), i32::MAX as i64) as i32
    } else {
        super::block::shr_round(m, (-s) as u32)
    }
}

/// SiLU of a normal block in place, `x sigmoid(x)`; returns the exponent
/// of the (normal) result.
pub fn silu_block(m: &mut [i32], e: i32) -> i32 {
    // Four values a step (`update_max_each`).
    let max = super::wide::update_max_each(m, |v| {
        let s = sigmoid_q15(to_q16(*v, e)) as i32; // <= 2^15
                                                   // |v >> 15| <= 2^15: the product is at most 2^30.
        *v = (*v >> super::block::TO_15) * s;
        v.unsigned_abs()
    });
    // value = (v >> 15) s 2^(e + 15 - 15)
    super::block::normalize_with_max(m, e, max)
}

/// The 15-bit SiLU of one element `v × 2^e` of a normal block: the result
/// is `silu15(v, e) × 2^(e + 15)`, `|silu15| <= 2^15`.
#[inline(always)]
pub fn silu15(v: i32, e: i32) -> i32 {
    let s = sigmoid_q15(to_q16(v, e)) as i32;
    ((v >> super::block::TO_15) * s) >> 15
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    const Q15: f64 = 32768.0;
    const Q16: f64 = 65536.0;

    #[test]
    fn exp_neg_is_within_1_22_units_everywhere() {
        let mut worst = 0.0f64;
        for a in 0..(23u32 << 16) {
            let want = (-(a as f64) / Q16).exp() * Q16;
            let err = (exp_neg_q16(a) as f64 - want).abs();
            worst = worst.max(err);
        }
        assert!(worst <= 1.22, "worst {worst} units of Q16");
        assert_eq!(exp_neg_q16(0), 65536);
        assert_eq!(exp_neg_q16(u32::MAX), 0);
    }

    #[test]
    fn sigmoid_is_within_0_99_units_of_q15_everywhere() {
        let mut worst = 0.0f64;
        let mut t = -(25i32 << 16);
        while t <= 25 << 16 {
            let x = t as f64 / Q16;
            let want = Q15 / (1.0 + (-x).exp());
            let got = sigmoid_q15(t);
            worst = worst.max((got as f64 - want).abs());
            t += 1;
        }
        assert!(worst <= 0.99, "worst {worst} units of Q15");
        assert_eq!(sigmoid_q15(0), 16384);
        assert_eq!(sigmoid_q15(i32::MAX), 32768);
        assert_eq!(sigmoid_q15(i32::MIN + 1), 0);
        assert_eq!(sigmoid_q15(i32::MIN), 0);
    }

    /// The form before the table of steps: two values read a step.
    fn sigmoid_q15_by_values(t: i32) -> u32 {
        let a = t.unsigned_abs();
        let s = if a >= 16 << 16 {
            ONE_Q15
        } else {
            let (i, f) = ((a >> 11) as usize, a & 0x7ff);
            let (lo, hi) = (u32::from(SIGMOID_Q16[i]), u32::from(SIGMOID_Q16[i + 1]));
            let q16 = 32_768 + lo + (((hi - lo) * f + 1024) >> 11);
            (q16 + 1) >> 1
        };
        if t >= 0 {
            s
        } else {
            ONE_Q15 - s
        }
    }

    /// The table of steps gives the bits of the two values, at every input
    /// in `[-17, 17]` and at the ends of i32.
    #[test]
    fn the_steps_give_the_values_sigmoid() {
        for t in -(17i32 << 16)..=(17 << 16) {
            assert_eq!(sigmoid_q15(t), sigmoid_q15_by_values(t), "{t}");
        }
        for t in [
            i32::MIN,
            i32::MIN + 1,
            i32::MAX,
            (16 << 16) - 1,
            -(16 << 16) + 1,
        ] {
            assert_eq!(sigmoid_q15(t), sigmoid_q15_by_values(t), "{t}");
        }
    }

    #[test]
    fn the_table_is_the_rounded_function() {
        for (i, &v) in SIGMOID_Q16.iter().enumerate() {
            let want = (Q16 / (1.0 + (-(i as f64) / 32.0).exp())).round() - 32768.0;
            assert_eq!(v as f64, want, "{i}");
        }
    }

    #[test]
    fn sigmoid_is_monotone_and_symmetric() {
        let mut last = 0;
        for t in (-(20i32 << 16)..=(20 << 16)).step_by(7) {
            let s = sigmoid_q15(t);
            assert!(s >= last, "{t}");
            last = s;
            let mirror = sigmoid_q15(-t);
            assert!((s + mirror).abs_diff(32768) <= 1, "{t}");
        }
    }

    #[test]
    fn silu_of_a_block_matches_f64() {
        let x: Vec<f32> = (0..200).map(|i| (i as f32 - 100.0) * 0.173).collect();
        let mut m = vec![0; 200];
        let e = super::super::block::from_f32(&x, &mut m);
        let e2 = silu_block(&mut m, e);
        for (i, &v) in x.iter().enumerate() {
            let v = v as f64;
            let want = v / (1.0 + (-v).exp());
            let got = m[i] as f64 * 2f64.powi(e2);
            // Q15 sigmoid and 15-bit views: within 2^-14 of the largest value.
            assert!(
                (got - want).abs() <= 17.3 * 2f64.powi(-13),
                "{v}: {got} {want}"
            );
        }
    }

    #[test]
    fn q16_conversion_rounds_and_saturates() {
        assert_eq!(to_q16(3, -1), 3 << 15);
        assert_eq!(to_q16(3, -17), 2); // 1.5 rounds up
        assert_eq!(to_q16(1 << 29, 0), i32::MAX);
        assert_eq!(to_q16(-(1 << 29), 3), -i32::MAX);
        assert_eq!(to_q16(-5, 20), -i32::MAX);
    }
}
