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
use crate::error::{part, part_mut, split_mut, Error, Result};
use crate::fixed::activation::{sigmoid_q15, to_q16};
use crate::fixed::block::{normalize, Block, TO_15};
use crate::fixed::wide::{max_mapped, mul_i32, mul_i32_u32, mul_u32};
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

/// The Q16 logit of a raw dot product `raw` with a key of scale `kbits`
/// (f32 bits) for a query whose factor (its scale over `sqrt(d)`) is
/// `c16 × 2^ec` (`c16 < 2^16`), clamped to `±LIMIT` (adding one to
/// `clamps` where `COUNT`).
#[inline(always)]
fn logit<const COUNT: bool>(raw: i32, kbits: u32, c16: u32, ec: i32, clamps: &mut u32) -> i64 {
    let (km, kb) = scale_parts(kbits);
    // km16 c16 < 2^32; |raw| < 2^31: the product fits an i64.
    let p = mul_i32_u32(raw, (km >> 8) * c16);
    // value = p × 2^(kb - 150 + 8 + ec); in Q16: 16 more.
    let sh = kb as i32 - 126 + ec;
    let l = if sh >= 0 {
        // Clamped first so that the shift cannot overflow: a nonzero `p`
        // shifted by 31 or more saturates whatever its size.
        p.clamp(-(LOGIT_LIMIT + 1), LOGIT_LIMIT + 1) << sh.min(32)
    } else {
        let s = (-sh).min(62) as u32;
        (p + (1i64 << s >> 1)) >> s
    };
    if l.unsigned_abs() > LOGIT_LIMIT as u64 {
        if COUNT {
            *clamps = clamps.saturating_add(1);
        }
        l.clamp(-LOGIT_LIMIT, LOGIT_LIMIT)
    } else {
        l
    }
}

/// One token of `cross` over an int8 memory ([`crate::mixers::Mixer::step_int`]).
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
    let (q15, rest) = split_mut(rest, d, SCRATCH)?;
    let acc: &mut [i64] = {
        let (_, aligned, _) = bytemuck::pod_align_to_mut::<i32, i64>(rest);
        part_mut(aligned, ..d, SCRATCH)?
    };

    let (eq, eg) = {
        let xin = act.input_int(x)?;
        let eq = w.get(Role::QProj)?.matvec_int(&xin, q)?;
        let eg = match c.output_gate {
            true => w.get(Role::GProj)?.matvec_int(&xin, g)?,
            false => 0,
        };
        (eq, eg)
    };

    // The memory's part: `n` memories of `m` rows of `Hkv d` values.
    let row = kv * d;
    let base = n * m * row;
    let values = |start: usize, group: usize| start / group..(start + m * row).div_ceil(group);
    // The largest value scale's exponent: every value scale is below
    // `vref = 2^(vtop - 126)`.
    let vtop = max_mapped(part(vs, values(base, vgroup), SCRATCH)?, |b| {
        scale_parts(b).1
    });
    let inv_sqrt_d = Fx::from_i64(d as i64, 0).rsqrt();
    let per_group = (h / kv).max(1);
    let mut eo: Option<i32> = None;
    for head in 0..h {
        // The head's query normalized on its own, as 15-bit views.
        q15.copy_from_slice(part(q, head * d..head * d + d, SCRATCH)?);
        let e = normalize(q15, eq);
        q15.iter_mut().for_each(|v| *v >>= TO_15);
        let q15 = &*q15;
        let f = Fx::pow2(e + TO_15 as i32) * inv_sqrt_d;
        let (c16, ec) = (f.mantissa() >> 16, f.exponent() + 16);
        let off = (head / per_group) * d;
        // Slot `j`'s key, its scale's bits, its value and its scale's bits
        // (`get`: a loaded memory holds every slot; the empty and zero
        // defaults are not reached).
        let slot = |j: usize| {
            let at = base + j * row + off;
            (
                kq.get(at..at + d).unwrap_or_default(),
                ks.get(at / kgroup).copied().unwrap_or(0),
                vq.get(at..at + d).unwrap_or_default(),
                vs.get(at / vgroup).copied().unwrap_or(0),
            )
        };
        let mut top = -LOGIT_LIMIT;
        for j in 0..m {
            let (k, kb, _, _) = slot(j);
            top = top.max(logit::<false>(dot15x8(q15, k), kb, c16, ec, clamps));
        }
        acc.fill(0);
        let mut sum = 0u64;
        for j in 0..m {
            let (k, kb, v, vb) = slot(j);
            let l = logit::<true>(dot15x8(q15, k), kb, c16, ec, clamps);
            // top - l <= 2^31: Q16, e^-(top - l) in Q30.
            let p = exp_neg((top - l) as u32);
            sum += p as u64;
            let (vm, vexp) = scale_parts(vb);
            // vs / vref in Q24: vm 2^(vexp - 150) / 2^(vtop - 126) 2^24.
            let rel = vm >> (vtop - vexp.min(vtop)).min(31);
            // p rel 2^-30 <= 2^24.
            let wv = (mul_u32(p, rel) >> 30) as i32;
            if wv != 0 {
                for (a, &vi) in acc.iter_mut().zip(v) {
                    // |wv v| <= 2^31; at most 2^20 terms: below 2^51.
                    *a += mul_i32(wv, vi as i32);
                }
            }
        }
        // out = acc 2^-24 vref / (sum 2^-30).
        let scale = Fx::pow2(vtop as i32 - 126 + 30) * Fx::from_u64(sum, 0, false).recip();
        let (done, rest) = split_mut(o, head * d, SCRATCH)?;
        let oh = part_mut(rest, ..d, SCRATCH)?;
        let e = finish(acc, scale, oh);
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

    /// The logit by f64 arithmetic, in Q16.
    fn exact(raw: i32, kbits: u32, c16: u32, ec: i32) -> f64 {
        let k = f32::from_bits(kbits) as f64;
        raw as f64 * k * c16 as f64 * 2f64.powi(ec) * 65536.0
    }

    #[test]
    fn logits_are_the_products_within_their_rounding_and_saturate() {
        let mut clamps = 0;
        for (raw, k, c16, ec) in [
            (1000, 0.01f32, 40_000u32, -24),
            (-16_129 * 32, 0.002, 65_535, -20),
            (7, 3.5, 32_768, -15),
            (0, 1.0, 50_000, -10),
            (-3, 1e-6, 33_000, -30),
        ] {
            let want = exact(raw, k.to_bits(), c16, ec);
            let got = logit::<true>(raw, k.to_bits(), c16, ec, &mut clamps) as f64;
            // The key scale's mantissa to 16 bits: 2^-15 relative, plus
            // the rounding of the shift.
            assert!(
                (got - want).abs() <= want.abs() * 2f64.powi(-15) + 1.0,
                "{raw} {k}: {got} {want}"
            );
        }
        assert_eq!(clamps, 0);
        let big = logit::<true>(16_129 * 64, 1000.0f32.to_bits(), 65_535, 0, &mut clamps);
        let small = logit::<true>(-16_129 * 64, 1000.0f32.to_bits(), 65_535, 0, &mut clamps);
        assert_eq!((big, small, clamps), (LOGIT_LIMIT, -LOGIT_LIMIT, 2));
        // Not counted in the first pass.
        logit::<false>(16_129 * 64, 1000.0f32.to_bits(), 65_535, 0, &mut clamps);
        assert_eq!(clamps, 2);
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
            for raw in [i32::MIN + 1, -1, 0, 1, i32::MAX] {
                for ec in [-200, -40, 0, 40] {
                    let l = logit::<true>(raw, bits, 65_535, ec, &mut clamps);
                    assert!(l.abs() <= LOGIT_LIMIT);
                }
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
