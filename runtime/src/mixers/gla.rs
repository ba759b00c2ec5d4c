//! `gla` — linear attention with a decay per key channel, as fla's
//! `GatedLinearAttention`, `HGRN2Attention` and `MultiScaleRetention`
//! (RetNet) layers run it one token at a time (docs/spec.md §3.9). `H` heads,
//! `K` key channels and `V` value channels per head:
//!
//! ```text
//! GLA:        q = Wq x,  k = Wk x,  v = Wv x,
//!             a = exp(logsigmoid(B (A x) + b) / normalizer)         [H*K]
//! HGRN2:      q = swish(Wq x),  v = Wv x,
//!             a = lb + (1 - lb) sigmoid(Wf x),  k = 1 - a           (lb: the layer's lower bound)
//! retention:  q, k = rope(Wq x), rope(Wk x),  v = Wv x,  a_h = 1 - 2^(-5 - h)
//! per head h: S_h[v][k] = a_h[k] S_h[v][k] + k_h[k] v_h[v]
//!             o_h[v] = K^-1/2 sum_k S_h[v][k] q_h[k]
//! GLA, retention: o_h = rmsnorm(o_h) g_norm (* swish(Wg x)_h with the output gate)
//! HGRN2:          o = rmsnorm(o) g_norm                              (over all H*V)
//! out = Wo o
//! ```
//!
//! State layout: `S [H][V][K]`.

pub use super::gla_config::{GlaConfig, GlaVariant};
use super::{push, rope, width, Mixer, SpecSink, StepCtx};
use crate::error::{split_mut, Error, Result, Rows, StepResult};
use crate::format::Role;
use crate::math::{exp, logsigmoid, rms_scale, sigmoid, silu};
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

impl Mixer for GlaConfig {
    fn push_specs(&self, layer: u16, d: u32, s: &mut dyn SpecSink) {
        let (h, k, v, r) = (
            self.num_heads,
            self.head_k_dim,
            self.head_v_dim,
            self.gate_low_rank_dim,
        );
        let (hk, hv) = (width(h, k), width(h, v));
        push(s, layer, Role::QProj, [hk, d, 0], true);
        match self.variant {
            GlaVariant::Hgrn2 => push(s, layer, Role::FProj, [hk, d, 0], true),
            _ => push(s, layer, Role::KProj, [hk, d, 0], true),
        }
        push(s, layer, Role::VProj, [hv, d, 0], true);
        if self.output_gate {
            push(s, layer, Role::GProj, [hv, d, 0], true);
        }
        match self.variant {
            GlaVariant::Gla => {
                push(s, layer, Role::GkProjA, [r, d, 0], true);
                push(s, layer, Role::GkProjB, [hk, r, 0], true);
                push(s, layer, Role::GkBias, [hk, 0, 0], false);
                push(s, layer, Role::GNorm, [v, 0, 0], false);
            }
            GlaVariant::Hgrn2 => {
                push(s, layer, Role::LowerBound, [hk, 0, 0], false);
                push(s, layer, Role::GNorm, [hv, 0, 0], false);
            }
            GlaVariant::Retention => push(s, layer, Role::GNorm, [v, 0, 0], false),
        }
        push(s, layer, Role::OProj, [d, hv, 0], true);
    }

    fn step(
        &self,
        ctx: &StepCtx,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> StepResult<()> {
        self.run(ctx, w, state, scratch, act, x, out)
            .map_err(Error::at_step)
    }
}

/// Splits `n` words off the front of `rest`, or fails (scratch sized by
/// [`GlaConfig::scratch_len`] never does).
fn take<'a>(rest: &mut &'a mut [f32], n: usize) -> Result<&'a mut [f32]> {
    if rest.len() < n {
        return Err(Error::Internal("gla scratch too small"));
    }
    let (head, tail) = core::mem::take(rest).split_at_mut(n);
    *rest = tail;
    Ok(head)
}

/// RMSNorm of each `size`-long group of `o` with the weight `weight`
/// (`weight.at(i)` for channel `i` of a group, so a `[V]` weight serves
/// every head and an `[H*V]` one, read at `i + offset`, the whole output).
fn norm_groups(
    o: &mut [f32],
    size: usize,
    per_group_weight: bool,
    eps: f32,
    w: &crate::tensor::Tensor<'_>,
) {
    for (gi, og) in o.chunks_exact_mut(size.max(1)).enumerate() {
        let inv = rms_scale(og, eps);
        let base = if per_group_weight { 0 } else { gi * size };
        for (i, e) in og.iter_mut().enumerate() {
            *e = *e * inv * w.at(base + i);
        }
    }
}

impl GlaConfig {
    /// [`Mixer::step`] with the load-time error type, converted once by
    /// `step` (everything here was checked at load: an error is a bug).
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        ctx: &StepCtx,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        // At least 1 (a parsed config's are), so that no chunk size is 0.
        let (h, kd, vd) = (
            self.num_heads as usize,
            (self.head_k_dim as usize).max(1),
            (self.head_v_dim as usize).max(1),
        );
        let (hk, hv) = (h * kd, h * vd);
        let mut rest = scratch;
        let q = take(&mut rest, hk)?;
        let k = take(&mut rest, hk)?;
        let a = take(&mut rest, hk)?;
        let v = take(&mut rest, hv)?;
        let g = take(&mut rest, hv)?;
        let low = take(&mut rest, self.gate_low_rank_dim as usize)?;
        let cs = take(&mut rest, kd)?;

        {
            let xin = act.input(x)?;
            w.get(Role::QProj)?.matvec(&xin, q)?;
            match self.variant {
                // HGRN2's forget gate goes to `a` first, its key follows.
                GlaVariant::Hgrn2 => w.get(Role::FProj)?.matvec(&xin, a)?,
                _ => w.get(Role::KProj)?.matvec(&xin, k)?,
            }
            w.get(Role::VProj)?.matvec(&xin, v)?;
            if self.output_gate {
                w.get(Role::GProj)?.matvec(&xin, g)?;
            }
            if self.variant == GlaVariant::Gla {
                w.get(Role::GkProjA)?.matvec(&xin, low)?;
            }
        }
        match self.variant {
            GlaVariant::Gla => {
                w.get(Role::GkProjB)?.matvec(&act.input(low)?, a)?;
                let bias = w.get(Role::GkBias)?;
                let norm = self.gate_logit_normalizer.max(1) as f32;
                for (i, e) in a.iter_mut().enumerate() {
                    *e = exp(logsigmoid(*e + bias.at(i)) / norm);
                }
            }
            GlaVariant::Hgrn2 => {
                let lb = w.get(Role::LowerBound)?;
                q.iter_mut().for_each(|e| *e = silu(*e));
                for (i, (e, ki)) in a.iter_mut().zip(k.iter_mut()).enumerate() {
                    let b = lb.at(i);
                    // exp(logaddexp(ln b, ln(1 - b) + logsigmoid(f))).
                    let decay = b + (1.0 - b) * sigmoid(*e);
                    *e = decay;
                    *ki = 1.0 - decay;
                }
            }
            GlaVariant::Retention => {
                rope::table(self.rope_theta, self.head_k_dim, ctx.abs_pos, cs);
                let half = kd / 2;
                let (cos, sin) = cs.split_at(half.min(cs.len()));
                for x in q.chunks_exact_mut(kd).chain(k.chunks_exact_mut(kd)) {
                    let (lo, hi) = split_mut(x, half, "gla: rope half past the head")?;
                    for (((p, r), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
                        let (x0, x1) = (*p, *r);
                        *p = x0 * c - x1 * s;
                        *r = x1 * c + x0 * s;
                    }
                }
                for (hh, ah) in a.chunks_exact_mut(kd).enumerate() {
                    ah.fill(GlaConfig::retention_decay(hh));
                }
            }
        }

        // The recurrence; the output overwrites v (each head's v is read
        // for its own rows before they are written).
        let scale = 1.0 / libm::sqrtf(kd as f32);
        for ((((s_h, q_h), k_h), a_h), v_h) in Rows(state.chunks_exact_mut((vd * kd).max(1)))
            .zip(q.chunks_exact(kd))
            .zip(k.chunks_exact(kd))
            .zip(a.chunks_exact(kd))
            .zip(v.chunks_exact_mut(vd))
        {
            for (row, vv) in s_h.chunks_exact_mut(kd).zip(v_h.iter_mut()) {
                let mut o = 0.0f32;
                for (((s, &ai), &ki), &qi) in row.iter_mut().zip(a_h).zip(k_h).zip(q_h) {
                    *s = ai * *s + ki * *vv;
                    o += *s * qi;
                }
                *vv = o * scale;
            }
        }

        let o = v;
        let weight = w.get(Role::GNorm)?;
        let eps = self.norm_eps(ctx.norm_eps);
        match self.variant {
            GlaVariant::Hgrn2 => norm_groups(o, hv, false, eps, &weight),
            _ => norm_groups(o, vd, true, eps, &weight),
        }
        if self.output_gate {
            o.iter_mut()
                .zip(g.iter())
                .for_each(|(e, &gi)| *e *= silu(gi));
        }
        w.get(Role::OProj)?.matvec(&act.input(o)?, out)?;
        Ok(())
    }
}
