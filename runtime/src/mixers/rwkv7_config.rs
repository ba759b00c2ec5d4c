//! The `rwkv7` layer's configuration: its record, checks and sizes
//! (docs/spec.md §3.8), below its step (`mixers/rwkv7.rs`).

use super::{product, sum};
use crate::error::{ensure, ensure_size, Result};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, StateFormat, STATE_WORD};
use crate::image::BLOCK_FORMAT_VERSION;

/// How the removal key `kk = k * k_k` is normalised per head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KkNorm {
    /// `u / sqrt(sum u^2 + 1e-6)`: fla's fused `l2_norm` (`fuse_norm: true`,
    /// its default).
    L2 = 0,
    /// `u / max(sqrt(sum u^2), 1e-12)`: PyTorch's `F.normalize`
    /// (`fuse_norm: false`).
    Normalize = 1,
}

/// Record flag bits (word 7) of an `rwkv7` layer.
mod flag {
    /// The layer's value is the one passed to later layers (fla's layer 0:
    /// no `v_lora`); otherwise the layer mixes its value toward it.
    pub const VALUE_FIRST: u32 = 1;
    /// `KkNorm::Normalize` (else `KkNorm::L2`).
    pub const KK_NORMALIZE: u32 = 1 << 1;
    pub const KNOWN: u32 = (1 << 2) - 1;
}

/// RWKV-7 time-mixing layer configuration (fla's `RWKV7Attention`,
/// docs/spec.md §3.8).
///
/// Record words: `H | K | V | dw | da | dv | dg | flags | g_norm eps (f32
/// bits)`, flags bit 0 the first layer's value (written to later layers,
/// no `v_lora`), bit 1 `F.normalize` for the removal key; word 15 the state
/// format (f32 only). The model's `hidden_size` must be `H * K` (fla's
/// `key_dim`), checked when the image is sized.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rwkv7Config {
    /// Heads H.
    pub num_heads: u32,
    /// Key (and receptance) size per head K; `H * K` is the model width.
    pub head_dim: u32,
    /// Value size per head V (fla's `value_dim / num_heads`).
    pub head_v_dim: u32,
    /// Rank of the decay's low-rank projection (`decay_low_rank_dim`).
    pub decay_rank: u32,
    /// Rank of the in-context learning rate's (`a_low_rank_dim`).
    pub a_rank: u32,
    /// Rank of the value residual's (`v_low_rank_dim`; unused by the first
    /// layer).
    pub v_rank: u32,
    /// Rank of the output gate's (`gate_low_rank_dim`).
    pub gate_rank: u32,
    /// Whether this layer's value is passed to later layers (fla's layer 0)
    /// rather than mixed toward the passed one.
    pub value_first: bool,
    /// The removal key's normalisation.
    pub kk_norm: KkNorm,
    /// Epsilon of the per-head group norm (fla: `head_dim * norm_eps`).
    pub g_norm_eps: f32,
}

impl Rwkv7Config {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<Rwkv7Config> {
        let f = w[7];
        ensure!(f & !flag::KNOWN == 0, layer, "unknown rwkv7 flags");
        ensure!(
            w[STATE_WORD] == StateFormat::F32 as u32,
            layer,
            "this mixer has no step for that state format"
        );
        let c = Rwkv7Config {
            num_heads: w[0],
            head_dim: w[1],
            head_v_dim: w[2],
            decay_rank: w[3],
            a_rank: w[4],
            v_rank: w[5],
            gate_rank: w[6],
            value_first: f & flag::VALUE_FIRST != 0,
            kk_norm: if f & flag::KK_NORMALIZE != 0 {
                KkNorm::Normalize
            } else {
                KkNorm::L2
            },
            g_norm_eps: f32::from_bits(w[8]),
        };
        ensure!(
            dim_ok(c.num_heads) && dim_ok(c.head_dim) && dim_ok(c.head_v_dim),
            layer,
            "rwkv7 dims out of range"
        );
        ensure!(
            dim_ok(c.decay_rank) && dim_ok(c.a_rank) && dim_ok(c.gate_rank),
            layer,
            "rwkv7 low-rank dims out of range"
        );
        ensure!(
            c.value_first || dim_ok(c.v_rank),
            layer,
            "rwkv7 v_low_rank_dim out of range"
        );
        ensure!(
            !c.value_first || c.v_rank == 0,
            layer,
            "the first layer's rwkv7 value has no v_low_rank_dim (0)"
        );
        ensure!(
            c.g_norm_eps.is_finite() && c.g_norm_eps >= 0.0,
            layer,
            "rwkv7 g_norm eps must be finite and >= 0"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_dim) && width_ok(c.num_heads, c.head_v_dim),
            layer,
            "rwkv7 num_heads * head sizes exceeds 2^20"
        );
        Ok(c)
    }

    /// Encodes the layer record words.
    pub fn to_words(&self) -> LayerWords {
        let flags = if self.value_first {
            flag::VALUE_FIRST
        } else {
            0
        } | match self.kk_norm {
            KkNorm::L2 => 0,
            KkNorm::Normalize => flag::KK_NORMALIZE,
        };
        record_words(&[
            self.num_heads,
            self.head_dim,
            self.head_v_dim,
            self.decay_rank,
            self.a_rank,
            self.v_rank,
            self.gate_rank,
            flags,
            self.g_norm_eps.to_bits(),
        ])
    }

    /// The key width `H * K` (the model width, fla's `key_dim`).
    pub const fn key_width(&self) -> u64 {
        product(&[self.num_heads as u64, self.head_dim as u64])
    }

    /// The value width `H * V` (fla's `value_dim`).
    pub const fn value_width(&self) -> u64 {
        product(&[self.num_heads as u64, self.head_v_dim as u64])
    }

    /// The largest rank of the low-rank projections.
    pub const fn max_rank(&self) -> u64 {
        let mut m = self.decay_rank;
        if self.a_rank > m {
            m = self.a_rank;
        }
        if self.gate_rank > m {
            m = self.gate_rank;
        }
        if !self.value_first && self.v_rank > m {
            m = self.v_rank;
        }
        m as u64
    }

    /// State words: the previous token's input `[H*K]` (the token shift),
    /// then `S [H][V][K]`.
    pub const fn state_len(&self) -> u64 {
        sum(&[
            self.key_width(),
            product(&[self.value_width(), self.head_dim as u64]),
        ])
    }

    /// Scratch words: a mixed input `[H*K]`; r, the decay, k, the removal
    /// key and the learning rate (`[H*K]` each); v, the gate and the output
    /// (`[H*V]` each); the low-rank hidden `[max rank]`.
    pub const fn scratch_len(&self) -> u64 {
        sum(&[
            product(&[6, self.key_width()]),
            product(&[3, self.value_width()]),
            self.max_rank(),
        ])
    }

    /// Words of the value passed across layers (`[H*V]`).
    pub const fn carry_len(&self) -> u64 {
        self.value_width()
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words ([`Rwkv7Config::state_len`]; `pinned_max` is for SWA only).
    pub(crate) const fn layer_state_len(&self, _pinned_max: usize) -> u64 {
        self.state_len()
    }

    /// The widest input of the layer's products besides the model width:
    /// `o_proj`'s `H * V` columns or a low-rank hidden.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        let v = self.value_width();
        let r = self.max_rank();
        if v > r {
            v
        } else {
            r
        }
    }

    /// How the layer keeps its state: f32 (no integer step).
    pub(crate) const fn state_format(&self) -> StateFormat {
        StateFormat::F32
    }

    /// The oldest image format version whose records hold an `rwkv7`
    /// layer: format 8 (the generalized block).
    pub(crate) const fn min_format_version(&self) -> u32 {
        BLOCK_FORMAT_VERSION
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// fla's `rwkv7` fixture's second layer: hidden 32, 2 heads of 16,
    /// value 16 per head, ranks decay 8 / a 8 / v 8 / gate 16.
    fn later() -> Rwkv7Config {
        Rwkv7Config {
            num_heads: 2,
            head_dim: 16,
            head_v_dim: 16,
            decay_rank: 8,
            a_rank: 8,
            v_rank: 8,
            gate_rank: 16,
            value_first: false,
            kk_norm: KkNorm::L2,
            g_norm_eps: 16.0 * 1e-5,
        }
    }

    #[test]
    fn record_round_trips_and_sizes_are_the_spec_s() {
        let c = later();
        assert_eq!(Rwkv7Config::from_words(&c.to_words(), None), Ok(c));
        let first = Rwkv7Config {
            value_first: true,
            v_rank: 0,
            kk_norm: KkNorm::Normalize,
            ..c
        };
        assert_eq!(Rwkv7Config::from_words(&first.to_words(), None), Ok(first));
        // Shift 32, then 2 heads of [16][16].
        assert_eq!(c.state_len(), 32 + 2 * 16 * 16);
        assert_eq!(c.scratch_len(), 6 * 32 + 3 * 32 + 16);
        assert_eq!((c.carry_len(), c.out_proj_cols()), (32, 32));
    }

    /// docs/spec.md §6's examples: state bytes per layer of MCU-sized
    /// RWKV-7 layers with their channel mixing's `D` words (the block's),
    /// and of fla's default (hidden 2048, head_dim 64).
    #[test]
    fn mcu_sized_layers_keep_the_state_spec_md_quotes() {
        for ((heads, k), bytes) in [
            ((4, 16), 4_608),
            ((4, 32), 17_408),
            ((4, 64), 67_584),
            ((32, 64), 540_672),
        ] {
            let c = Rwkv7Config {
                num_heads: heads,
                head_dim: k,
                head_v_dim: k,
                ..later()
            };
            let channel_mix = c.key_width();
            assert_eq!(4 * (c.state_len() + channel_mix), bytes, "{heads} x {k}");
        }
    }

    #[test]
    fn bad_records_are_refused() {
        let cases: [(usize, u32); 8] = [
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 0),
            (5, 0),
            (7, 1 << 2),
            (8, f32::NAN.to_bits()),
            (8, (-1.0f32).to_bits()),
        ];
        for (i, v) in cases {
            let mut w = later().to_words();
            w[i] = v;
            assert!(
                matches!(
                    Rwkv7Config::from_words(&w, Some(1)),
                    Err(Error::BadConfig { layer: Some(1), .. })
                ),
                "word {i} = {v}"
            );
        }
        // The first layer with a value rank, and an integer state.
        let mut w = later().to_words();
        w[7] = flag::VALUE_FIRST;
        assert!(Rwkv7Config::from_words(&w, None).is_err());
        let mut w = later().to_words();
        w[STATE_WORD] = StateFormat::Int16 as u32;
        assert!(Rwkv7Config::from_words(&w, None).is_err());
    }
}
