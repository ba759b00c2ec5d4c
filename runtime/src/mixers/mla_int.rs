//! `mla`'s integer step (docs/integer-path.md, "MLA on the integer path"):
//! an int8 latent window with per-entry scales and integer softmax
//! attention, the up-projections absorbed as in the f32 step.
//!
//! - A **slot** (one position) is the latent `c [R]` quantized to int8
//!   (`q = round(127 v / max|v|)`, [`crate::fixed::block::quantize`]) and
//!   the RoPE-rotated shared key `kr [dr]` kept at its 15-bit view (i16:
//!   int8 RoPE keys cost an MLA LM 0.006 bits per byte in the f64
//!   reference, the int8 latents 0.0003), each with one packed scale word
//!   ([`pack_scale`]: a 16-bit mantissa and an i16 exponent, saturated and
//!   counted beyond it). Bytes per slot: `R + 2 dr + 8` against f32's `4 (R
//!   + dr)`.
//! - **Absorbed query** `q_lat = Wuk_h^T q_nope` and **output** `o_h =
//!   Wuv_h Σ p_s c_s`: `kv_b_proj` (f32, read through its bits as 15-bit
//!   mantissas aligned to its largest exponent, [`F32Bits`]) times the
//!   15-bit views, summed exactly in i64 (`|W q| < 2^30`, at most `2^20`
//!   terms), then rounded to a normal block.
//! - **Scores** `q_lat·c_s + q_rope·kr_s`: the query's two parts kept at
//!   their 15-bit views (not quantized to int8), two exact i64 sums
//!   against the slot, each times its scale and `1/sqrt(d + dr)` as an [`Fx`]; softmax
//!   and the weighted sum of the latents as SWA's ([`attend_scored`]).
//! - RoPE in integer code ([`super::rope_int`]), the f32 step's phases.
//!
//! State layout (i32 words): the scale words `[W][2]` (latent, RoPE key),
//! then the latents `[W][R]` as int8 padded to a word, then the RoPE keys
//! `[W][dr]` as i16 padded to a word. A zeroed state is a valid empty one (a slot is read
//! only when `ctx.pos` says its token is in the stream). A restored state
//! may hold any bits: the scale exponents are i16 by construction and the
//! dot products exact, so a hostile state gives garbage logits but no
//! overflow.

use super::mla_config::MlaConfig;
use super::rope_int::{rotate, table_q15};
use super::swa_int::{align_head, attend_scored, pack_scale, quantize_part, unpack_scale};
use crate::error::{part_mut, split_mut, Error, Result};
use crate::fixed::block::{normalize, normalize_with_max, F32Bits, TO_15};
use crate::fixed::{Block, Fx};
use crate::format::Role;
use crate::mixers::StepCtx;
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

/// The exact dot product of a query's 15-bit views (`|a| <= 2^15`) and an
/// int8 vector: each term below 2^22, so i64 holds any length.
fn dot15x8(a: &[i32], b: &[i8]) -> i64 {
    a.iter()
        .zip(b)
        .fold(0i64, |s, (&x, &y)| s + (x * y as i32) as i64)
}

/// The exact dot product of a query's 15-bit views and an i16 vector:
/// each term at most 2^30 in magnitude, so i64 holds any length.
fn dot15x16(a: &[i32], b: &[i16]) -> i64 {
    a.iter()
        .zip(b)
        .fold(0i64, |s, (&x, &y)| s + x as i64 * y as i64)
}

/// Rounds the i64 sums `acc` (values `acc_i 2^e`) into `out` as a normal
/// block; returns its exponent (all zero: exponent 0).
fn round_sums(acc: &[i64], e: i32, out: &mut [i32]) -> i32 {
    let amax = acc.iter().map(|a| a.unsigned_abs()).max().unwrap_or(0);
    if amax == 0 {
        out.fill(0);
        return 0;
    }
    // To 30 bits: |acc| >> s < 2^30.
    let s = (64 - amax.leading_zeros() as i32 - 30).max(0);
    let mut omax = 0u32;
    for (o, &a) in out.iter_mut().zip(acc) {
        *o = match s {
            0 => a as i32,
            _ => ((a + (1i64 << (s - 1))) >> s) as i32,
        };
        omax = omax.max(o.unsigned_abs());
    }
    normalize_with_max(out, e + s, omax)
}

/// The state's parts: scale words `[W][2]`, latents `[W][R]` (int8), RoPE
/// keys `[W][dr]` (i16).
fn parts<'s>(
    c: &MlaConfig,
    state: &'s mut [i32],
) -> Result<(&'s mut [i32], &'s mut [i8], &'s mut [i16])> {
    let (w, r, dr) = (
        c.window as usize,
        c.kv_lora_rank as usize,
        c.rope_dim as usize,
    );
    let bad = Error::Internal("mla state of the wrong size");
    let (scales, rest) = state.split_at_mut_checked(2 * w).ok_or(bad)?;
    let (lw, rest) = rest.split_at_mut_checked((w * r).div_ceil(4)).ok_or(bad)?;
    let kw = rest.get_mut(..(w * dr).div_ceil(2)).ok_or(bad)?;
    Ok((
        scales,
        bytemuck::cast_slice_mut(lw),
        bytemuck::cast_slice_mut(kw),
    ))
}

/// The largest magnitude an int8 latent window holds
/// (`Session::state_max_abs`): every latent and RoPE key, `max |q| ×
/// scale`.
pub(crate) fn state_max_abs(c: &MlaConfig, state: &[i32]) -> f32 {
    let (w, r, dr) = (
        c.window as usize,
        c.kv_lora_rank as usize,
        c.rope_dim as usize,
    );
    let lat_words = (w * r).div_ceil(4);
    let (Some(scales), Some(lw), Some(kw)) = (
        state.get(..2 * w),
        state.get(2 * w..2 * w + lat_words),
        state.get(2 * w + lat_words..2 * w + lat_words + (w * dr).div_ceil(2)),
    ) else {
        return 0.0;
    };
    let (lat, keys): (&[i8], &[i16]) = (bytemuck::cast_slice(lw), bytemuck::cast_slice(kw));
    let max8 = |q: &[i8]| q.iter().fold(0u16, |a, v| a.max(v.unsigned_abs() as u16));
    let max16 = |q: &[i16]| q.iter().fold(0u16, |a, v| a.max(v.unsigned_abs()));
    let mut top = Fx::ZERO;
    for (s, pair) in scales.chunks_exact(2).enumerate() {
        let parts = [
            lat.get(s * r..(s + 1) * r).map_or(0, max8),
            keys.get(s * dr..(s + 1) * dr).map_or(0, max16),
        ];
        for (m, &word) in parts.into_iter().zip(pair) {
            let x = unpack_scale(word as u32) * Fx::from_i64(m as i64, 0);
            if x.gt(top) {
                top = x;
            }
        }
    }
    f32::from_bits(top.to_f32_bits())
}

/// One token of `mla` with an int8 latent window
/// ([`crate::mixers::Mixer::step_int`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn step(
    c: &MlaConfig,
    ctx: &StepCtx,
    w: &LayerWeights<'_>,
    state: &mut [f32],
    scratch: &mut [f32],
    act: &mut ActBuf<'_>,
    x: Block<'_>,
    out: &mut [i32],
    clamps: &mut u32,
) -> Result<i32> {
    let (h, d, dv, dr, r) = c.dims();
    let (window, t) = (c.window as u64, ctx.pos);
    let half = dr / 2;
    let scratch: &mut [i32] = bytemuck::cast_slice_mut(scratch);
    let too_small = Error::Internal("mla scratch too small");
    let (q, rest) = scratch
        .split_at_mut_checked(h * (d + dr))
        .ok_or(too_small)?;
    let (new, rest) = rest.split_at_mut_checked(r + dr).ok_or(too_small)?;
    let (lat, rest) = rest.split_at_mut_checked(r).ok_or(too_small)?;
    let (accw, rest) = rest
        .split_at_mut_checked(2 * r.max(dv) + 1)
        .ok_or(too_small)?;
    let (o, rest) = rest.split_at_mut_checked(h * dv).ok_or(too_small)?;
    let (cs, rest) = rest.split_at_mut_checked(dr).ok_or(too_small)?;
    let tmp = rest.get_mut(..r + dr).ok_or(too_small)?;
    let acc: &mut [i64] = {
        let (_, aligned, _) = bytemuck::pod_align_to_mut::<i32, i64>(accw);
        aligned.get_mut(..r.max(dv)).ok_or(too_small)?
    };
    let state: &mut [i32] = bytemuck::cast_slice_mut(state);
    let (scales, lats, keys) = parts(c, state)?;

    let (eq, en) = {
        let xin = act.input_int(x)?;
        (
            w.get(Role::QProj)?.matvec_int(&xin, q)?,
            w.get(Role::KvAProj)?.matvec_int(&xin, new)?,
        )
    };
    let (cos, sin) = split_mut(cs, half, "mla rope table")?;
    table_q15(c.rope_theta.to_bits(), c.rope_dim, ctx.abs_pos, cos, sin);

    // Store this token's latent (int8) and rotated key (its 15-bit view).
    // Nonzero: the window is (checked at load), stated without a panic
    // branch; every slot `at` below is then inside the state `parts`
    // checked.
    const SLOT: &str = "mla slot out of the state";
    let window = core::num::NonZeroU64::new(window).unwrap_or(core::num::NonZeroU64::MIN);
    let at = (t % window) as usize;
    let (c_new, kr_new) = split_mut(new, r, SLOT)?;
    let cs_new = quantize_part(
        c_new,
        en,
        part_mut(tmp, ..r, SLOT)?,
        part_mut(lats, at * r..at * r + r, SLOT)?,
    )?;
    let ek = normalize(kr_new, en);
    let ek = rotate(kr_new, ek, cos, sin);
    // A normal block's mantissas are below 2^30: their views fit an i16.
    for (k, &m) in part_mut(keys, at * dr..at * dr + dr, SLOT)?
        .iter_mut()
        .zip(&*kr_new)
    {
        *k = (m >> TO_15) as i16;
    }
    let ks_new = Fx::from_i64(1, ek + TO_15 as i32);
    let [sc_new, sk_new] = part_mut(scales, 2 * at..2 * at + 2, SLOT)? else {
        return Err(Error::Internal(SLOT));
    };
    *sc_new = pack_scale(cs_new, clamps) as i32;
    *sk_new = pack_scale(ks_new, clamps) as i32;

    let kv_b = w.get(Role::KvBProj)?.stored_vector()?;
    let (wbits, shift_base) = kv_b.raw();
    let ew = kv_b.exp15();
    let inv = Fx::from_i64((d + dr) as i64, 0).rsqrt();
    let first = (t + 1).saturating_sub(window.get());
    let (lats, keys, scales) = (&*lats, &*keys, &*scales);
    let mut eo: Option<i32> = None;
    for head in 0..h {
        let qh = part_mut(q, head * (d + dr)..(head + 1) * (d + dr), SLOT)?;
        let (q_nope, q_rope) = split_mut(qh, d, SLOT)?;
        // This head's rotated RoPE query, normal on its own.
        let er = normalize(q_rope, eq);
        let er = rotate(q_rope, er, cos, sin);
        // Absorb Wuk_h: q_lat = Wuk_h^T q_nope (kv_b rows head*(d+dv) .. +d),
        // on q_nope's 15-bit view (of the whole q block).
        let base = head * (d + dv) * r;
        let acc_r = part_mut(acc, ..r, SLOT)?;
        acc_r.fill(0);
        for (i, &qi) in q_nope.iter().enumerate() {
            let q15 = (qi >> TO_15) as i64; // |q15| <= 2^15
            let row = wbits.get(base + i * r..base + (i + 1) * r).unwrap_or(&[]);
            for (a, &b) in acc_r.iter_mut().zip(row) {
                // |W15 q15| <= 2^30; at most 2^20 terms: below 2^50.
                *a += F32Bits::decode(b, shift_base) as i64 * q15;
            }
        }
        let el = round_sums(acc_r, ew + eq + TO_15 as i32, lat);
        // The query's 15-bit views: the latent part, then the RoPE part.
        let (ql, qr) = split_mut(tmp, r, SLOT)?;
        ql.iter_mut().zip(&*lat).for_each(|(a, &m)| *a = m >> TO_15);
        qr.iter_mut()
            .zip(&*q_rope)
            .for_each(|(a, &m)| *a = m >> TO_15);
        let (ql, qr) = (&*ql, &*qr);
        let (el, er) = (el + TO_15 as i32, er + TO_15 as i32);
        let scored = || {
            (first..=t).map(move |s| {
                // `get`: every slot is inside the state (`parts`); the
                // empty and zero defaults are not reached.
                let at = (s % window) as usize;
                let c8 = lats.get(at * r..at * r + r).unwrap_or_default();
                let k16 = keys.get(at * dr..at * dr + dr).unwrap_or_default();
                let (sc, sk) = match scales.get(2 * at..2 * at + 2) {
                    Some(&[sc, sk]) => (sc as u32, sk as u32),
                    _ => (0, 0),
                };
                let l = Fx::from_i64(dot15x8(ql, c8), el) * (inv * unpack_scale(sc))
                    + Fx::from_i64(dot15x16(qr, k16), er) * (inv * unpack_scale(sk));
                (l, c8, sc)
            })
        };
        // The weighted sum of the latents, into `lat` (free again).
        let ea = attend_scored(scored, None, part_mut(acc, ..r, SLOT)?, lat);
        // Absorb Wuv_h: o_h = Wuv_h acc (kv_b rows head*(d+dv)+d .. +dv).
        let vbase = base + d * r;
        let acc_v = part_mut(acc, ..dv, SLOT)?;
        for (jv, a) in acc_v.iter_mut().enumerate() {
            let row = wbits
                .get(vbase + jv * r..vbase + (jv + 1) * r)
                .unwrap_or(&[]);
            // |W15 a15| <= 2^30; at most 2^20 terms.
            *a = row.iter().zip(lat.iter()).fold(0i64, |s, (&b, &m)| {
                s + F32Bits::decode(b, shift_base) as i64 * (m >> TO_15) as i64
            });
        }
        let (done, rest) = split_mut(o, head * dv, SLOT)?;
        let oh = part_mut(rest, ..dv, SLOT)?;
        let e = round_sums(acc_v, ew + ea + TO_15 as i32, oh);
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
