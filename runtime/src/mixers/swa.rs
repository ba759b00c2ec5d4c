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

pub use super::swa_config::SwaConfig;
use super::{conv, push, push_conv_specs, width, Mixer, SpecSink, StepCtx};
use crate::error::{part_mut, split_mut, Error, Result, StepResult};
use crate::format::Role;
use crate::math::dot;
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;
use core::num::NonZeroU64;

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
    fn push_specs(&self, layer: u16, dm: u32, s: &mut dyn SpecSink) {
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
        match self.state {
            crate::format::StateFormat::Int8KvLog => {
                super::swa_logkv::step(self, ctx, w, state, scratch, act, x, out, clamps)
            }
            _ => super::swa_int::step(self, ctx, w, state, scratch, act, x, out, clamps),
        }
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
        // Nonzero: `d`, the span (at least 1) and the dilation (checked at
        // load, `max(1)`), stated so that no chunk size or remainder below
        // has a panic branch.
        let d = d.max(1);
        let span = NonZeroU64::new(self.span()).unwrap_or(NonZeroU64::MIN);
        let t = ctx.pos;
        let r = NonZeroU64::new(self.dilation.max(1) as u64).unwrap_or(NonZeroU64::MIN);
        const SCRATCH: &str = "swa scratch too small";
        let (q, rest) = split_mut(scratch, h * d, SCRATCH)?;
        let (o, rest) = split_mut(rest, h * d, SCRATCH)?;
        let (k, rest) = split_mut(rest, hkv * d, SCRATCH)?;
        let (v, rest) = split_mut(rest, hkv * d, SCRATCH)?;
        let (cs, rest) = split_mut(rest, d, SCRATCH)?;
        let q_sink = part_mut(rest, ..d, SCRATCH)?;

        w.get(Role::QProj)?.matvec(&x, q)?;
        w.get(Role::KProj)?.matvec(&x, k)?;
        w.get(Role::VProj)?.matvec(&x, v)?;

        let sink_cap = self.sinks as usize + ctx.pinned_max;
        let kv_len = (sink_cap + span.get() as usize) * hkv * d;
        const STATE: &str = "swa state too small";
        let (keys, rest) = split_mut(state, kv_len, STATE)?;
        let (values, conv_state) = split_mut(rest, kv_len, STATE)?;
        if self.conv_size > 0 {
            conv::step_qkv(w, self.conv_size as usize, conv_state, q, k, v)?;
        }

        self.rope_table(ctx.abs_pos, cs);
        self.rotate(cs, q);
        self.rotate(cs, k);
        let row = hkv * d;
        // `k` and `v` hold a row (`hkv * d`) each.
        let store = |slot: usize, keys: &mut [f32], values: &mut [f32]| -> Result<()> {
            let at = slot * row;
            part_mut(keys, at..at + k.len(), STATE)?.copy_from_slice(k);
            part_mut(values, at..at + v.len(), STATE)?.copy_from_slice(v);
            Ok(())
        };
        let s_eff = (self.sinks as usize + ctx.pinned) as u64;
        store(sink_cap + (t % span) as usize, keys, values)?;
        if t < s_eff {
            store(t as usize, keys, values)?;
        }

        let (first, sink_end) = super::swa_config::visible(t, s_eff, span.get(), r.get());
        let in_window = |s: u64| s >= first && (t - s) % r == 0;
        // Cache positions are refused with dilation, so `span` is W here.
        let rerotate = self.cache_positions && self.use_rope && sink_end > 0;
        if rerotate {
            // R(cache position) = R(cache position - t) R(t): rotate the query back.
            let back = t - t.min(s_eff + span.get() - 1);
            self.rope_table(back.wrapping_neg(), cs);
        }
        let sinks = match self.sink_logits {
            true => Some(w.get(Role::Sinks)?),
            false => None,
        };
        let scale = 1.0 / libm::sqrtf(d as f32);
        let group = (h / hkv.max(1)).max(1);
        for (head, (qh, oh)) in q.chunks_exact(d).zip(o.chunks_exact_mut(d)).enumerate() {
            let kv_off = (head / group) * d;
            // `get`: every slot's row is inside the cache (the state's
            // sizing); the empty default is not reached.
            let at = |slot: usize| slot * row + kv_off;
            let key = |slot: usize| keys.get(at(slot)..at(slot) + d).unwrap_or_default();
            let value = |slot: usize| values.get(at(slot)..at(slot) + d).unwrap_or_default();
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
                    if r.get() > 1 && in_window(slot as u64) {
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
                s += r.get();
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
    use crate::format::{LayerWords, StateFormat, STATE_WORD};
    use crate::image::INTEGER_PATH_FORMAT_VERSION;

    /// The state-format word: int8 KV round-trips (with a short convolution
    /// too); int16 and an unknown code are refused with a typed error.
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
        assert_eq!(SwaConfig::from_words(&conv.to_words(), None), Ok(conv));
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

    /// State format 3 (log scales) round-trips, is `d + 1` bytes per slot
    /// and tensor (each part padded to a word), and adds the logit row
    /// (`span` words) to the scratch.
    #[test]
    fn log_scale_kv_is_checked_and_sized() {
        let log = SwaConfig {
            state: StateFormat::Int8KvLog,
            window: 512,
            num_kv_heads: 4,
            num_heads: 8,
            ..config(8, 10_000.0)
        };
        assert_eq!(SwaConfig::from_words(&log.to_words(), None), Ok(log));
        assert_eq!(log.min_format_version(), INTEGER_PATH_FORMAT_VERSION);
        // The 512-window model's layer: 512 slots x 4 kv heads x (2 + 16) bytes.
        assert_eq!(4 * log.state_len(0), 512 * 4 * 18);
        assert_eq!(4 * log.state_len(3), 515 * 4 * 18);
        let old = SwaConfig {
            state: StateFormat::Int8Kv,
            ..log
        };
        assert_eq!(4 * old.state_len(0), 512 * 4 * (8 + 16));
        assert_eq!(log.scratch_len(), old.scratch_len() + 512);
        // 5 slots of one kv head: 10 code bytes padded to 3 words, then
        // 40 bytes of keys and of values.
        let small = SwaConfig {
            state: StateFormat::Int8KvLog,
            ..config(8, 10_000.0)
        };
        assert_eq!(small.state_len(1), 3 + 2 * 10);
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
