//! SWA on the integer token path, stage 2 part 1 (docs/integer-path.md,
//! "SWA on the integer path"): the int8 KV slot with its per-slot scale and
//! integer softmax attention of one query head over such slots.
//!
//! **Not wired into the step yet**: no image carries an int8 KV state
//! format, and `SwaConfig::state_format` still says f32, so an SWA layer on
//! the integer token path runs its f32 step. What is here is the cleanly
//! tested core the step will be built on; what is left (the state layout
//! and format word, RoPE in fixed point, the short convolution, the ring
//! and sinks bookkeeping) is listed in docs/integer-path.md.
//!
//! - A **slot** (one position, one kv head) is `d` int8 values and one
//!   32-bit scale word: `v_c ≈ q_c × scale`, `q = round(127 v / max|v|)`
//!   ([`crate::fixed::block::quantize`]), the scale packed to a 16-bit
//!   mantissa and a 16-bit exponent ([`pack_scale`]). Bytes per slot:
//!   `d + 4` against f32's `4 d`.
//! - **Scores** `q·k_t` are exact i32 sums of int8 products (`|Σ| ≤ 127^2
//!   d < 2^31` for `d < 2^17`), times `scale_q × scale_t / sqrt(d)` as an
//!   [`Fx`]; the softmax subtracts the largest logit (the sink logit
//!   included) and takes [`Fx::exp`] of each difference, so every weight is
//!   in `(0, 1]`; the values are summed in i64 with weights in Q24 of the
//!   largest value scale.

use crate::fixed::block::{normalize_with_max, quantize, Block};
use crate::fixed::Fx;

/// Packs a non-negative scale into one word: bits 0-15 the mantissa's top
/// 16 bits, rounded (`[2^15, 2^16)`, or 0 for zero), bits 16-31 the
/// exponent of that 16-bit mantissa as an i16. A scale whose exponent is
/// beyond i16 saturates (to the largest word, or to zero below the
/// smallest) and adds one to `clamps`; relative rounding within 2^-16.
pub(crate) fn pack_scale(s: Fx, clamps: &mut u32) -> u32 {
    if s.is_zero() {
        return 0;
    }
    let mut m = (s.mantissa() as u64 + (1 << 15)) >> 16; // [2^15, 2^16]
    let mut e = s.exponent() as i64 + 16;
    if m == 1 << 16 {
        m = 1 << 15;
        e += 1;
    }
    if e > i16::MAX as i64 {
        *clamps = clamps.saturating_add(1);
        return 0xffff | ((i16::MAX as u16 as u32) << 16);
    }
    if e < i16::MIN as i64 {
        *clamps = clamps.saturating_add(1);
        return 0;
    }
    (m as u32) | ((e as i16 as u16 as u32) << 16)
}

/// The scale of a packed word ([`pack_scale`]), exactly.
pub(crate) fn unpack_scale(w: u32) -> Fx {
    let m = w & 0xffff;
    let e = (w >> 16) as u16 as i16 as i32;
    Fx::from_u64(m as u64, e, false)
}

/// Stores the normal block `v` (one position, one kv head, `[d]`) as an
/// int8 slot: writes `q` and returns the packed scale word.
pub(crate) fn store_slot(v: Block<'_>, q: &mut [i8], clamps: &mut u32) -> u32 {
    let s = quantize(v, q);
    pack_scale(s, clamps)
}

/// One key/value slot as the attention reads it: the int8 key and value
/// of one kv head at one position and their packed scale words.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot<'a> {
    /// The key's int8 values `[d]`.
    pub k: &'a [i8],
    /// The key's packed scale ([`pack_scale`]).
    pub k_scale: u32,
    /// The value's int8 values `[d]`.
    pub v: &'a [i8],
    /// The value's packed scale.
    pub v_scale: u32,
}

/// The exact dot product of two int8 vectors (`|Σ| < 2^31` for `d < 2^17`).
fn dot8(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .fold(0i32, |s, (&x, &y)| s.wrapping_add(x as i32 * y as i32))
}

/// The logit of one slot: `q·k × scale_q × scale_k × c` (`c` the softmax
/// scale, `1/sqrt(d)`, times `scale_q` already).
fn logit(q: &[i8], qc: Fx, s: &Slot<'_>) -> Fx {
    Fx::from_i64(dot8(q, s.k) as i64, 0) * (qc * unpack_scale(s.k_scale))
}

/// A query of one head: its int8 values `[d]` and their scale.
pub(crate) type Query<'q> = (&'q [i8], Fx);

/// Softmax attention of one query head over the slots that `slots()`
/// yields (called twice, the same slots each time), each with the index of
/// the query it is scored with (0 or 1: `swa` scores its sink slots with
/// the query rotated to its cache position), and an optional extra logit
/// `sink` that joins the denominator with no value (learned sink logits):
/// writes the weighted sum of the values into `out` (`[d]`) as a normal
/// block and returns its exponent (all zero, exponent 0, without slots).
///
/// Passes: the logits' maximum (and the largest value scale), then the
/// weights `e^(l_t - max)` (in `(0, 1]`) and the sums. `acc` (`[d]`) is
/// scratch.
pub(crate) fn attend<'a, I: Iterator<Item = (usize, Slot<'a>)>>(
    queries: [Query<'_>; 2],
    slots: impl Fn() -> I,
    sink: Option<Fx>,
    acc: &mut [i64],
    out: &mut [i32],
) -> i32 {
    let d = out.len();
    let c = Fx::from_i64(d as i64, 0).rsqrt();
    let qc = [queries[0].1 * c, queries[1].1 * c];
    let lg = |i: usize, s: &Slot<'_>| logit(queries[i & 1].0, qc[i & 1], s);
    let mut max = sink;
    let mut vmax = Fx::ZERO;
    let mut n = 0usize;
    for (i, s) in slots() {
        let l = lg(i, &s);
        if max.is_none_or(|m| l.gt(m)) {
            max = Some(l);
        }
        let vs = unpack_scale(s.v_scale);
        if vs.gt(vmax) {
            vmax = vs;
        }
        n += 1;
    }
    acc.fill(0);
    let (Some(max), false) = (max, vmax.is_zero() || n == 0) else {
        out.fill(0);
        return 0;
    };
    let inv_vmax = vmax.recip();
    let mut sum = sink.map_or(Fx::ZERO, |l| (l - max).exp());
    for (i, s) in slots() {
        let p = (lg(i, &s) - max).exp(); // (0, 1]
        sum = sum + p;
        // p × scale_t / vmax in Q24: at most 2^24.
        let w = (p * unpack_scale(s.v_scale) * inv_vmax).to_fixed(24);
        for (a, &v) in acc.iter_mut().zip(s.v) {
            // |w v| <= 2^24 × 127 < 2^31; n < 2^32 terms stay below 2^63.
            *a += w * v as i64;
        }
    }
    // out = acc × 2^-24 × vmax / sum.
    let f = vmax * sum.recip();
    let amax = acc.iter().map(|a| a.unsigned_abs()).max().unwrap_or(0);
    if amax == 0 || f.is_zero() {
        out.fill(0);
        return 0;
    }
    // acc to 30 bits: m = acc / 2^s.
    let s = 64 - amax.leading_zeros() as i32 - 30;
    let f15 = (f.mantissa() >> 17) as i64; // [2^14, 2^15)
    let mut omax = 0u32;
    for (o, &a) in out.iter_mut().zip(acc.iter()) {
        let m = if s > 0 {
            (a + (1 << (s - 1))) >> s
        } else {
            a << -s
        };
        // |m| <= 2^30, f15 < 2^15: the product below 2^45, then 30 bits.
        let p = (m * f15 + (1 << 14)) >> 15;
        *o = p as i32;
        omax = omax.max(o.unsigned_abs());
    }
    // value = (o 2^15 / f15) 2^(s - 24) f15 2^(f.e + 17)
    let e = s - 24 + f.exponent() + 17 + 15;
    normalize_with_max(out, e, omax)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::fixed::block::normalize;
    use std::vec;
    use std::vec::Vec;

    /// The f64 value of an Fx.
    fn fx64(x: Fx) -> f64 {
        let v = x.mantissa() as f64 * 2f64.powi(x.exponent());
        if x.is_negative() {
            -v
        } else {
            v
        }
    }

    /// xorshift64*, uniform in [-1, 1).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let r = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
            (r >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        }
    }

    /// A normal block of the values `x` (mantissas at exponent -40, normalized).
    fn block_of(x: &[f64]) -> (Vec<i32>, i32) {
        let mut m: Vec<i32> = x
            .iter()
            .map(|v| (v * 2f64.powi(24)).round() as i32)
            .collect();
        let e = normalize(&mut m, -24);
        (m, e)
    }

    #[test]
    fn pack_scale_round_trips_within_2_pow_minus_16() {
        let mut clamps = 0;
        for &v in &[1.0, 3.0e-5, 0.7, 1234.5, 2f64.powi(-40), 0.999_999_9] {
            let x = Fx::from_i64((v * 2f64.powi(40)) as i64, -40);
            let back = unpack_scale(pack_scale(x, &mut clamps));
            let rel = (fx64(back) - fx64(x)).abs() / fx64(x);
            assert!(rel <= 2f64.powi(-16), "{v}: {rel}");
        }
        assert_eq!(clamps, 0);
        assert_eq!(pack_scale(Fx::ZERO, &mut clamps), 0);
        // Out of the i16 exponent range: saturated and counted.
        pack_scale(Fx::pow2(40_000), &mut clamps);
        assert_eq!(
            unpack_scale(pack_scale(Fx::pow2(-40_000), &mut clamps)),
            Fx::ZERO
        );
        assert_eq!(clamps, 2);
    }

    /// Softmax attention in f64 over `keys`/`values` (each `[n][d]`), the
    /// first `n_alt` keys scored with `q_alt`, with an optional sink logit.
    fn attend64(
        [q, q_alt]: [&[f64]; 2],
        n_alt: usize,
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
                let q = if t < n_alt { q_alt } else { q };
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

    /// Runs the integer attention on f64 inputs (the first `n_alt` slots
    /// scored with a second query); returns its output, the f64 attention
    /// of the dequantized int8 slots and that of the inputs.
    fn run(
        rng: &mut Rng,
        n: usize,
        n_alt: usize,
        d: usize,
        amp: f64,
        sink: Option<f64>,
    ) -> [Vec<f64>; 3] {
        let gen = |rng: &mut Rng, a: f64| -> Vec<f64> { (0..d).map(|_| a * rng.next()).collect() };
        let q = gen(rng, amp);
        let q_alt = gen(rng, amp);
        // Per-slot magnitudes that differ by up to 8x: the per-slot scales matter.
        let keys: Vec<Vec<f64>> = (0..n).map(|t| gen(rng, amp / (1 + t % 8) as f64)).collect();
        let values: Vec<Vec<f64>> = (0..n).map(|t| gen(rng, 1.0 + (t % 5) as f64)).collect();
        let mut clamps = 0;
        let mut store = |x: &[f64]| -> (Vec<i8>, u32, Vec<f64>) {
            let (m, e) = block_of(x);
            let mut q8 = vec![0i8; d];
            let w = store_slot(Block { m: &m, e }, &mut q8, &mut clamps);
            let s = fx64(unpack_scale(w));
            let deq = q8.iter().map(|&v| v as f64 * s).collect();
            (q8, w, deq)
        };
        let (q8, qw, qd) = store(&q);
        let (qa8, qaw, qad) = store(&q_alt);
        let ks: Vec<_> = keys.iter().map(|k| store(k)).collect();
        let vs: Vec<_> = values.iter().map(|v| store(v)).collect();
        let mut acc = vec![0i64; d];
        let mut out = vec![0i32; d];
        let sink_fx = sink.map(|s| Fx::from_i64((s * 2f64.powi(30)).round() as i64, -30));
        let e = attend(
            [(&q8, unpack_scale(qw)), (&qa8, unpack_scale(qaw))],
            || {
                (0..n).map(|t| {
                    let slot = Slot {
                        k: &ks[t].0,
                        k_scale: ks[t].1,
                        v: &vs[t].0,
                        v_scale: vs[t].1,
                    };
                    (usize::from(t < n_alt), slot)
                })
            },
            sink_fx,
            &mut acc,
            &mut out,
        );
        assert_eq!(clamps, 0);
        let got: Vec<f64> = out.iter().map(|&m| m as f64 * 2f64.powi(e)).collect();
        let kd: Vec<Vec<f64>> = ks.iter().map(|k| k.2.clone()).collect();
        let vd: Vec<Vec<f64>> = vs.iter().map(|v| v.2.clone()).collect();
        let sink_used = sink_fx.map(fx64);
        [
            got,
            attend64([&qd, &qad], n_alt, &kd, &vd, sink_used),
            attend64([&q, &q_alt], n_alt, &keys, &values, sink),
        ]
    }

    fn max_err(a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    /// The stated tolerances (docs/integer-path.md): against f64 attention
    /// over the same int8 slots, within 2^-12 of the largest value (the
    /// integer softmax's arithmetic); against f64 attention over the
    /// unquantized vectors, within 0.03 of the largest value (int8 keys,
    /// values and query).
    #[test]
    fn integer_attention_matches_f64() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut worst_arith, mut worst_q) = (0f64, 0f64);
        for case in 0..200 {
            let n = 1 + case % 37;
            let d = [8, 16, 32, 64][case % 4];
            let amp = [0.5, 2.0, 6.0][case % 3];
            let sink = if case % 5 == 0 {
                Some(rng.next() * 3.0)
            } else {
                None
            };
            let n_alt = if case % 3 == 1 { case % 7 } else { 0 };
            let [got, deq, exact] = run(&mut rng, n, n_alt.min(n), d, amp, sink);
            let vmax = 5.0; // the largest value magnitude generated
            let arith = max_err(&got, &deq) / vmax;
            let quant = max_err(&got, &exact) / vmax;
            assert!(arith <= 2f64.powi(-12), "case {case}: {arith}");
            assert!(quant <= 0.03, "case {case}: {quant}");
            worst_arith = worst_arith.max(arith);
            worst_q = worst_q.max(quant);
        }
        std::println!("worst: arithmetic {worst_arith:.3e}, with int8 {worst_q:.3e}");
    }

    #[test]
    fn empty_window_gives_zeros() {
        let mut acc = vec![0i64; 4];
        let mut out = vec![7i32; 4];
        let q: &[i8] = &[1, 2, 3, 4];
        let e = attend(
            [(q, Fx::ONE), (q, Fx::ONE)],
            core::iter::empty,
            Some(Fx::ONE),
            &mut acc,
            &mut out,
        );
        assert_eq!((e, out), (0, vec![0; 4]));
    }

    #[test]
    fn one_slot_returns_its_value() {
        // A single key: weight 1, the output is the (dequantized) value.
        let mut rng = Rng(7);
        let [got, deq, _] = run(&mut rng, 1, 0, 16, 1.0, None);
        assert!(max_err(&got, &deq) <= 2f64.powi(-14) * 5.0);
    }
}
