//! The `swa` layer's configuration: its record, options, checks and state
//! sizes (both state formats), shared by the f32 step (`mixers/swa.rs`) and
//! the integer step (`mixers/swa_int.rs`), so neither imports the other's
//! file through it.

use super::{conv, conv_int, product, rope, sum};
use crate::error::{ensure, ensure_size, Error, Result};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, StateFormat, MAX_DIM, STATE_WORD};
use crate::image::{INTEGER_PATH_FORMAT_VERSION, MIN_FORMAT_VERSION, MIXER_OPTIONS_FORMAT_VERSION};

/// Flag bits of the layer record.
pub(super) mod flag {
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
    /// How the KV cache is kept (record word 15, format 6): f32, int8 with
    /// per-slot scale words (`mixers/swa_int.rs`), or int8 with one-byte
    /// log scales (`mixers/swa_logkv.rs`, what `ferrite quantize --path
    /// int` writes).
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

    pub(super) const fn dims(&self) -> (usize, usize, usize) {
        (
            self.num_heads as usize,
            self.num_kv_heads as usize,
            self.head_dim as usize,
        )
    }

    pub(super) const fn dims64(&self) -> (u64, u64, u64) {
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
    /// (key, value) and `2d` bytes, padded to a word, then the q, k and v
    /// convolution rings of `mixers::conv_int` (`mixers/swa_int.rs`); int8
    /// KV with log scales, per slot and kv head two scale bytes (key, value)
    /// padded to a word over all slots, then `2d` bytes, then the same rings
    /// (`mixers/swa_logkv.rs`) (saturating: an absurd `pinned_max` yields a
    /// size no buffer has).
    pub const fn state_len(&self, pinned_max: usize) -> u64 {
        let (h, hkv, d) = self.dims64();
        let slots = sum(&[self.sinks as u64, self.span(), pinned_max as u64]);
        if let StateFormat::Int8KvLog = self.state {
            return sum(&[
                log_kv_state_words(slots, hkv, d),
                conv_int::state_words(product(&[h, d]), self.conv_size),
                product(&[2, conv_int::state_words(product(&[hkv, d]), self.conv_size)]),
            ]);
        }
        if let StateFormat::Int8Kv = self.state {
            return sum(&[
                int8_kv_state_words(slots, hkv, d),
                conv_int::state_words(product(&[h, d]), self.conv_size),
                product(&[2, conv_int::state_words(product(&[hkv, d]), self.conv_size)]),
            ]);
        }
        let channels = sum(&[product(&[h, d]), product(&[2, hkv, d])]);
        sum(&[
            product(&[slots, 2, hkv, d]),
            conv::state_words(channels, self.conv_size),
        ])
    }

    /// Scratch words: q, o (`H*d` each), k, v (`Hkv*d` each), RoPE tables and
    /// the sink-rotated query (`3d`); the integer step also its two int8
    /// queries (`2d` more: the int8 KV states only), and with log scales one
    /// head's logits over the window (`span` more).
    pub const fn scratch_len(&self) -> u64 {
        let (h, hkv, d) = self.dims64();
        let extra = match self.state {
            StateFormat::Int8Kv => product(&[2, d]),
            StateFormat::Int8KvLog => sum(&[product(&[2, d]), self.span()]),
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
    pub(super) fn rope_table(&self, pos: u64, cs: &mut [f32]) {
        rope::table(self.rope_theta, self.head_dim, pos, cs);
    }

    /// Rotates every head of `x` (heads of size d) with the table `cs`.
    pub(super) fn rotate(&self, cs: &[f32], x: &mut [f32]) {
        if !self.use_rope {
            return;
        }
        let half = self.head_dim as usize / 2;
        // The table holds `d` values and the heads `2 * half` (`d` is even
        // and nonzero with RoPE, checked at load): the `else`s are not
        // reached, and state that without a panic branch.
        let (Some((cos, sin)), Some(size)) = (
            cs.split_at_checked(half),
            core::num::NonZeroUsize::new(2 * half),
        ) else {
            return;
        };
        for head in x.chunks_exact_mut(size.get()) {
            let Some((lo, hi)) = head.split_at_mut_checked(half) else {
                continue;
            };
            for (((a, b), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
                let (x0, x1) = (*a, *b);
                *a = x0 * c - x1 * s;
                *b = x1 * c + x0 * s;
            }
        }
    }
}

/// State words of an int8 KV cache of `slots` positions, `hkv` kv heads of
/// size `d` (saturating).
pub(crate) const fn int8_kv_state_words(slots: u64, hkv: u64, d: u64) -> u64 {
    let bytes = product(&[slots, hkv, d]);
    sum(&[product(&[2, slots, hkv]), product(&[2, bytes.div_ceil(4)])])
}

/// State words of an int8 KV cache with one-byte log scales of `slots`
/// positions, `hkv` kv heads of size `d` (saturating): the scale codes
/// `[slots][hkv][2]` as bytes, then the keys and the values `[slots][hkv][d]`
/// as bytes, each part padded to a word.
pub(crate) const fn log_kv_state_words(slots: u64, hkv: u64, d: u64) -> u64 {
    let bytes = product(&[slots, hkv, d]);
    sum(&[
        product(&[2, slots, hkv]).div_ceil(4),
        product(&[2, bytes.div_ceil(4)]),
    ])
}

/// The keys token `t` sees: the window `{t - i r : i < W}` within
/// `[first, t]`, and the sinks `[0, sink_end)` that are not window keys
/// (`r = 1`: `[0, min(s_eff, first))`). Returns `(first, sink_end)`; the
/// f32 and the integer step both read it.
pub(super) fn visible(t: u64, s_eff: u64, span: u64, r: u64) -> (u64, u64) {
    let first = (t + 1).saturating_sub(span);
    let sink_end = if r == 1 {
        s_eff.min(first)
    } else {
        s_eff.min(t + 1)
    };
    (first, sink_end)
}
