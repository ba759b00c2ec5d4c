//! The depthwise causal short convolution of GDN (also used by GSA, SWA and BLA).
//!
//! Per channel `c` with kernel width `W`: `y_c = silu(sum_j w[c, j] * window_c[j])`
//! where `window_c` holds the last `W` raw inputs, newest at `W - 1`. The
//! state keeps the `W - 1` previous inputs of every channel (oldest first).
//! fla's DeltaNet with a q/k activation other than SiLU convolves q and k
//! without the SiLU ([`step_qkv_act`]).

use crate::error::{Error, Result};
use crate::format::Role;
use crate::math::silu;
use crate::tensor::Tensor;
use crate::weights::LayerWeights;

/// State words of a convolution over `channels` channels of width `width`.
pub const fn state_len(channels: usize, width: usize) -> usize {
    channels.saturating_mul(width.saturating_sub(1))
}

/// [`state_len`] in u64, for overflow-free sizing on any target (saturating).
pub const fn state_words(channels: u64, width: u32) -> u64 {
    channels.saturating_mul(width.saturating_sub(1) as u64)
}

/// Convolves `x` in place (raw projection in, activated output out) and
/// pushes the raw input into `cache` (`channels * (width - 1)` words).
pub fn step(weight: &Tensor<'_>, width: usize, cache: &mut [f32], x: &mut [f32]) {
    step_with::<true>(weight, width, cache, x)
}

/// The activation after the convolution: SiLU, or none.
#[inline(always)]
fn act<const SILU: bool>(y: f32) -> f32 {
    if SILU {
        silu(y)
    } else {
        y
    }
}

/// [`step`], with (`SILU`) or without the SiLU after the convolution.
fn step_with<const SILU: bool>(
    weight: &Tensor<'_>,
    width: usize,
    cache: &mut [f32],
    x: &mut [f32],
) {
    let hist = width.saturating_sub(1);
    if hist == 0 {
        // Width 1: no history, one weight per channel.
        for (c, xc) in x.iter_mut().enumerate() {
            *xc = act::<SILU>(weight.at(c) * *xc);
        }
        return;
    }
    match weight.f32_values() {
        // The common width (4, fla's default), unrolled.
        Some(w) if width == 4 => {
            for ((xc, row), past) in x
                .iter_mut()
                .zip(w.chunks_exact(4))
                .zip(cache.chunks_exact_mut(3))
            {
                let raw = *xc;
                let (p0, p1, p2) = (past[0], past[1], past[2]);
                let acc = row[3] * raw + row[0] * p0 + row[1] * p1 + row[2] * p2;
                past.copy_from_slice(&[p1, p2, raw]);
                *xc = act::<SILU>(acc);
            }
        }
        Some(w) => {
            for ((xc, row), past) in x
                .iter_mut()
                .zip(w.chunks_exact(width))
                .zip(cache.chunks_exact_mut(hist))
            {
                *xc = act::<SILU>(tap(row, past, hist, *xc));
            }
        }
        None => {
            let mut row = [0.0f32; MAX_WIDTH];
            for (c, (xc, past)) in x.iter_mut().zip(cache.chunks_exact_mut(hist)).enumerate() {
                for (j, r) in row.iter_mut().enumerate().take(width) {
                    *r = weight.at(c * width + j);
                }
                *xc = act::<SILU>(tap(&row[..width.min(MAX_WIDTH)], past, hist, *xc));
            }
        }
    }
}

/// Widest convolution a config may ask for (`conv_size` 1..=64).
const MAX_WIDTH: usize = 64;

/// One channel: `w[hist] * raw + sum_j w[j] * past[j]` (oldest first), and
/// the window moved on by one (`past` gets `raw` as its newest) in the
/// same pass.
#[inline]
fn tap(w: &[f32], past: &mut [f32], hist: usize, raw: f32) -> f32 {
    let mut acc = w.get(hist).copied().unwrap_or(0.0) * raw;
    // Both hold `hist` words (the callers' chunks); `n` states it, so the
    // indexing below has no panic branch.
    let n = hist.min(past.len()).min(w.len());
    let (past, w) = (&mut past[..n], &w[..n]);
    for j in 0..n {
        let old = past[j];
        acc += w[j] * old;
        past[j] = if j + 1 < n { past[j + 1] } else { raw };
    }
    acc
}

/// The q, k and v caches of `cache`, in that order (the session sized it:
/// a shorter one is a broken invariant, `Error::Internal`).
fn split_caches(
    cache: &mut [f32],
    width: usize,
    q: usize,
    k: usize,
) -> Result<(&mut [f32], &mut [f32], &mut [f32])> {
    let (qc, rest) = cache
        .split_at_mut_checked(state_len(q, width))
        .ok_or(Error::Internal("convolution cache"))?;
    let (kc, vc) = rest
        .split_at_mut_checked(state_len(k, width))
        .ok_or(Error::Internal("convolution cache"))?;
    Ok((qc, kc, vc))
}

/// Convolves q, k and v in place with the layer's `{q,k,v}_conv1d` kernels;
/// `cache` holds the three caches in that order.
pub fn step_qkv(
    w: &LayerWeights<'_>,
    width: usize,
    cache: &mut [f32],
    q: &mut [f32],
    k: &mut [f32],
    v: &mut [f32],
) -> Result<()> {
    let (qc, kc, vc) = split_caches(cache, width, q.len(), k.len())?;
    step(&w.get(Role::QConv)?, width, qc, q);
    step(&w.get(Role::KConv)?, width, kc, k);
    step(&w.get(Role::VConv)?, width, vc, v);
    Ok(())
}

/// [`step_qkv`], with the SiLU after the q and k convolutions only when
/// `qk_silu` (v always has it): fla's DeltaNet convolves q and k without it
/// when its `qk_activation` is not SiLU.
pub fn step_qkv_act(
    w: &LayerWeights<'_>,
    width: usize,
    cache: &mut [f32],
    qk_silu: bool,
    q: &mut [f32],
    k: &mut [f32],
    v: &mut [f32],
) -> Result<()> {
    if qk_silu {
        return step_qkv(w, width, cache, q, k, v);
    }
    let (qc, kc, vc) = split_caches(cache, width, q.len(), k.len())?;
    step_with::<false>(&w.get(Role::QConv)?, width, qc, q);
    step_with::<false>(&w.get(Role::KConv)?, width, kc, k);
    step(&w.get(Role::VConv)?, width, vc, v);
    Ok(())
}
