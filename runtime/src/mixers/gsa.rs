//! `gsa` — Gated Slot Attention (fla `GatedSlotAttention` semantics, docs/spec.md §3.2).
//!
//! `M` memory slots per head, written with data-dependent forget gates
//! `alpha = exp(logsigmoid(f_proj x) / normalizer)`, read with a softmax over slots.
//!
//! The slot updates depend only on the kv head, so this runtime stores the
//! state once per kv head (`Hkv*M*(K+V)` words) instead of once per query head
//! as fla does: identical outputs, `H/Hkv` times less memory.
//! With `use_short_conv`, q, k and v first go through fla's short
//! convolution (with its SiLU), then the feature map (q, k) or SiLU (v) as
//! without it: fla applies both activations.
//! State layout: `Hk [Hkv][K][M]`, then `Hv [Hkv][M][V]`, then the q, k and
//! v convolution caches.

use super::gsa_config::{FeatureMap, GsaConfig, G_NORM_EPS};
use super::{conv, push, push_conv_specs, width, Mixer, SpecSink, StepCtx};
use crate::error::{part, split_mut, Error, Result, Rows, StepResult};
use crate::format::Role;
use crate::math::{exp, logsigmoid, rms_scale, silu, softmax_in_place};
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

/// The feature map on q or k, in f32.
fn apply(map: FeatureMap, x: &mut [f32]) {
    match map {
        FeatureMap::Swish => x.iter_mut().for_each(|e| *e = silu(*e)),
        FeatureMap::Relu => x.iter_mut().for_each(|e| *e = e.max(0.0)),
    }
}

impl Mixer for GsaConfig {
    fn push_specs(&self, layer: u16, d: u32, s: &mut dyn SpecSink) {
        let (h, hkv, k, v, m) = (
            self.num_heads,
            self.num_kv_heads,
            self.head_k_dim,
            self.head_v_dim,
            self.num_slots,
        );
        push(s, layer, Role::QProj, [width(h, k), d, 0], true);
        push(s, layer, Role::KProj, [width(hkv, k), d, 0], true);
        push(s, layer, Role::VProj, [width(hkv, v), d, 0], true);
        if self.conv_size > 0 {
            let channels = [width(h, k), width(hkv, k), width(hkv, v)];
            push_conv_specs(s, layer, channels, self.conv_size);
        }
        push(s, layer, Role::FProj, [width(hkv, m), d, 0], true);
        push(s, layer, Role::GNorm, [width(h, v), 0, 0], false);
        push(s, layer, Role::OProj, [d, width(h, v), 0], true);
    }

    fn step(
        &self,
        _ctx: &StepCtx,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> StepResult<()> {
        self.run(_ctx, w, state, scratch, act, x, out)
            .map_err(Error::at_step)
    }

    #[cfg(feature = "int-path")]
    fn step_int(
        &self,
        ctx: &StepCtx,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: crate::fixed::Block<'_>,
        out: &mut [i32],
        clamps: &mut u32,
    ) -> StepResult<i32> {
        super::gsa_int::step(self, ctx, w, state, scratch, act, x, out, clamps)
            .map_err(Error::at_step)
    }
}

impl GsaConfig {
    /// [`Mixer::step`] with the load-time error type, converted once by
    /// `step` (everything here was checked at load: an error is a bug).
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        _ctx: &StepCtx,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        let x = act.input(x)?;
        let (h, hkv, k, v, m) = self.dims();
        const SCRATCH: &str = "gsa scratch too small";
        let (q, rest) = split_mut(scratch, h * k, SCRATCH)?;
        let (kk, rest) = split_mut(rest, hkv * k, SCRATCH)?;
        let (vv, rest) = split_mut(rest, hkv * v, SCRATCH)?;
        let (f, rest) = split_mut(rest, hkv * m, SCRATCH)?;
        let (p, rest) = split_mut(rest, m, SCRATCH)?;
        let o = rest
            .get_mut(..h * v)
            .ok_or(Error::BadHeader("gsa scratch too small"))?;

        w.get(Role::QProj)?.matvec(&x, q)?;
        w.get(Role::KProj)?.matvec(&x, kk)?;
        w.get(Role::VProj)?.matvec(&x, vv)?;
        w.get(Role::FProj)?.matvec(&x, f)?;
        let (state, caches) = split_mut(state, hkv * m * (k + v), "gsa state too small")?;
        if self.conv_size > 0 {
            conv::step_qkv(w, self.conv_size as usize, caches, q, kk, vv)?;
        }
        apply(self.feature_map, q);
        apply(self.feature_map, kk);
        vv.iter_mut().for_each(|e| *e = silu(*e));
        // f becomes alpha = exp(logsigmoid(f) / normalizer).
        let inv_norm = 1.0 / self.gate_logit_normalizer;
        f.iter_mut()
            .for_each(|e| *e = exp(logsigmoid(*e) * inv_norm));

        let (hk_all, hv_all) = split_mut(state, hkv * k * m, "gsa state too small")?;
        // The sizes are nonzero (checked at load); the `max(1)`s state it,
        // so no chunk size or division below has a panic branch.
        let (k, v, m) = (k.max(1), v.max(1), m.max(1));
        let (km, mv) = ((k * m).max(1), (m * v).max(1));
        // Each kv head's gates, key and value states, keys and values.
        let kv_heads = Rows(f.chunks_exact(m))
            .zip(hk_all.chunks_exact_mut(km))
            .zip(hv_all.chunks_exact_mut(mv))
            .zip(Rows(kk.chunks_exact(k)).zip(vv.chunks_exact(v)))
            .take(hkv);
        for (((alpha, hk), hv), (kg, vg)) in kv_heads {
            for (row, &kc) in hk.chunks_exact_mut(m).zip(kg) {
                for (e, &a) in row.iter_mut().zip(alpha) {
                    *e = a * *e + kc * (1.0 - a);
                }
            }
            for (row, &a) in hv.chunks_exact_mut(v).zip(alpha) {
                for (e, &vc) in row.iter_mut().zip(vg) {
                    *e = a * *e + (1.0 - a) * vc;
                }
            }
        }

        let group = (h / hkv.max(1)).max(1);
        for (i, (qi, oi)) in Rows(q.chunks_exact(k))
            .zip(o.chunks_exact_mut(v))
            .enumerate()
        {
            let g = i / group;
            let hk = part(hk_all, g * km..(g + 1) * km, "gsa key state")?;
            p.fill(0.0);
            for (row, &qc) in hk.chunks_exact(m).zip(qi) {
                p.iter_mut().zip(row).for_each(|(pm, &e)| *pm += qc * e);
            }
            softmax_in_place(p);
            oi.fill(0.0);
            let hv = part(hv_all, g * mv..(g + 1) * mv, "gsa value state")?;
            for (row, &pm) in hv.chunks_exact(v).zip(p.iter()) {
                oi.iter_mut().zip(row).for_each(|(e, &r)| *e += pm * r);
            }
        }

        o.iter_mut().for_each(|e| *e = silu(*e));
        let inv = rms_scale(o, G_NORM_EPS);
        let g_norm = w.get(Role::GNorm)?;
        o.iter_mut()
            .enumerate()
            .for_each(|(c, e)| *e *= inv * g_norm.at(c));
        w.get(Role::OProj)?.matvec(&act.input(o)?, out)?;
        Ok(())
    }
}
