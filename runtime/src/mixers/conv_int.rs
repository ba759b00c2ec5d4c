//! The short convolution on the integer token path (docs/spec.md §3.5,
//! docs/integer-path.md): the same maths as the f32 `mixers::conv`, on blocks.
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
use crate::error::{part, part_mut, Error, Result};
use crate::fixed::activation::silu_block;
use crate::fixed::block::{normalize_with_max, shr_round_small, F32Bits, TO_15};
use crate::tensor::Tensor;

/// Widest convolution a config may ask for (`conv_size` 1..=64).
const MAX_WIDTH: usize = 64;

/// State words of one convolved vector of `channels` channels, width `width`.
pub const fn state_words(channels: u64, width: u32) -> u64 {
    let hist = width.saturating_sub(1) as u64;
    sum(&[hist, product(&[hist, channels]).div_ceil(2)])
}

/// Slot `s`'s exponent ([`crate::fixed::stored_exponent`]).
fn slot_exp(exps: &[i32], s: usize) -> i32 {
    crate::fixed::stored_exponent(exps.get(s).copied().unwrap_or(0))
}

/// What a slot out of the ring would be (not reached: the ring was checked
/// against `hist * channels` above, and `write`, `slot` are below `hist`).
const SLOTS: &str = "convolution slot out of the ring";

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
    step_with(weight, width, ring, pos, x, e, silu, true)
}

/// [`step`], with [`window4`]'s pass a channel where `by_channel` allows
/// it (the tests compare the two).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn step_with(
    weight: &Tensor<'_>,
    width: usize,
    ring: &mut [i32],
    pos: u64,
    x: &mut [i32],
    e: i32,
    silu: bool,
    by_channel: bool,
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
    // Tap j = 0..W-1 reads the token of age W-1-j: the current input is tap
    // W-1 (age 0), the token of age a sits in slot (pos - a) mod (W-1).
    // Taps older than the stream are skipped.
    let x_exp = e + TO_15 as i32;
    let valid = |age: usize| pos >= age as u64;
    // The slot of this token (one 64-bit remainder a call); the slot of age
    // a (1..=W-1) is a steps before it, mod W-1, without another division.
    let write = (pos % hist.max(1) as u64) as usize;
    let slot_of = |age: usize| {
        if write >= age {
            write - age
        } else {
            write + hist - age
        }
    };
    let mut emax = x_exp;
    for age in 1..=hist {
        if valid(age) {
            emax = emax.max(slot_exp(exps, slot_of(age)));
        }
    }
    // log2 of the taps' count, rounded up: the sum of W terms below 2^30.
    let spare = usize::BITS - (width - 1).leading_zeros();
    let (bits, base) = w.raw();
    if bits.len() != channels * width {
        return Err(Error::Internal("convolution kernel of the wrong size"));
    }
    // Every shift below is at most 31 and the values shifted are products of
    // two 15-bit views (below 2^30): the branch-free rounding applies.
    let shift_for = |te: i32| (spare + (emax - te).clamp(0, 40) as u32).min(31);
    let tap = |j: usize| bits.iter().skip(j).step_by(width);

    // The current tap, and the oldest (its slot takes the current input).
    let cur_shift = shift_for(x_exp);
    // Width 4 (every shipped model's): one pass a channel, its 4 kernel
    // values adjacent; the same sum (integer additions in another order),
    // so the same bits.
    // In a stream's first tokens the taps older than it count only where
    // their slots hold zeros (as a new or reset state's do): a zero times
    // any weight, rounded at a shift of 31, adds 0.
    let zeros = |age: usize| {
        let s = slot_of(age);
        slots
            .get(s * channels..(s + 1) * channels)
            .is_some_and(|row| row.iter().all(|&v| v == 0))
    };
    if by_channel
        && hist == 3
        && base >= F32Bits::WIDE_BASE
        && (1..=hist).all(|age| valid(age) || zeros(age))
    {
        let shift_of = |age: usize| {
            if valid(age) {
                shift_for(slot_exp(exps, slot_of(age)))
            } else {
                31
            }
        };
        let shifts = [0, 1, 2].map(|j| shift_of(hist - j));
        let max = window4(x, bits, base, slots, write, shifts, cur_shift)?;
        *part_mut(exps, write, SLOTS)? = x_exp;
        let e_out = normalize_with_max(x, w.exp15() + emax + spare as i32, max);
        return Ok(if silu { silu_block(x, e_out) } else { e_out });
    }
    if hist == 0 {
        for (xc, &wb) in x.iter_mut().zip(tap(0)) {
            // |x >> 15| <= 2^15.
            *xc = shr_round_small(F32Bits::decode(wb, base) * (*xc >> TO_15), cur_shift);
        }
    } else {
        let row = part_mut(slots, write * channels..(write + 1) * channels, SLOTS)?;
        // An oldest tap older than the stream weighs nothing.
        let (old_shift, old_on) = if valid(hist) {
            (shift_for(slot_exp(exps, write)), -1i32)
        } else {
            (0, 0)
        };
        for (((xc, slot), &wc), &w0) in x.iter_mut().zip(row.iter_mut()).zip(tap(hist)).zip(tap(0))
        {
            let cur = *xc >> TO_15; // |cur| <= 2^15
            let old = i32::from(*slot) & old_on;
            *xc = shr_round_small(F32Bits::decode(wc, base) * cur, cur_shift)
                + shr_round_small(F32Bits::decode(w0, base) * old, old_shift);
            *slot = cur.clamp(-32767, 32767) as i16;
        }
    }
    // The taps in between, one pass each.
    for j in 1..hist {
        let age = hist - j;
        if !valid(age) {
            continue;
        }
        let slot = slot_of(age);
        let sh = shift_for(slot_exp(exps, slot));
        let row = part(slots, slot * channels..(slot + 1) * channels, SLOTS)?;
        for ((xc, &v), &wb) in x.iter_mut().zip(row).zip(tap(j)) {
            *xc += shr_round_small(F32Bits::decode(wb, base) * i32::from(v), sh);
        }
    }
    if hist > 0 {
        *part_mut(exps, write, SLOTS)? = x_exp;
    }
    let max = crate::fixed::block::max_abs(x);
    let e_out = normalize_with_max(x, w.exp15() + emax + spare as i32, max);
    Ok(if silu { silu_block(x, e_out) } else { e_out })
}

/// [`step`]'s taps for width 4, one pass a channel: `x[c]` becomes `Σ_j`
/// of tap `j`'s rounded product (`shifts[j]` for the slot taps `j = 0..3`,
/// tap 0 the slot `write`, `cur_shift` for the current input; a tap older
/// than the stream has a slot of zeros and the shift 31, and adds 0), and
/// slot `write` takes the current input's 15-bit view. Returns the largest
/// `|x[c]|`. The kernel's shift `base` is at least [`F32Bits::WIDE_BASE`].
#[inline(always)]
fn window4(
    x: &mut [i32],
    bits: &[u32],
    base: i32,
    slots: &mut [i16],
    write: usize,
    shifts: [u32; 3],
    cur_shift: u32,
) -> Result<u32> {
    let channels = x.len();
    let (rows, _) = slots
        .split_at_mut_checked(3 * channels)
        .ok_or(Error::Internal(SLOTS))?;
    // Tap j reads slot (write + j) mod 3.
    let (r0, rest) = rows
        .split_at_mut_checked(channels)
        .ok_or(Error::Internal(SLOTS))?;
    let (r1, r2) = rest
        .split_at_mut_checked(channels)
        .ok_or(Error::Internal(SLOTS))?;
    let mut r = [r0, r1, r2];
    r.rotate_left(write % 3);
    let [s0, s1, s2] = r;
    let (kernel, _) = bits.as_chunks::<4>();
    let d = |b: u32| F32Bits::decode_wide(b, base); // base >= WIDE_BASE
    let [sh0, sh1, sh2] = shifts;
    let mut max = 0u32;
    for ((((xc, &[w0, w1, w2, w3]), o0), &o1), &o2) in x
        .iter_mut()
        .zip(kernel)
        .zip(s0.iter_mut())
        .zip(s1.iter())
        .zip(s2.iter())
    {
        let cur = *xc >> TO_15; // |cur| <= 2^15
        let y = shr_round_small(d(w3) * cur, cur_shift)
            + shr_round_small(d(w0) * i32::from(*o0), sh0)
            + shr_round_small(d(w1) * i32::from(o1), sh1)
            + shr_round_small(d(w2) * i32::from(o2), sh2);
        *o0 = cur.clamp(-32767, 32767) as i16;
        *xc = y;
        max = max.max(y.unsigned_abs());
    }
    Ok(max)
}

/// The q, k and v convolutions of one token with SiLU (`parts`: each a
/// normal block and its exponent, updated in place; `channels` their
/// widths), their rings one after the other at the start of `rings` (as
/// the integer states keep them): GSA's and BLA's short convolutions.
pub(crate) fn step_qkv(
    w: &crate::weights::LayerWeights<'_>,
    width: u32,
    rings: &mut [i32],
    pos: u64,
    parts: [(&mut [i32], &mut i32); 3],
) -> Result<()> {
    use crate::format::Role;
    let mut rest = rings;
    for ((x, e), role) in parts
        .into_iter()
        .zip([Role::QConv, Role::KConv, Role::VConv])
    {
        let words = state_words(x.len() as u64, width) as usize;
        let (ring, tail) = rest
            .split_at_mut_checked(words)
            .ok_or(Error::Internal("convolution rings of the wrong size"))?;
        *e = step(&w.get(role)?, width as usize, ring, pos, x, *e, true)?;
        rest = tail;
    }
    Ok(())
}

/// The largest magnitude in the rings of `channels` (one after the other
/// at the start of `rings`, width `width`), zero for what `rings` lacks.
pub(crate) fn rings_max_abs(rings: &[i32], channels: [usize; 3], width: u32) -> crate::fixed::Fx {
    let mut top = crate::fixed::Fx::ZERO;
    let mut at = 0;
    for ch in channels {
        let words = state_words(ch as u64, width) as usize;
        if let Some(ring) = rings.get(at..at + words) {
            let x = max_abs(ring, ch, width as usize);
            if x.gt(top) {
                top = x;
            }
        }
        at += words;
    }
    top
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
    fn the_pass_a_channel_gives_the_bits_of_the_pass_a_tap() {
        // Width 4, kernels over 30 octaves (some values decode to 0, some
        // subnormal), inputs of varying exponents: both paths from the same
        // state give the same outputs, exponents and rings.
        let mut r = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        for case in 0..40 {
            let c = 1 + (next() % 70) as usize;
            let w: Vec<f32> = (0..c * 4)
                .map(|_| {
                    let v = next();
                    match v % 11 {
                        0 => f32::from_bits((v >> 32) as u32 & 0x807f_ffff), // subnormal
                        1 => 0.0,
                        _ => {
                            ((v >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                                * 2f32.powi((v % 31) as i32 - 20)
                        }
                    }
                })
                .collect();
            let kernel = tensor(&w, c);
            let words = state_words(c as u64, 4) as usize;
            // A quarter of the cases start from a ring of old values (a
            // state not zeroed): the stream's first tokens must not read
            // them.
            let ring: Vec<i32> = (0..words)
                .map(|i| {
                    if case % 4 == 1 && i >= 3 {
                        (next() >> 40) as i32
                    } else {
                        0
                    }
                })
                .collect();
            let (mut ring_a, mut ring_b) = (ring.clone(), ring);
            for t in 0..12u64 {
                let x: Vec<f32> = (0..c)
                    .map(|_| {
                        ((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * (1 + t % 7) as f32
                    })
                    .collect();
                let mut a = vec![0; c];
                let e = from_f32(&x, &mut a);
                let mut b = a.clone();
                let silu = case % 2 == 0;
                let ea = step_with(&kernel, 4, &mut ring_a, t, &mut a, e, silu, true).unwrap();
                let eb = step_with(&kernel, 4, &mut ring_b, t, &mut b, e, silu, false).unwrap();
                assert_eq!((ea, &a, &ring_a), (eb, &b, &ring_b), "case {case} t {t}");
            }
        }
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
