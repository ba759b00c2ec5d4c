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

use super::mla_config::MlaConfig;
use super::swa::OnlineSoftmax;
use super::{push, width, Mixer, SpecSink, StepCtx};
use crate::error::{part, part_mut, split_mut, Error, Result, StepResult};
use crate::format::Role;
use crate::math::dot;
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

/// GPT-NeoX half-split rotation of `x` (`[dr]`) with the table `cs`.
fn rotate(cs: &[f32], x: &mut [f32]) {
    let half = x.len() / 2;
    // The table holds `dr` values (the session's scratch); `None` is not
    // reached, and states that without a panic branch.
    let Some((cos, sin)) = cs.split_at_checked(half) else {
        return;
    };
    let (lo, hi) = x.split_at_mut(half);
    for (((a, b), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
        let (x0, x1) = (*a, *b);
        *a = x0 * c - x1 * s;
        *b = x1 * c + x0 * s;
    }
}

impl Mixer for MlaConfig {
    fn push_specs(&self, layer: u16, dm: u32, s: &mut dyn SpecSink) {
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
        super::mla_int::step(self, ctx, w, state, scratch, act, x, out, clamps)
            .map_err(Error::at_step)
    }
}

impl MlaConfig {
    /// One token (docs/spec.md §3.6).
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
        const SCRATCH: &str = "mla scratch too small";
        let (q, rest) = split_mut(scratch, h * (d + dr), SCRATCH)?;
        let (new, rest) = split_mut(rest, slot, SCRATCH)?;
        let (q_lat, rest) = split_mut(rest, r, SCRATCH)?;
        let (acc, rest) = split_mut(rest, r, SCRATCH)?;
        let (o, rest) = split_mut(rest, h * dv, SCRATCH)?;
        let cs = rest
            .get_mut(..dr)
            .ok_or(Error::BadHeader("mla scratch too small"))?;

        w.get(Role::QProj)?.matvec(&x, q)?;
        w.get(Role::KvAProj)?.matvec(&x, new)?;
        self.rope_table(ctx.abs_pos, cs);
        rotate(cs, part_mut(new, r.., SCRATCH)?);
        // `max(1)`: the window is nonzero (checked at load), stated without
        // a panic branch.
        let window = window.max(1);
        let at = (t % window) as usize * slot;
        state
            .get_mut(at..at + slot)
            .ok_or(Error::BadHeader("mla state too small"))?
            .copy_from_slice(new);

        let kv_b = w.get(Role::KvBProj)?;
        let scale = 1.0 / libm::sqrtf((d + dr) as f32);
        let first = (t + 1).saturating_sub(window);
        for (head, (qh, oh)) in q
            .chunks_exact_mut((d + dr).max(1))
            .zip(o.chunks_exact_mut(dv.max(1)))
            .enumerate()
        {
            let (q_nope, q_rope) = split_mut(qh, d, SCRATCH)?;
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
                let at = (s % window) as usize * slot;
                let kept = part(state, at..at + slot, "mla slot out of the state")?;
                let (c, kr) = kept
                    .split_at_checked(r)
                    .ok_or(Error::Internal("mla slot out of the state"))?;
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
    use crate::format::StateFormat;

    fn mla() -> MlaConfig {
        MlaConfig {
            num_heads: 4,
            head_dim: 8,
            v_head_dim: 6,
            rope_dim: 4,
            kv_lora_rank: 10,
            window: 16,
            rope_theta: 10000.0,
            state: StateFormat::F32,
        }
    }

    #[test]
    fn record_round_trips_and_state_is_latent_plus_rope_per_slot() {
        let c = mla();
        assert_eq!(MlaConfig::from_words(&c.to_words(), None), Ok(c));
        // W * (R + dr), against 2 * H * d_k... of a full window: 16 * 14 floats.
        assert_eq!(c.state_len(), 16 * 14);
        // int8: two scale words a slot, then 16 * 10 int8 latents and 16 * 4
        // i16 RoPE keys.
        let c8 = MlaConfig {
            state: StateFormat::Int8Kv,
            ..c
        };
        assert_eq!(MlaConfig::from_words(&c8.to_words(), None), Ok(c8));
        assert_eq!(c8.state_len(), 32 + 40 + 32);
        let mut w = c.to_words();
        w[crate::format::STATE_WORD] = StateFormat::Int16 as u32;
        assert!(MlaConfig::from_words(&w, None).is_err());
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
