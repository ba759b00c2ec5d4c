//! The depthwise causal short convolution of GDN (also used by SWA and BLA).
//!
//! Per channel `c` with kernel width `W`: `y_c = silu(sum_j w[c, j] * window_c[j])`
//! where `window_c` holds the last `W` raw inputs, newest at `W - 1`. The
//! state keeps the `W - 1` previous inputs of every channel (oldest first).

use crate::error::Result;
use crate::image::Role;
use crate::math::silu;
use crate::model::LayerWeights;
use crate::tensor::Tensor;

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
    let hist = width - 1;
    for (c, xc) in x.iter_mut().enumerate() {
        let raw = *xc;
        let row = c * width;
        let mut acc = weight.at(row + hist) * raw;
        if hist > 0 {
            let past = &mut cache[c * hist..(c + 1) * hist];
            for (j, p) in past.iter().enumerate() {
                acc += weight.at(row + j) * p;
            }
            past.copy_within(1.., 0);
            past[hist - 1] = raw;
        }
        *xc = silu(acc);
    }
}

/// Convolves q, k and v in place with the layer's `{q,k,v}_conv1d` kernels;
/// `cache` holds the three caches in that order.
pub fn step_qkv(
    w: &LayerWeights<'_, '_>,
    width: usize,
    cache: &mut [f32],
    q: &mut [f32],
    k: &mut [f32],
    v: &mut [f32],
) -> Result<()> {
    let (qc, rest) = cache.split_at_mut(state_len(q.len(), width));
    let (kc, vc) = rest.split_at_mut(state_len(k.len(), width));
    step(&w.get(Role::QConv)?, width, qc, q);
    step(&w.get(Role::KConv)?, width, kc, k);
    step(&w.get(Role::VConv)?, width, vc, v);
    Ok(())
}
