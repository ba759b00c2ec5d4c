//! `gdn` — Gated DeltaNet (fla `GatedDeltaNet` semantics, docs/spec.md §3.1).
//!
//! Per value head `j` (q/k head `h = j / (HV/H)`), with `S_j: [V, K]`:
//! ```text
//! S_j = exp(g) S_j ;  S_j += beta (v_j - S_j k) k^T ;  o_j = S_j q
//! ```
//! State layout: `S [HV][V][K]`, then the q, k and v convolution caches.

use super::{conv, product, push, push_conv_specs, sum, width, Mixer, Specs, StepCtx};
use crate::config::{dim_ok, ensure, ensure_size, width_ok, LayerWords};
use crate::error::{Error, Result};
use crate::image::Role;
use crate::math::{exp, l2norm_in_place, rms_scale, sigmoid, silu, softplus};
use crate::model::LayerWeights;
use crate::tensor::ActBuf;

/// Gated DeltaNet layer configuration.
///
/// Record words: `H | HV | K | V | conv_size | flags (bit 0 use_gate, bit 1 allow_neg_eigval)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GdnConfig {
    /// q/k heads H.
    pub num_heads: u32,
    /// Value heads HV (a multiple of H: grouped value attention).
    pub num_v_heads: u32,
    /// q/k head size K.
    pub head_k_dim: u32,
    /// Value head size V.
    pub head_v_dim: u32,
    /// Short convolution width W.
    pub conv_size: u32,
    /// Gate the output norm with `silu(g_proj x)`.
    pub use_gate: bool,
    /// Let beta range over (0, 2) (negative eigenvalues).
    pub allow_neg_eigval: bool,
}

impl GdnConfig {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<GdnConfig> {
        let c = GdnConfig {
            num_heads: w[0],
            num_v_heads: w[1],
            head_k_dim: w[2],
            head_v_dim: w[3],
            conv_size: w[4],
            use_gate: w[5] & 1 != 0,
            allow_neg_eigval: w[5] & 2 != 0,
        };
        ensure!(w[5] & !3 == 0, layer, "unknown gdn flags");
        ensure!(
            dim_ok(c.num_heads) && dim_ok(c.num_v_heads),
            layer,
            "gdn head counts out of range"
        );
        ensure!(
            dim_ok(c.head_k_dim) && dim_ok(c.head_v_dim),
            layer,
            "gdn head dims out of range"
        );
        ensure!(
            c.num_v_heads % c.num_heads == 0,
            layer,
            "num_v_heads must be a multiple of num_heads"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_k_dim),
            layer,
            "gdn num_heads * head_k_dim exceeds 2^20"
        );
        ensure_size!(
            width_ok(c.num_v_heads, c.head_v_dim),
            layer,
            "gdn num_v_heads * head_v_dim exceeds 2^20"
        );
        ensure!(
            c.conv_size >= 1 && c.conv_size <= 64,
            layer,
            "gdn conv_size must be 1..=64"
        );
        Ok(c)
    }

    /// Encodes the layer record words.
    pub fn to_words(&self) -> LayerWords {
        let mut w = [0; 15];
        w[..6].copy_from_slice(&[
            self.num_heads,
            self.num_v_heads,
            self.head_k_dim,
            self.head_v_dim,
            self.conv_size,
            self.use_gate as u32 | (self.allow_neg_eigval as u32) << 1,
        ]);
        w
    }

    const fn dims(&self) -> (usize, usize, usize, usize) {
        (
            self.num_heads as usize,
            self.num_v_heads as usize,
            self.head_k_dim as usize,
            self.head_v_dim as usize,
        )
    }

    const fn dims64(&self) -> (u64, u64, u64, u64) {
        let (h, hv, k, v) = (
            self.num_heads,
            self.num_v_heads,
            self.head_k_dim,
            self.head_v_dim,
        );
        (h as u64, hv as u64, k as u64, v as u64)
    }

    /// State words: `HV*V*K` for S plus `(2*H*K + HV*V) * (W - 1)` for the convolutions.
    pub const fn state_len(&self) -> u64 {
        let (h, hv, k, v) = self.dims64();
        let channels = sum(&[product(&[2, h, k]), product(&[hv, v])]);
        sum(&[
            product(&[hv, v, k]),
            conv::state_words(channels, self.conv_size),
        ])
    }

    /// Scratch words: q, k (`H*K` each), v, g, o (`HV*V` each), a, b (`HV` each).
    pub const fn scratch_len(&self) -> u64 {
        let (h, hv, k, v) = self.dims64();
        sum(&[product(&[2, h, k]), product(&[3, hv, v]), 2 * hv])
    }
}

impl Mixer for GdnConfig {
    fn push_specs(&self, layer: u16, d: u32, s: &mut Specs) {
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
        push(s, layer, Role::AProj, [hv, d, 0], true);
        push(s, layer, Role::BProj, [hv, d, 0], true);
        push(s, layer, Role::ALog, [hv, 0, 0], false);
        push(s, layer, Role::DtBias, [hv, 0, 0], false);
        push_conv_specs(s, layer, [qk, qk, vo], self.conv_size);
        if self.use_gate {
            push(s, layer, Role::GProj, [vo, d, 0], true);
        }
        push(s, layer, Role::ONorm, [v, 0, 0], false);
        push(s, layer, Role::OProj, [d, vo, 0], true);
    }

    fn step(
        &self,
        ctx: &StepCtx,
        w: &LayerWeights<'_, '_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        let x = act.input(x)?;
        let (h, hv, k, v) = self.dims();
        let width = self.conv_size as usize;
        let (q, rest) = scratch.split_at_mut(h * k);
        let (kk, rest) = rest.split_at_mut(h * k);
        let (vv, rest) = rest.split_at_mut(hv * v);
        let (g, rest) = rest.split_at_mut(hv * v);
        let (o, rest) = rest.split_at_mut(hv * v);
        let (a, rest) = rest.split_at_mut(hv);
        let b = rest
            .get_mut(..hv)
            .ok_or(Error::BadHeader("gdn scratch too small"))?;

        w.get(Role::QProj)?.matvec(&x, q)?;
        w.get(Role::KProj)?.matvec(&x, kk)?;
        w.get(Role::VProj)?.matvec(&x, vv)?;
        w.get(Role::AProj)?.matvec(&x, a)?;
        w.get(Role::BProj)?.matvec(&x, b)?;
        if self.use_gate {
            w.get(Role::GProj)?.matvec(&x, g)?;
        }

        let (s_all, caches) = state.split_at_mut(hv * v * k);
        conv::step_qkv(w, width, caches, q, kk, vv)?;

        let q_scale = 1.0 / libm::sqrtf(k as f32);
        for (qh, kh) in q.chunks_exact_mut(k).zip(kk.chunks_exact_mut(k)) {
            l2norm_in_place(qh, 1e-6);
            qh.iter_mut().for_each(|e| *e *= q_scale);
            l2norm_in_place(kh, 1e-6);
        }

        let (a_log, dt_bias, o_norm) = (
            w.get(Role::ALog)?,
            w.get(Role::DtBias)?,
            w.get(Role::ONorm)?,
        );
        let group = hv / h;
        let beta_scale = if self.allow_neg_eigval { 2.0 } else { 1.0 };
        for (j, s) in s_all.chunks_exact_mut(v * k).enumerate() {
            let (qh, kh) = (&q[(j / group) * k..][..k], &kk[(j / group) * k..][..k]);
            let beta = beta_scale * sigmoid(b[j]);
            let decay = exp(-exp(a_log.at(j)) * softplus(a[j] + dt_bias.at(j)));
            let oj = &mut o[j * v..(j + 1) * v];
            for ((row, &vr), or) in s
                .chunks_exact_mut(k)
                .zip(&vv[j * v..(j + 1) * v])
                .zip(oj.iter_mut())
            {
                // Two passes, each a fused pair of the four steps (decay,
                // S k; update, S q), summing in the same order as separate
                // loops would: the same bits, half the memory traffic.
                let mut sk = 0.0f32;
                for (e, &kc) in row.iter_mut().zip(kh) {
                    *e *= decay;
                    sk += *e * kc;
                }
                let u = beta * (vr - sk);
                let mut sq = 0.0f32;
                for ((e, &kc), &qc) in row.iter_mut().zip(kh).zip(qh) {
                    *e += u * kc;
                    sq += *e * qc;
                }
                *or = sq;
            }
            let inv = rms_scale(oj, ctx.norm_eps);
            for (c, e) in oj.iter_mut().enumerate() {
                *e *= inv * o_norm.at(c);
                if self.use_gate {
                    *e *= silu(g[j * v + c]);
                }
            }
        }
        w.get(Role::OProj)?.matvec(&act.input(o)?, out)?;
        Ok(())
    }
}
