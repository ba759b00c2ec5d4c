//! `swa`'s integer step with state format 3, `Int8KvLog`
//! (docs/integer-path.md, "The 512-window transformer"): an int8 KV cache
//! with one-byte logarithmic scales, and attention whose scores, softmax
//! weights and weighted sums are plain integers.
//!
//! - A **slot** (one position, one kv head) is `d` int8 values and one
//!   scale code byte `c`: `v_i ≈ q_i × 2^(c/8 - LOG_SCALE_BIAS)`, the
//!   smallest code for which the largest `|q_i|` rounds to at most 127 (so
//!   it lands in `[117, 127]`: the scales are eight steps an octave).
//!   Bytes per slot: `d + 1`. A vector too large for code 255 is clamped
//!   (its largest values saturate at ±127, counted in the layer's clamps);
//!   one too small for code 0 rounds to small integers (absolute error at
//!   most `2^-(LOG_SCALE_BIAS + 1)`).
//! - **Logits** once per key, in Q16 `i32`: the exact int8 dot product
//!   `q·k` times a per-head multiplier of the key's scale step (`c mod 8`,
//!   eight entries per head), shifted by the key's octave (`c / 8`),
//!   clamped to `±2^14` (`±2^30` in Q16). One head's window logits are
//!   kept in a scratch row (`span` words); the sink slots (few) are scored
//!   again.
//! - **Weights** `e^(l - max)` in Q30 from the Q16 difference ([`exp_neg`]:
//!   a 257-entry `2^-x` table, interpolated), each folded with its value's
//!   scale step and octave into a Q23 `i32` (relative to the window's
//!   largest value octave), so the weighted sum is one multiply-add per
//!   value element into `i64`; the denominator is the exact `u64` sum of
//!   the Q30 weights. Integer sums are exact, so the order of the slots
//!   does not change a bit.
//! - RoPE, the projections and the short convolution as the int8 KV step
//!   ([`super::swa_int::project`]).
//!
//! State layout (i32 words; `slots = S + pinned_max + span` as in
//! `swa.rs`): the scale codes `[slots][Hkv][2]` (key, value) as bytes
//! padded to a word, then the keys `[slots][Hkv][d]` as int8 padded to a
//! word, then the values likewise, then (with a short convolution) the q,
//! k and v rings of [`super::conv_int`]. A zeroed state is a valid empty
//! one.

use super::conv_int;
use super::rope_int::{rotate, table_q15};
use super::swa_config::SwaConfig;
use super::swa_int::{align_head, finish, project, quantize_part};
use crate::error::{part, part_mut, split_mut, Error, Result};
use crate::fixed::block::{normalize, quantize, Block};
use crate::fixed::wide::{mul_i32, mul_u32};
use crate::fixed::Fx;
use crate::format::Role;
use crate::mixers::StepCtx;
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;
use core::num::NonZeroU64;

/// The exponent bias of a scale code: code `c` is the scale
/// `2^(c/8 - LOG_SCALE_BIAS)`, so codes 0-255 span `2^-20` to `2^11.875`.
pub(crate) const LOG_SCALE_BIAS: i32 = 20;

/// `2^(j/8)` in Q15, rounded, `j = 0..8`: a scale code's step.
const STEP_Q15: [u32; 8] = [32768, 35734, 38968, 42495, 46341, 50535, 55109, 60097];

/// `2^(-j/8)` in Q31, rounded, `j = 0..8`: the reciprocal steps the
/// quantizer divides by.
const INV_STEP_Q31: [u32; 8] = [
    2147483648, 1969251188, 1805811301, 1655936265, 1518500250, 1392470869, 1276901417, 1170923762,
];

/// `2^(-i/256)` in Q30, rounded, `i = 0..=256`.
static EXP2_NEG_Q30: [u32; 257] = [
    1073741824, 1070838486, 1067942999, 1065055341, 1062175491, 1059303428, 1056439131, 1053582579,
    1050733751, 1047892626, 1045059183, 1042233401, 1039415261, 1036604740, 1033801819, 1031006477,
    1028218693, 1025438448, 1022665720, 1019900489, 1017142735, 1014392438, 1011649578, 1008914134,
    1006186087, 1003465416, 1000752102, 998046124, 995347464, 992656100, 989972014, 987295185,
    984625594, 981963222, 979308048, 976660054, 974019220, 971385527, 968758955, 966139485,
    963527098, 960921775, 958323496, 955732243, 953147997, 950570738, 948000448, 945437108,
    942880699, 940331203, 937788600, 935252872, 932724001, 930201967, 927686753, 925178340,
    922676710, 920181844, 917693724, 915212331, 912737649, 910269657, 907808339, 905353676,
    902905651, 900464244, 898029440, 895601218, 893179563, 890764456, 888355878, 885953814,
    883558244, 881169153, 878786521, 876410331, 874040567, 871677210, 869320244, 866969651,
    864625413, 862287515, 859955938, 857630665, 855311680, 852998965, 850692504, 848392279,
    846098274, 843810471, 841528855, 839253408, 836984114, 834720956, 832463917, 830212982,
    827968132, 825729353, 823496627, 821269938, 819049271, 816834607, 814625932, 812423229,
    810226483, 808035676, 805850792, 803671817, 801498734, 799331526, 797170178, 795014675,
    792865000, 790721137, 788583072, 786450787, 784324269, 782203500, 780088465, 777979150,
    775875538, 773777614, 771685363, 769598769, 767517817, 765442492, 763372778, 761308661,
    759250125, 757197155, 755149737, 753107854, 751071493, 749040637, 747015274, 744995386,
    742980960, 740971982, 738968435, 736970306, 734977579, 732990241, 731008277, 729031671,
    727060411, 725094480, 723133865, 721178552, 719228525, 717283772, 715344277, 713410026,
    711481005, 709557200, 707638598, 705725183, 703816941, 701913860, 700015924, 698123120,
    696235434, 694352853, 692475362, 690602947, 688735596, 686873293, 685016026, 683163781,
    681316545, 679474303, 677637043, 675804750, 673977412, 672155015, 670337545, 668524990,
    666717336, 664914570, 663116678, 661323648, 659535466, 657752119, 655973594, 654199878,
    652430958, 650666822, 648907455, 647152846, 645402981, 643657847, 641917433, 640181724,
    638450708, 636724373, 635002706, 633285695, 631573326, 629865587, 628162466, 626463950,
    624770026, 623080683, 621395908, 619715688, 618040012, 616368866, 614702239, 613040119,
    611382493, 609729349, 608080675, 606436459, 604796689, 603161352, 601530438, 599903933,
    598281827, 596664106, 595050760, 593441776, 591837143, 590236848, 588640881, 587049229,
    585461881, 583878825, 582300049, 580725543, 579155293, 577589290, 576027521, 574469975,
    572916640, 571367506, 569822560, 568281792, 566745190, 565212742, 563684439, 562160268,
    560640218, 559124278, 557612438, 556104685, 554601009, 553101399, 551605844, 550114332,
    548626854, 547143398, 545663953, 544188508, 542717053, 541249576, 539786068, 538326517,
    536870912,
];

/// `log2 e` in Q30, rounded.
const LOG2_E_Q30: u32 = 1_549_082_005;

/// The largest logit magnitude, Q16 (`2^14`): a logit beyond saturates.
const LOGIT_LIMIT: i64 = 1 << 30;

/// `e^-a` for a Q16 `a >= 0`, in Q30 (`2^30` for `a = 0`): `a log2 e` in
/// Q24 (rounded), its fraction's `2^-f` from [`EXP2_NEG_Q30`] interpolated
/// linearly between steps of 1/256, then shifted by the integer part.
/// Within `2^-20` relative of `e^-a` plus half a unit of Q30 (the tests
/// measure it on the Q16 grid); 0 from `2^-31` down.
#[inline]
pub(crate) fn exp_neg(a: u32) -> u32 {
    let y = (mul_u32(a, LOG2_E_Q30) + (1 << 21)) >> 22; // Q24, below 2^41
    let n = y >> 24;
    if n > 30 {
        return 0;
    }
    let f = (y & 0xff_ffff) as usize;
    let (i, lo) = (f >> 16, (f & 0xffff) as u32);
    let (t0, t1) = (EXP2_NEG_Q30[i], EXP2_NEG_Q30[i + 1]);
    // (t0 - t1) < 2^22, lo < 2^16: the product below 2^38.
    let t = t0 - ((mul_u32(t0 - t1, lo) + (1 << 15)) >> 16) as u32;
    if n == 0 {
        t
    } else {
        (t + (1 << (n - 1))) >> n
    }
}

/// `round(m × 2^(e - c/8 + LOG_SCALE_BIAS))` as a magnitude: the value
/// `m × 2^e` in units of the scale of code `c` (saturating at `u32::MAX`).
#[inline]
fn in_units(m: u32, e: i32, c: i32) -> u32 {
    // m × INV_STEP × 2^-31 × 2^(e - c/8 + B): m < 2^31, INV_STEP <= 2^31.
    let p = mul_u32(m, INV_STEP_Q31[(c & 7) as usize]);
    let sh = 31 - (e - (c >> 3) + LOG_SCALE_BIAS);
    if sh >= 64 {
        0
    } else if sh <= 0 {
        if p == 0 {
            0
        } else {
            u32::MAX
        }
    } else {
        let r = (p >> (sh - 1)).div_ceil(2); // round half up
        r.min(u32::MAX as u64) as u32
    }
}

/// Quantizes the normal block `b` to int8 with a log scale: writes `q`,
/// returns the scale code, the smallest for which the largest value
/// rounds to at most 127 (codes clamped to 0-255; one past 255 saturates
/// the values at ±127 and adds one to `clamps`). A zero block gives zeros
/// and code 0.
pub(crate) fn quantize_log(b: Block<'_>, q: &mut [i8], clamps: &mut u32) -> u8 {
    let top = b.m.iter().fold(0u32, |a, v| a.max(v.unsigned_abs()));
    if top == 0 {
        q.fill(0);
        return 0;
    }
    // top in [2^(t-1), 2^t): the value below 2^(e + t); at c = 8k with
    // k = e + t - 7 + B the largest is below 128 units, at 8(k - 1) at
    // least 2^(t-1-(k-1)+...) = 64: the code is in (8k - 8, 8k + 1].
    let t = 32 - crate::fixed::wide::lz32(top) as i32;
    let k = b.e + t - 7 + LOG_SCALE_BIAS;
    let mut c = 8 * k - 7;
    while c < 8 * k + 1 && (c < 0 || in_units(top, b.e, c) > 127) {
        c += 1;
    }
    let c = if c > 255 {
        *clamps = clamps.saturating_add(1);
        255
    } else {
        c.max(0)
    };
    for (qi, &v) in q.iter_mut().zip(b.m) {
        let mag = in_units(v.unsigned_abs(), b.e, c).min(127) as i8;
        *qi = if v < 0 { -mag } else { mag };
    }
    c as u8
}

/// The scale of code `c`, `2^(c/8 - LOG_SCALE_BIAS)`, as an [`Fx`].
pub(crate) fn code_scale(c: u8) -> Fx {
    Fx::from_u64(
        STEP_Q15[(c & 7) as usize] as u64,
        (c >> 3) as i32 - LOG_SCALE_BIAS - 15,
        false,
    )
}

/// The exact dot product of two int8 vectors (`|Σ| < 2^31` for `d < 2^17`);
/// `D > 0` unrolls it for vectors of `D` values (the same sum: integer).
#[inline(always)]
fn dot8<const D: usize>(a: &[i8], b: &[i8]) -> i32 {
    if D > 0 {
        if let (Some(a), Some(b)) = (a.first_chunk::<D>(), b.first_chunk::<D>()) {
            return a
                .iter()
                .zip(b.iter())
                .fold(0i32, |s, (&x, &y)| s.wrapping_add(x as i32 * y as i32));
        }
    }
    a.iter()
        .zip(b)
        .fold(0i32, |s, (&x, &y)| s.wrapping_add(x as i32 * y as i32))
}

/// `acc += w v` element by element (`|w v| < 2^31` per term); `D > 0`
/// unrolls it for `D` values (the same sums).
#[inline(always)]
fn accumulate<const D: usize>(acc: &mut [i64], w: i32, v: &[i8]) {
    if D > 0 {
        if let (Some(acc), Some(v)) = (acc.first_chunk_mut::<D>(), v.first_chunk::<D>()) {
            for (a, &x) in acc.iter_mut().zip(v.iter()) {
                *a += w as i64 * x as i64;
            }
            return;
        }
    }
    for (a, &x) in acc.iter_mut().zip(v) {
        *a += w as i64 * x as i64;
    }
}

/// One slot's share of the second pass: its weight `e^(l - max)` in Q30
/// (returned, for the denominator) and `acc += w × step(vc) × 2^(vc/8 -
/// vtop) × v` with that factor a Q23 `i32` (below `2^24`).
#[inline(always)]
fn weigh<const D: usize>(acc: &mut [i64], max: i32, vtop: u8, l: i32, v: &[i8], vc: u8) -> u64 {
    let w = exp_neg((max as i64 - l as i64) as u32); // Q30, (0, 2^30]
                                                     // w × step (< 2^46) to Q23 of the largest octave: below 2^24.
    let sh = 22 + vtop.saturating_sub(vc >> 3) as u32;
    let wv = if sh >= 64 {
        0
    } else {
        // Rounded half up: `((p >> (sh - 1)) + 1) >> 1` is `(p + 2^(sh-1))
        // >> sh`, and `p >> 21` (below 2^25) fits a u32.
        let p = mul_u32(w, STEP_Q15[(vc & 7) as usize]);
        ((((p >> (sh - 1)) as u32) + 1) >> 1) as i32
    };
    // |wv x| < 2^24 × 127 < 2^31.
    accumulate::<D>(acc, wv, v);
    w as u64
}

/// One head's query as the logits read it: its int8 values and, per scale
/// step of a key, the multiplier `2^(j/8) × scale_q / sqrt(d)` as a 31-bit
/// integer with the common exponent `base` (the Q16 logit of a key of code
/// `c` is `q·k × mult[c mod 8] × 2^(base + c/8)`).
#[derive(Clone, Copy)]
pub(crate) struct Scorer<'q> {
    q: &'q [i8],
    /// Below 2^31: an `i32`, so that a logit is one signed multiply.
    mult: [i32; 8],
    base: i32,
}

impl<'q> Scorer<'q> {
    /// The scorer of the int8 query `q` with scale `scale` (`c = 1/sqrt(d)`
    /// applied here).
    pub(crate) fn new(q: &'q [i8], scale: Fx) -> Scorer<'q> {
        let qc = scale * Fx::from_i64(q.len().max(1) as i64, 0).rsqrt();
        // STEP (< 2^16) × mantissa (< 2^32) >> 17: below 2^31.
        let mult = STEP_Q15.map(|s| ((mul_u32(s, qc.mantissa()) + (1 << 16)) >> 17) as i32);
        // real = mult 2^(e + 17 - 15) 2^(c/8 - B); Q16 adds 16.
        let base = qc.exponent() + 18 - LOG_SCALE_BIAS;
        Scorer { q, mult, base }
    }

    /// The Q16 logit of the key `k` with scale code `c`, clamped to `±2^30`.
    #[cfg(test)]
    pub(crate) fn logit(&self, k: &[i8], c: u8) -> i32 {
        self.logit_d::<0>(k, c)
    }

    /// [`Scorer::logit`] with the dot product unrolled for `D` values.
    #[inline(always)]
    fn logit_d<const D: usize>(&self, k: &[i8], c: u8) -> i32 {
        let p = mul_i32(dot8::<D>(self.q, k), self.mult[(c & 7) as usize]);
        let sh = self.base + (c >> 3) as i32;
        let l = if sh < 0 {
            // Rounded half up: `((p >> (s - 1)) + 1) >> 1` is `(p +
            // 2^(s-1)) >> s` without the 64-bit constant.
            let s = sh.unsigned_abs();
            if s > 62 {
                0
            } else {
                ((p >> (s - 1)) + 1) >> 1
            }
        } else if sh > 30 || p.unsigned_abs() >= (LOGIT_LIMIT as u64) >> sh {
            p.signum() * LOGIT_LIMIT
        } else {
            p << sh
        };
        l.clamp(-LOGIT_LIMIT, LOGIT_LIMIT) as i32
    }
}

/// A read view of a log-scale KV cache: one kv head's slots.
#[derive(Clone, Copy)]
pub(crate) struct Cache<'a> {
    /// Scale codes `[slots][Hkv][2]` (key, value).
    pub codes: &'a [u8],
    /// Keys `[slots][Hkv][d]`.
    pub keys: &'a [i8],
    /// Values `[slots][Hkv][d]`.
    pub values: &'a [i8],
    /// Kv heads.
    pub hkv: usize,
    /// The kv head read.
    pub head: usize,
    /// Head size.
    pub d: usize,
}

impl<'a> Cache<'a> {
    /// Slot `si`'s key and its code, its value and its code.
    #[inline]
    fn slot(&self, si: usize) -> (&'a [i8], u8, &'a [i8], u8) {
        let at = si * self.hkv + self.head;
        let (d, codes) = (self.d, self.codes);
        (
            self.keys.get(at * d..(at + 1) * d).unwrap_or(&[]),
            codes.get(2 * at).copied().unwrap_or(0),
            self.values.get(at * d..(at + 1) * d).unwrap_or(&[]),
            codes.get(2 * at + 1).copied().unwrap_or(0),
        )
    }
}

/// Calls its argument with each sink slot a head sees.
pub(crate) type SinkSlots<'s> = &'s dyn Fn(&mut dyn FnMut(usize));

/// The slots one query head attends to: the window's ring slots (`count`
/// of them from ring position `ring0`, `step` apart, in a ring of `span`,
/// after the `sink_cap` sink slots), then the sink slots `sinks` (scored
/// with the query `alt`: 1 for the rotated one, else 0).
#[derive(Clone, Copy)]
pub(crate) struct Visible<'s> {
    /// First ring position.
    pub ring0: usize,
    /// Window keys.
    pub count: usize,
    /// Ring positions between keys (the dilation).
    pub step: usize,
    /// Ring length.
    pub span: usize,
    /// Ring slots start after this many sink slots.
    pub sink_cap: usize,
    /// The sink slots seen (slot indices, increasing).
    pub sinks: SinkSlots<'s>,
    /// Which query scores the sinks (0 or 1).
    pub alt: usize,
}

/// Softmax attention of one query head (scorers `[plain, rotated]`) over
/// `vis` in `cache`, with an optional extra Q16 logit `sink` in the
/// denominator: writes the weighted sum of the values into `out` (`[d]`)
/// as a normal block and returns its exponent (all zero, exponent 0,
/// without slots). `row` (at least `vis.count` words) keeps the window's
/// logits; `acc` (`[d]`) is scratch.
pub(crate) fn attend(
    scorers: [&Scorer<'_>; 2],
    cache: &Cache<'_>,
    vis: &Visible<'_>,
    sink: Option<i32>,
    row: &mut [i32],
    acc: &mut [i64],
    out: &mut [i32],
) -> i32 {
    // The common head sizes unrolled (the same integer arithmetic).
    match out.len() {
        8 => attend_d::<8>(scorers, cache, vis, sink, row, acc, out),
        16 => attend_d::<16>(scorers, cache, vis, sink, row, acc, out),
        _ => attend_d::<0>(scorers, cache, vis, sink, row, acc, out),
    }
}

/// The window's ring positions as at most two runs `(first position,
/// keys)` whose keys are `vis.step` apart without wrapping: from `ring0` to
/// the ring's end, then from the wrapped position on.
fn ring_runs(vis: &Visible<'_>) -> [(usize, usize); 2] {
    let step = vis.step.max(1);
    let before_wrap = vis.span.saturating_sub(vis.ring0).div_ceil(step);
    let first = vis.count.min(before_wrap);
    let wrapped = (vis.ring0 + first * step).saturating_sub(vis.span);
    [(vis.ring0, first), (wrapped, vis.count - first)]
}

/// [`attend`] with the per-key loops unrolled for `D` values (`0`: any).
fn attend_d<const D: usize>(
    scorers: [&Scorer<'_>; 2],
    cache: &Cache<'_>,
    vis: &Visible<'_>,
    sink: Option<i32>,
    row: &mut [i32],
    acc: &mut [i64],
    out: &mut [i32],
) -> i32 {
    let row = match row.get_mut(..vis.count) {
        Some(r) => r,
        None => {
            out.fill(0);
            return 0;
        }
    };
    let (codes, keys, values, d) = (cache.codes, cache.keys, cache.values, cache.d);
    // Slot `si` of the kv head read is entry `si hkv + head`; a run's keys
    // are `step hkv` entries apart.
    let entry = |pos: usize| (vis.sink_cap + pos) * cache.hkv + cache.head;
    let stride = vis.step.max(1) * cache.hkv;
    let runs = ring_runs(vis);
    // Pass 1: the window's logits into the row, the sinks' maximum, the
    // largest value octave.
    let mut max = sink.unwrap_or(i32::MIN);
    let mut vtop = 0u8;
    let plain = scorers[0];
    let mut rest = &mut *row;
    for (pos, n) in runs {
        let (part, later) = rest.split_at_mut(n.min(rest.len()));
        rest = later;
        let mut at = entry(pos);
        for l in part.iter_mut() {
            let k = keys.get(at * d..at * d + d).unwrap_or(&[]);
            let (kc, vc) = match codes.get(2 * at..2 * at + 2) {
                Some(&[kc, vc]) => (kc, vc),
                _ => (0, 0),
            };
            *l = plain.logit_d::<D>(k, kc);
            max = max.max(*l);
            vtop = vtop.max(vc >> 3);
            at += stride;
        }
    }
    let mut n = row.len();
    let alt = scorers[vis.alt & 1];
    (vis.sinks)(&mut |si| {
        let (k, kc, _, vc) = cache.slot(si);
        max = max.max(alt.logit_d::<D>(k, kc));
        vtop = vtop.max(vc >> 3);
        n += 1;
    });
    acc.fill(0);
    if n == 0 {
        out.fill(0);
        return 0;
    }
    // Pass 2: weights, their sum, and the weighted values.
    let mut sum = sink.map_or(0u64, |l| exp_neg((max as i64 - l as i64) as u32) as u64);
    let mut rest = &*row;
    for (pos, n) in runs {
        let (part, later) = rest.split_at(n.min(rest.len()));
        rest = later;
        let mut at = entry(pos);
        for &l in part {
            let v = values.get(at * d..at * d + d).unwrap_or(&[]);
            let vc = codes.get(2 * at + 1).copied().unwrap_or(0);
            sum += weigh::<D>(acc, max, vtop, l, v, vc);
            at += stride;
        }
    }
    (vis.sinks)(&mut |si| {
        let (k, kc, v, vc) = cache.slot(si);
        sum += weigh::<D>(acc, max, vtop, alt.logit_d::<D>(k, kc), v, vc);
    });
    // Σ wv x = 2^(23 + B - vtop) Σ w v (w, v real): out = acc 2^(vtop - B + 7) / sum,
    // and `finish` takes acc × 2^-24 × f.
    let f = Fx::from_u64(sum, 0, false)
        .recip()
        .shl(vtop as i32 - LOG_SCALE_BIAS + 31);
    finish(acc, f, out)
}

/// [`attend`] as it was written first, slot by slot around the ring: the
/// reference the runs above are tested against, bit for bit.
#[cfg(test)]
fn attend_reference(
    scorers: [&Scorer<'_>; 2],
    cache: &Cache<'_>,
    vis: &Visible<'_>,
    sink: Option<i32>,
    row: &mut [i32],
    acc: &mut [i64],
    out: &mut [i32],
) -> i32 {
    let row = match row.get_mut(..vis.count) {
        Some(r) => r,
        None => {
            out.fill(0);
            return 0;
        }
    };
    // Pass 1: the window's logits into the row, the sinks' maximum, the
    // largest value octave.
    let mut max = sink.unwrap_or(i32::MIN);
    let mut vtop = 0u8;
    let mut n = 0usize;
    let plain = scorers[0];
    let mut at = vis.ring0;
    for l in row.iter_mut() {
        let (k, kc, _, vc) = cache.slot(vis.sink_cap + at);
        *l = plain.logit_d::<0>(k, kc);
        max = max.max(*l);
        vtop = vtop.max(vc >> 3);
        at += vis.step;
        if at >= vis.span {
            at -= vis.span;
            if at >= vis.span {
                // Checked: the span is nonzero (`0` is not reached).
                at = at.checked_rem(vis.span).unwrap_or(0);
            }
        }
    }
    n += row.len();
    let alt = scorers[vis.alt & 1];
    (vis.sinks)(&mut |si| {
        let (k, kc, _, vc) = cache.slot(si);
        max = max.max(alt.logit_d::<0>(k, kc));
        vtop = vtop.max(vc >> 3);
        n += 1;
    });
    acc.fill(0);
    if n == 0 {
        out.fill(0);
        return 0;
    }
    // Pass 2: weights, their sum, and the weighted values.
    let mut sum = sink.map_or(0u64, |l| exp_neg((max as i64 - l as i64) as u32) as u64);
    let mut at = vis.ring0;
    for &l in row.iter() {
        let (_, _, v, vc) = cache.slot(vis.sink_cap + at);
        sum += weigh::<0>(acc, max, vtop, l, v, vc);
        at += vis.step;
        if at >= vis.span {
            at -= vis.span;
            if at >= vis.span {
                // Checked: the span is nonzero (`0` is not reached).
                at = at.checked_rem(vis.span).unwrap_or(0);
            }
        }
    }
    (vis.sinks)(&mut |si| {
        let (k, kc, v, vc) = cache.slot(si);
        sum += weigh::<0>(acc, max, vtop, alt.logit_d::<0>(k, kc), v, vc);
    });
    // Σ wv x = 2^(23 + B - vtop) Σ w v (w, v real): out = acc 2^(vtop - B + 7) / sum,
    // and `finish` takes acc × 2^-24 × f.
    let f = Fx::from_u64(sum, 0, false)
        .recip()
        .shl(vtop as i32 - LOG_SCALE_BIAS + 31);
    finish(acc, f, out)
}

/// The largest magnitude a log-scale KV state holds
/// (`Session::state_max_abs`): every slot's key and value (`max |q| ×
/// scale`) and the convolution rings, for a state of `slots` slots.
pub(crate) fn state_max_abs(c: &SwaConfig, slots: usize, state: &[i32]) -> f32 {
    let (h, hkv, d) = (
        c.num_heads as usize,
        c.num_kv_heads as usize,
        c.head_dim as usize,
    );
    let code_words = (2 * slots * hkv).div_ceil(4);
    let bytes_words = (slots * hkv * d).div_ceil(4);
    let (Some(cw), Some(kw), Some(vw)) = (
        state.get(..code_words),
        state.get(code_words..code_words + bytes_words),
        state.get(code_words + bytes_words..code_words + 2 * bytes_words),
    ) else {
        return 0.0;
    };
    let codes: &[u8] = bytemuck::cast_slice(cw);
    let (keys, values): (&[i8], &[i8]) = (bytemuck::cast_slice(kw), bytemuck::cast_slice(vw));
    let mut top = Fx::ZERO;
    let mut see = |x: Fx| {
        if x.gt(top) {
            top = x;
        }
    };
    let max8 = |q: &[i8]| q.iter().fold(0u8, |a, v| a.max(v.unsigned_abs()));
    for at in 0..slots * hkv {
        let part = |all: &[i8]| all.get(at * d..(at + 1) * d).map_or(0, max8);
        for (m, ci) in [(part(keys), 2 * at), (part(values), 2 * at + 1)] {
            let code = codes.get(ci).copied().unwrap_or(0);
            see(code_scale(code) * Fx::from_i64(m as i64, 0));
        }
    }
    let mut at = code_words + 2 * bytes_words;
    if c.conv_size > 0 {
        for ch in [h * d, hkv * d, hkv * d] {
            let words = conv_int::state_words(ch as u64, c.conv_size) as usize;
            if let Some(ring) = state.get(at..at + words) {
                see(conv_int::max_abs(ring, ch, c.conv_size as usize));
            }
            at += words;
        }
    }
    f32::from_bits(top.to_f32_bits())
}

/// One token of `swa` with a log-scale int8 KV cache
/// ([`crate::mixers::Mixer::step_int`] for state format `Int8KvLog`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn step(
    c: &SwaConfig,
    ctx: &StepCtx,
    w: &LayerWeights<'_>,
    state: &mut [f32],
    scratch: &mut [f32],
    act: &mut ActBuf<'_>,
    x: Block<'_>,
    out: &mut [i32],
    clamps: &mut u32,
) -> Result<i32> {
    let (h, hkv, d) = (
        c.num_heads as usize,
        c.num_kv_heads as usize,
        c.head_dim as usize,
    );
    // Nonzero: the span (at least 1) and the dilation (`max(1)`), stated
    // so that no remainder or division below has a panic branch.
    let span = NonZeroU64::new(c.span()).unwrap_or(NonZeroU64::MIN);
    let t = ctx.pos;
    let r = NonZeroU64::new(c.dilation.max(1) as u64).unwrap_or(NonZeroU64::MIN);
    let half = d / 2;
    let scratch: &mut [i32] = bytemuck::cast_slice_mut(scratch);
    let too_small = Error::Internal("swa scratch too small");
    let (q, rest) = scratch.split_at_mut_checked(h * d).ok_or(too_small)?;
    let (o, rest) = rest.split_at_mut_checked(h * d).ok_or(too_small)?;
    let (cs, rest) = rest.split_at_mut_checked(d).ok_or(too_small)?;
    let (tmp, rest) = rest.split_at_mut_checked(d).ok_or(too_small)?;
    let (q8s, rest) = rest.split_at_mut_checked(2 * d).ok_or(too_small)?;
    let (row, rest) = rest
        .split_at_mut_checked(span.get() as usize)
        .ok_or(too_small)?;
    // k, v and the spare d words: the i64 accumulator once k, v are stored.
    let kv_acc = rest.get_mut(..2 * hkv * d + d).ok_or(too_small)?;

    // The state's parts.
    let sink_cap = c.sinks as usize + ctx.pinned_max;
    let slots = sink_cap + span.get() as usize;
    let state: &mut [i32] = bytemuck::cast_slice_mut(state);
    let bad_state = Error::Internal("swa state of the wrong size");
    let code_words = (2 * slots * hkv).div_ceil(4);
    let bytes_words = (slots * hkv * d).div_ceil(4);
    let (cw, rest) = state.split_at_mut_checked(code_words).ok_or(bad_state)?;
    let (kw, rest) = rest.split_at_mut_checked(bytes_words).ok_or(bad_state)?;
    let (vw, convs) = rest.split_at_mut_checked(bytes_words).ok_or(bad_state)?;
    let codes: &mut [u8] = bytemuck::cast_slice_mut(cw);
    let keys: &mut [i8] = bytemuck::cast_slice_mut(kw);
    let values: &mut [i8] = bytemuck::cast_slice_mut(vw);

    const SCRATCH: &str = "swa scratch too small";
    const SLOT: &str = "swa slot out of the cache";
    let kv = part_mut(kv_acc, ..2 * hkv * d, SCRATCH)?;
    let [eq, ek, ev] = project(c, ctx, w, act, x, q, kv, cs, convs)?;
    let (cos, sin) = split_mut(cs, half, SCRATCH)?;

    // Store this token's k, v (per kv head, each normalized on its own).
    let s_eff = (c.sinks as usize + ctx.pinned) as u64;
    {
        let (k, v) = kv_acc
            .split_at_checked(hkv * d)
            .ok_or(Error::Internal(SCRATCH))?;
        let mut store = |slot: usize| -> Result<()> {
            for j in 0..hkv {
                let at = (slot * hkv + j) * d;
                for (src, e, dst, ci) in [(k, ek, &mut *keys, 0), (v, ev, &mut *values, 1)] {
                    let src = part(src, j * d..j * d + d, SCRATCH)?;
                    let tmp = part_mut(tmp, ..src.len(), SCRATCH)?;
                    tmp.copy_from_slice(src);
                    let e = normalize(tmp, e);
                    let dst = part_mut(dst, at..at + d, SLOT)?;
                    let code = quantize_log(Block { m: tmp, e }, dst, clamps);
                    *part_mut(codes, 2 * (slot * hkv + j) + ci, SLOT)? = code;
                }
            }
            Ok(())
        };
        store(sink_cap + (t % span) as usize)?;
        if t < s_eff {
            store(t as usize)?;
        }
    }

    let (first, sink_end) = super::swa_config::visible(t, s_eff, span.get(), r.get());
    let in_window = |s: u64| s >= first && (t - s) % r == 0;
    let rerotate = c.cache_positions && c.use_rope && sink_end > 0;
    if rerotate {
        let back = t - t.min(s_eff + span.get() - 1);
        table_q15(
            c.rope_theta.to_bits(),
            c.head_dim,
            back.wrapping_neg(),
            cos,
            sin,
        );
    }
    let sinks = match c.sink_logits {
        true => Some(w.get(Role::Sinks)?.stored_vector()?),
        false => None,
    };
    let acc: &mut [i64] = {
        let (_, aligned, _) = bytemuck::pod_align_to_mut::<i32, i64>(kv_acc);
        aligned.get_mut(..d).ok_or(too_small)?
    };
    let q8s: &mut [i8] = bytemuck::cast_slice_mut(q8s);
    let (q8, q8_alt) = split_mut(q8s, d, SCRATCH)?;
    let q8_alt = part_mut(q8_alt, ..d, SCRATCH)?;
    let group = (h / hkv.max(1)).max(1);
    let (keys, values, codes) = (&*keys, &*values, &*codes);
    // The window's keys `start, start + r, .., t`, in ring slots.
    let start = first + (t - first) % r;
    let sink_slots = move |f: &mut dyn FnMut(usize)| {
        for s in 0..sink_end {
            if !(r.get() > 1 && in_window(s)) {
                f(s as usize);
            }
        }
    };
    let vis = Visible {
        ring0: (start % span) as usize,
        count: ((t - start) / r + 1) as usize,
        step: r.get() as usize,
        span: span.get() as usize,
        sink_cap,
        sinks: &sink_slots,
        alt: usize::from(rerotate),
    };
    // The heads aligned as they come: `eo` the common exponent so far.
    let mut eo: Option<i32> = None;
    for head in 0..h {
        let qh = part(q, head * d..head * d + d, SCRATCH)?;
        let qs = quantize_part(qh, eq, tmp, q8)?;
        let qs_alt = if rerotate {
            let tmp = part_mut(tmp, ..qh.len(), SCRATCH)?;
            tmp.copy_from_slice(qh);
            let e = normalize(tmp, eq);
            let e = rotate(tmp, e, cos, sin);
            quantize(Block { m: tmp, e }, q8_alt)
        } else {
            qs
        };
        let plain = Scorer::new(q8, qs);
        let rotated = Scorer::new(q8_alt, qs_alt);
        let cache = Cache {
            codes,
            keys,
            values,
            hkv,
            head: head / group,
            d,
        };
        let sink = sinks.as_ref().map(|v| {
            Fx::from_f32_bits(v.bits(head))
                .to_fixed(16)
                .clamp(-LOGIT_LIMIT, LOGIT_LIMIT) as i32
        });
        let (done, rest) = split_mut(o, head * d, SCRATCH)?;
        let oh = part_mut(rest, ..d, SCRATCH)?;
        let e = attend([&plain, &rotated], &cache, &vis, sink, row, acc, oh);
        if oh.iter().all(|&m| m == 0) {
            continue;
        }
        align_head(done, oh, e, &mut eo);
    }
    let eo = match eo {
        Some(e) => normalize(o, e),
        None => {
            o.fill(0);
            0
        }
    };
    let oin = act.input_int(Block { m: o, e: eo })?;
    w.get(Role::OProj)?.matvec_int(&oin, out)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::fixed::testing::{block_of, fx64, Rng};
    use std::vec;
    use std::vec::Vec;

    #[test]
    fn tables_are_their_functions_rounded() {
        for j in 0..8 {
            let s = 2f64.powf(j as f64 / 8.0);
            assert_eq!(STEP_Q15[j] as f64, (s * 32768.0).round(), "{j}");
            assert_eq!(INV_STEP_Q31[j] as f64, (2f64.powi(31) / s).round(), "{j}");
        }
        for (i, &t) in EXP2_NEG_Q30.iter().enumerate() {
            let want = (2f64.powi(30) * 2f64.powf(-(i as f64) / 256.0)).round();
            assert_eq!(t as f64, want, "{i}");
        }
        assert_eq!(
            LOG2_E_Q30 as f64,
            (std::f64::consts::LOG2_E * 2f64.powi(30)).round()
        );
    }

    /// The stated bound: within 2^-20 relative of `e^-a` plus half a unit
    /// of Q30 (a on the Q16 grid).
    #[test]
    fn exp_neg_is_within_2_pow_minus_20() {
        let mut worst = 0f64;
        let mut a = 0u32;
        while a < 30 << 16 {
            let got = exp_neg(a) as f64 / 2f64.powi(30);
            let want = (-(a as f64) / 65536.0).exp();
            let err = (got - want).abs() - 2f64.powi(-31);
            worst = worst.max(err / want);
            assert!(err <= want * 2f64.powi(-20), "{a}: {got} {want}");
            a += 7;
        }
        assert_eq!(exp_neg(0), 1 << 30);
        assert_eq!(exp_neg(u32::MAX), 0);
        std::println!("exp_neg: worst relative {worst:.3e}");
    }

    /// Quantizes `x` with a log scale: the int8 values, the code and the
    /// dequantized values.
    fn store(x: &[f64], clamps: &mut u32) -> (Vec<i8>, u8, Vec<f64>) {
        let (m, e) = block_of(x);
        let mut q = vec![0i8; x.len()];
        let c = quantize_log(Block { m: &m, e }, &mut q, clamps);
        let s = fx64(code_scale(c));
        let deq = q.iter().map(|&v| v as f64 * s).collect();
        (q, c, deq)
    }

    #[test]
    fn log_scales_put_the_largest_in_117_to_127() {
        let mut rng = Rng(0x5eed);
        let mut clamps = 0;
        for case in 0..2000 {
            // (block_of takes magnitudes below 128.)
            let amp = 2f64.powf((rng.next() + 1.0) * 6.5 - 8.0);
            let x: Vec<f64> = (0..8 + case % 9).map(|_| amp * rng.next()).collect();
            let (q, c, deq) = store(&x, &mut clamps);
            let top = q.iter().map(|v| v.unsigned_abs()).max().unwrap();
            assert!((117..=127).contains(&top), "case {case}: {top} (code {c})");
            let s = fx64(code_scale(c));
            for (a, b) in x.iter().zip(&deq) {
                // Half a unit, the Q15 step's rounding (2^-16 relative, up
                // to 127 units) and the block's own rounding of x.
                let err = (a - b).abs();
                let bound = s * (0.5 + 127.0 * 2f64.powi(-16)) + 2f64.powi(-24);
                assert!(err <= bound, "case {case}: {a} {b} {s}");
            }
        }
        assert_eq!(clamps, 0);
        // Beyond code 255: saturated and counted; below code 0: code 0.
        let mut q = [0i8; 3];
        let big = Block {
            m: &[1 << 28, -(1 << 29) + 1, 5],
            e: 0,
        };
        assert_eq!(quantize_log(big, &mut q, &mut clamps), 255);
        assert_eq!((q, clamps), ([127, -127, 0], 1));
        let (q, c, _) = store(&[1e-7, 2e-6, 0.0], &mut clamps);
        assert_eq!((c, q, clamps), (0, vec![0, 2, 0], 1));
        let (q, c, _) = store(&[0.0, 0.0], &mut clamps);
        assert_eq!((c, q), (0, vec![0, 0]));
    }

    /// Softmax attention in f64 of `q` (`q_alt` for the sink slots, the
    /// first `n_sinks`) over `keys`/`values`, with an optional sink logit.
    fn attend64(
        [q, q_alt]: [&[f64]; 2],
        n_sinks: usize,
        keys: &[Vec<f64>],
        values: &[Vec<f64>],
        sink: Option<f64>,
    ) -> Vec<f64> {
        let d = q.len();
        let c = 1.0 / (d as f64).sqrt();
        let l: Vec<f64> = keys
            .iter()
            .enumerate()
            .map(|(t, k)| {
                let q = if t < n_sinks { q_alt } else { q };
                q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() * c
            })
            .collect();
        let max = l
            .iter()
            .copied()
            .chain(sink)
            .fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = l.iter().map(|x| (x - max).exp()).collect();
        let sum: f64 = p.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
        (0..d)
            .map(|i| p.iter().zip(values).map(|(p, v)| p * v[i]).sum::<f64>() / sum)
            .collect()
    }

    /// Runs the log-scale attention over `n_sinks` sink slots (scored with
    /// the second query) and `n` window slots laid out in a ring of `n`
    /// starting at `ring0`: returns its output, the f64 attention over the
    /// dequantized slots and that over the inputs.
    #[allow(clippy::too_many_arguments)]
    fn run(
        rng: &mut Rng,
        n: usize,
        n_sinks: usize,
        d: usize,
        amp: f64,
        sink: Option<f64>,
        ring0: usize,
    ) -> [Vec<f64>; 3] {
        let gen = |rng: &mut Rng, a: f64| -> Vec<f64> { (0..d).map(|_| a * rng.next()).collect() };
        let q = gen(rng, amp);
        let q_alt = gen(rng, amp);
        let total = n_sinks + n;
        // Per-slot magnitudes that differ by up to 8x (keys) and 5x (values).
        let keys: Vec<Vec<f64>> = (0..total)
            .map(|t| gen(rng, amp / (1 + t % 8) as f64))
            .collect();
        let values: Vec<Vec<f64>> = (0..total).map(|t| gen(rng, 1.0 + (t % 5) as f64)).collect();
        let mut clamps = 0;
        let quant_q = |x: &[f64], q8: &mut Vec<i8>| -> (Fx, Vec<f64>) {
            let (m, e) = block_of(x);
            let s = quantize(Block { m: &m, e }, q8);
            let deq = q8.iter().map(|&v| v as f64 * fx64(s)).collect();
            (s, deq)
        };
        let (mut q8, mut qa8) = (vec![0i8; d], vec![0i8; d]);
        let (qs, qd) = quant_q(&q, &mut q8);
        let (qas, qad) = quant_q(&q_alt, &mut qa8);
        // The cache: sink slots first, then the ring (window slot i at ring
        // position (ring0 + i) % n).
        let slots = total;
        let mut codes = vec![0u8; 2 * slots];
        let mut kq = vec![0i8; slots * d];
        let mut vq = vec![0i8; slots * d];
        let (mut kd, mut vd) = (vec![vec![]; total], vec![vec![]; total]);
        for t in 0..total {
            let si = if t < n_sinks {
                t
            } else {
                n_sinks + (ring0 + t - n_sinks) % n
            };
            let (k8, kc, kdq) = store(&keys[t], &mut clamps);
            let (v8, vc, vdq) = store(&values[t], &mut clamps);
            kq[si * d..][..d].copy_from_slice(&k8);
            vq[si * d..][..d].copy_from_slice(&v8);
            codes[2 * si] = kc;
            codes[2 * si + 1] = vc;
            kd[t] = kdq;
            vd[t] = vdq;
        }
        assert_eq!(clamps, 0);
        let cache = Cache {
            codes: &codes,
            keys: &kq,
            values: &vq,
            hkv: 1,
            head: 0,
            d,
        };
        let sinks = |f: &mut dyn FnMut(usize)| (0..n_sinks).for_each(f);
        let vis = Visible {
            ring0,
            count: n,
            step: 1,
            span: n,
            sink_cap: n_sinks,
            sinks: &sinks,
            alt: 1,
        };
        let sink_q16 = sink.map(|s| (s * 65536.0).round() as i32);
        let (mut row, mut acc, mut out) = (vec![0i32; n], vec![0i64; d], vec![0i32; d]);
        let e = attend(
            [&Scorer::new(&q8, qs), &Scorer::new(&qa8, qas)],
            &cache,
            &vis,
            sink_q16,
            &mut row,
            &mut acc,
            &mut out,
        );
        let got: Vec<f64> = out.iter().map(|&m| m as f64 * 2f64.powi(e)).collect();
        let sink_used = sink_q16.map(|s| s as f64 / 65536.0);
        [
            got,
            attend64([&qd, &qad], n_sinks, &kd, &vd, sink_used),
            attend64([&q, &q_alt], n_sinks, &keys, &values, sink),
        ]
    }

    fn max_err(a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    /// The stated tolerances (docs/integer-path.md): against f64 attention
    /// over the same int8 slots, within 2^-14 of the largest value (the
    /// fixed-point scores, weights and sums); against f64 attention over
    /// the unquantized vectors, within 0.07 of the largest value (int8
    /// keys, values and query; the worst of these 300 cases is a sharp
    /// softmax, d = 32 with logits near 60, where the scale-word format's
    /// int8 gives 0.028 and the log scales' coarser steps 0.064; the mean
    /// over the cases is 0.0021 against 0.0024).
    #[test]
    fn fixed_point_attention_matches_f64() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut worst_arith, mut worst_q) = (0f64, 0f64);
        for case in 0..300 {
            let n = 1 + case % 41;
            let n_sinks = if case % 3 == 1 { case % 5 } else { 0 };
            let d = [8, 16, 32, 64][case % 4];
            let amp = [0.5, 2.0, 6.0][case % 3];
            let sink = if case % 5 == 0 {
                Some(rng.next() * 3.0)
            } else {
                None
            };
            let [got, deq, exact] = run(&mut rng, n, n_sinks, d, amp, sink, case % n);
            let vmax = 5.0; // the largest value magnitude generated
            let arith = max_err(&got, &deq) / vmax;
            let quant = max_err(&got, &exact) / vmax;
            assert!(arith <= 2f64.powi(-14), "case {case}: {arith}");
            assert!(quant <= 0.07, "case {case}: {quant}");
            worst_arith = worst_arith.max(arith);
            worst_q = worst_q.max(quant);
        }
        std::println!("worst: arithmetic {worst_arith:.3e}, with int8 {worst_q:.3e}");
    }

    /// The logit's and the weight's shifts round as the first form did,
    /// `(p + 2^(s-1)) >> s` with the 64-bit constant: random int8 vectors
    /// of 64 (and their extremes), the multiplier's extremes, every shift.
    #[test]
    fn shifts_round_as_the_first_form() {
        let first = |p: i64, sh: i32| -> i64 {
            if sh >= 0 {
                if sh > 30 || p.unsigned_abs() >= (LOGIT_LIMIT as u64) >> sh {
                    p.signum() * LOGIT_LIMIT
                } else {
                    p << sh
                }
            } else if sh < -62 {
                0
            } else {
                let s = -sh;
                ((p + (1 << (s - 1))) >> s).clamp(-LOGIT_LIMIT, LOGIT_LIMIT)
            }
        };
        let mut rng = Rng(0x5eed_0004);
        let byte = |rng: &mut Rng| (rng.next() * 128.0) as i8;
        for case in 0..600 {
            let q: Vec<i8> = match case {
                0 => vec![127; 64],
                1 => vec![-128; 64],
                _ => (0..64).map(|_| byte(&mut rng)).collect(),
            };
            let k: Vec<i8> = match case {
                0 | 1 => vec![-128; 64],
                _ => (0..64).map(|_| byte(&mut rng)).collect(),
            };
            let dot: i32 = q.iter().zip(&k).map(|(&a, &b)| a as i32 * b as i32).sum();
            let mut scorer = Scorer::new(&q, Fx::ONE);
            scorer.mult = [[1, i32::MAX, 1 << 30, 12_345_678][case % 4]; 8];
            let p = dot as i64 * scorer.mult[0] as i64;
            for base in -95..40 {
                scorer.base = base;
                for c in [0u8, 7, 8, 100, 255] {
                    let sh = base + (c >> 3) as i32;
                    assert_eq!(scorer.logit(&k, c) as i64, first(p, sh), "p {p} sh {sh}");
                }
            }
        }
        // The weight's factor: `w = 2^30` (a logit at the maximum) times
        // each step, shifted by every `sh = 22 + vtop - octave` from 22 to
        // 64, on a value of 1.
        for vc in 0..=255u8 {
            for vtop in 0..48u8 {
                let mut acc = [0i64; 1];
                assert_eq!(weigh::<0>(&mut acc, 0, vtop, 0, &[1], vc), 1 << 30);
                let sh = 22 + vtop.saturating_sub(vc >> 3) as u64;
                let p = (1u64 << 30) * STEP_Q15[(vc & 7) as usize] as u64;
                let want = if sh >= 64 {
                    0
                } else {
                    (p + (1 << (sh - 1))) >> sh
                };
                assert_eq!(acc[0], want as i64, "vc {vc} vtop {vtop}");
            }
        }
    }

    /// The runs over the ring give the slot-by-slot walk's bits: random
    /// rings (wrapped or not, dilated, several kv heads, sink slots, head
    /// sizes unrolled and not), random int8 slots and scale codes, query
    /// scales over 24 octaves.
    #[test]
    fn runs_give_the_slot_by_slot_bits() {
        let mut rng = Rng(0x5eed_0003);
        let pick = |rng: &mut Rng, n: usize| ((rng.next() + 1.0) * 0.5 * n as f64) as usize % n;
        for case in 0..600 {
            let d = [8, 16, 12, 4][case % 4];
            let hkv = 1 + pick(&mut rng, 3);
            let head = pick(&mut rng, hkv);
            let step = 1 + pick(&mut rng, 3);
            let span = 1 + pick(&mut rng, 40);
            let count = pick(&mut rng, span.div_ceil(step) + 1);
            let ring0 = pick(&mut rng, span);
            let sink_cap = pick(&mut rng, 4);
            let slots = sink_cap + span;
            let bytes = |rng: &mut Rng| -> Vec<i8> {
                (0..slots * hkv * d)
                    .map(|_| (rng.next() * 127.0) as i8)
                    .collect()
            };
            let (keys, values) = (bytes(&mut rng), bytes(&mut rng));
            let codes: Vec<u8> = (0..2 * slots * hkv)
                .map(|_| 100 + pick(&mut rng, 100) as u8)
                .collect();
            let cache = Cache {
                codes: &codes,
                keys: &keys,
                values: &values,
                hkv,
                head,
                d,
            };
            let sinks = |f: &mut dyn FnMut(usize)| (0..sink_cap).step_by(2).for_each(f);
            let vis = Visible {
                ring0,
                count,
                step,
                span,
                sink_cap,
                sinks: &sinks,
                alt: case % 2,
            };
            let q: Vec<i8> = (0..d).map(|_| (rng.next() * 127.0) as i8).collect();
            let qa: Vec<i8> = (0..d).map(|_| (rng.next() * 127.0) as i8).collect();
            let scale = Fx::from_i64(1, pick(&mut rng, 24) as i32 - 30);
            let (plain, alt) = (Scorer::new(&q, scale), Scorer::new(&qa, scale));
            let sink = (case % 3 == 0).then_some((rng.next() * 65536.0 * 4.0) as i32);
            let mut got = (vec![0i32; span], vec![0i64; d], vec![0i32; d]);
            let mut want = got.clone();
            let e = attend(
                [&plain, &alt],
                &cache,
                &vis,
                sink,
                &mut got.0,
                &mut got.1,
                &mut got.2,
            );
            let e_ref = attend_reference(
                [&plain, &alt],
                &cache,
                &vis,
                sink,
                &mut want.0,
                &mut want.1,
                &mut want.2,
            );
            assert_eq!(
                (e, &got.2),
                (e_ref, &want.2),
                "case {case}: d {d} hkv {hkv} step {step} span {span} count {count} ring0 {ring0}"
            );
        }
    }

    #[test]
    fn empty_window_gives_zeros() {
        let cache = Cache {
            codes: &[],
            keys: &[],
            values: &[],
            hkv: 1,
            head: 0,
            d: 4,
        };
        let none = |_: &mut dyn FnMut(usize)| {};
        let vis = Visible {
            ring0: 0,
            count: 0,
            step: 1,
            span: 1,
            sink_cap: 0,
            sinks: &none,
            alt: 0,
        };
        let q: &[i8] = &[1, 2, 3, 4];
        let s = Scorer::new(q, Fx::ONE);
        let (mut acc, mut out) = (vec![0i64; 4], vec![7i32; 4]);
        let e = attend(
            [&s, &s],
            &cache,
            &vis,
            Some(1 << 16),
            &mut [],
            &mut acc,
            &mut out,
        );
        assert_eq!((e, out), (0, vec![0; 4]));
    }

    #[test]
    fn one_slot_returns_its_value() {
        let mut rng = Rng(7);
        let [got, deq, _] = run(&mut rng, 1, 0, 16, 1.0, None, 0);
        assert!(max_err(&got, &deq) <= 2f64.powi(-14) * 5.0);
    }

    /// Logits saturate at ±2^14 instead of wrapping.
    #[test]
    fn logits_saturate() {
        let q = [127i8; 8];
        let s = Scorer::new(&q, Fx::pow2(20));
        assert_eq!(s.logit(&[127; 8], 255), LOGIT_LIMIT as i32);
        assert_eq!(s.logit(&[-127; 8], 255), -LOGIT_LIMIT as i32);
        assert_eq!(s.logit(&[0; 8], 255), 0);
        let tiny = Scorer::new(&q, Fx::pow2(-200));
        assert_eq!(tiny.logit(&[127; 8], 0), 0);
    }
}
