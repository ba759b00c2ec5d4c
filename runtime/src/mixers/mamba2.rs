//! `mamba2` — Mamba-2's mixer as fla's `Mamba2` layer runs it one token at
//! a time (docs/spec.md §3.7). `H` heads of `P` channels, state size `N`,
//! `G` groups of B and C (head `h` reads group `g = h / (H/G)`, or `h mod G`
//! where the record says so: `Mamba2Config::groups_interleaved`):
//!
//! ```text
//! [z; xBC; dt] = in_proj u                       z [H*P], xBC [H*P + 2*G*N], dt [H]
//! xBC = silu(conv(xBC) + bias)                   causal, width W, per channel
//! [x; B; C] = xBC                                x [H*P], B [G*N], C [G*N]
//! per head h:  dt_h = softplus(dt_h + dt_bias_h),  a_h = exp(-exp(A_log_h) dt_h)
//!              S_h[p][n] = a_h S_h[p][n] + (dt_h B_g[n]) x_h[p]
//!              y_h[p] = sum_n S_h[p][n] C_g[n] + D_h x_h[p]
//! y = rmsnorm_G(y * silu(z)) norm.weight          (gated RMSNorm over G groups)
//! out = out_proj y
//! ```
//!
//! State layout: the convolution's `[C][W-1]` previous inputs (oldest
//! first, as `mixers::conv`), then `S [H][P][N]`.

use super::mamba2_config::Mamba2Config;
use super::{conv, push, Mixer, SpecSink, StepCtx};
use crate::error::{part, split_mut, Error, Result, Rows, StepResult};
use crate::format::Role;
use crate::math::{exp, rms_scale, silu, softplus};
use crate::tensor::{ActBuf, Tensor};
use crate::weights::LayerWeights;

/// `u32` of a width a parsed config keeps at most 2^20 (saturating for a
/// hand-built one).
fn w32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Mixer for Mamba2Config {
    fn push_specs(&self, layer: u16, d: u32, s: &mut dyn SpecSink) {
        let (h, inner, channels) = (self.num_heads, w32(self.inner()), w32(self.conv_channels()));
        push(
            s,
            layer,
            Role::InProj,
            [w32(self.in_proj_rows()), d, 0],
            true,
        );
        push(s, layer, Role::Conv1d, [channels, 1, self.conv_size], false);
        if self.conv_bias {
            push(s, layer, Role::Conv1dBias, [channels, 0, 0], false);
        }
        push(s, layer, Role::ALog, [h, 0, 0], false);
        push(s, layer, Role::DtBias, [h, 0, 0], false);
        let d_len = if self.d_per_channel { inner } else { h };
        push(s, layer, Role::DSkip, [d_len, 0, 0], false);
        if self.gated_norm {
            push(s, layer, Role::MixerNorm, [inner, 0, 0], false);
        }
        push(s, layer, Role::OutProj, [d, inner, 0], true);
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

/// The causal convolution with a bias and SiLU, in place over `xbc`
/// (`[C]`), its `W - 1` previous inputs per channel in `cache` (`[C][W-1]`,
/// oldest first): `y_c = silu(sum_j w[c][j] win_c[j] + b_c)`, the window's
/// newest input at `j = W - 1`.
fn conv_bias_silu(
    weight: &Tensor<'_>,
    bias: Option<&Tensor<'_>>,
    width: usize,
    cache: &mut [f32],
    xbc: &mut [f32],
) {
    let hist = width - 1;
    for (c, xc) in xbc.iter_mut().enumerate() {
        let raw = *xc;
        let past = cache.get_mut(c * hist..(c + 1) * hist).unwrap_or_default();
        let row = c * width;
        let mut acc = 0.0f32;
        for (j, p) in past.iter().enumerate() {
            acc += weight.at(row + j) * *p;
        }
        acc += weight.at(row + hist) * raw;
        if let Some(b) = bias {
            acc += b.at(c);
        }
        // The window moves on: the oldest input leaves, `raw` comes in
        // (`past` has `hist` words, none for width 1).
        if !past.is_empty() {
            past.copy_within(1.., 0);
        }
        if let Some(last) = past.last_mut() {
            *last = raw;
        }
        *xc = silu(acc);
    }
}

impl Mamba2Config {
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
        let (heads, p, n, groups) = self.dims();
        let inner = heads * p;
        let gn = groups * n;
        let channels = inner + 2 * gn;
        let width = self.conv_size as usize;
        let proj = scratch
            .get_mut(..inner + channels + heads)
            .ok_or(Error::BadHeader("mamba2 scratch too small"))?;
        w.get(Role::InProj)?.matvec(&act.input(x)?, proj)?;
        const SCRATCH: &str = "mamba2 scratch too small";
        let (z, rest) = split_mut(proj, inner, SCRATCH)?;
        let (xbc, dt) = split_mut(rest, channels, SCRATCH)?;

        let (cache, s_all) = split_mut(
            state,
            conv::state_len(channels, width),
            "mamba2 state too small",
        )?;
        let bias = if self.conv_bias {
            Some(w.get(Role::Conv1dBias)?)
        } else {
            None
        };
        conv_bias_silu(&w.get(Role::Conv1d)?, bias.as_ref(), width, cache, xbc);

        let (xs, bc) = split_mut(xbc, inner, SCRATCH)?;
        let (b_all, c_all) = bc.split_at_checked(gn).ok_or(Error::Internal(SCRATCH))?;
        let (a_log, dt_bias, d_skip) = (
            w.get(Role::ALog)?,
            w.get(Role::DtBias)?,
            w.get(Role::DSkip)?,
        );
        // The sizes are nonzero (checked at load): the `max(1)`s state it,
        // so no chunk size or division has a panic branch.
        let (p, n) = (p.max(1), n.max(1));
        for (h, ((s_h, x_h), &dt_raw)) in Rows(s_all.chunks_exact_mut((p * n).max(1)))
            .zip(xs.chunks_exact_mut(p))
            .zip(dt.iter())
            .enumerate()
        {
            let g = self.group_of(h);
            let b = part(b_all, g * n..(g + 1) * n, "mamba2 group")?;
            let c = part(c_all, g * n..(g + 1) * n, "mamba2 group")?;
            let dt_h = softplus(dt_raw + dt_bias.at(h));
            let decay = exp(dt_h * -exp(a_log.at(h)));
            for (ch, (row, xp)) in s_h.chunks_exact_mut(n).zip(x_h.iter_mut()).enumerate() {
                let xv = *xp;
                let mut y = 0.0f32;
                for ((s, &bv), &cv) in row.iter_mut().zip(b).zip(c) {
                    *s = *s * decay + dt_h * bv * xv;
                    y += *s * cv;
                }
                let dk = if self.d_per_channel {
                    d_skip.at(h * p + ch)
                } else {
                    d_skip.at(h)
                };
                // y overwrites x: the D skip was its last reader.
                *xp = y + xv * dk;
            }
        }

        // The gated norm over G groups of H*P / G channels (or the gate alone).
        let y = xs;
        if self.gated_norm {
            let weight = w.get(Role::MixerNorm)?;
            if !self.norm_before_gate {
                y.iter_mut().zip(z.iter()).for_each(|(v, &g)| *v *= silu(g));
            }
            let size = (inner / groups.max(1)).max(1);
            for (gi, yg) in y.chunks_exact_mut(size).enumerate() {
                let inv = rms_scale(yg, ctx.norm_eps);
                for (i, v) in yg.iter_mut().enumerate() {
                    *v = *v * inv * weight.at(gi * size + i);
                }
            }
            if self.norm_before_gate {
                y.iter_mut().zip(z.iter()).for_each(|(v, &g)| *v *= silu(g));
            }
        } else {
            y.iter_mut().zip(z.iter()).for_each(|(v, &g)| *v *= silu(g));
        }
        w.get(Role::OutProj)?.matvec(&act.input(y)?, out)?;
        Ok(())
    }
}
