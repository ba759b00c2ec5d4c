//! GSA's integer step (state format int16, the integer token path:
//! docs/integer-path.md, "GSA on the integer path"): the maths of
//! docs/spec.md §3.2 on blocks and 16-bit slot memories, every step in
//! integer code.
//!
//! **State** (i32 words, in this order; `Hkv` kv heads, `M` slots):
//!
//! ```text
//! scales [Hkv][M][ Ek: i32 | fk: u32 | Ev: i32 | fv: u32 ]   per (kv head, slot): its key and its value scale
//! Hk: [Hkv][M][K] i16 mantissas (padded to a word)           slot m's key    = mantissa × fk 2^(Ek - 32)
//! Hv: [Hkv][M][V] i16 mantissas (padded to a word)           slot m's value  = mantissa × fv 2^(Ev - 32)
//! q, k, v convolution rings (mixers::conv_int), when conv_size > 0
//! ```
//!
//! (The f32 state keeps `Hk` as `[K][M]`; here each slot's key is one
//! contiguous vector with its own scale.) `f < 2^31` (0 in a zeroed state)
//! marks an empty slot vector: its values are zero.
//!
//! **The forget gate is the scale's** (the update is `slots_int::update`,
//! shared with BLA). Slot `m` of kv head `g` is updated
//! `h ← α h + (1 - α) x` with one `α` for its key and its value: `σ ← α σ`
//! is one [`Fx`] product, exact to 2^-31, so no mantissa is rounded by a
//! gate however close to 1 (a 16-bit memory multiplied element by element
//! stops moving values below `0.5 / (1 - α)` units). The write enters at
//! the new scale: `n_i = (m_i << 8) + round((1 - α) x_i / σ × 2^8)` (i64),
//! and the vector is shifted back to 16 bits by `s` bits with `σ ← σ
//! 2^(s - 8)`: `s = 8` (the old mantissas exact) while the largest `|n| >>
//! 8` lies in `[2^12, 2^15)`, else the shift that brings it into `[2^13,
//! 2^14)`; a write that dwarfs the old vector moves the scale up first
//! (`slots_int`). No mantissa needs a clamp (the shift rounds the largest
//! to at most 32767).
//!
//! **Per token**: q, k, v and the gate logits from the products (blocks);
//! the short convolutions with SiLU (`conv_int`); the feature map on q and
//! k (SiLU or ReLU) and SiLU on v; per slot `α = exp(logsigmoid(f) / n)` as
//! an `Fx` (`logsigmoid(f) = -softplus(-f)`, the normalizer `n` by its
//! bits); the slot updates above (each kv head's k and v on their own
//! 15-bit views); per query head the logits `q·Hk_m` (exact i64 sums of 15
//! x 16-bit products, times the slot's key scale) in Q16, the softmax over
//! the `M` slots (`Fx::exp` of each logit minus the largest, every weight
//! in `(0, 1]`), the values summed in i64 with weights in Q24 of the
//! largest value scale, divided once by the weights' sum (as SWA's
//! attention, `swa_int::attend`); the heads aligned into one block, SiLU,
//! the RMSNorm over all `H V` (eps 1e-5, `g_norm` by its bits), `o_proj`.

use super::gsa_config::{FeatureMap, GsaConfig, G_NORM_EPS, SLOT_WORDS};
use super::slots_int::{self, read_heads, update, Part};
use super::{conv_int, StepCtx};
use crate::error::{Error, Result, Rows};
use crate::fixed::activation::silu_block;
use crate::fixed::block::{normalize, normalize_with_max, rms_inv, Block, TO_15};
use crate::fixed::Fx;
use crate::format::Role;
use crate::tensor::{ActBuf, Tensor};
use crate::weights::LayerWeights;

/// The feature map on a normal block in place; returns its exponent.
fn feature(m: &mut [i32], e: i32, map: FeatureMap) -> i32 {
    match map {
        FeatureMap::Swish => silu_block(m, e),
        FeatureMap::Relu => {
            m.iter_mut().for_each(|v| *v = (*v).max(0));
            normalize(m, e)
        }
    }
}

/// `x = rmsnorm(x) × weight` in place on a normal block (as the block's
/// norms, `int_token`); returns the exponent of the normal result.
fn norm_in_place(x: &mut [i32], e: i32, weight: &Tensor<'_>, eps: Fx) -> Result<i32> {
    let w = weight.stored_vector()?;
    let inv = rms_inv(Block { m: x, e }, eps);
    if inv.is_zero() {
        x.fill(0);
        return Ok(0);
    }
    let f = (inv.mantissa() >> 16) as i32; // [2^15, 2^16)
    let mut max = 0u32;
    for (c, xc) in x.iter_mut().enumerate() {
        // 15 x 15 bits, its 15-bit view times 16 bits: below 2^31.
        let p = (*xc >> TO_15) * w.at15(c);
        *xc = (p >> 15) * f;
        max = max.max(xc.unsigned_abs());
    }
    let e = e + TO_15 as i32 + w.exp15() + 15 + inv.exponent() + 16;
    Ok(normalize_with_max(x, e, max))
}

/// The largest magnitude an int16 GSA state holds (`Session::state_max_abs`):
/// every slot vector's largest mantissa times its scale, and the
/// convolution rings.
pub(crate) fn state_max_abs(c: &GsaConfig, state: &[i32]) -> f32 {
    let (h, hkv, k, v, m) = c.dims();
    let channels = [h * k, hkv * k, hkv * v];
    slots_int::state_max_abs(state, hkv * m, (k, v), channels, c.conv_size)
}

/// One token of `gsa` with the int16 state ([`crate::mixers::Mixer::step_int`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn step(
    c: &GsaConfig,
    ctx: &StepCtx,
    w: &LayerWeights<'_>,
    state: &mut [f32],
    scratch: &mut [f32],
    act: &mut ActBuf<'_>,
    x: Block<'_>,
    out: &mut [i32],
    clamps: &mut u32,
) -> Result<i32> {
    let (h, hkv, k, v, m) = (
        c.num_heads as usize,
        c.num_kv_heads as usize,
        c.head_k_dim as usize,
        c.head_v_dim as usize,
        c.num_slots as usize,
    );
    let scratch: &mut [i32] = bytemuck::cast_slice_mut(scratch);
    let too_small = Error::Internal("gsa scratch too small");
    let (q, rest) = scratch.split_at_mut_checked(h * k).ok_or(too_small)?;
    let (kk, rest) = rest.split_at_mut_checked(hkv * k).ok_or(too_small)?;
    let (vv, rest) = rest.split_at_mut_checked(hkv * v).ok_or(too_small)?;
    let (f, rest) = rest.split_at_mut_checked(hkv * m).ok_or(too_small)?;
    let (logits, rest) = rest.split_at_mut_checked(m).ok_or(too_small)?;
    let (o, rest) = rest.split_at_mut_checked(h * v).ok_or(too_small)?;
    let acc: &mut [i64] = {
        let (_, aligned, _) = bytemuck::pod_align_to_mut::<i32, i64>(rest);
        aligned.get_mut(..v).ok_or(too_small)?
    };

    let xin = act.input_int(x)?;
    let mut eq = w.get(Role::QProj)?.matvec_int(&xin, q)?;
    let mut ek = w.get(Role::KProj)?.matvec_int(&xin, kk)?;
    let mut ev = w.get(Role::VProj)?.matvec_int(&xin, vv)?;
    let ef = w.get(Role::FProj)?.matvec_int(&xin, f)?;

    // The state's parts.
    let state: &mut [i32] = bytemuck::cast_slice_mut(state);
    let bad_state = Error::Internal("gsa state of the wrong size");
    let (scales, rest) = state
        .split_at_mut_checked(hkv * m * SLOT_WORDS as usize)
        .ok_or(bad_state)?;
    let (kw, rest) = rest
        .split_at_mut_checked((hkv * m * k).div_ceil(2))
        .ok_or(bad_state)?;
    let (vw, convs) = rest
        .split_at_mut_checked((hkv * m * v).div_ceil(2))
        .ok_or(bad_state)?;
    let hk_all: &mut [i16] = bytemuck::cast_slice_mut(kw);
    let hv_all: &mut [i16] = bytemuck::cast_slice_mut(vw);

    if c.conv_size > 0 {
        // As the f32 step: q, k, v convolved with SiLU, then the feature map.
        let parts = [(&mut *q, &mut eq), (&mut *kk, &mut ek), (&mut *vv, &mut ev)];
        conv_int::step_qkv(w, c.conv_size, convs, ctx.pos, parts)?;
    }
    eq = feature(q, eq, c.feature_map);
    ek = feature(kk, ek, c.feature_map);
    ev = silu_block(vv, ev);

    // The slot updates, alpha = exp(-softplus(-f) / normalizer) per slot.
    let inv_norm = Fx::from_f32_bits(c.gate_logit_normalizer.to_bits()).recip();
    // The sizes are nonzero (checked at load): the `max(1)`s state it, so
    // no chunk size has a panic branch. Each kv head's keys, values, gate
    // logits, slot records (four words a slot) and slot states.
    let (k1, v1, m1) = (k.max(1), v.max(1), m.max(1));
    let per_head = Rows(kk.chunks_exact_mut(k1))
        .zip(vv.chunks_exact_mut(v1))
        .zip(f.chunks_exact(m1))
        .zip(scales.chunks_exact_mut((m1 * 4).max(1)))
        .zip(hk_all.chunks_exact_mut((m1 * k1).max(1)))
        .zip(hv_all.chunks_exact_mut((m1 * v1).max(1)))
        .take(hkv);
    for (((((kg, vg), fg), recs), hkg), hvg) in per_head {
        let xk = Part::new(kg, ek);
        let xv = Part::new(vg, ev);
        let slots = fg
            .iter()
            .zip(recs.as_chunks_mut::<4>().0)
            .zip(hkg.chunks_exact_mut(k1))
            .zip(hvg.chunks_exact_mut(v1));
        for (((&fs, rec), hks), hvs) in slots {
            let fl = Fx::from_i64(fs as i64, ef);
            let alpha = (-((-fl).softplus() * inv_norm)).exp();
            let beta = if alpha.gt(Fx::ONE) {
                Fx::ZERO
            } else {
                Fx::ONE - alpha
            };
            let (rk, rv) = rec.split_at_mut(2);
            update(hks, rk, &xk, alpha, beta);
            update(hvs, rv, &xv, alpha, beta);
        }
    }

    // The reads, per query head; the heads aligned as they come.
    let eo = read_heads(
        q,
        eq,
        None,
        (k, v),
        h / hkv.max(1),
        m,
        scales,
        hk_all,
        hv_all,
        logits,
        acc,
        o,
        clamps,
    )?;
    let eo = silu_block(o, eo);
    let eps = Fx::from_f32_bits(G_NORM_EPS.to_bits());
    let eo = norm_in_place(o, eo, &w.get(Role::GNorm)?, eps)?;
    let oin = act.input_int(Block { m: o, e: eo })?;
    w.get(Role::OProj)?.matvec_int(&oin, out)
}
