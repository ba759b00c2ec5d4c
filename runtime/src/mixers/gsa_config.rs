//! The `gsa` layer's configuration: its record, checks and state sizes (both
//! state formats), shared by the f32 step (`mixers/gsa.rs`) and the integer
//! step (`mixers/gsa_int.rs`), so neither imports the other's file through
//! it.

use super::{conv, conv_int, product, sum};
use crate::error::{ensure, ensure_size, Error, Result};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, StateFormat, STATE_WORD};
use crate::image::{INTEGER_PATH_FORMAT_VERSION, MIN_FORMAT_VERSION, MIXER_OPTIONS_FORMAT_VERSION};

/// Feature map applied to q and k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeatureMap {
    /// `x * sigmoid(x)` (fla's default).
    Swish = 0,
    /// `max(x, 0)`.
    Relu = 1,
}

/// Epsilon of GSA's output norm (fixed by fla).
pub const G_NORM_EPS: f32 = 1e-5;

/// Gated Slot Attention layer configuration.
///
/// Record words: `H | Hkv | K | V | M | feature_map | gate_logit_normalizer
/// (f32 bits) | flags (bit 0 short convolution) | conv_size`, and word 15
/// the state format (`format::STATE_WORD`: f32, or int16 on the integer
/// token path, `mixers/gsa_int.rs`). Without a short convolution words 7
/// and 8 are 0, as in format 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GsaConfig {
    /// Query heads H.
    pub num_heads: u32,
    /// Key/value heads Hkv (divides H).
    pub num_kv_heads: u32,
    /// Key head size K.
    pub head_k_dim: u32,
    /// Value head size V.
    pub head_v_dim: u32,
    /// Memory slots M.
    pub num_slots: u32,
    /// Feature map on q and k.
    pub feature_map: FeatureMap,
    /// Divisor of the log forget gate.
    pub gate_logit_normalizer: f32,
    /// Short convolution width on q, k, v (0 = none).
    pub conv_size: u32,
    /// How the slot memories are kept (record word 15): f32, or int16
    /// with per-(kv head, slot) scales (`mixers/gsa_int.rs`).
    pub state: StateFormat,
}

/// Flag bit of the layer record (word 7): short convolution.
const SHORT_CONV: u32 = 1;

impl GsaConfig {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<GsaConfig> {
        let feature_map = match w[5] {
            0 => FeatureMap::Swish,
            1 => FeatureMap::Relu,
            _ => {
                return Err(Error::BadConfig {
                    layer,
                    reason: "unknown gsa feature_map",
                })
            }
        };
        let c = GsaConfig {
            num_heads: w[0],
            num_kv_heads: w[1],
            head_k_dim: w[2],
            head_v_dim: w[3],
            num_slots: w[4],
            feature_map,
            gate_logit_normalizer: f32::from_bits(w[6]),
            conv_size: if w[7] & SHORT_CONV != 0 { w[8] } else { 0 },
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
        ensure!(
            !matches!(c.state, StateFormat::Int8Kv | StateFormat::Int8KvLog),
            layer,
            "this mixer has no step for that state format"
        );
        ensure!(w[7] & !SHORT_CONV == 0, layer, "unknown gsa flags");
        ensure!(
            if w[7] & SHORT_CONV != 0 {
                w[8] >= 1 && w[8] <= 64
            } else {
                w[8] == 0
            },
            layer,
            "gsa conv_size must be 1..=64 with a short convolution, else 0"
        );
        ensure!(
            dim_ok(c.num_heads) && dim_ok(c.num_kv_heads),
            layer,
            "gsa head counts out of range"
        );
        ensure!(
            c.num_heads % c.num_kv_heads == 0,
            layer,
            "num_heads must be a multiple of num_kv_heads"
        );
        ensure!(
            dim_ok(c.head_k_dim) && dim_ok(c.head_v_dim),
            layer,
            "gsa head dims out of range"
        );
        ensure!(dim_ok(c.num_slots), layer, "gsa num_slots out of range");
        // Hkv divides H, so these also bound Hkv*K and Hkv*V.
        ensure_size!(
            width_ok(c.num_heads, c.head_k_dim),
            layer,
            "gsa num_heads * head_k_dim exceeds 2^20"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_v_dim),
            layer,
            "gsa num_heads * head_v_dim exceeds 2^20"
        );
        ensure_size!(
            width_ok(c.num_kv_heads, c.num_slots),
            layer,
            "gsa num_kv_heads * num_slots exceeds 2^20"
        );
        let n = c.gate_logit_normalizer;
        ensure!(
            n.is_finite() && n > 0.0,
            layer,
            "gate_logit_normalizer must be finite and > 0"
        );
        Ok(c)
    }

    /// Encodes the layer record words.
    pub fn to_words(&self) -> LayerWords {
        let mut w = record_words(&[
            self.num_heads,
            self.num_kv_heads,
            self.head_k_dim,
            self.head_v_dim,
            self.num_slots,
            self.feature_map as u32,
            self.gate_logit_normalizer.to_bits(),
            if self.conv_size > 0 { SHORT_CONV } else { 0 },
            self.conv_size,
        ]);
        w[STATE_WORD] = self.state as u32;
        w
    }

    pub(super) const fn dims(&self) -> (usize, usize, usize, usize, usize) {
        (
            self.num_heads as usize,
            self.num_kv_heads as usize,
            self.head_k_dim as usize,
            self.head_v_dim as usize,
            self.num_slots as usize,
        )
    }

    pub(super) const fn dims64(&self) -> (u64, u64, u64, u64, u64) {
        let (h, hkv) = (self.num_heads as u64, self.num_kv_heads as u64);
        let (k, v, m) = (
            self.head_k_dim as u64,
            self.head_v_dim as u64,
            self.num_slots as u64,
        );
        (h, hkv, k, v, m)
    }

    /// State words: f32, `Hkv * M * (K + V)`, plus `(H*K + Hkv*(K + V)) *
    /// (W - 1)` for the short convolution; int16, per kv head and slot four
    /// scale words and `K + V` 16-bit mantissas (keys and values each padded
    /// to a word), then the q, k and v rings of `mixers::conv_int`
    /// (`mixers/gsa_int.rs`).
    pub const fn state_len(&self) -> u64 {
        if let StateFormat::Int16 = self.state {
            return int16_state_words(self);
        }
        let (h, hkv, k, v, m) = self.dims64();
        let channels = sum(&[product(&[h, k]), product(&[hkv, k + v])]);
        sum(&[
            product(&[hkv, m, k + v]),
            conv::state_words(channels, self.conv_size),
        ])
    }

    /// Scratch words: q `[H*K]`, k `[Hkv*K]`, v `[Hkv*V]`, f `[Hkv*M]`, p `[M]`,
    /// o `[H*V]`; the int16 state's step also an i64 accumulator `[V]`
    /// (`2V + 1` words, the one for its alignment).
    pub const fn scratch_len(&self) -> u64 {
        let (h, hkv, k, v, m) = self.dims64();
        let extra = match self.state {
            StateFormat::Int16 => product(&[2, v]) + 1,
            _ => 0,
        };
        sum(&[
            product(&[h, k]),
            product(&[hkv, k + v + m]),
            m,
            product(&[h, v]),
            extra,
        ])
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words with a pinned prefix of up to `pinned_max` tokens
    /// ([`GsaConfig::state_len`]; `pinned_max` is for SWA only).
    pub(crate) const fn layer_state_len(&self, _pinned_max: usize) -> u64 {
        self.state_len()
    }

    /// Input width of the output projection (`o_proj` columns): `H * V`.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        self.num_heads as u64 * self.head_v_dim as u64
    }

    /// How the layer keeps its slot memories (record word 15).
    pub(crate) const fn state_format(&self) -> StateFormat {
        self.state
    }

    /// The oldest image format version whose layer record holds this
    /// configuration: format 6 for an int16 state, format 4 for a short
    /// convolution, else format 1.
    pub(crate) const fn min_format_version(&self) -> u32 {
        if !matches!(self.state, StateFormat::F32) {
            INTEGER_PATH_FORMAT_VERSION
        } else if self.conv_size > 0 {
            MIXER_OPTIONS_FORMAT_VERSION
        } else {
            MIN_FORMAT_VERSION
        }
    }
}

/// Scale words per (kv head, slot) of the int16 state: the key's `E, f`,
/// the value's `E, f` (`mixers/gsa_int.rs`).
pub(crate) const SLOT_WORDS: u64 = 4;

/// State words of the int16 format ([`GsaConfig::state_len`]): the scale
/// words, the key and value mantissas, the convolution rings (saturating).
const fn int16_state_words(c: &GsaConfig) -> u64 {
    let (h, hkv, k, v, m) = c.dims64();
    sum(&[
        product(&[hkv, m, SLOT_WORDS]),
        product(&[hkv, m, k]).div_ceil(2),
        product(&[hkv, m, v]).div_ceil(2),
        conv_int::state_words(product(&[h, k]), c.conv_size),
        conv_int::state_words(product(&[hkv, k]), c.conv_size),
        conv_int::state_words(product(&[hkv, v]), c.conv_size),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gsa(conv_size: u32) -> GsaConfig {
        GsaConfig {
            num_heads: 4,
            num_kv_heads: 2,
            head_k_dim: 8,
            head_v_dim: 6,
            num_slots: 5,
            feature_map: FeatureMap::Relu,
            gate_logit_normalizer: 8.0,
            conv_size,
            state: StateFormat::F32,
        }
    }

    #[test]
    fn short_convolution_round_trips_and_old_records_are_unchanged() {
        let plain = gsa(0).to_words();
        assert!(plain[7..].iter().all(|&x| x == 0), "format 1 words");
        assert_eq!(GsaConfig::from_words(&plain, None), Ok(gsa(0)));
        let conv = gsa(3).to_words();
        assert_eq!((conv[7], conv[8]), (1, 3));
        assert_eq!(GsaConfig::from_words(&conv, None), Ok(gsa(3)));
        // State: Hkv*M*(K+V) + (H*K + Hkv*(K+V)) * (W-1).
        assert_eq!(gsa(0).state_len(), 2 * 5 * 14);
        assert_eq!(gsa(3).state_len(), 2 * 5 * 14 + (32 + 28) * 2);
    }

    #[test]
    fn inconsistent_conv_words_are_refused() {
        for (flags, width) in [(0, 4), (1, 0), (1, 65), (2, 0)] {
            let mut w = gsa(0).to_words();
            w[7] = flags;
            w[8] = width;
            assert!(
                matches!(
                    GsaConfig::from_words(&w, Some(1)),
                    Err(Error::BadConfig { layer: Some(1), .. })
                ),
                "flags {flags} conv {width}"
            );
        }
    }

    #[test]
    fn the_int16_state_round_trips_and_has_its_size() {
        let c = GsaConfig {
            state: StateFormat::Int16,
            ..gsa(3)
        };
        let w = c.to_words();
        assert_eq!(w[STATE_WORD], StateFormat::Int16 as u32);
        assert_eq!(GsaConfig::from_words(&w, None), Ok(c));
        assert_eq!(c.min_format_version(), INTEGER_PATH_FORMAT_VERSION);
        assert_eq!(gsa(3).min_format_version(), MIXER_OPTIONS_FORMAT_VERSION);
        // 2 kv heads x 5 slots: 4 scale words each, K = 8 and V = 6
        // mantissas (40 and 30 words); rings of width 3: 2 exponent words
        // and 2 x C i16 for q (32 channels), k (16) and v (12).
        assert_eq!(c.state_len(), 40 + 40 + 30 + (2 + 32) + (2 + 16) + (2 + 12));
        assert_eq!(c.scratch_len(), gsa(3).scratch_len() + 2 * 6 + 1);
        // int8 KV (2) and unknown codes are refused.
        for code in [2, 3, 99] {
            let mut w = c.to_words();
            w[STATE_WORD] = code;
            assert!(
                matches!(
                    GsaConfig::from_words(&w, Some(2)),
                    Err(Error::BadConfig { layer: Some(2), .. })
                ),
                "code {code}"
            );
        }
    }
}
