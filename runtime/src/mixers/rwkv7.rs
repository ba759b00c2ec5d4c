//! `rwkv7` — RWKV-7's time mixing as fla's `RWKV7Attention` runs it one
//! token at a time (docs/spec.md §3.8). `H` heads, key size `K` (`H * K`
//! is the model width `D`), value size `V`; `u` the normed input, `u'` the
//! previous token's (0 at the start):
//!
//! ```text
//! u_* = u + (u' - u) * x_*                          for * in r, w, k, v, a, g
//! r = r_proj u_r    k = k_proj u_k    v = v_proj u_v
//! w = -e^-0.5 sigmoid(W2 tanh(W1 u_w) + b_w)         (log decay, in (-0.61, 0))
//! first layer: carry = v;   later: v = v + (carry - v) sigmoid(V2 V1 u_v + b_v)
//! a = sigmoid(A2 A1 u_a + b_a)                       (in-context learning rate)
//! g = G2 sigmoid(G1 u_g)                             (output gate)
//! kk = normalise_per_head(k * k_k);   k = k + k (a - 1) k_a
//! per head, S [V][K]:  sa = S (-kk)
//!                      S = S diag(e^w) + sa (kk a)^T + v k^T
//!                      o = S r
//! o = groupnorm_per_head(o) w_gn + b_gn
//! o = (o + (sum_K r k r_k) v) g                      (the bonus, per head)
//! out = o_proj o
//! ```
//!
//! State layout: `u'` `[H*K]`, then `S [H][V][K]`.

use super::rwkv7_config::{KkNorm, Rwkv7Config};
use super::{push, width, Mixer, SpecSink, StepCtx};
use crate::error::{part, part_mut, Error, Result, Rows, StepResult};
use crate::format::Role;
use crate::math::{dot, exp, mean_rstd, sigmoid};
use crate::tensor::{ActBuf, Tensor};
use crate::weights::LayerWeights;

/// `e^-0.5`, the bound of RWKV-7's log decay (fla's `-0.6065306597126334`).
const W_SCALE: f32 = -0.606_530_66;

impl Mixer for Rwkv7Config {
    fn push_specs(&self, layer: u16, d: u32, s: &mut dyn SpecSink) {
        let (h, k) = (self.num_heads, self.head_dim);
        let (hk, hv) = (width(h, k), width(h, self.head_v_dim));
        for role in [Role::XR, Role::XW, Role::XK, Role::XV, Role::XA, Role::XG] {
            push(s, layer, role, [d, 0, 0], false);
        }
        push(s, layer, Role::KK, [hk, 0, 0], false);
        push(s, layer, Role::KA, [hk, 0, 0], false);
        push(s, layer, Role::RK, [h, k, 0], false);
        push(s, layer, Role::RProj, [hk, d, 0], true);
        push(s, layer, Role::KProj, [hk, d, 0], true);
        push(s, layer, Role::VProj, [hv, d, 0], true);
        let lora = |s: &mut dyn SpecSink, a, b, bias: Option<Role>, rank, out| {
            push(s, layer, a, [rank, d, 0], true);
            push(s, layer, b, [out, rank, 0], true);
            if let Some(bias) = bias {
                push(s, layer, bias, [out, 0, 0], false);
            }
        };
        lora(
            s,
            Role::WLoraA,
            Role::WLoraB,
            Some(Role::WLoraBias),
            self.decay_rank,
            hk,
        );
        if !self.value_first {
            lora(
                s,
                Role::VLoraA,
                Role::VLoraB,
                Some(Role::VLoraBias),
                self.v_rank,
                hv,
            );
        }
        lora(
            s,
            Role::ALoraA,
            Role::ALoraB,
            Some(Role::ALoraBias),
            self.a_rank,
            hk,
        );
        lora(s, Role::GLoraA, Role::GLoraB, None, self.gate_rank, hv);
        push(s, layer, Role::GNorm, [hv, 0, 0], false);
        push(s, layer, Role::GNormBias, [hv, 0, 0], false);
        push(s, layer, Role::OProj, [d, hv, 0], true);
    }

    /// Without the session's carried value, which every layer needs (the
    /// first writes it, the others read it): an error. The block calls
    /// [`Rwkv7Config::step_with_carry`] (`LayerConfig::step`).
    fn step(
        &self,
        _: &StepCtx,
        _: &LayerWeights<'_>,
        _: &mut [f32],
        _: &mut [f32],
        _: &mut ActBuf<'_>,
        _: &[f32],
        _: &mut [f32],
    ) -> StepResult<()> {
        Err(crate::error::StepError::Internal(
            "rwkv7 runs with the carried value (LayerConfig::step)",
        ))
    }
}

impl Rwkv7Config {
    /// [`Mixer::step`] with the value carried across layers (`carry`, the
    /// session's region of [`Rwkv7Config::carry_len`] words or more, zeroed
    /// before each token's first layer): the first layer writes its value
    /// there, the others mix theirs toward it.
    #[allow(clippy::too_many_arguments)]
    pub fn step_with_carry(
        &self,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        carry: &mut [f32],
        x: &[f32],
        out: &mut [f32],
    ) -> StepResult<()> {
        self.run(w, state, scratch, act, carry, x, out)
            .map_err(Error::at_step)
    }
}

/// `out = B f(A u) + bias`: a low-rank projection of `u` through `hidden`
/// (`[rank]`), `f` applied to the hidden values.
#[allow(clippy::too_many_arguments)]
fn lora(
    w: &LayerWeights<'_>,
    (a, b, bias): (Role, Role, Option<Role>),
    act: &mut ActBuf<'_>,
    u: &[f32],
    hidden: &mut [f32],
    f: impl Fn(f32) -> f32,
    out: &mut [f32],
) -> Result<()> {
    let a = w.get(a)?;
    let hidden = hidden
        .get_mut(..a.rows())
        .ok_or(Error::BadHeader("rwkv7 scratch too small"))?;
    a.matvec(&act.input(u)?, hidden)?;
    hidden.iter_mut().for_each(|v| *v = f(*v));
    w.get(b)?.matvec(&act.input(hidden)?, out)?;
    if let Some(bias) = bias {
        let bias = w.get(bias)?;
        out.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v += bias.at(i));
    }
    Ok(())
}

/// `mixed = u + (prev - u) * mix` (fla's `addcmul` of the token shift).
fn shift(u: &[f32], prev: &[f32], mix: &Tensor<'_>, mixed: &mut [f32]) {
    for (i, ((m, &uc), &pc)) in mixed.iter_mut().zip(u).zip(prev).enumerate() {
        *m = uc + (pc - uc) * mix.at(i);
    }
}

impl Rwkv7Config {
    /// One token, with the load-time error type (converted once by the
    /// trait's step: everything here was checked at load).
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        carry: &mut [f32],
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        let (h, kd, vd) = (
            self.num_heads as usize,
            self.head_dim as usize,
            self.head_v_dim as usize,
        );
        let (hk, hv) = (h * kd, h * vd);
        let too_small = Error::BadHeader("rwkv7 scratch too small");
        let (mixed, rest) = scratch.split_at_mut(hk.min(scratch.len()));
        let (r, rest) = rest.split_at_mut(hk.min(rest.len()));
        let (dec, rest) = rest.split_at_mut(hk.min(rest.len()));
        let (k, rest) = rest.split_at_mut(hk.min(rest.len()));
        let (kk, rest) = rest.split_at_mut(hk.min(rest.len()));
        let (a, rest) = rest.split_at_mut(hk.min(rest.len()));
        let (v, rest) = rest.split_at_mut(hv.min(rest.len()));
        let (g, rest) = rest.split_at_mut(hv.min(rest.len()));
        let (o, hidden) = rest.split_at_mut(hv.min(rest.len()));
        if o.len() < hv || x.len() != hk || state.len() < hk {
            return Err(too_small);
        }
        let carry = carry
            .get_mut(..hv)
            .ok_or(Error::BadHeader("rwkv7 needs the session's carried value"))?;
        let (prev, s_all) = state.split_at_mut(hk);

        // The six projections of the token-shifted inputs.
        shift(x, prev, &w.get(Role::XR)?, mixed);
        w.get(Role::RProj)?.matvec(&act.input(mixed)?, r)?;
        shift(x, prev, &w.get(Role::XW)?, mixed);
        let roles = (Role::WLoraA, Role::WLoraB, Some(Role::WLoraBias));
        lora(w, roles, act, mixed, hidden, libm::tanhf, dec)?;
        dec.iter_mut().for_each(|e| *e = exp(W_SCALE * sigmoid(*e)));
        shift(x, prev, &w.get(Role::XK)?, mixed);
        w.get(Role::KProj)?.matvec(&act.input(mixed)?, k)?;
        shift(x, prev, &w.get(Role::XV)?, mixed);
        w.get(Role::VProj)?.matvec(&act.input(mixed)?, v)?;
        if self.value_first {
            carry.copy_from_slice(v);
        } else {
            // o holds the mix weight until the state is read.
            let roles = (Role::VLoraA, Role::VLoraB, Some(Role::VLoraBias));
            lora(w, roles, act, mixed, hidden, |e| e, o)?;
            for ((vc, &first), &m) in v.iter_mut().zip(carry.iter()).zip(o.iter()) {
                *vc += (first - *vc) * sigmoid(m);
            }
        }
        shift(x, prev, &w.get(Role::XA)?, mixed);
        let roles = (Role::ALoraA, Role::ALoraB, Some(Role::ALoraBias));
        lora(w, roles, act, mixed, hidden, |e| e, a)?;
        a.iter_mut().for_each(|e| *e = sigmoid(*e));
        shift(x, prev, &w.get(Role::XG)?, mixed);
        let roles = (Role::GLoraA, Role::GLoraB, None);
        lora(w, roles, act, mixed, hidden, sigmoid, g)?;
        prev.copy_from_slice(x);

        // The removal key, normalised per head, and the key's learning-rate mix.
        let (k_k, k_a) = (w.get(Role::KK)?, w.get(Role::KA)?);
        for (i, ((kki, ki), &ai)) in kk.iter_mut().zip(k.iter_mut()).zip(a.iter()).enumerate() {
            *kki = *ki * k_k.at(i);
            *ki += *ki * (ai - 1.0) * k_a.at(i);
        }
        // The sizes are nonzero (checked at load): the `max(1)`s state it,
        // so no chunk size below has a panic branch.
        let (kd, vd) = (kd.max(1), vd.max(1));
        for kh in kk.chunks_exact_mut(kd) {
            let norm = dot(kh, kh);
            let inv = match self.kk_norm {
                KkNorm::L2 => 1.0 / libm::sqrtf(norm + 1e-6),
                KkNorm::Normalize => 1.0 / libm::sqrtf(norm).max(1e-12),
            };
            kh.iter_mut().for_each(|e| *e *= inv);
        }

        // The state update and read, per head and value row.
        let (gn_w, gn_b, r_k) = (
            w.get(Role::GNorm)?,
            w.get(Role::GNormBias)?,
            w.get(Role::RK)?,
        );
        // Each head's parts by range, as checked parts (not a zip of nine
        // chunk iterators, whose states the M3 kept on the stack).
        const HEAD: &str = "rwkv7 head out of its scratch";
        for (head, s) in Rows(s_all.chunks_exact_mut((vd * kd).max(1)))
            .enumerate()
            .take(h)
        {
            let at = head * kd..(head + 1) * kd;
            let (rh, dh, kh, kkh, ah) = (
                part(r, at.clone(), HEAD)?,
                part(dec, at.clone(), HEAD)?,
                part(k, at.clone(), HEAD)?,
                part(kk, at.clone(), HEAD)?,
                part(a, at, HEAD)?,
            );
            let at = head * vd..(head + 1) * vd;
            let (vh, gh) = (part(v, at.clone(), HEAD)?, part(g, at.clone(), HEAD)?);
            let oh = part_mut(o, at, HEAD)?;
            for ((row, &vc), oc) in s.chunks_exact_mut(kd).zip(vh).zip(oh.iter_mut()) {
                let mut sa = 0.0f32;
                for (&e, &kkc) in row.iter().zip(kkh) {
                    sa += -kkc * e;
                }
                let mut sr = 0.0f32;
                let cols = row.iter_mut().zip(dh).zip(kkh).zip(ah).zip(kh).zip(rh);
                for (((((e, &dc), &kkc), &ac), &kc), &rc) in cols {
                    *e = dc * *e + kkc * ac * sa + kc * vc;
                    sr += *e * rc;
                }
                *oc = sr;
            }
            // The per-head group norm, then the bonus and the gate.
            let (mean, rstd) = mean_rstd(oh, self.g_norm_eps);
            let mut bonus = 0.0f32;
            for (j, (&rj, &kj)) in rh.iter().zip(kh).enumerate() {
                bonus += rj * kj * r_k.at(head * kd + j);
            }
            for (c, ((oc, &vc), &gc)) in oh.iter_mut().zip(vh).zip(gh).enumerate() {
                let i = head * vd + c;
                let normed = (*oc - mean) * rstd * gn_w.at(i) + gn_b.at(i);
                *oc = (normed + bonus * vc) * gc;
            }
        }
        w.get(Role::OProj)?.matvec(&act.input(o)?, out)?;
        Ok(())
    }
}
