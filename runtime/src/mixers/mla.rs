//! `mla` — a latent-compressed sliding window (MLA-style, docs/spec.md §3.6).
//!
//! The window of the last `W` tokens stores, per token, one low-rank latent
//! `c [R]` and one small RoPE key `kr [dr]` shared by all heads, instead of
//! full keys and values per kv head. Keys and values are the up-projections
//! `k_h = [Wuk_h c ; kr]`, `v_h = Wuv_h c` (DeepSeek-V2's multi-head latent
//! attention), but they are never formed: the up-projections are absorbed at
//! decode time, `q_h · Wuk_h c = (Wuk_h^T q_h) · c` and
//! `sum_s p_s Wuv_h c_s = Wuv_h (sum_s p_s c_s)`, so each window slot costs
//! `R + dr` floats.
//!
//! State layout: `[W][R + dr]` (slot `t mod W`: the latent, then the
//! RoPE-rotated shared key).

// Without the `mla` feature only the record (parse, sizes, tensor list)
// remains; the step's helpers are then unused.
#![cfg_attr(not(feature = "mla"), allow(dead_code, unused_imports))]

use super::swa::OnlineSoftmax;
use super::{product, push, rope, sum, width, Mixer, Specs, StepCtx};
use crate::error::{ensure, ensure_size, Error, Result, StepResult};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, Role};
use crate::image::MIXER_OPTIONS_FORMAT_VERSION;
use crate::math::dot;
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

/// Latent-compressed window layer configuration.
///
/// Record words: `H | d (q/k head size without RoPE) | dv | dr (RoPE size,
/// even, may be 0) | R (kv_lora_rank) | W (window) | rope_theta (f32 bits)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlaConfig {
    /// Heads H.
    pub num_heads: u32,
    /// Per-head q/k size of the part without RoPE, `d`.
    pub head_dim: u32,
    /// Per-head value size `dv`.
    pub v_head_dim: u32,
    /// Size of the RoPE part of q and of the shared RoPE key, `dr` (even).
    pub rope_dim: u32,
    /// Latent size `R` (`kv_lora_rank`).
    pub kv_lora_rank: u32,
    /// Window W: the query sees itself and the W - 1 previous tokens.
    pub window: u32,
    /// RoPE base.
    pub rope_theta: f32,
}

/// The refusal of `mla` layers by a runtime built without the `mla` feature.
pub(crate) const NOT_BUILT: &str =
    "mla layers need the runtime's `mla` feature (on by default; firmware turns it on when its image has one)";

impl MlaConfig {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<MlaConfig> {
        let c = MlaConfig {
            num_heads: w[0],
            head_dim: w[1],
            v_head_dim: w[2],
            rope_dim: w[3],
            kv_lora_rank: w[4],
            window: w[5],
            rope_theta: f32::from_bits(w[6]),
        };
        ensure!(dim_ok(c.num_heads), layer, "mla num_heads out of range");
        ensure!(
            dim_ok(c.head_dim) && dim_ok(c.v_head_dim),
            layer,
            "mla head dims out of range"
        );
        ensure!(
            c.rope_dim <= 1 << 16 && c.rope_dim % 2 == 0,
            layer,
            "mla rope_dim must be even (0 for none) and at most 65536"
        );
        ensure!(
            dim_ok(c.kv_lora_rank),
            layer,
            "mla kv_lora_rank out of range"
        );
        ensure!(dim_ok(c.window), layer, "mla window must be >= 1");
        ensure!(
            c.rope_dim == 0 || (c.rope_theta.is_finite() && c.rope_theta > 0.0),
            layer,
            "rope_theta must be finite and > 0"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_dim + c.rope_dim)
                && width_ok(c.num_heads, c.head_dim + c.v_head_dim),
            layer,
            "mla num_heads * head sizes exceeds 2^20"
        );
        ensure_size!(
            width_ok(c.num_heads, c.kv_lora_rank) && c.kv_lora_rank + c.rope_dim <= 1 << 20,
            layer,
            "mla num_heads * kv_lora_rank exceeds 2^20"
        );
        Ok(c)
    }

    /// Encodes the layer record words.
    pub fn to_words(&self) -> LayerWords {
        record_words(&[
            self.num_heads,
            self.head_dim,
            self.v_head_dim,
            self.rope_dim,
            self.kv_lora_rank,
            self.window,
            self.rope_theta.to_bits(),
        ])
    }

    const fn dims(&self) -> (usize, usize, usize, usize, usize) {
        (
            self.num_heads as usize,
            self.head_dim as usize,
            self.v_head_dim as usize,
            self.rope_dim as usize,
            self.kv_lora_rank as usize,
        )
    }

    /// Floats per window slot: `R + dr`.
    pub const fn slot_len(&self) -> u64 {
        self.kv_lora_rank as u64 + self.rope_dim as u64
    }

    /// State words: `W * (R + dr)`.
    pub const fn state_len(&self) -> u64 {
        product(&[self.window as u64, self.slot_len()])
    }

    /// Scratch words: q `[H*(d+dr)]`, the new slot `[R+dr]`, the absorbed
    /// query and the latent accumulator (`R` each), o `[H*dv]`, RoPE table `[dr]`.
    pub const fn scratch_len(&self) -> u64 {
        let (h, d, dv, dr, r) = (
            self.num_heads as u64,
            self.head_dim as u64,
            self.v_head_dim as u64,
            self.rope_dim as u64,
            self.kv_lora_rank as u64,
        );
        sum(&[product(&[h, d + dr]), r + dr, 2 * r, product(&[h, dv]), dr])
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words with a pinned prefix of up to `pinned_max` tokens
    /// ([`MlaConfig::state_len`]; `pinned_max` is for SWA only).
    pub(crate) const fn layer_state_len(&self, _pinned_max: usize) -> u64 {
        self.state_len()
    }

    /// Input width of the output projection (`o_proj` columns): `H * dv`.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        self.num_heads as u64 * self.v_head_dim as u64
    }

    /// How the layer keeps its state: f32 only (no integer step yet; in an
    /// image on the integer token path the layer runs its f32 step).
    pub(crate) const fn state_format(&self) -> crate::format::StateFormat {
        crate::format::StateFormat::F32
    }

    /// The oldest image format version whose layer record holds this
    /// configuration: every `mla` layer needs format 4.
    pub(crate) const fn min_format_version(&self) -> u32 {
        MIXER_OPTIONS_FORMAT_VERSION
    }

    /// Fills `cs` (`[dr]`: cosines then sines) for position `pos`
    /// ([`rope::table`]).
    fn rope_table(&self, pos: u64, cs: &mut [f32]) {
        rope::table(self.rope_theta, self.rope_dim, pos, cs);
    }
}

/// GPT-NeoX half-split rotation of `x` (`[dr]`) with the table `cs`.
fn rotate(cs: &[f32], x: &mut [f32]) {
    let half = x.len() / 2;
    let (cos, sin) = cs.split_at(half);
    let (lo, hi) = x.split_at_mut(half);
    for (((a, b), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
        let (x0, x1) = (*a, *b);
        *a = x0 * c - x1 * s;
        *b = x1 * c + x0 * s;
    }
}

impl Mixer for MlaConfig {
    fn push_specs(&self, layer: u16, dm: u32, s: &mut Specs) {
        let h = self.num_heads;
        let qk = self.head_dim.saturating_add(self.rope_dim);
        let kv = self.head_dim.saturating_add(self.v_head_dim);
        let r = self.kv_lora_rank;
        push(s, layer, Role::QProj, [width(h, qk), dm, 0], true);
        push(
            s,
            layer,
            Role::KvAProj,
            [r.saturating_add(self.rope_dim), dm, 0],
            true,
        );
        // Read by columns (absorbed), so it stays f32/f16: not a "matrix".
        push(s, layer, Role::KvBProj, [width(h, kv), r, 0], false);
        push(
            s,
            layer,
            Role::OProj,
            [dm, width(h, self.v_head_dim), 0],
            true,
        );
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

impl MlaConfig {
    /// [`Mixer::step`] without the `mla` feature: never reached, because
    /// [`crate::LayerConfig::parse`] refuses `mla` layers then.
    #[cfg(not(feature = "mla"))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        _: &StepCtx,
        _: &LayerWeights<'_>,
        _: &mut [f32],
        _: &mut [f32],
        _: &mut ActBuf<'_>,
        _: &[f32],
        _: &mut [f32],
    ) -> Result<()> {
        Err(Error::BadConfig {
            layer: None,
            reason: NOT_BUILT,
        })
    }

    /// One token (docs/spec.md §3.6).
    #[cfg(feature = "mla")]
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
        let (h, d, dv, dr, r) = self.dims();
        let (window, t) = (self.window as u64, ctx.pos);
        let slot = r + dr;
        let (q, rest) = scratch.split_at_mut(h * (d + dr));
        let (new, rest) = rest.split_at_mut(slot);
        let (q_lat, rest) = rest.split_at_mut(r);
        let (acc, rest) = rest.split_at_mut(r);
        let (o, rest) = rest.split_at_mut(h * dv);
        let cs = rest
            .get_mut(..dr)
            .ok_or(Error::BadHeader("mla scratch too small"))?;

        w.get(Role::QProj)?.matvec(&x, q)?;
        w.get(Role::KvAProj)?.matvec(&x, new)?;
        self.rope_table(ctx.abs_pos, cs);
        rotate(cs, &mut new[r..]);
        let at = (t % window) as usize * slot;
        state
            .get_mut(at..at + slot)
            .ok_or(Error::BadHeader("mla state too small"))?
            .copy_from_slice(new);

        let kv_b = w.get(Role::KvBProj)?;
        let scale = 1.0 / libm::sqrtf((d + dr) as f32);
        let first = (t + 1).saturating_sub(window);
        for (head, (qh, oh)) in q
            .chunks_exact_mut(d + dr)
            .zip(o.chunks_exact_mut(dv))
            .enumerate()
        {
            let (q_nope, q_rope) = qh.split_at_mut(d);
            rotate(cs, q_rope);
            // Absorb Wuk_h: q_lat = Wuk_h^T q_nope (kv_b rows head*(d+dv) .. +d).
            let base = head * (d + dv) * r;
            for (j, ql) in q_lat.iter_mut().enumerate() {
                let mut sum = 0.0f32;
                for (i, &qi) in q_nope.iter().enumerate() {
                    sum += kv_b.at(base + i * r + j) * qi;
                }
                *ql = sum;
            }
            let mut softmax = OnlineSoftmax::new(acc);
            for s in first..=t {
                let kept = &state[(s % window) as usize * slot..][..slot];
                let (c, kr) = kept.split_at(r);
                let score = (dot(q_lat, c) + dot(q_rope, kr)) * scale;
                softmax.add(score, Some(c));
            }
            softmax.finish();
            // Absorb Wuv_h: o_h = Wuv_h acc (kv_b rows head*(d+dv)+d .. +dv).
            let vbase = base + d * r;
            for (jv, e) in oh.iter_mut().enumerate() {
                let mut sum = 0.0f32;
                for (j, &a) in acc.iter().enumerate() {
                    sum += kv_b.at(vbase + jv * r + j) * a;
                }
                *e = sum;
            }
        }
        w.get(Role::OProj)?.matvec(&act.input(o)?, out)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mla() -> MlaConfig {
        MlaConfig {
            num_heads: 4,
            head_dim: 8,
            v_head_dim: 6,
            rope_dim: 4,
            kv_lora_rank: 10,
            window: 16,
            rope_theta: 10000.0,
        }
    }

    #[test]
    fn record_round_trips_and_state_is_latent_plus_rope_per_slot() {
        let c = mla();
        assert_eq!(MlaConfig::from_words(&c.to_words(), None), Ok(c));
        // W * (R + dr), against 2 * H * d_k... of a full window: 16 * 14 floats.
        assert_eq!(c.state_len(), 16 * 14);
    }

    #[test]
    fn bad_records_are_refused() {
        for (i, v) in [(3usize, 3u32), (4, 0), (5, 0), (0, 0)] {
            let mut w = mla().to_words();
            w[i] = v;
            assert!(
                matches!(
                    MlaConfig::from_words(&w, Some(2)),
                    Err(Error::BadConfig { layer: Some(2), .. })
                ),
                "word {i} = {v}"
            );
        }
    }
}
