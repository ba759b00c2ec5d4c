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
//! With `dilation` `r > 1` the window keys are the tokens at distances
//! `0, r, 2r, ..., (W-1) r`; the ring then holds the whole span of
//! `(W-1) r + 1` tokens, because the next `r - 1` queries read the residue
//! classes in between (docs/spec.md §3.3, "Dilated window").
//!
//! State layout: keys `[S + pinned_max + span][Hkv][d]` (`span = (W-1) r + 1`,
//! `W` without dilation), values likewise, then the short-convolution caches
//! when `use_short_conv` is set.

use super::{conv, product, push, push_conv_specs, rope, sum, width, Mixer, Specs, StepCtx};
use crate::error::{ensure, ensure_size, Error, Result, StepResult};
use crate::format::{
    dim_ok, record_words, width_ok, LayerWords, Role, StateFormat, MAX_DIM, STATE_WORD,
};
use crate::image::{INTEGER_PATH_FORMAT_VERSION, MIN_FORMAT_VERSION, MIXER_OPTIONS_FORMAT_VERSION};
use crate::math::dot;
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

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
/// Record words: `H | Hkv | d | W | S | rope_theta (f32 bits) | flags | conv_size
/// | dilation` with flags bit 0 cache positions, bit 1 learned sink logits,
/// bit 2 short convolution, bit 3 no RoPE; dilation 0 (format 1-3 records)
/// means 1.
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
    /// Distance between the window's keys (1 = a plain window).
    pub dilation: u32,
    /// How the KV cache is kept (record word 15, format 6): f32, or int8
    /// with per-slot scales for the integer step (`mixers/swa_int.rs`; not
    /// with a short convolution yet).
    pub state: StateFormat,
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
            dilation: if w[8] == 0 { 1 } else { w[8] },
            state: match StateFormat::from_code(w[STATE_WORD]) {
                Some(s) => s,
                None => {
                    return Err(Error::BadConfig {
                        layer,
                        reason: "unknown state format",
                    })
                }
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
        ensure!(
            c.dilation == 1 || !c.cache_positions,
            layer,
            "a dilated window needs absolute RoPE positions"
        );
        ensure_size!(
            c.span() <= MAX_DIM as u64,
            layer,
            "swa (window - 1) * dilation + 1 exceeds 2^20"
        );
        ensure!(
            !matches!(c.state, StateFormat::Int16),
            layer,
            "this mixer has no step for that state format"
        );
        ensure!(
            !matches!(c.state, StateFormat::Int8Kv) || c.conv_size == 0,
            layer,
            "an int8 swa KV cache with a short convolution has no integer step yet"
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
        let mut w = record_words(&[
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.window,
            self.sinks,
            self.rope_theta.to_bits(),
            flags,
            self.conv_size,
            if self.dilation > 1 { self.dilation } else { 0 },
        ]);
        w[STATE_WORD] = self.state as u32;
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

    /// Ring slots: the span `(W - 1) * dilation + 1` of tokens a dilated
    /// window reaches (`W` without dilation).
    pub const fn span(&self) -> u64 {
        let r = if self.dilation == 0 { 1 } else { self.dilation };
        sum(&[
            product(&[(self.window as u64).saturating_sub(1), r as u64]),
            1,
        ])
    }

    /// State words: f32, `(S + pinned_max + span) * Hkv * 2d` plus the
    /// convolution caches; int8 KV, per slot and kv head two scale words
    /// (key, value) and `2d` bytes, padded to a word ([`super::swa_int`])
    /// (saturating: an absurd `pinned_max` yields a size no buffer has).
    pub const fn state_len(&self, pinned_max: usize) -> u64 {
        let (h, hkv, d) = self.dims64();
        let slots = sum(&[self.sinks as u64, self.span(), pinned_max as u64]);
        if let StateFormat::Int8Kv = self.state {
            return super::swa_int::state_words(slots, hkv, d);
        }
        let channels = sum(&[product(&[h, d]), product(&[2, hkv, d])]);
        sum(&[
            product(&[slots, 2, hkv, d]),
            conv::state_words(channels, self.conv_size),
        ])
    }

    /// Scratch words: q, o (`H*d` each), k, v (`Hkv*d` each), RoPE tables and
    /// the sink-rotated query (`3d`); the integer step also its two int8
    /// queries (`2d` more: the int8 KV state only).
    pub const fn scratch_len(&self) -> u64 {
        let (h, hkv, d) = self.dims64();
        let extra = match self.state {
            StateFormat::Int8Kv => product(&[2, d]),
            _ => 0,
        };
        sum(&[
            product(&[2, h, d]),
            product(&[2, hkv, d]),
            product(&[3, d]),
            extra,
        ])
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words with a pinned prefix of up to `pinned_max` tokens
    /// ([`SwaConfig::state_len`]).
    pub(crate) const fn layer_state_len(&self, pinned_max: usize) -> u64 {
        self.state_len(pinned_max)
    }

    /// Input width of the output projection (`o_proj` columns): `H * d`.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        self.num_heads as u64 * self.head_dim as u64
    }

    /// How the layer keeps its KV cache (record word 15).
    pub(crate) const fn state_format(&self) -> StateFormat {
        self.state
    }

    /// The oldest image format version whose layer record holds this
    /// configuration: format 6 for an int8 KV cache, format 4 for a
    /// dilated window, else format 1.
    pub(crate) const fn min_format_version(&self) -> u32 {
        if !matches!(self.state, StateFormat::F32) {
            INTEGER_PATH_FORMAT_VERSION
        } else if self.dilation > 1 {
            MIXER_OPTIONS_FORMAT_VERSION
        } else {
            MIN_FORMAT_VERSION
        }
    }

    /// Fills `cs` (`[d]`: cosines then sines) for position `pos`, taken
    /// modulo 2^64 ([`rope::table`]).
    fn rope_table(&self, pos: u64, cs: &mut [f32]) {
        rope::table(self.rope_theta, self.head_dim, pos, cs);
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
pub(super) struct OnlineSoftmax<'o> {
    max: f32,
    sum: f32,
    acc: &'o mut [f32],
}

impl<'o> OnlineSoftmax<'o> {
    pub(super) fn new(acc: &'o mut [f32]) -> Self {
        acc.fill(0.0);
        OnlineSoftmax {
            max: f32::NEG_INFINITY,
            sum: 0.0,
            acc,
        }
    }

    /// Adds a logit with its value vector (`None`: a sink logit with no value).
    pub(super) fn add(&mut self, logit: f32, value: Option<&[f32]>) {
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

    pub(super) fn finish(self) {
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
        super::swa_int::step(self, ctx, w, state, scratch, act, x, out, clamps)
            .map_err(Error::at_step)
    }
}

impl SwaConfig {
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
        let x = act.input(x)?;
        let (h, hkv, d) = self.dims();
        let (span, t) = (self.span(), ctx.pos);
        let r = self.dilation.max(1) as u64;
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
        let kv_len = (sink_cap + span as usize) * hkv * d;
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
        store(sink_cap + (t % span) as usize, keys, values);
        if t < s_eff {
            store(t as usize, keys, values);
        }

        // Visible keys: window {t - i r : i < W} within [first, t], and the
        // sinks [0, s_eff) that are not window keys (r = 1: [0, min(s_eff, first))).
        let first = (t + 1).saturating_sub(span);
        let sink_end = if r == 1 {
            s_eff.min(first)
        } else {
            s_eff.min(t + 1)
        };
        let in_window = |s: u64| s >= first && (t - s) % r == 0;
        // Cache positions are refused with dilation, so `span` is W here.
        let rerotate = self.cache_positions && self.use_rope && sink_end > 0;
        if rerotate {
            // R(cache position) = R(cache position - t) R(t): rotate the query back.
            let back = t - t.min(s_eff + span - 1);
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
                    if r > 1 && in_window(slot as u64) {
                        continue;
                    }
                    softmax.add(dot(qs, key(slot)) * scale, Some(value(slot)));
                }
            }
            // Oldest first: s = first + ((t - first) mod r), step r, up to t.
            let mut s = first + (t - first) % r;
            while s <= t {
                let slot = sink_cap + (s % span) as usize;
                softmax.add(dot(qh, key(slot)) * scale, Some(value(slot)));
                s += r;
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

    /// The state-format word: int8 KV round-trips; int16, an unknown code
    /// and int8 KV with a short convolution are refused with a typed error.
    #[test]
    fn state_formats_are_checked() {
        let int8 = SwaConfig {
            state: StateFormat::Int8Kv,
            ..config(8, 10_000.0)
        };
        let w = int8.to_words();
        assert_eq!(SwaConfig::from_words(&w, None), Ok(int8));
        assert_eq!(int8.min_format_version(), INTEGER_PATH_FORMAT_VERSION);
        let refused = |w: &LayerWords| {
            matches!(
                SwaConfig::from_words(w, Some(0)),
                Err(Error::BadConfig { .. })
            )
        };
        let mut bad = w;
        bad[STATE_WORD] = StateFormat::Int16 as u32;
        assert!(refused(&bad));
        bad[STATE_WORD] = 7;
        assert!(refused(&bad));
        let conv = SwaConfig {
            conv_size: 4,
            ..int8
        };
        assert!(refused(&conv.to_words()));
        // About a quarter of the f32 cache at d = 64: 2 (64 + 4) bytes per slot.
        let wide = SwaConfig {
            head_dim: 64,
            ..int8
        };
        let f32_words = SwaConfig {
            state: StateFormat::F32,
            ..wide
        }
        .state_len(0);
        assert_eq!(wide.state_len(0), 4 * (2 + 2 * 16));
        assert!(wide.state_len(0) * 100 <= f32_words * 27);
    }

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
            dilation: 1,
            state: StateFormat::F32,
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

    fn swa(window: u32, dilation: u32) -> SwaConfig {
        SwaConfig {
            num_heads: 2,
            num_kv_heads: 1,
            head_dim: 4,
            window,
            sinks: 2,
            rope_theta: 10000.0,
            use_rope: true,
            cache_positions: false,
            sink_logits: false,
            conv_size: 0,
            dilation,
            state: StateFormat::F32,
        }
    }

    #[test]
    fn dilation_round_trips_and_plain_records_are_unchanged() {
        assert_eq!(swa(8, 1).to_words()[8], 0, "format 1 word");
        assert_eq!(
            SwaConfig::from_words(&swa(8, 1).to_words(), None),
            Ok(swa(8, 1))
        );
        let w = swa(8, 3).to_words();
        assert_eq!(w[8], 3);
        assert_eq!(SwaConfig::from_words(&w, None), Ok(swa(8, 3)));
    }

    #[test]
    fn a_dilated_window_keeps_its_whole_span() {
        // W = 4 keys at distances 0, 3, 6, 9: span 10 ring slots + 2 sinks.
        let c = swa(4, 3);
        assert_eq!(c.span(), 10);
        assert_eq!(c.state_len(0), (2 + 10) * 2 * 4);
        assert_eq!(c.state_len(0), swa(10, 1).state_len(0));
        assert_eq!(swa(1, 1000).span(), 1);
    }

    #[test]
    fn dilation_with_cache_positions_or_an_oversized_span_is_refused() {
        let mut c = swa(4, 2);
        c.cache_positions = true;
        assert!(matches!(
            SwaConfig::from_words(&c.to_words(), Some(0)),
            Err(Error::BadConfig { .. })
        ));
        let big = swa(1 << 12, 1 << 9);
        assert!(matches!(
            SwaConfig::from_words(&big.to_words(), Some(0)),
            Err(Error::SizeOverflow { .. })
        ));
    }
}
