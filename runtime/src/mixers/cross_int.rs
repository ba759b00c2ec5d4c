//! `cross`'s integer step (docs/cross-attention.md, "The integer step"):
//! attention over an int8 memory with integer logits, softmax weights and
//! weighted sums, for layers whose record asks for it (state format
//! `Int8Kv`) on the integer token path.
//!
//! - **The memory** is read in place, as the f32 step reads it: int8 keys
//!   and values with an f32 scale a group (a baked memory: the image's row
//!   groups; a caller's int8 memory: one scale a row). A slot (one memory
//!   row, one kv head: `d` values) must lie inside one group
//!   ([`int8_slots`]); any other memory (f32, f16, int4, groups that cut a
//!   slot) and heads wider than [`MAX_HEAD_DIM`] take the layer's f32 step
//!   instead ([`takes_integer_step`]).
//!   Scales are read by their bits.
//! - **The query** of each head is normalized on its own and read by its
//!   15-bit views (`|q| <= 2^15`), so that it adds no int8 rounding; heads
//!   of at most [`MAX_HEAD_DIM`] channels keep the exact dot product with an
//!   int8 key below 2^30.
//! - **Logits** in Q16 `i64` from the exact dot product `q·k` times the key
//!   scale's 16-bit mantissa and the query's factor (its exponent and
//!   `1/sqrt(d)`), shifted by the sum of their exponents, clamped to `±2^14`
//!   (counted in the layer's clamps).
//! - **Weights** `e^(l - max)` in Q30 ([`exp_neg`], the SWA step's table),
//!   two passes over the slots (the maximum, then the sums), so the scratch
//!   does not grow with `m` and the order of the slots changes no bit. Each
//!   weight is folded with its value's scale relative to the memory's
//!   largest value scale into Q24, one multiply-add per value element into
//!   `i64`; the denominator is the exact `u64` sum of the weights.
//! - The output gate as `sigmoid_q15` of the gate's Q16 values.

use super::cross_config::CrossConfig;
use super::swa_int::{align_head, finish};
use super::swa_logkv::exp_neg;
use super::StepCtx;
use crate::error::{part, part_mut, split_mut, Error, Result, Rows};
use crate::fixed::activation::{sigmoid_q15, to_q16};
use crate::fixed::block::{normalize, Block, TO_15};
use crate::fixed::wide::{max_mapped, mul_i32, mul_u32};
use crate::fixed::Fx;
use crate::format::Role;
use crate::tensor::{ActBuf, Tensor, TensorData};
use crate::weights::LayerWeights;

/// What a scratch part out of its buffer would be (not reached: the
/// session sized it by [`CrossConfig::scratch_len`]).
const SCRATCH: &str = "cross scratch too small";

/// The largest logit magnitude, Q16 (`2^14`): a logit beyond saturates.
const LOGIT_LIMIT: i64 = 1 << 30;

/// The widest head the integer step takes: a dot product of 15-bit query
/// views and int8 keys stays below `2^22 × 256 = 2^30`.
pub(crate) const MAX_HEAD_DIM: usize = 256;

/// The exact dot product of a query's 15-bit views (`|a| <= 2^15`) and an
/// int8 key of at most [`MAX_HEAD_DIM`] values (below 2^30).
#[inline(always)]
fn dot15x8(a: &[i32], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .fold(0i32, |s, (&x, &y)| s.wrapping_add(x * y as i32))
}

/// An int8 memory tensor whose every slot of `d` values lies inside one
/// scale group: its values, its scales and the group size. `None` for
/// another dtype or a group that is not a multiple of `d`.
pub(crate) fn int8_slots<'a>(t: &Tensor<'a>, d: usize) -> Option<(&'a [i8], &'a [f32], usize)> {
    match *t.data() {
        TensorData::I8 { q, scales, group } if d > 0 && group > 0 && group % d == 0 => {
            Some((q, scales, group))
        }
        _ => None,
    }
}

/// Whether the layer takes this integer step for the memory this token
/// reads (the caller's or the selected baked one): both its keys and its
/// values int8 with whole slots in each scale group ([`int8_slots`]), and
/// heads of at most [`MAX_HEAD_DIM`] channels.
pub(crate) fn takes_integer_step(
    c: &CrossConfig,
    ctx: &StepCtx<'_>,
    w: &LayerWeights<'_>,
    state: &[f32],
) -> bool {
    let d = c.head_dim as usize;
    if d > MAX_HEAD_DIM {
        return false;
    }
    match c.memory(ctx, w, state) {
        Ok((k, v, _, _)) => int8_slots(&k, d).is_some() && int8_slots(&v, d).is_some(),
        Err(_) => false,
    }
}

/// A scale read by its bits as `(mantissa, biased exponent)`: the value is
/// `mantissa × 2^(exponent - 150)`, the mantissa 24 bits with its leading
/// one. Zero, subnormal and negative scales (none in an image the tools
/// wrote: `max|v| / 127`) read as 0; NaN and infinities as the largest
/// finite exponent's. Deterministic whatever the bits, never a panic.
#[inline(always)]
fn scale_parts(bits: u32) -> (u32, u32) {
    let b = (bits >> 23) & 0xff;
    if b == 0 || bits >> 31 != 0 {
        (0, 0)
    } else {
        ((bits & 0x7f_ffff) | 0x80_0000, b.min(0xfe))
    }
}

/// A scale (f32 bits) relative to `2^(top - 126)`, where `top` is the
/// largest biased exponent among the scales it is compared with: its
/// mantissa shifted right by the exponents' distance and by `drop` bits
/// more (`24 - drop` bits at most).
#[inline(always)]
fn relative(bits: u32, top: u32, drop: u32) -> u32 {
    let (m, e) = scale_parts(bits);
    m >> (top - e.min(top) + drop).min(31)
}

/// The Q16 logit `p × 2^sh`, clamped to `±LIMIT` (adding one to `clamps`).
#[inline(never)]
fn logit_wide(p: i64, sh: i32, clamps: &mut u32) -> i32 {
    let l = if sh >= 0 {
        // Clamped first so that the shift cannot overflow: a nonzero `p`
        // shifted by 31 or more saturates whatever its size.
        p.clamp(-(LOGIT_LIMIT + 1), LOGIT_LIMIT + 1) << sh.min(32)
    } else {
        let s = (-sh).min(62) as u32;
        (p + (1i64 << s >> 1)) >> s
    };
    if l.unsigned_abs() > LOGIT_LIMIT as u64 {
        *clamps = clamps.saturating_add(1);
        l.clamp(-LOGIT_LIMIT, LOGIT_LIMIT) as i32
    } else {
        l as i32
    }
}

/// The Q16 logit of a slot for one head: `t × c31 × 2^-(32 + u)` (`t` the
/// dot product times the key's relative scale, `c31` and `u` the head's
/// multiplier and shift), clamped to `±LIMIT` (adding one to `clamps`).
/// One long multiply and a shift of its high word where `u >= 0` (every
/// head of a trained model: `u < 0` needs logits of `2^14` and more).
#[inline(always)]
fn logit(t: i32, c31: i32, u: i32, clamps: &mut u32) -> i32 {
    let p = mul_i32(t, c31);
    if u < 0 {
        return logit_wide(p, -(32 + u), clamps);
    }
    let l = ((p >> 32) as i32) >> u.min(31);
    if l.unsigned_abs() > LOGIT_LIMIT as u32 {
        *clamps = clamps.saturating_add(1);
        l.clamp(-LOGIT_LIMIT as i32, LOGIT_LIMIT as i32)
    } else {
        l
    }
}

/// Slots whose weighted values an i32 partial sum holds: `2^16 × 128 ×
/// 255 < 2^31` (a weight is at most 2^16, a value at most 128).
const PARTIAL_SLOTS: usize = 255;

/// Adds the i32 partial sums into the i64 ones and zeroes them.
#[inline(always)]
fn flush(partial: &mut [i32], total: &mut [i64]) {
    for (p, t) in partial.iter_mut().zip(total) {
        *t += *p as i64;
        *p = 0;
    }
}

/// `v × f × 2^-30` for a factor `f` in Q30 (`<= 2^30`), to 2^-14 relative:
/// the softmax's rescaling of a running sum when the largest logit grows.
#[inline(always)]
fn rescale(v: i64, f: u32) -> i64 {
    // |v| < 2^51: (v >> 14) (f >> 16) < 2^37 × 2^14. (A sum of weights,
    // below 2^50, likewise.)
    (v >> 14) * (f >> 16) as i64
}

/// One token of `cross` over an int8 memory ([`crate::mixers::Mixer::step_int`]).
///
/// The memory is walked once, slot by slot, each slot's key and value read
/// (and their scales decoded) once for the query heads that share its kv
/// head; each head keeps a running softmax: the largest logit so far, the
/// weights `e^(l - top)` (Q30, SWA's table) and their sum, and the
/// weighted sum of the values (weights in Q16, i32 partial sums of at most
/// [`PARTIAL_SLOTS`] slots added into i64), both rescaled (to 2^-14) when
/// the largest logit grows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn step(
    c: &CrossConfig,
    ctx: &StepCtx<'_>,
    w: &LayerWeights<'_>,
    state: &mut [f32],
    scratch: &mut [f32],
    act: &mut ActBuf<'_>,
    x: Block<'_>,
    out: &mut [i32],
    clamps: &mut u32,
) -> Result<i32> {
    // At least 1 (a parsed config's are), so that no chunk size is 0.
    let (h, kv, d) = (
        (c.num_heads as usize).max(1),
        (c.num_kv_heads as usize).max(1),
        (c.head_dim as usize).max(1),
    );
    let (mk, mv, m, n) = c.memory(ctx, w, state)?;
    let not_int8 = Error::Internal("cross: the integer step needs int8 memories");
    let (kq, ks, kgroup) = int8_slots(&mk, d).ok_or(not_int8)?;
    let (vq, vs, vgroup) = int8_slots(&mv, d).ok_or(not_int8)?;
    let (ks, vs): (&[u32], &[u32]) = (bytemuck::cast_slice(ks), bytemuck::cast_slice(vs));

    let hd = h * d;
    let scratch: &mut [i32] = bytemuck::cast_slice_mut(scratch);
    let (q, rest) = split_mut(scratch, hd, SCRATCH)?;
    let (g, rest) = split_mut(rest, hd, SCRATCH)?;
    let (o, rest) = split_mut(rest, hd, SCRATCH)?;
    let (_, aligned, _) = bytemuck::pod_align_to_mut::<i32, i64>(rest);
    let (acc, rest) = split_mut(aligned, hd, SCRATCH)?;
    let (partials, rest) = split_mut(rest, hd.div_ceil(2), SCRATCH)?;
    let partials: &mut [i32] = part_mut(bytemuck::cast_slice_mut(partials), ..hd, SCRATCH)?;
    // Per head: the sum of the weights (Q30), the largest logit so far
    // (Q16), the query's multiplier and the logits' shift ([`logit`]).
    let (sums, rest) = split_mut(rest, h, SCRATCH)?;
    let rest: &mut [i32] = bytemuck::cast_slice_mut(rest);
    let (tops, rest) = split_mut(rest, h, SCRATCH)?;
    let (mults, rest) = split_mut(rest, h, SCRATCH)?;
    let shifts = part_mut(rest, ..h, SCRATCH)?;

    let (eq, eg) = {
        let xin = act.input_int(x)?;
        let eq = w.get(Role::QProj)?.matvec_int(&xin, q)?;
        let eg = match c.output_gate {
            true => w.get(Role::GProj)?.matvec_int(&xin, g)?,
            false => 0,
        };
        (eq, eg)
    };

    // The memory's part: `n` memories of `m` rows of `Hkv d` values; the
    // scale groups it covers.
    let row = kv * d;
    let base = n * m * row;
    let groups = |group: usize| base / group..(base + m * row).div_ceil(group);
    let exponent = |b| scale_parts(b).1;
    // The largest key and value scales' exponents: every key scale is
    // below `2^(ktop - 126)`, every value scale below `2^(vtop - 126)`.
    let ktop = max_mapped(part(ks, groups(kgroup), SCRATCH)?, exponent);
    let vtop = max_mapped(part(vs, groups(vgroup), SCRATCH)?, exponent);

    // Each head's query normalized on its own, in place, as 15-bit views;
    // its factor `2^e / sqrt(d) = c31 2^(fe + 1)`. A logit is `q15·k8 ×
    // key scale × factor`: with the key scale as `k15 2^(ktop - 141)` (15
    // bits relative to the largest) and `t = (q15·k8) k15 2^-15`, in Q16
    // `t c31 2^(ktop - 109 + fe)`: the high word of `t c31` shifted right
    // by `u = 77 - ktop - fe`.
    let inv_sqrt_d = Fx::from_i64(d as i64, 0).rsqrt();
    for (((qh, top), mult), sh) in Rows(q.chunks_exact_mut(d))
        .zip(tops.iter_mut())
        .zip(mults.iter_mut())
        .zip(shifts.iter_mut())
    {
        let e = normalize(qh, eq);
        qh.iter_mut().for_each(|v| *v >>= TO_15);
        let f = Fx::pow2(e + TO_15 as i32) * inv_sqrt_d;
        // The smallest logit: the first slot sets it (its weight 1).
        *top = -LOGIT_LIMIT as i32;
        *mult = (f.mantissa() >> 1) as i32;
        *sh = 77 - ktop as i32 - f.exponent();
    }
    sums.fill(0);
    partials.fill(0);
    acc.fill(0);

    let per_group = (h / kv).max(1);
    let q = &*q;
    for j in 0..m {
        for gi in 0..kv {
            let at = base + j * row + gi * d;
            // `get`: a loaded memory holds every slot; the empty and zero
            // defaults are not reached.
            let k = kq.get(at..at + d).unwrap_or_default();
            let v = vq.get(at..at + d).unwrap_or_default();
            let k15 = relative(ks.get(at / kgroup).copied().unwrap_or(0), ktop, 9);
            // The value's scale against `2^(vtop - 126)`, in Q24.
            let v24 = relative(vs.get(at / vgroup).copied().unwrap_or(0), vtop, 0);
            let (a, b) = (gi * per_group, (gi + 1) * per_group);
            let (Some(sums), Some(tops), Some(mults), Some(shifts)) = (
                sums.get_mut(a..b),
                tops.get_mut(a..b),
                mults.get(a..b),
                shifts.get(a..b),
            ) else {
                return Err(Error::Internal(SCRATCH));
            };
            let (Some(qs), Some(accs), Some(parts)) = (
                q.get(a * d..b * d),
                acc.get_mut(a * d..b * d),
                partials.get_mut(a * d..b * d),
            ) else {
                return Err(Error::Internal(SCRATCH));
            };
            let heads = sums
                .iter_mut()
                .zip(tops.iter_mut())
                .zip(mults.iter().zip(shifts));
            // `Rows`: no division in `zip` (docs/c-api.md, "No panics").
            let sums_of = Rows(accs.chunks_exact_mut(d)).zip(parts.chunks_exact_mut(d));
            for (((sum, top), (&c31, &u)), (qh, (acc_h, part_h))) in
                heads.zip(Rows(qs.chunks_exact(d)).zip(sums_of))
            {
                // |q15·k8| < 2^30, k15 < 2^15: t below 2^30.
                let t = (mul_i32(dot15x8(qh, k), k15 as i32) >> 15) as i32;
                let l = logit(t, c31, u, clamps);
                let weight = if l > *top {
                    // A new largest logit: the sums so far rescaled by
                    // `e^(top - l)`, this slot's weight 1.
                    if *sum != 0 {
                        let f = exp_neg((l - *top) as u32);
                        *sum = rescale(*sum, f);
                        flush(part_h, acc_h);
                        acc_h.iter_mut().for_each(|a| *a = rescale(*a, f));
                    }
                    *top = l;
                    1 << 30
                } else {
                    // top - l <= 2^31: Q16, e^-(top - l) in Q30.
                    exp_neg((*top - l) as u32)
                };
                *sum += weight as i64;
                // weight v24 2^-38, rounded: at most 2^16 (Q16).
                let wv = ((mul_u32(weight, v24) + (1 << 37)) >> 38) as i32;
                if wv != 0 {
                    for (a, &vi) in part_h.iter_mut().zip(v) {
                        // |wv v| <= 2^23: PARTIAL_SLOTS terms below 2^31.
                        *a += wv * vi as i32;
                    }
                }
            }
        }
        if j % PARTIAL_SLOTS == PARTIAL_SLOTS - 1 {
            flush(partials, acc);
        }
    }
    flush(partials, acc);

    let mut eo: Option<i32> = None;
    for (hh, (&sum, acc_h)) in Rows(sums.iter()).zip(acc.chunks_exact(d)).enumerate() {
        // out = acc 2^-16 vref / (sum 2^-30), vref = 2^(vtop - 126); `finish`
        // takes acc 2^-24 f.
        let sum = Fx::from_u64(sum.unsigned_abs(), 0, false);
        let f = Fx::pow2(vtop as i32 - 126 + 30 + 8) * sum.recip();
        let (done, rest) = split_mut(o, hh * d, SCRATCH)?;
        let oh = part_mut(rest, ..d, SCRATCH)?;
        let e = finish(acc_h, f, oh);
        if oh.iter().all(|&v| v == 0) {
            continue;
        }
        align_head(done, oh, e, &mut eo);
    }
    let Some(eo) = eo else {
        // Every head's output is zero: so is the layer's.
        out.fill(0);
        return Ok(0);
    };
    let mut eo = normalize(o, eo);
    if c.output_gate {
        for (oi, &gi) in o.iter_mut().zip(&*g) {
            // (o >> 15) sigmoid in Q15 (<= 2^15): |o| stays below 2^30.
            *oi = (*oi >> TO_15) * sigmoid_q15(to_q16(gi, eg)) as i32;
        }
        eo = normalize(o, eo);
    }
    let oin = act.input_int(Block { m: o, e: eo })?;
    w.get(Role::OProj)?.matvec_int(&oin, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The logit by f64 arithmetic, in Q16: `raw × key scale × c16 2^ec`.
    fn exact(raw: i32, kbits: u32, c16: u32, ec: i32) -> f64 {
        let k = f32::from_bits(kbits) as f64;
        raw as f64 * k * c16 as f64 * 2f64.powi(ec) * 65536.0
    }

    /// The logit as the step computes it, the key scale relative to a
    /// memory whose largest key-scale exponent is `ktop`, the head's
    /// factor `c16 2^ec`.
    fn stepped(raw: i32, kbits: u32, ktop: u32, c16: u32, ec: i32, clamps: &mut u32) -> i32 {
        let f = Fx::from_u64(c16 as u64, ec, false);
        let k15 = relative(kbits, ktop, 9);
        let t = (mul_i32(raw, k15 as i32) >> 15) as i32;
        logit(
            t,
            (f.mantissa() >> 1) as i32,
            77 - ktop as i32 - f.exponent(),
            clamps,
        )
    }

    #[test]
    fn logits_are_the_products_within_their_rounding_and_saturate() {
        let mut clamps = 0;
        for (raw, k, ktop, c16, ec) in [
            (1000, 0.01f32, 120u32, 40_000u32, -24),
            (-16_129 * 32, 0.002, 118, 65_535, -20),
            (7, 3.5, 128, 32_768, -15),
            (0, 1.0, 127, 50_000, -10),
            (-3, 1e-6, 107, 33_000, -30),
            // A key scale 2^-5 of the memory's largest.
            (20_000, 0.01, 125, 45_000, -26),
        ] {
            let want = exact(raw, k.to_bits(), c16, ec);
            let got = stepped(raw, k.to_bits(), ktop, c16, ec, &mut clamps) as f64;
            // The key scale to 15 bits (2^-14 relative at the least
            // scale here), `t` and the logit each rounded down by at most
            // one unit (a unit of `t` is `want / t` in the logit).
            let t = ((raw as i64 * relative(k.to_bits(), ktop, 9) as i64) >> 15) as f64;
            let unit_t = if t == 0.0 { 0.0 } else { (want / t).abs() };
            let bound = want.abs() * 2f64.powi(-14) + unit_t + 1.0;
            assert!((got - want).abs() <= bound, "{raw} {k}: {got} {want}");
        }
        assert_eq!(clamps, 0);
        let big = stepped(
            16_129 * 64,
            1000.0f32.to_bits(),
            136,
            65_535,
            0,
            &mut clamps,
        );
        let small = stepped(
            -16_129 * 64,
            1000.0f32.to_bits(),
            136,
            65_535,
            0,
            &mut clamps,
        );
        assert_eq!(
            (big, small, clamps),
            (LOGIT_LIMIT as i32, -LOGIT_LIMIT as i32, 2)
        );
    }

    #[test]
    fn odd_scales_read_as_zero_or_the_largest_without_a_panic() {
        assert_eq!(scale_parts(0), (0, 0));
        assert_eq!(scale_parts(1), (0, 0)); // subnormal
        assert_eq!(scale_parts((-1.0f32).to_bits()), (0, 0));
        assert_eq!(scale_parts(1.0f32.to_bits()), (1 << 23, 127));
        assert_eq!(scale_parts(f32::INFINITY.to_bits()).1, 0xfe);
        let mut clamps = 0;
        for bits in [0, 1, u32::MAX, f32::NAN.to_bits(), f32::INFINITY.to_bits()] {
            for top in [0, 1, 127, 0xfe] {
                assert!(relative(bits, top, 0) < 1 << 24);
                for raw in [-(1 << 30) + 1, -1, 0, 1, (1 << 30) - 1] {
                    for ec in [-200, -40, 0, 40] {
                        let l = stepped(raw, bits, top, 65_535, ec, &mut clamps);
                        assert!(l.unsigned_abs() <= LOGIT_LIMIT as u32);
                    }
                }
            }
        }
    }

    #[test]
    fn rescaling_keeps_fourteen_bits() {
        for v in [1i64 << 50, -(1i64 << 40) - 12_345, 3 << 31, 0] {
            for f in [1u32 << 30, 1 << 29, 759_250_125, 1 << 16] {
                let want = v as f64 * f as f64 / 2f64.powi(30);
                let got = rescale(v, f) as f64;
                assert!(
                    (got - want).abs() <= want.abs() * 2f64.powi(-13) + 2f64.powi(14),
                    "{v} {f}"
                );
            }
        }
    }

    #[test]
    fn int8_memories_need_whole_slots_in_a_group() {
        let q = [1i8; 64];
        let scales = [0.5f32; 4];
        let t = |group| {
            Tensor::new(
                2,
                32,
                TensorData::I8 {
                    q: &q,
                    scales: &scales[..64 / group],
                    group,
                },
            )
            .unwrap()
        };
        assert!(int8_slots(&t(16), 8).is_some());
        assert!(int8_slots(&t(16), 16).is_some());
        assert!(int8_slots(&t(32), 16).is_some());
        assert!(int8_slots(&t(32), 32).is_some());
        // A group of 16 cuts slots of 32.
        assert!(int8_slots(&t(16), 32).is_none());
        let f = [0f32; 64];
        let f32_tensor = Tensor::new(4, 16, TensorData::F32(&f)).unwrap();
        assert!(int8_slots(&f32_tensor, 8).is_none());
    }
}
