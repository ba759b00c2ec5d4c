//! The `mamba2` layer's configuration: its record, checks and sizes
//! (docs/spec.md §3.7), below its step (`mixers/mamba2.rs`).

use super::{conv, product, sum};
use crate::error::{ensure, ensure_size, Result};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, StateFormat, STATE_WORD};
use crate::image::BLOCK_FORMAT_VERSION;

/// Record flag bits (word 5) of a `mamba2` layer.
mod flag {
    /// The convolution has a bias (fla's `use_conv_bias`, its default).
    pub const CONV_BIAS: u32 = 1;
    /// No gated RMSNorm: the output is `y * silu(z)` (fla's `rmsnorm: false`).
    pub const NO_NORM: u32 = 1 << 1;
    /// The gated RMSNorm normalises before the gate: `norm(y) * silu(z)`
    /// (fla's `norm_before_gate: true`; the default is `norm(y * silu(z))`).
    pub const NORM_BEFORE_GATE: u32 = 1 << 2;
    /// `D` per channel `[H*P]` instead of per head `[H]` (fla's `D_has_hdim`).
    pub const D_PER_CHANNEL: u32 = 1 << 3;
    /// Head `h` reads group `h mod G` (fla 0.6.0's PyTorch path) instead of
    /// `h / (H/G)` (mamba_ssm's kernels, fla's decode step).
    pub const GROUPS_INTERLEAVED: u32 = 1 << 4;
    pub const KNOWN: u32 = (1 << 5) - 1;
}

/// Mamba-2 layer configuration (fla's `Mamba2`, docs/spec.md §3.7).
///
/// Record words: `H | P (head_dim) | N (state_size) | G (n_groups) | W
/// (conv_kernel) | flags`, flags bit 0 convolution bias, bit 1 no gated
/// RMSNorm, bit 2 norm before the gate, bit 3 `D` per channel, bit 4 heads
/// interleaved over the groups; word 15 the state format (f32 only). The gated norm's epsilon is the model's
/// `norm_eps` (fla's Mamba-2 uses one for both).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mamba2Config {
    /// Heads H.
    pub num_heads: u32,
    /// Channels per head P (`head_dim`); the inner width is `H * P`.
    pub head_dim: u32,
    /// State size per head and channel N (`state_size`).
    pub state_size: u32,
    /// Groups G of B and C (`n_groups`), dividing H: head `h` reads group
    /// `h / (H / G)`, or `h mod G` with [`Mamba2Config::groups_interleaved`];
    /// also the gated norm's groups (contiguous channels either way).
    pub n_groups: u32,
    /// Causal convolution width W (`conv_kernel`), 1..=64.
    pub conv_size: u32,
    /// Whether the convolution has a bias.
    pub conv_bias: bool,
    /// Whether the output goes through the gated RMSNorm (`norm.weight`)
    /// or only through the gate `silu(z)`.
    pub gated_norm: bool,
    /// The gated norm normalises `y` before the gate (else `y * silu(z)`).
    pub norm_before_gate: bool,
    /// `D` has one value per channel (`[H*P]`) instead of per head.
    pub d_per_channel: bool,
    /// Head `h` reads B and C of group `h mod G` instead of `h / (H/G)`:
    /// fla 0.6.0's PyTorch forward (`B.repeat(...)`, what runs without
    /// `mamba_ssm`) tiles the groups, its decode step and mamba_ssm's
    /// kernels block them (docs/fla.md). The same with one group.
    pub groups_interleaved: bool,
}

impl Mamba2Config {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<Mamba2Config> {
        let f = w[5];
        ensure!(f & !flag::KNOWN == 0, layer, "unknown mamba2 flags");
        ensure!(
            w[STATE_WORD] == StateFormat::F32 as u32,
            layer,
            "this mixer has no step for that state format"
        );
        let c = Mamba2Config {
            num_heads: w[0],
            head_dim: w[1],
            state_size: w[2],
            n_groups: w[3],
            conv_size: w[4],
            conv_bias: f & flag::CONV_BIAS != 0,
            gated_norm: f & flag::NO_NORM == 0,
            norm_before_gate: f & flag::NORM_BEFORE_GATE != 0,
            d_per_channel: f & flag::D_PER_CHANNEL != 0,
            groups_interleaved: f & flag::GROUPS_INTERLEAVED != 0,
        };
        ensure!(
            dim_ok(c.num_heads) && dim_ok(c.head_dim) && dim_ok(c.state_size),
            layer,
            "mamba2 dims out of range"
        );
        ensure!(dim_ok(c.n_groups), layer, "mamba2 n_groups out of range");
        ensure!(
            c.num_heads % c.n_groups == 0,
            layer,
            "mamba2 num_heads must be a multiple of n_groups"
        );
        ensure!(
            c.conv_size >= 1 && c.conv_size <= 64,
            layer,
            "mamba2 conv_size must be 1..=64"
        );
        ensure!(
            !c.norm_before_gate || c.gated_norm,
            layer,
            "mamba2 norm_before_gate needs the gated norm"
        );
        // H*P, G*N and the in-projection's rows 2*H*P + 2*G*N + H.
        ensure_size!(
            width_ok(c.num_heads, c.head_dim)
                && width_ok(c.n_groups, c.state_size)
                && c.in_proj_rows() <= 1 << 20,
            layer,
            "mamba2 num_heads * head_dim or the in-projection exceeds 2^20"
        );
        Ok(c)
    }

    /// Encodes the layer record words.
    pub fn to_words(&self) -> LayerWords {
        let flags = if self.conv_bias { flag::CONV_BIAS } else { 0 }
            | if self.gated_norm { 0 } else { flag::NO_NORM }
            | if self.norm_before_gate {
                flag::NORM_BEFORE_GATE
            } else {
                0
            }
            | if self.d_per_channel {
                flag::D_PER_CHANNEL
            } else {
                0
            }
            | if self.groups_interleaved {
                flag::GROUPS_INTERLEAVED
            } else {
                0
            };
        record_words(&[
            self.num_heads,
            self.head_dim,
            self.state_size,
            self.n_groups,
            self.conv_size,
            flags,
        ])
    }

    /// The inner width `H * P` (saturating for a hand-built config).
    pub const fn inner(&self) -> u64 {
        product(&[self.num_heads as u64, self.head_dim as u64])
    }

    /// Channels of the convolution: x, B and C, `H*P + 2*G*N`.
    pub const fn conv_channels(&self) -> u64 {
        sum(&[
            self.inner(),
            product(&[2, self.n_groups as u64, self.state_size as u64]),
        ])
    }

    /// Rows of the in-projection: the gate `z` `[H*P]`, x, B and C, `dt` `[H]`.
    pub const fn in_proj_rows(&self) -> u64 {
        sum(&[self.inner(), self.conv_channels(), self.num_heads as u64])
    }

    /// State words: the convolution's `W - 1` previous inputs of each
    /// channel (`[C][W-1]`, as `mixers::conv`), then the SSM state
    /// `[H][P][N]`.
    pub const fn state_len(&self) -> u64 {
        sum(&[
            conv::state_words(self.conv_channels(), self.conv_size),
            product(&[self.inner(), self.state_size as u64]),
        ])
    }

    /// Scratch words: the in-projection's output (z, x, B, C, dt); the
    /// output `y` overwrites x.
    pub const fn scratch_len(&self) -> u64 {
        self.in_proj_rows()
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words ([`Mamba2Config::state_len`]; `pinned_max` is for SWA only).
    pub(crate) const fn layer_state_len(&self, _pinned_max: usize) -> u64 {
        self.state_len()
    }

    /// Input width of the output projection (`out_proj` columns): `H * P`.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        self.inner()
    }

    /// How the layer keeps its state: f32 (no integer step).
    pub(crate) const fn state_format(&self) -> StateFormat {
        StateFormat::F32
    }

    /// The oldest image format version whose records hold a `mamba2`
    /// layer: format 8 (the generalized block).
    pub(crate) const fn min_format_version(&self) -> u32 {
        BLOCK_FORMAT_VERSION
    }

    /// The group of B and C head `h` reads.
    pub const fn group_of(&self, h: usize) -> usize {
        // Checked: `n_groups` divides `num_heads` (checked at load), stated
        // without a panic branch (0 is not reached).
        let groups = self.n_groups as usize;
        if self.groups_interleaved {
            match h.checked_rem(groups) {
                Some(g) => g,
                None => 0,
            }
        } else {
            match (self.num_heads as usize).checked_div(groups) {
                Some(per) if per > 0 => h / per,
                _ => 0,
            }
        }
    }

    pub(super) const fn dims(&self) -> (usize, usize, usize, usize) {
        (
            self.num_heads as usize,
            self.head_dim as usize,
            self.state_size as usize,
            self.n_groups as usize,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// fla's `mamba2_groups` fixture: hidden 32, expand 2, 4 heads of 16,
    /// state 16, 2 groups, conv 4 with bias.
    fn fixture() -> Mamba2Config {
        Mamba2Config {
            num_heads: 4,
            head_dim: 16,
            state_size: 16,
            n_groups: 2,
            conv_size: 4,
            conv_bias: true,
            gated_norm: true,
            norm_before_gate: false,
            d_per_channel: false,
            groups_interleaved: true,
        }
    }

    #[test]
    fn record_round_trips_and_sizes_are_the_spec_s() {
        let c = fixture();
        assert_eq!(Mamba2Config::from_words(&c.to_words(), None), Ok(c));
        let all = Mamba2Config {
            conv_bias: false,
            gated_norm: true,
            norm_before_gate: true,
            d_per_channel: true,
            groups_interleaved: false,
            ..c
        };
        assert_eq!(Mamba2Config::from_words(&all.to_words(), None), Ok(all));
        // In-projection: z 64, x 64, B and C 2 * 2 * 16, dt 4 (fla's 196).
        assert_eq!(c.in_proj_rows(), 196);
        // Conv state 128 channels x 3, SSM state 4 x 16 x 16.
        assert_eq!(c.state_len(), 128 * 3 + 4 * 16 * 16);
        assert_eq!(c.scratch_len(), 196);
        assert_eq!(c.out_proj_cols(), 64);
    }

    /// docs/spec.md §6's examples: state bytes per layer of MCU-sized
    /// Mamba-2 layers, and of fla's default (hidden 2048, head_dim 64,
    /// state 128).
    #[test]
    fn mcu_sized_layers_keep_the_state_spec_md_quotes() {
        let layer = |h, p, n, g| Mamba2Config {
            num_heads: h,
            head_dim: p,
            state_size: n,
            n_groups: g,
            groups_interleaved: false,
            ..fixture()
        };
        for ((h, p, n, g), bytes) in [
            ((4, 16, 8, 1), 3_008),
            ((8, 16, 16, 1), 10_112),
            ((8, 32, 16, 2), 20_224),
            ((64, 64, 128, 1), 2_149_376),
        ] {
            assert_eq!(4 * layer(h, p, n, g).state_len(), bytes, "{h} {p} {n} {g}");
        }
    }

    #[test]
    fn bad_records_are_refused() {
        let cases: [(usize, u32); 7] = [
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 3), // 4 heads, 3 groups
            (4, 0),
            (4, 65),
            (5, 1 << 5),
        ];
        for (i, v) in cases {
            let mut w = fixture().to_words();
            w[i] = v;
            assert!(
                matches!(
                    Mamba2Config::from_words(&w, Some(1)),
                    Err(Error::BadConfig { layer: Some(1), .. })
                ),
                "word {i} = {v}"
            );
        }
        // Norm before the gate without the norm, and an integer state.
        let mut w = fixture().to_words();
        w[5] = flag::NO_NORM | flag::NORM_BEFORE_GATE;
        assert!(Mamba2Config::from_words(&w, None).is_err());
        let mut w = fixture().to_words();
        w[STATE_WORD] = StateFormat::Int16 as u32;
        assert!(Mamba2Config::from_words(&w, None).is_err());
        // The in-projection's rows past 2^20.
        let mut w = fixture().to_words();
        w[0] = 1 << 10;
        w[1] = 1 << 9;
        w[3] = 1;
        assert!(matches!(
            Mamba2Config::from_words(&w, None),
            Err(Error::SizeOverflow { .. })
        ));
    }
}
