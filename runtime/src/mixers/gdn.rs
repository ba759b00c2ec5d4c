//! `gdn` — Gated DeltaNet (fla `GatedDeltaNet` semantics, docs/spec.md §3.1)
//! and the members of its family that are configurations of the same kernel
//! (docs/spec.md §3.1.1): DeltaNet (fla `DeltaNet`: no decay gate), linear
//! attention (additive update, no decay) and RetNet-style retention
//! (additive update, a fixed decay per head).
//!
//! Per value head `j` (q/k head `h = j / (HV/H)`), with `S_j: [V, K]`:
//! ```text
//! S_j = decay_j S_j ;  S_j += beta (v_j - S_j k) k^T   (delta rule)
//!                      S_j += beta v_j k^T             (additive)
//! o_j = S_j q
//! ```
//! State layout: `S [HV][V][K]`, then the q, k and v convolution caches.

pub use super::gdn_config::{retention_gamma, GdnConfig, GdnDecay, QkActivation, QkNorm};
#[cfg(feature = "int-path")]
use super::gdn_int as int_step;
use super::{conv, push, push_conv_specs, width, Mixer, SpecSink, StepCtx};
use crate::error::{part, split_mut, Error, Result, Rows, StepResult};
use crate::format::Role;
use crate::math::{exp, l1norm_in_place, l2norm_in_place, rms_scale, sigmoid, silu, softplus};
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

impl Mixer for GdnConfig {
    fn push_specs(&self, layer: u16, d: u32, s: &mut dyn SpecSink) {
        let (h, hv, k, v) = (
            self.num_heads,
            self.num_v_heads,
            self.head_k_dim,
            self.head_v_dim,
        );
        let (qk, vo) = (width(h, k), width(hv, v));
        push(s, layer, Role::QProj, [qk, d, 0], true);
        push(s, layer, Role::KProj, [qk, d, 0], true);
        push(s, layer, Role::VProj, [vo, d, 0], true);
        let gated = matches!(self.decay, GdnDecay::Gated);
        if gated {
            push(s, layer, Role::AProj, [hv, d, 0], true);
        }
        if self.use_beta {
            push(s, layer, Role::BProj, [hv, d, 0], true);
        }
        if gated {
            push(s, layer, Role::ALog, [hv, 0, 0], false);
            push(s, layer, Role::DtBias, [hv, 0, 0], false);
        }
        if self.conv_size > 0 {
            push_conv_specs(s, layer, [qk, qk, vo], self.conv_size);
        }
        if self.use_gate {
            push(s, layer, Role::GProj, [vo, d, 0], true);
        }
        push(s, layer, Role::ONorm, [v, 0, 0], false);
        push(s, layer, Role::OProj, [d, vo, 0], true);
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
        int_step::step(self, ctx, w, state, scratch, act, x, out, clamps).map_err(Error::at_step)
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

impl GdnConfig {
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
        let x = act.input(x)?;
        let (h, hv, k, v) = self.dims();
        let width = self.conv_size as usize;
        const SCRATCH: &str = "gdn scratch too small";
        let (q, rest) = split_mut(scratch, h * k, SCRATCH)?;
        let (kk, rest) = split_mut(rest, h * k, SCRATCH)?;
        let (vv, rest) = split_mut(rest, hv * v, SCRATCH)?;
        let (g, rest) = split_mut(rest, hv * v, SCRATCH)?;
        let (o, rest) = split_mut(rest, hv * v, SCRATCH)?;
        let (a, rest) = split_mut(rest, hv, SCRATCH)?;
        let b = rest
            .get_mut(..hv)
            .ok_or(Error::BadHeader("gdn scratch too small"))?;

        w.get(Role::QProj)?.matvec(&x, q)?;
        w.get(Role::KProj)?.matvec(&x, kk)?;
        w.get(Role::VProj)?.matvec(&x, vv)?;
        let gated = matches!(self.decay, GdnDecay::Gated);
        if gated {
            w.get(Role::AProj)?.matvec(&x, a)?;
        }
        if self.use_beta {
            w.get(Role::BProj)?.matvec(&x, b)?;
        }
        if self.use_gate {
            w.get(Role::GProj)?.matvec(&x, g)?;
        }

        let (s_all, caches) = split_mut(state, hv * v * k, "gdn state too small")?;
        let qk_silu = matches!(self.qk_activation, QkActivation::Silu);
        if width > 0 {
            conv::step_qkv_act(w, width, caches, qk_silu, q, kk, vv)?;
        } else {
            // No short convolution: fla's DeltaNet applies the SiLUs itself.
            if qk_silu {
                q.iter_mut()
                    .chain(kk.iter_mut())
                    .for_each(|e| *e = silu(*e));
            }
            vv.iter_mut().for_each(|e| *e = silu(*e));
        }
        match self.qk_activation {
            QkActivation::Silu | QkActivation::Identity => {}
            QkActivation::Relu => q
                .iter_mut()
                .chain(kk.iter_mut())
                .for_each(|e| *e = e.max(0.0)),
            QkActivation::EluPlusOne => q
                .iter_mut()
                .chain(kk.iter_mut())
                .for_each(|e| *e = if *e > 0.0 { *e + 1.0 } else { exp(*e) }),
        }

        let q_scale = 1.0 / libm::sqrtf(k as f32);
        // `k`, `v` and `h` are nonzero (checked at load); the `max(1)`s
        // below state it, so no chunk size or division has a panic branch.
        let k = k.max(1);
        let v = v.max(1);
        for (qh, kh) in Rows(q.chunks_exact_mut(k)).zip(kk.chunks_exact_mut(k)) {
            match self.qk_norm {
                QkNorm::L2 => {
                    l2norm_in_place(qh, 1e-6);
                    l2norm_in_place(kh, 1e-6);
                }
                QkNorm::Sum => {
                    l1norm_in_place(qh);
                    l1norm_in_place(kh);
                }
                QkNorm::None => {}
            }
            qh.iter_mut().for_each(|e| *e *= q_scale);
        }

        let (a_log, dt_bias, o_norm) = if gated {
            (
                Some(w.get(Role::ALog)?),
                Some(w.get(Role::DtBias)?),
                w.get(Role::ONorm)?,
            )
        } else {
            (None, None, w.get(Role::ONorm)?)
        };
        let group = (hv / h.max(1)).max(1);
        let beta_scale = if self.allow_neg_eigval { 2.0 } else { 1.0 };
        // Head j's state, output, value and gate, and its a and b (each
        // `hv` of them).
        let heads = Rows(s_all.chunks_exact_mut((v * k).max(1)))
            .zip(o.chunks_exact_mut(v))
            .zip(vv.chunks_exact(v))
            .zip(g.chunks_exact(v))
            .zip(a.iter().zip(b.iter()));
        for (j, ((((s, oj), vj), gj), (&aj, &bj))) in heads.enumerate() {
            let at = (j / group) * k;
            let qh = part(q, at..at + k, "gdn query head")?;
            let kh = part(kk, at..at + k, "gdn key head")?;
            let beta = if self.use_beta {
                beta_scale * sigmoid(bj)
            } else {
                beta_scale
            };
            let decay = match (&a_log, &dt_bias) {
                (Some(al), Some(dt)) => exp(-exp(al.at(j)) * softplus(aj + dt.at(j))),
                _ => match self.decay {
                    GdnDecay::Retention => retention_gamma(j),
                    _ => 1.0,
                },
            };
            for ((row, &vr), or) in s.chunks_exact_mut(k).zip(vj).zip(oj.iter_mut()) {
                // Two passes, each a fused pair of the four steps (decay,
                // S k; update, S q), summing in the same order as separate
                // loops would: the same bits, half the memory traffic.
                let u = if self.delta_rule {
                    let mut sk = 0.0f32;
                    for (e, &kc) in row.iter_mut().zip(kh) {
                        *e *= decay;
                        sk += *e * kc;
                    }
                    beta * (vr - sk)
                } else {
                    if decay != 1.0 {
                        row.iter_mut().for_each(|e| *e *= decay);
                    }
                    beta * vr
                };
                let mut sq = 0.0f32;
                for ((e, &kc), &qc) in row.iter_mut().zip(kh).zip(qh) {
                    *e += u * kc;
                    sq += *e * qc;
                }
                *or = sq;
            }
            let inv = rms_scale(oj, ctx.norm_eps);
            for (c, (e, &gc)) in oj.iter_mut().zip(gj).enumerate() {
                *e *= inv * o_norm.at(c);
                if self.use_gate {
                    *e *= silu(gc);
                }
            }
        }
        w.get(Role::OProj)?.matvec(&act.input(o)?, out)?;
        Ok(())
    }
}
