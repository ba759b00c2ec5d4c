//! The short convolution on the integer token path (docs/spec.md §3.5,
//! docs/integer-path.md): the same maths as [`super::conv`], on blocks.
//!
//! State of one convolved vector of `C` channels and width `W`: a ring of
//! `W - 1` slots, the input of token `p` in slot `p mod (W - 1)`, each slot
//! `C` 16-bit mantissas (the 15-bit view of the input's normal block) with
//! the slot's exponent:
//!
//! ```text
//! [ exponent of slot 0 .. W-2 : i32 each ] [ slot 0: C x i16 | slot 1 | ... ] (padded to a word)
//! ```
//!
//! A slot is read only if its token belongs to the stream (`ctx.pos`), so
//! a zeroed state is a valid empty window. Per channel
//! `y = Σ_j w[c][j] x_{t-W+1+j}[c]` with each tap's product (15 x 15 bits)
//! shifted to the largest exponent among the window's slots and the
//! kernel's values, and by `ceil(log2 W)` bits more, so the sum of `W` taps
//! fits an i32; then the optional SiLU. The kernel's f32 values are read
//! through their bits ([`crate::fixed::block::F32Bits`]).

use super::{product, sum};
use crate::error::{Error, Result};
use crate::fixed::activation::silu_block;
use crate::fixed::block::{normalize_with_max, shr_round, TO_15};
use crate::tensor::Tensor;

/// Widest convolution a config may ask for (`conv_size` 1..=64).
const MAX_WIDTH: usize = 64;

/// State words of one convolved vector of `channels` channels, width `width`.
pub const fn state_words(channels: u64, width: u32) -> u64 {
    let hist = width.saturating_sub(1) as u64;
    sum(&[hist, product(&[hist, channels]).div_ceil(2)])
}

/// Convolves the normal block `(x, e)` in place with `weight` (`[C, 1, W]`,
/// f32 or f16) and pushes its 15-bit view into `ring` (exactly
/// [`state_words`]`(C, W)` words) as the slot of token `pos` (tokens since
/// the stream started); applies SiLU when `silu`. Returns the exponent of
/// the normal result.
pub fn step(
    weight: &Tensor<'_>,
    width: usize,
    ring: &mut [i32],
    pos: u64,
    x: &mut [i32],
    e: i32,
    silu: bool,
) -> Result<i32> {
    let w = weight.stored_vector()?;
    let channels = x.len();
    let hist = width.saturating_sub(1);
    if width == 0 || width > MAX_WIDTH || w.len() != channels * width {
        return Err(Error::Internal("convolution kernel of the wrong size"));
    }
    let (exps, slots) = ring.split_at_mut(hist.min(ring.len()));
    let slots: &mut [i16] = bytemuck::cast_slice_mut(slots);
    if slots.len() < hist * channels {
        return Err(Error::Internal("convolution state of the wrong size"));
    }
    // The slot (and so the exponent) of each tap j = 0..W-1; the current
    // input is tap W-1 (age 0). Taps older than the stream are skipped.
    let x_exp = e + TO_15 as i32;
    let mut slot_of = [usize::MAX; MAX_WIDTH];
    let mut tap_exp = [i32::MIN; MAX_WIDTH];
    tap_exp[width - 1] = x_exp;
    for (j, (s, te)) in slot_of
        .iter_mut()
        .zip(tap_exp.iter_mut())
        .enumerate()
        .take(hist)
    {
        let age = (hist - j) as u64;
        if pos >= age {
            let slot = ((pos - age) % hist as u64) as usize;
            *s = slot;
            *te = exps[slot];
        }
    }
    let emax = tap_exp[..width].iter().copied().max().unwrap_or(x_exp);
    // log2 of the taps' count, rounded up: the sum of W terms below 2^30.
    let spare = usize::BITS - (width - 1).leading_zeros();
    let mut shift = [0u32; MAX_WIDTH];
    for (sh, &te) in shift.iter_mut().zip(&tap_exp[..width]) {
        *sh = if te == i32::MIN {
            u32::MAX
        } else {
            spare + (emax - te).clamp(0, 40) as u32
        };
    }
    let write = (pos % hist.max(1) as u64) as usize;
    // Taps before `first` are older than the stream; slot offsets once.
    let first = hist.saturating_sub(usize::try_from(pos).unwrap_or(usize::MAX));
    let mut base = [0usize; MAX_WIDTH];
    for (b, &slot) in base.iter_mut().zip(&slot_of).take(hist).skip(first) {
        *b = slot * channels;
    }
    let cur_shift = shift[width - 1];
    let mut max = 0u32;
    let mut row = [0i32; MAX_WIDTH];
    for (c, xc) in x.iter_mut().enumerate() {
        // The channel's kernel as 15-bit mantissas (each value is read once
        // per token: no saving in keeping them).
        for (j, r) in row.iter_mut().enumerate().take(width) {
            *r = w.at15(c * width + j);
        }
        let cur = *xc >> TO_15; // |cur| <= 2^15
        // 15 x 15 bits, then at least `spare` bits down.
        let mut acc = shr_round(row[width - 1] * cur, cur_shift);
        for j in first..hist {
            let v = i32::from(slots[base[j] + c]);
            acc += shr_round(row[j] * v, shift[j]);
        }
        if hist > 0 {
            slots[write * channels + c] = cur.clamp(-32767, 32767) as i16;
        }
        *xc = acc;
        max = max.max(acc.unsigned_abs());
    }
    if hist > 0 {
        exps[write] = x_exp;
    }
    let e_out = normalize_with_max(x, w.exp15() + emax + spare as i32, max);
    Ok(if silu { silu_block(x, e_out) } else { e_out })
}

/// The largest magnitude in a window's slots (for inspection).
pub fn max_abs(ring: &[i32], channels: usize, width: usize) -> crate::fixed::Fx {
    use crate::fixed::Fx;
    let hist = width.saturating_sub(1);
    let (exps, slots) = ring.split_at(hist.min(ring.len()));
    let slots: &[i16] = bytemuck::cast_slice(slots);
    let mut top = Fx::ZERO;
    for (slot, &e) in exps.iter().enumerate() {
        let m = slots
            .iter()
            .skip(slot * channels)
            .take(channels)
            .fold(0u32, |a, v| a.max(v.unsigned_abs() as u32));
        let x = Fx::from_i64(m as i64, e);
        if x.gt(top) {
            top = x;
        }
    }
    top
}

#[cfg(test)]
mod tests {
    //! The integer convolution against the f32 one ([`super::super::conv`])
    //! on the same kernel and inputs.
    extern crate std;
    use super::*;
    use crate::fixed::block::{from_f32, to_f32, Block};
    use crate::tensor::TensorData;
    use std::vec;
    use std::vec::Vec;

    fn tensor(w: &[f32], c: usize) -> Tensor<'_> {
        Tensor::new(c, w.len() / c, TensorData::F32(w)).unwrap()
    }

    #[test]
    fn matches_the_f32_convolution_over_a_stream() {
        for width in [1usize, 2, 4, 7] {
            let c = 12;
            let w: Vec<f32> = (0..c * width)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) / 9.0)
                .collect();
            let kernel = tensor(&w, c);
            let wmax = w.iter().fold(0f32, |a, v| a.max(v.abs()));
            let mut f_cache = vec![0f32; c * (width - 1)];
            let mut ring = vec![0i32; state_words(c as u64, width as u32) as usize];
            let mut window_max = 0f32;
            for t in 0..40u64 {
                let x: Vec<f32> = (0..c)
                    .map(|i| ((i as u64 * 7 + t * 13) % 19) as f32 * 0.3 - 2.5)
                    .map(|v| v * (1.0 + (t % 5) as f32))
                    .collect();
                let mut f = x.clone();
                super::super::conv::step(&kernel, width, &mut f_cache, &mut f);
                let mut m = vec![0; c];
                let e = from_f32(&x, &mut m);
                let e = step(&kernel, width, &mut ring, t, &mut m, e, true).unwrap();
                let mut got = vec![0f32; c];
                to_f32(Block { m: &m, e }, &mut got);
                // Each tap multiplies a 15-bit view of its token's vector (the
                // window's int16 slots) by a 15-bit view of the kernel (aligned
                // to its largest value): within 2^-14 of the largest input
                // times (the row's weights plus W times the largest weight);
                // the SiLU within 1e-4.
                window_max = window_max.max(x.iter().fold(0f32, |a, v| a.max(v.abs())));
                for (i, (a, b)) in got.iter().zip(&f).enumerate() {
                    let wsum: f32 = w[i * width..(i + 1) * width].iter().map(|v| v.abs()).sum();
                    let bound =
                        window_max * (wsum + width as f32 * wmax) / 16384.0 + 1e-4 * b.abs() + 1e-6;
                    assert!((a - b).abs() <= bound, "width {width} t {t}: {a} {b}");
                }
            }
        }
    }
}
