//! The `gla` layer's configuration: its record, checks and sizes
//! (docs/spec.md §3.9), below its step (`mixers/gla.rs`).

use super::{product, sum};
use crate::error::{ensure, ensure_size, Result};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, StateFormat, STATE_WORD};
use crate::image::BLOCK_FORMAT_VERSION;

/// Record flag bits (word 5) of a `gla` layer.
mod flag {
    /// An output gate: `o = g_norm(o) * swish(g_proj x)` (fla's
    /// `use_output_gate`, GLA and RetNet only).
    pub const OUTPUT_GATE: u32 = 1;
    pub const KNOWN: u32 = 1;
}

/// Which of fla's three layers over the per-key-decay recurrence a `gla`
/// layer is: they share the state and its update, and differ in where the
/// decay, the key and the query come from (docs/spec.md §3.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlaVariant {
    /// fla's `GatedLinearAttention`: the decay of each key channel from a
    /// low-rank projection, `exp(logsigmoid(gk) / normalizer)`.
    Gla = 0,
    /// fla's `HGRN2Attention`: `q = swish(q_proj x)`, the decay
    /// `lb + (1 - lb) sigmoid(f_proj x)` with the layer's lower bound `lb`,
    /// the key `1 - decay`; one RMSNorm over every head's output.
    Hgrn2 = 1,
    /// fla's `MultiScaleRetention` (RetNet): RoPE on q and k, a fixed decay
    /// per head `1 - 2^(-5 - h)`.
    Retention = 2,
}

impl GlaVariant {
    /// The variant of a record code.
    pub const fn from_code(code: u32) -> Option<GlaVariant> {
        match code {
            0 => Some(GlaVariant::Gla),
            1 => Some(GlaVariant::Hgrn2),
            2 => Some(GlaVariant::Retention),
            _ => None,
        }
    }

    /// The name of `config.json`'s `variant` field.
    pub const fn name(self) -> &'static str {
        match self {
            GlaVariant::Gla => "gla",
            GlaVariant::Hgrn2 => "hgrn2",
            GlaVariant::Retention => "retention",
        }
    }
}

/// Per-key-decay linear attention (fla's GLA, HGRN2 and RetNet layers,
/// docs/spec.md §3.9).
///
/// Record words: `H | K (head_k_dim) | V (head_v_dim) | R (gate_low_rank_dim,
/// GLA only, else 0) | variant (0 GLA, 1 HGRN2, 2 retention) | flags (bit 0
/// output gate) | gate_logit_normalizer (GLA only, else 0) | rope_theta (f32
/// bits, retention only, else 0) | the output norm's epsilon (f32 bits; 0:
/// the model's `norm_eps`)`; word 15 the state format (f32 only). fla's
/// GLA and RetNet pass their `norm_eps` to the output norm; its HGRN2's
/// fused norm keeps its own default, 1e-5 (docs/fla.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GlaConfig {
    /// Heads H.
    pub num_heads: u32,
    /// Key (and query, decay) channels per head K.
    pub head_k_dim: u32,
    /// Value channels per head V.
    pub head_v_dim: u32,
    /// Which layer of fla: where the decay, key and query come from.
    pub variant: GlaVariant,
    /// Rank R of GLA's decay projection (`gk_proj`); 0 for the others.
    pub gate_low_rank_dim: u32,
    /// GLA's `gate_logit_normalizer` (fla's default 16): the log decay is
    /// `logsigmoid(gk) / normalizer`; 0 for the others.
    pub gate_logit_normalizer: u32,
    /// Whether the output is gated by `swish(g_proj x)` (GLA and RetNet).
    pub output_gate: bool,
    /// RoPE base of RetNet's rotation of q and k (fla's 10000); 0 for the
    /// others.
    pub rope_theta: f32,
    /// Epsilon of the output norm; 0 for the model's `norm_eps`.
    pub o_norm_eps: f32,
}

impl GlaConfig {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<GlaConfig> {
        let f = w[5];
        ensure!(f & !flag::KNOWN == 0, layer, "unknown gla flags");
        ensure!(
            w[STATE_WORD] == StateFormat::F32 as u32,
            layer,
            "this mixer has no step for that state format"
        );
        let variant = match GlaVariant::from_code(w[4]) {
            Some(v) => v,
            None => {
                return Err(crate::error::Error::BadConfig {
                    layer,
                    reason: "unknown gla variant",
                })
            }
        };
        let c = GlaConfig {
            num_heads: w[0],
            head_k_dim: w[1],
            head_v_dim: w[2],
            variant,
            gate_low_rank_dim: w[3],
            gate_logit_normalizer: w[6],
            output_gate: f & flag::OUTPUT_GATE != 0,
            rope_theta: f32::from_bits(w[7]),
            o_norm_eps: f32::from_bits(w[8]),
        };
        ensure!(
            c.o_norm_eps.is_finite() && c.o_norm_eps >= 0.0,
            layer,
            "gla o_norm_eps must be finite and >= 0"
        );
        ensure!(
            dim_ok(c.num_heads) && dim_ok(c.head_k_dim) && dim_ok(c.head_v_dim),
            layer,
            "gla dims out of range"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_k_dim) && width_ok(c.num_heads, c.head_v_dim),
            layer,
            "gla num_heads * head_dim exceeds 2^20"
        );
        match variant {
            GlaVariant::Gla => {
                ensure!(
                    dim_ok(c.gate_low_rank_dim),
                    layer,
                    "gla gate_low_rank_dim out of range"
                );
                ensure!(
                    c.gate_logit_normalizer >= 1 && c.gate_logit_normalizer <= 1 << 16,
                    layer,
                    "gla gate_logit_normalizer must be 1..=65536"
                );
                ensure!(w[7] == 0, layer, "gla rope_theta is for retention only");
            }
            GlaVariant::Hgrn2 => {
                ensure!(
                    c.gate_low_rank_dim == 0 && c.gate_logit_normalizer == 0 && w[7] == 0,
                    layer,
                    "hgrn2 has no gate projection, normalizer or rope"
                );
                ensure!(!c.output_gate, layer, "hgrn2 has no output gate");
            }
            GlaVariant::Retention => {
                ensure!(
                    c.gate_low_rank_dim == 0 && c.gate_logit_normalizer == 0,
                    layer,
                    "retention has no gate projection or normalizer"
                );
                ensure!(
                    c.rope_theta.is_finite() && c.rope_theta > 1.0,
                    layer,
                    "retention rope_theta must be finite and > 1"
                );
                ensure!(
                    c.head_k_dim % 2 == 0,
                    layer,
                    "retention head_k_dim must be even (RoPE)"
                );
            }
        }
        Ok(c)
    }

    /// Encodes the layer record words.
    pub fn to_words(&self) -> LayerWords {
        let flags = if self.output_gate {
            flag::OUTPUT_GATE
        } else {
            0
        };
        record_words(&[
            self.num_heads,
            self.head_k_dim,
            self.head_v_dim,
            self.gate_low_rank_dim,
            self.variant as u32,
            flags,
            self.gate_logit_normalizer,
            self.rope_theta.to_bits(),
            self.o_norm_eps.to_bits(),
        ])
    }

    /// The output norm's epsilon: its own, or the model's `norm_eps`.
    pub fn norm_eps(&self, model_eps: f32) -> f32 {
        if self.o_norm_eps > 0.0 {
            self.o_norm_eps
        } else {
            model_eps
        }
    }

    /// Key width `H * K` (saturating for a hand-built config).
    pub const fn key_width(&self) -> u64 {
        product(&[self.num_heads as u64, self.head_k_dim as u64])
    }

    /// Value width `H * V` (saturating for a hand-built config).
    pub const fn value_width(&self) -> u64 {
        product(&[self.num_heads as u64, self.head_v_dim as u64])
    }

    /// State words: `S [H][V][K]`.
    pub const fn state_len(&self) -> u64 {
        product(&[self.value_width(), self.head_k_dim as u64])
    }

    /// Scratch words: q, k and the decays `[H*K]` each, v and the gate
    /// `[H*V]` each, the low-rank `[R]` and a RoPE table `[K]`.
    pub const fn scratch_len(&self) -> u64 {
        sum(&[
            product(&[3, self.key_width()]),
            product(&[2, self.value_width()]),
            self.gate_low_rank_dim as u64,
            self.head_k_dim as u64,
        ])
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words ([`GlaConfig::state_len`]; `pinned_max` is for SWA only).
    pub(crate) const fn layer_state_len(&self, _pinned_max: usize) -> u64 {
        self.state_len()
    }

    /// Input width of the output projection (`o_proj` columns): `H * V`.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        self.value_width()
    }

    /// How the layer keeps its state: f32 (no integer step).
    pub(crate) const fn state_format(&self) -> StateFormat {
        StateFormat::F32
    }

    /// The oldest image format version whose records hold a `gla` layer:
    /// format 8, the format of the families added with it.
    pub(crate) const fn min_format_version(&self) -> u32 {
        BLOCK_FORMAT_VERSION
    }

    /// RetNet's fixed decay of head `h`: `1 - 2^(-5 - h)` (fla's
    /// `g_gamma`, computed in f32: 1 from head 20 on).
    pub fn retention_decay(h: usize) -> f32 {
        let e = 5usize.saturating_add(h).min(200) as i32;
        1.0 - libm::exp2f(-(e as f32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// fla's `gla` fixture: hidden 32, 2 heads, K 8, V 16, rank 16.
    fn fixture() -> GlaConfig {
        GlaConfig {
            num_heads: 2,
            head_k_dim: 8,
            head_v_dim: 16,
            variant: GlaVariant::Gla,
            gate_low_rank_dim: 16,
            gate_logit_normalizer: 16,
            output_gate: true,
            rope_theta: 0.0,
            o_norm_eps: 0.0,
        }
    }

    #[test]
    fn record_round_trips_and_sizes_are_the_spec_s() {
        let c = fixture();
        assert_eq!(GlaConfig::from_words(&c.to_words(), None), Ok(c));
        let hgrn2 = GlaConfig {
            num_heads: 4,
            head_k_dim: 8,
            head_v_dim: 8,
            variant: GlaVariant::Hgrn2,
            gate_low_rank_dim: 0,
            gate_logit_normalizer: 0,
            output_gate: false,
            rope_theta: 0.0,
            o_norm_eps: 1e-5,
        };
        assert_eq!(GlaConfig::from_words(&hgrn2.to_words(), None), Ok(hgrn2));
        let retnet = GlaConfig {
            head_k_dim: 16,
            head_v_dim: 32,
            variant: GlaVariant::Retention,
            gate_low_rank_dim: 0,
            gate_logit_normalizer: 0,
            rope_theta: 10_000.0,
            ..c
        };
        assert_eq!(GlaConfig::from_words(&retnet.to_words(), None), Ok(retnet));
        // S: 2 heads x 16 x 8.
        assert_eq!(c.state_len(), 256);
        assert_eq!(c.scratch_len(), 3 * 16 + 2 * 32 + 16 + 8);
        assert_eq!(c.out_proj_cols(), 32);
        assert_eq!(4 * retnet.state_len(), 4_096);
    }

    /// docs/spec.md §6's examples: state bytes per layer of MCU-sized GLA,
    /// RetNet and HGRN2 layers and of fla's defaults at hidden 2048.
    #[test]
    fn mcu_sized_layers_keep_the_state_spec_md_quotes() {
        let layer = |h, k, v| GlaConfig {
            num_heads: h,
            head_k_dim: k,
            head_v_dim: v,
            ..fixture()
        };
        for ((h, k, v), bytes) in [
            ((4, 8, 16), 2_048),
            ((4, 16, 32), 8_192),
            ((8, 8, 8), 2_048),
            ((4, 256, 512), 2_097_152),
            ((8, 256, 512), 4_194_304),
            ((16, 128, 128), 1_048_576),
        ] {
            assert_eq!(4 * layer(h, k, v).state_len(), bytes, "{h} {k} {v}");
        }
    }

    #[test]
    fn retention_decays_are_fla_s() {
        assert_eq!(GlaConfig::retention_decay(0), 0.96875);
        assert_eq!(GlaConfig::retention_decay(1), 1.0 - 1.0 / 64.0);
        assert_eq!(GlaConfig::retention_decay(19), 1.0 - 2f32.powi(-24));
        assert_eq!(GlaConfig::retention_decay(20), 1.0);
        assert_eq!(GlaConfig::retention_decay(usize::MAX), 1.0);
    }

    #[test]
    fn bad_records_are_refused() {
        let cases: [(usize, u32); 9] = [
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 0),
            (4, 3),
            (5, 2),
            (6, 0),
            (7, 10_000f32.to_bits()),
            (8, f32::NAN.to_bits()),
        ];
        for (i, v) in cases {
            let mut w = fixture().to_words();
            w[i] = v;
            assert!(
                matches!(
                    GlaConfig::from_words(&w, Some(1)),
                    Err(Error::BadConfig { layer: Some(1), .. })
                ),
                "word {i} = {v}"
            );
        }
        // An integer state; an HGRN2 layer with a gate; an odd RoPE width.
        let mut w = fixture().to_words();
        w[STATE_WORD] = StateFormat::Int16 as u32;
        assert!(GlaConfig::from_words(&w, None).is_err());
        let mut w = fixture().to_words();
        (w[3], w[4], w[6]) = (0, 1, 0);
        assert!(GlaConfig::from_words(&w, None).is_err());
        let mut w = fixture().to_words();
        (w[1], w[3], w[4], w[6], w[7]) = (7, 0, 2, 0, 10_000f32.to_bits());
        assert!(GlaConfig::from_words(&w, None).is_err());
        let mut w = fixture().to_words();
        w[0] = 1 << 11;
        w[2] = 1 << 10;
        assert!(matches!(
            GlaConfig::from_words(&w, None),
            Err(Error::SizeOverflow { .. })
        ));
    }
}
