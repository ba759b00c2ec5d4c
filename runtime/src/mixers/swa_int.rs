//! `swa`'s integer step (docs/integer-path.md, "SWA on the integer path"):
//! an int8 KV cache with per-slot scales and integer softmax attention.
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
//! - RoPE in integer code ([`super::rope_int`]): the same exact phases as
//!   the f32 step, cos/sin in Q15.
//!
//! State layout (i32 words; `slots = S + pinned_max + span` as in
//! `swa.rs`, the same ring and sink slots): the scale words `[slots][Hkv]
//! [2]` (key, value), then the keys `[slots][Hkv][d]` as int8 padded to a
//! word, then the values likewise, then (with a short convolution) the q,
//! k and v rings of [`super::conv_int`]. A zeroed state is a valid empty
//! one (a slot is read only when `ctx.pos` says its token is in the stream).
//! The convolution runs as in the f32 step: on q, k and v with SiLU, before
//! RoPE.

use super::conv_int;
use super::rope_int::{rotate, table_q15};
use super::swa_config::SwaConfig;
use crate::error::{part, part_mut, split_mut, Error, Result};
use crate::fixed::block::{normalize, normalize_with_max, quantize, shr_round, Block};
use crate::fixed::Fx;
use crate::format::Role;
use crate::mixers::StepCtx;
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;
use core::num::{NonZeroU64, NonZeroUsize};

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
    let scored =
        || slots().map(move |(i, s)| (logit(queries[i & 1].0, qc[i & 1], &s), s.v, s.v_scale));
    attend_scored(scored, sink, acc, out)
}

/// The softmax and weighted sum of [`attend`] over already scored slots:
/// `slots()` yields each slot's logit, its int8 value `[d]` and the
/// value's packed scale (called twice, the same slots each time; `mla`
/// scores its latents itself). Writes the weighted sum into `out` as a
/// normal block and returns its exponent (all zero, exponent 0, without
/// slots); `acc` (`[d]`) is scratch.
pub(crate) fn attend_scored<'a, I: Iterator<Item = (Fx, &'a [i8], u32)>>(
    slots: impl Fn() -> I,
    sink: Option<Fx>,
    acc: &mut [i64],
    out: &mut [i32],
) -> i32 {
    let mut max = sink;
    let mut vmax = Fx::ZERO;
    let mut n = 0usize;
    for (l, _, v_scale) in slots() {
        if max.is_none_or(|m| l.gt(m)) {
            max = Some(l);
        }
        let vs = unpack_scale(v_scale);
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
    for (l, v, v_scale) in slots() {
        let p = (l - max).exp(); // (0, 1]
        sum = sum.plus_nonneg(p); // both >= 0
                                  // p × scale_t / vmax in Q24: at most 2^24.
        let w = (p * unpack_scale(v_scale) * inv_vmax).to_fixed(24);
        for (a, &v) in acc.iter_mut().zip(v) {
            // |w v| <= 2^24 × 127 < 2^31; n < 2^32 terms stay below 2^63.
            *a += w * v as i64;
        }
    }
    // out = acc × 2^-24 × vmax / sum.
    finish(acc, vmax * sum.recip(), out)
}

/// The weighted sum `out = acc × 2^-24 × f` of a head as a normal block
/// (all zero, exponent 0, for a zero sum or factor); returns its exponent.
pub(crate) fn finish(acc: &[i64], f: Fx, out: &mut [i32]) -> i32 {
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

/// What a scratch part or cache slot out of its buffer would be (not
/// reached: the session sized both).
const SCRATCH: &str = "swa scratch too small";
const SLOT: &str = "swa slot out of the cache";

/// Aligns a head's output `oh` (exponent `e`) with the heads before it,
/// `done`, at their common exponent `eo` (`None` before the first head
/// with a nonzero output): the block with the smaller exponent is shifted
/// right (rounded), and `eo` becomes the larger of the two.
pub(crate) fn align_head(done: &mut [i32], oh: &mut [i32], e: i32, eo: &mut Option<i32>) {
    match *eo {
        Some(c) if c >= e => {
            let s = (c - e).min(32) as u32;
            oh.iter_mut().for_each(|m| *m = shr_round(*m, s));
        }
        Some(c) => {
            let s = (e - c).min(32) as u32;
            done.iter_mut().for_each(|m| *m = shr_round(*m, s));
            *eo = Some(e);
        }
        None => *eo = Some(e),
    }
}

/// Quantizes `m` (`[d]`, part of a block with exponent `e`) to int8 in
/// `q`, through `tmp` (`[d]`) normalized first; returns the scale.
pub(crate) fn quantize_part(m: &[i32], e: i32, tmp: &mut [i32], q: &mut [i8]) -> Result<Fx> {
    let tmp = part_mut(tmp, ..m.len(), "quantize scratch too small")?;
    tmp.copy_from_slice(m);
    let e = normalize(tmp, e);
    Ok(quantize(Block { m: tmp, e }, q))
}

/// The largest magnitude an int8 KV state holds (`Session::state_max_abs`):
/// every slot's key and value (`max |q| × scale`) and the convolution
/// rings, for a state of `slots` slots (`S + pinned_max + span`).
pub(crate) fn state_max_abs(c: &SwaConfig, slots: usize, state: &[i32]) -> f32 {
    let (h, hkv, d) = (
        c.num_heads as usize,
        c.num_kv_heads as usize,
        c.head_dim as usize,
    );
    let bytes_words = (slots * hkv * d).div_ceil(4);
    let (Some(scales), Some(kw), Some(vw)) = (
        state.get(..2 * slots * hkv),
        state.get(2 * slots * hkv..2 * slots * hkv + bytes_words),
        state.get(2 * slots * hkv + bytes_words..2 * slots * hkv + 2 * bytes_words),
    ) else {
        return 0.0;
    };
    let (keys, values): (&[i8], &[i8]) = (bytemuck::cast_slice(kw), bytemuck::cast_slice(vw));
    let mut top = Fx::ZERO;
    let mut see = |x: Fx| {
        if x.gt(top) {
            top = x;
        }
    };
    let max8 = |q: &[i8]| q.iter().fold(0u8, |a, v| a.max(v.unsigned_abs()));
    for (at, pair) in scales.chunks_exact(2).enumerate() {
        let part = |all: &[i8]| all.get(at * d..(at + 1) * d).map_or(0, max8);
        for (m, &w) in [part(keys), part(values)].into_iter().zip(pair) {
            see(unpack_scale(w as u32) * Fx::from_i64(m as i64, 0));
        }
    }
    let mut at = 2 * slots * hkv + 2 * bytes_words;
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

/// The token's q (`[H*d]`) and k, v (`kv`, `[2 Hkv d]`) as blocks: the
/// projections of `x`, the short convolutions (with SiLU, their rings in
/// `convs`) where the layer has them, then RoPE on q and k, `cs` (`[d]`)
/// left holding the token's cosines and sines. Returns the exponents of q,
/// k and v.
#[allow(clippy::too_many_arguments)]
pub(crate) fn project(
    c: &SwaConfig,
    ctx: &StepCtx,
    w: &LayerWeights<'_>,
    act: &mut ActBuf<'_>,
    x: Block<'_>,
    q: &mut [i32],
    kv_acc: &mut [i32],
    cs: &mut [i32],
    convs: &mut [i32],
) -> Result<[i32; 3]> {
    let (h, hkv, d) = (
        c.num_heads as usize,
        c.num_kv_heads as usize,
        c.head_dim as usize,
    );
    let half = d / 2;
    let bad_state = Error::Internal("swa state of the wrong size");
    let (mut eq, mut ek, ev) = {
        let xin = act.input_int(x)?;
        let (k, v) = split_mut(kv_acc, hkv * d, SCRATCH)?;
        let v = part_mut(v, ..hkv * d, SCRATCH)?;
        let mut e = [
            w.get(Role::QProj)?.matvec_int(&xin, q)?,
            w.get(Role::KProj)?.matvec_int(&xin, k)?,
            w.get(Role::VProj)?.matvec_int(&xin, v)?,
        ];
        if c.conv_size > 0 {
            // As the f32 step: q, k, v convolved (with SiLU) before RoPE.
            let width = c.conv_size as usize;
            let q_words = conv_int::state_words((h * d) as u64, c.conv_size) as usize;
            let kv_words = conv_int::state_words((hkv * d) as u64, c.conv_size) as usize;
            let (cq, rest) = convs.split_at_mut_checked(q_words).ok_or(bad_state)?;
            let (ck, rest) = rest.split_at_mut_checked(kv_words).ok_or(bad_state)?;
            let cv = rest.get_mut(..kv_words).ok_or(bad_state)?;
            let conv = |role| w.get(role);
            e[0] = conv_int::step(&conv(Role::QConv)?, width, cq, ctx.pos, q, e[0], true)?;
            e[1] = conv_int::step(&conv(Role::KConv)?, width, ck, ctx.pos, k, e[1], true)?;
            e[2] = conv_int::step(&conv(Role::VConv)?, width, cv, ctx.pos, v, e[2], true)?;
        }
        (e[0], e[1], e[2])
    };
    let (cos, sin) = split_mut(cs, half, SCRATCH)?;
    if c.use_rope {
        table_q15(c.rope_theta.to_bits(), c.head_dim, ctx.abs_pos, cos, sin);
        eq = rotate(q, eq, cos, sin);
        ek = rotate(part_mut(kv_acc, ..hkv * d, SCRATCH)?, ek, cos, sin);
    }
    Ok([eq, ek, ev])
}

/// One token of `swa` with an int8 KV cache ([`crate::mixers::Mixer::step_int`]).
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
    // k, v and the spare d words: the i64 accumulator once k, v are stored.
    let kv_acc = rest.get_mut(..2 * hkv * d + d).ok_or(too_small)?;

    // The state's parts.
    let sink_cap = c.sinks as usize + ctx.pinned_max;
    let slots = sink_cap + span.get() as usize;
    let state: &mut [i32] = bytemuck::cast_slice_mut(state);
    let bad_state = Error::Internal("swa state of the wrong size");
    let (scales, rest) = state
        .split_at_mut_checked(2 * slots * hkv)
        .ok_or(bad_state)?;
    let bytes_words = (slots * hkv * d).div_ceil(4);
    let (kw, rest) = rest.split_at_mut_checked(bytes_words).ok_or(bad_state)?;
    let (vw, convs) = rest.split_at_mut_checked(bytes_words).ok_or(bad_state)?;
    let keys: &mut [i8] = bytemuck::cast_slice_mut(kw);
    let values: &mut [i8] = bytemuck::cast_slice_mut(vw);

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
                let (kj, vj) = (
                    part(k, j * d..j * d + d, SCRATCH)?,
                    part(v, j * d..j * d + d, SCRATCH)?,
                );
                let ks = quantize_part(kj, ek, tmp, part_mut(keys, at..at + d, SLOT)?)?;
                let vs = quantize_part(vj, ev, tmp, part_mut(values, at..at + d, SLOT)?)?;
                let s = 2 * (slot * hkv + j);
                let [sk, sv] = part_mut(scales, s..s + 2, SLOT)? else {
                    return Err(Error::Internal(SLOT));
                };
                *sk = pack_scale(ks, clamps) as i32;
                *sv = pack_scale(vs, clamps) as i32;
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
    let group = (h / hkv.max(1)).max(1);
    let (keys, values, scales) = (&*keys, &*values, &*scales);
    // The heads aligned as they come: `eo` the common exponent so far.
    let mut eo: Option<i32> = None;
    for head in 0..h {
        let j = head / group;
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
        // `get`: every slot is inside the cache (the state's sizing); the
        // empty and zero defaults are not reached.
        let slot = |si: usize| {
            let at = si * hkv + j;
            let (k_scale, v_scale) = match scales.get(2 * at..2 * at + 2) {
                Some(&[k, v]) => (k as u32, v as u32),
                _ => (0, 0),
            };
            Slot {
                k: keys.get(at * d..at * d + d).unwrap_or_default(),
                k_scale,
                v: values.get(at * d..at * d + d).unwrap_or_default(),
                v_scale,
            }
        };
        let alt = usize::from(rerotate);
        // The window's keys `start, start + r, .., t`, walked in ring
        // slots: one division a pass (at the wrap) instead of one a key.
        let start = first + (t - first) % r;
        let (ring0, count) = ((start % span) as usize, (t - start) / r + 1);
        let (span, step) = (
            NonZeroUsize::new(span.get() as usize).unwrap_or(NonZeroUsize::MIN),
            r.get() as usize,
        );
        let slots = || {
            (0..sink_end)
                .filter(move |&s| !(r.get() > 1 && in_window(s)))
                .map(move |s| (alt, slot(s as usize)))
                .chain((0..count).scan(ring0, move |at, _| {
                    let this = *at;
                    *at += step;
                    if *at >= span.get() {
                        *at %= span;
                    }
                    Some((0, slot(sink_cap + this)))
                }))
        };
        let sink = sinks.as_ref().map(|v| Fx::from_f32_bits(v.bits(head)));
        let (done, rest) = split_mut(o, head * d, SCRATCH)?;
        let oh = part_mut(rest, ..d, SCRATCH)?;
        let e = attend([(&*q8, qs), (&*q8_alt, qs_alt)], slots, sink, acc, oh);
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

    /// Stores the normal block `v` as an int8 slot: writes `q`, returns the
    /// packed scale word (as the step does).
    fn store_slot(v: Block<'_>, q: &mut [i8], clamps: &mut u32) -> u32 {
        pack_scale(quantize(v, q), clamps)
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
