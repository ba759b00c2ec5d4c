//! `swa` — sliding-window softmax attention with attention sinks (docs/spec.md §3.3).
//!
//! The query at stream position `t` sees itself, the `W - 1` previous tokens
//! and the first `S_eff = sinks + pinned` tokens of the stream, each key once.
//! Keys are stored RoPE-rotated at their absolute position in a rolling buffer
//! (slot `t mod W`, O(1) insert); the first `S_eff` tokens are also kept in
//! sink slots. With `rope_positions = "cache"` (StreamingLLM) only the sink
//! scores need the query rotated a second time, at its cache position
//! `min(t, S_eff + W - 1)`: window scores depend only on `t - s`, which cache
//! positions preserve.
//!
//! RoPE angles come from 64-bit fixed-point phases (turns per token times
//! the absolute position, modulo one turn, in wrapping integer arithmetic),
//! so the angle between a query and a key depends only on their distance, at
//! every position a `u64` holds: no f32 position loses precision past 2^24
//! (docs/spec.md, "Positions").
//!
//! State layout: keys `[S + pinned_max + W][Hkv][d]`, values likewise, then
//! the short-convolution caches when `use_short_conv` is set.

use super::{conv, product, push, push_conv_specs, sum, width, Mixer, Specs, StepCtx};
use crate::config::{dim_ok, ensure, ensure_size, width_ok, LayerWords};
use crate::error::{Error, Result};
use crate::image::Role;
use crate::math::dot;
use crate::model::LayerWeights;
use crate::tensor::ActBuf;

/// Flag bits of the layer record.
mod flag {
    pub const CACHE_POSITIONS: u32 = 1;
    pub const SINK_LOGITS: u32 = 2;
    pub const SHORT_CONV: u32 = 4;
    pub const NO_ROPE: u32 = 8;
    pub const ALL: u32 = 15;
}

/// Sliding-window attention layer configuration.
///
/// Record words: `H | Hkv | d | W | S | rope_theta (f32 bits) | flags | conv_size`
/// with flags bit 0 cache positions, bit 1 learned sink logits, bit 2 short
/// convolution, bit 3 no RoPE.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwaConfig {
    /// Query heads H.
    pub num_heads: u32,
    /// Key/value heads Hkv (divides H).
    pub num_kv_heads: u32,
    /// Head size d (even when RoPE is used).
    pub head_dim: u32,
    /// Window W: the query sees itself and W - 1 previous tokens.
    pub window: u32,
    /// Attention-sink tokens S kept from the start of the stream.
    pub sinks: u32,
    /// RoPE base.
    pub rope_theta: f32,
    /// Whether RoPE is applied at all.
    pub use_rope: bool,
    /// StreamingLLM positions (order in the cache) instead of absolute ones.
    pub cache_positions: bool,
    /// A learned per-head sink logit joins the softmax denominator.
    pub sink_logits: bool,
    /// Short convolution width on q, k, v (0 = none).
    pub conv_size: u32,
}

impl SwaConfig {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<SwaConfig> {
        let flags = w[6];
        let c = SwaConfig {
            num_heads: w[0],
            num_kv_heads: w[1],
            head_dim: w[2],
            window: w[3],
            sinks: w[4],
            rope_theta: f32::from_bits(w[5]),
            use_rope: flags & flag::NO_ROPE == 0,
            cache_positions: flags & flag::CACHE_POSITIONS != 0,
            sink_logits: flags & flag::SINK_LOGITS != 0,
            conv_size: if flags & flag::SHORT_CONV != 0 {
                w[7]
            } else {
                0
            },
        };
        ensure!(flags & !flag::ALL == 0, layer, "unknown swa flags");
        ensure!(
            dim_ok(c.num_heads) && dim_ok(c.num_kv_heads),
            layer,
            "swa head counts out of range"
        );
        ensure!(
            c.num_heads % c.num_kv_heads == 0,
            layer,
            "num_heads must be a multiple of num_kv_heads"
        );
        ensure!(dim_ok(c.head_dim), layer, "swa head_dim out of range");
        // Hkv divides H, so this also bounds Hkv*d.
        ensure_size!(
            width_ok(c.num_heads, c.head_dim),
            layer,
            "swa num_heads * head_dim exceeds 2^20"
        );
        ensure!(
            !c.use_rope || c.head_dim % 2 == 0,
            layer,
            "RoPE needs an even head_dim"
        );
        ensure!(dim_ok(c.window), layer, "swa window must be >= 1");
        ensure!(c.sinks <= 1 << 16, layer, "swa sinks out of range");
        ensure!(
            !c.use_rope || (c.rope_theta.is_finite() && c.rope_theta > 0.0),
            layer,
            "rope_theta must be finite and > 0"
        );
        ensure!(
            flags & flag::SHORT_CONV == 0 || (w[7] >= 1 && w[7] <= 64),
            layer,
            "swa conv_size must be 1..=64"
        );
        Ok(c)
    }

    /// Encodes the layer record words.
    pub fn to_words(&self) -> LayerWords {
        let bit = |on: bool, flag: u32| if on { flag } else { 0 };
        let flags = bit(self.cache_positions, flag::CACHE_POSITIONS)
            | bit(self.sink_logits, flag::SINK_LOGITS)
            | bit(self.conv_size > 0, flag::SHORT_CONV)
            | bit(!self.use_rope, flag::NO_ROPE);
        let mut w = [0; 15];
        w[..8].copy_from_slice(&[
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.window,
            self.sinks,
            self.rope_theta.to_bits(),
            flags,
            self.conv_size,
        ]);
        w
    }

    const fn dims(&self) -> (usize, usize, usize) {
        (
            self.num_heads as usize,
            self.num_kv_heads as usize,
            self.head_dim as usize,
        )
    }

    const fn dims64(&self) -> (u64, u64, u64) {
        (
            self.num_heads as u64,
            self.num_kv_heads as u64,
            self.head_dim as u64,
        )
    }

    /// State words: `(S + pinned_max + W) * Hkv * 2d` plus the convolution caches
    /// (saturating: an absurd `pinned_max` yields a size no buffer has).
    pub const fn state_len(&self, pinned_max: usize) -> u64 {
        let (h, hkv, d) = self.dims64();
        let slots = sum(&[self.sinks as u64, self.window as u64, pinned_max as u64]);
        let channels = sum(&[product(&[h, d]), product(&[2, hkv, d])]);
        sum(&[
            product(&[slots, 2, hkv, d]),
            conv::state_words(channels, self.conv_size),
        ])
    }

    /// Scratch words: q, o (`H*d` each), k, v (`Hkv*d` each), RoPE tables and
    /// the sink-rotated query (`3d`).
    pub const fn scratch_len(&self) -> u64 {
        let (h, hkv, d) = self.dims64();
        sum(&[product(&[2, h, d]), product(&[2, hkv, d]), product(&[3, d])])
    }

    /// Fills `cs` (`[d]`: cosines then sines) for position `pos`, taken
    /// modulo 2^64 (so `pos.wrapping_neg()` rotates back by `pos`).
    ///
    /// Frequency `i` turns `theta^(-2i/d) / 2 pi` times per token; as a 0.64
    /// fixed-point number of turns `step_i`, the phase at `pos` is
    /// `pos * step_i mod 2^64` exactly, and its top 32 bits give the angle in
    /// `[-pi, pi)` (rounded to 24 bits when converted to f32).
    fn rope_table(&self, pos: u64, cs: &mut [f32]) {
        /// One turn as a 0.64 fixed-point number, in f64.
        const TURN: f64 = 18_446_744_073_709_551_616.0;
        /// Radians per unit of the phase's top 32 bits.
        const RAD_PER_UNIT: f32 = core::f32::consts::TAU / 4_294_967_296.0;
        let half = self.head_dim as usize / 2;
        // theta^(-2/d) as exp(ln theta * -2/d): f64 `exp` and `log` are
        // smaller than `pow` in soft-float firmware (and the eval firmware
        // links them anyway).
        let ratio = libm::exp(libm::log(self.rope_theta as f64) * (-2.0 / self.head_dim as f64));
        let mut turns_per_token = 1.0 / core::f64::consts::TAU;
        let (cos, sin) = cs.split_at_mut(half);
        for (c, s) in cos.iter_mut().zip(sin.iter_mut()) {
            // In [0, 2^64 / 2 pi]: the conversion neither saturates nor wraps.
            let step = (turns_per_token * TURN) as u64;
            let phase = pos.wrapping_mul(step);
            let angle = ((phase >> 32) as u32 as i32) as f32 * RAD_PER_UNIT;
            *c = libm::cosf(angle);
            *s = libm::sinf(angle);
            turns_per_token *= ratio;
        }
    }

    /// Rotates every head of `x` (heads of size d) with the table `cs`.
    fn rotate(&self, cs: &[f32], x: &mut [f32]) {
        if !self.use_rope {
            return;
        }
        let half = self.head_dim as usize / 2;
        let (cos, sin) = cs.split_at(half);
        for head in x.chunks_exact_mut(2 * half) {
            let (lo, hi) = head.split_at_mut(half);
            for (((a, b), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
                let (x0, x1) = (*a, *b);
                *a = x0 * c - x1 * s;
                *b = x1 * c + x0 * s;
            }
        }
    }
}

/// Streaming softmax accumulator over keys (running max, sum and weighted values).
struct OnlineSoftmax<'o> {
    max: f32,
    sum: f32,
    acc: &'o mut [f32],
}

impl<'o> OnlineSoftmax<'o> {
    fn new(acc: &'o mut [f32]) -> Self {
        acc.fill(0.0);
        OnlineSoftmax {
            max: f32::NEG_INFINITY,
            sum: 0.0,
            acc,
        }
    }

    /// Adds a logit with its value vector (`None`: a sink logit with no value).
    fn add(&mut self, logit: f32, value: Option<&[f32]>) {
        if logit > self.max {
            let rescale = crate::math::exp(self.max - logit);
            self.sum *= rescale;
            self.acc.iter_mut().for_each(|e| *e *= rescale);
            self.max = logit;
        }
        let p = crate::math::exp(logit - self.max);
        self.sum += p;
        if let Some(v) = value {
            self.acc.iter_mut().zip(v).for_each(|(e, &vc)| *e += p * vc);
        }
    }

    fn finish(self) {
        if self.sum > 0.0 {
            let inv = 1.0 / self.sum;
            self.acc.iter_mut().for_each(|e| *e *= inv);
        }
    }
}

impl Mixer for SwaConfig {
    fn push_specs(&self, layer: u16, dm: u32, s: &mut Specs) {
        let h = self.num_heads;
        let (q, kv) = (
            width(h, self.head_dim),
            width(self.num_kv_heads, self.head_dim),
        );
        push(s, layer, Role::QProj, [q, dm, 0], true);
        push(s, layer, Role::KProj, [kv, dm, 0], true);
        push(s, layer, Role::VProj, [kv, dm, 0], true);
        if self.conv_size > 0 {
            push_conv_specs(s, layer, [q, kv, kv], self.conv_size);
        }
        if self.sink_logits {
            push(s, layer, Role::Sinks, [h, 0, 0], false);
        }
        push(s, layer, Role::OProj, [dm, q, 0], true);
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
        let (h, hkv, d) = self.dims();
        let (window, t) = (self.window as u64, ctx.pos);
        let (q, rest) = scratch.split_at_mut(h * d);
        let (o, rest) = rest.split_at_mut(h * d);
        let (k, rest) = rest.split_at_mut(hkv * d);
        let (v, rest) = rest.split_at_mut(hkv * d);
        let (cs, rest) = rest.split_at_mut(d);
        let q_sink = rest
            .get_mut(..d)
            .ok_or(Error::BadHeader("swa scratch too small"))?;

        w.get(Role::QProj)?.matvec(&x, q)?;
        w.get(Role::KProj)?.matvec(&x, k)?;
        w.get(Role::VProj)?.matvec(&x, v)?;

        let sink_cap = self.sinks as usize + ctx.pinned_max;
        let kv_len = (sink_cap + self.window as usize) * hkv * d;
        let (keys, rest) = state.split_at_mut(kv_len);
        let (values, conv_state) = rest.split_at_mut(kv_len);
        if self.conv_size > 0 {
            conv::step_qkv(w, self.conv_size as usize, conv_state, q, k, v)?;
        }

        self.rope_table(ctx.abs_pos, cs);
        self.rotate(cs, q);
        self.rotate(cs, k);
        let row = hkv * d;
        let store = |slot: usize, keys: &mut [f32], values: &mut [f32]| {
            keys[slot * row..(slot + 1) * row].copy_from_slice(k);
            values[slot * row..(slot + 1) * row].copy_from_slice(v);
        };
        let s_eff = (self.sinks as usize + ctx.pinned) as u64;
        store(sink_cap + (t % window) as usize, keys, values);
        if t < s_eff {
            store(t as usize, keys, values);
        }

        // Visible keys: window [first, t] and sinks [0, min(s_eff, first)).
        let first = (t + 1).saturating_sub(window);
        let sink_end = s_eff.min(first);
        let rerotate = self.cache_positions && self.use_rope && sink_end > 0;
        if rerotate {
            // R(cache position) = R(cache position - t) R(t): rotate the query back.
            let back = t - t.min(s_eff + window - 1);
            self.rope_table(back.wrapping_neg(), cs);
        }
        let sinks = match self.sink_logits {
            true => Some(w.get(Role::Sinks)?),
            false => None,
        };
        let scale = 1.0 / libm::sqrtf(d as f32);
        let group = h / hkv;
        for (head, (qh, oh)) in q.chunks_exact(d).zip(o.chunks_exact_mut(d)).enumerate() {
            let kv_off = (head / group) * d;
            let key = |slot: usize| &keys[slot * row + kv_off..][..d];
            let value = |slot: usize| &values[slot * row + kv_off..][..d];
            let mut softmax = OnlineSoftmax::new(oh);
            if let Some(s) = &sinks {
                softmax.add(s.at(head), None);
            }
            if sink_end > 0 {
                let qs: &[f32] = if rerotate {
                    q_sink.copy_from_slice(qh);
                    self.rotate(cs, q_sink);
                    q_sink
                } else {
                    qh
                };
                for slot in 0..sink_end as usize {
                    softmax.add(dot(qs, key(slot)) * scale, Some(value(slot)));
                }
            }
            for s in first..=t {
                let slot = sink_cap + (s % window) as usize;
                softmax.add(dot(qh, key(slot)) * scale, Some(value(slot)));
            }
            softmax.finish();
        }
        w.get(Role::OProj)?.matvec(&act.input(o)?, out)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(head_dim: u32, rope_theta: f32) -> SwaConfig {
        SwaConfig {
            num_heads: 1,
            num_kv_heads: 1,
            head_dim,
            window: 4,
            sinks: 0,
            rope_theta,
            use_rope: true,
            cache_positions: false,
            sink_logits: false,
            conv_size: 0,
        }
    }

    /// The fixed-point phases give `pos * theta^(-2i/d)` radians (computed
    /// here in f64 from the definition) within 1e-6, where f32 positions
    /// would be off by up to a radian at 2^24.
    #[test]
    fn rope_angles_match_the_definition() {
        for (d, theta) in [(16u32, 10_000.0f32), (32, 100.0), (8, 500_000.0)] {
            let c = config(d, theta);
            let mut cs = [0f32; 32];
            for pos in [0u64, 1, 2, 63, 1000, (1 << 20) + 5, (1 << 24) + 3] {
                c.rope_table(pos, &mut cs[..d as usize]);
                for i in 0..d as usize / 2 {
                    let inv_freq = libm::pow(theta as f64, -2.0 * i as f64 / d as f64);
                    let angle = pos as f64 * inv_freq;
                    let (cos, sin) = (cs[i] as f64, cs[d as usize / 2 + i] as f64);
                    assert!((cos - libm::cos(angle)).abs() < 1e-6, "cos {d} {pos} {i}");
                    assert!((sin - libm::sin(angle)).abs() < 1e-6, "sin {d} {pos} {i}");
                }
            }
        }
    }

    /// `pos.wrapping_neg()` rotates back: the tables of `p` and `-p` are
    /// conjugate, at every magnitude.
    #[test]
    fn negative_positions_rotate_back() {
        let c = config(16, 10_000.0);
        let (mut a, mut b) = ([0f32; 16], [0f32; 16]);
        for pos in [1u64, 77, 1 << 33, u64::MAX / 5] {
            c.rope_table(pos, &mut a);
            c.rope_table(pos.wrapping_neg(), &mut b);
            for i in 0..8 {
                assert!((a[i] - b[i]).abs() < 1e-6);
                assert!((a[8 + i] + b[8 + i]).abs() < 1e-6);
            }
        }
    }
}
