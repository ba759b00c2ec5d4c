//! The block around each layer's mixer (docs/spec.md §1.1): its norms and
//! its MLP. Format 1 has one block, RMSNorm, mixer, RMSNorm, SwiGLU MLP, no
//! biases; format 8 records per layer (layer-record word 14,
//! `format::BLOCK_WORD`) what the families it added need:
//!
//! ```text
//! bits 0-1  norm: 0 RMSNorm (weight), 1 LayerNorm (weight and bias)
//! bits 2-3  MLP:  0 SwiGLU, 1 none (Mamba-2), 2 channel mixing (RWKV-7:
//!                 token shift, squared ReLU)
//! bit 4     pre-norm: the residual stream is replaced by its norm before
//!           the block (RWKV-7's first layer)
//! ```
//!
//! Per layer `i`, with `norm` the layer's norm kind:
//!
//! ```text
//! h = norm(h, pre_norm_i)                        (pre-norm only)
//! h = h + mixer_i(norm(h, attn_norm_i))
//! SwiGLU:       h = h + down(silu(gate u) * up u),                 u = norm(h, mlp_norm_i)
//! channel mix:  h = h + value(relu(key(u + (u_prev - u) * x_k))^2), u_prev = u (state: D words)
//! none:         nothing
//! ```
//!
//! A zero word is the format-1 block, so every older image reads as before.

use crate::error::{Error, Result};
use crate::format::{read_u32, Role, BLOCK_WORD, LAYER_RECORD_WORDS, MODEL_RECORD_WORDS};
use crate::image::{BLOCK_FORMAT_VERSION, MIN_FORMAT_VERSION};
#[cfg(feature = "block-options")]
use crate::math::mean_rstd;
use crate::math::{rms_scale, silu};
use crate::mixers::{push, SpecSink};
use crate::tensor::{ActBuf, Tensor};
use crate::weights::LayerWeights;

/// The kind of a block's norms (and of the model's final norm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum NormKind {
    /// `rmsnorm(u, w, eps)`: a weight, no bias (format 1).
    Rms = 0,
    /// `layernorm(u, w, b, eps)`: a weight and a bias (format 8; RWKV-7).
    Layer = 1,
}

/// The MLP that follows a block's mixer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MlpKind {
    /// `down(silu(gate u) * up u)` (format 1).
    SwiGlu = 0,
    /// No MLP and no norm before it (Mamba-2's block; format 8).
    None = 1,
    /// RWKV-7's channel mixing: `value(relu(key(u + (u_prev - u) x_k))^2)`,
    /// `u_prev` the previous token's normed input (format 8).
    ChannelMix = 2,
}

/// Block options of one layer (layer-record word 14, format 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BlockConfig {
    /// Kind of the pre-norm, the pre-mixer norm and the pre-MLP norm.
    pub norm: NormKind,
    /// The MLP after the mixer.
    pub mlp: MlpKind,
    /// Whether the residual stream is replaced by its norm (`pre_norm`)
    /// before the block: RWKV-7's first layer (fla's `norm_first`).
    pub pre_norm: bool,
}

/// Bits of the block word.
mod bits {
    pub const NORM_MASK: u32 = 0b11;
    pub const MLP_SHIFT: u32 = 2;
    pub const PRE_NORM: u32 = 1 << 4;
    pub const KNOWN: u32 = (1 << 5) - 1;
}

impl BlockConfig {
    /// The format-1 block: RMSNorm, mixer, RMSNorm, SwiGLU MLP.
    pub const RMS_SWIGLU: BlockConfig = BlockConfig {
        norm: NormKind::Rms,
        mlp: MlpKind::SwiGlu,
        pre_norm: false,
    };

    /// Decodes a block word (layer `layer`, for errors).
    pub const fn from_word(w: u32, layer: Option<u16>) -> Result<BlockConfig> {
        if w & !bits::KNOWN != 0 {
            return Err(Error::BadConfig {
                layer,
                reason: "unknown block options",
            });
        }
        let norm = match w & bits::NORM_MASK {
            0 => NormKind::Rms,
            1 => NormKind::Layer,
            _ => {
                return Err(Error::BadConfig {
                    layer,
                    reason: "unknown block norm kind",
                })
            }
        };
        let mlp = match (w >> bits::MLP_SHIFT) & 0b11 {
            0 => MlpKind::SwiGlu,
            1 => MlpKind::None,
            2 => MlpKind::ChannelMix,
            _ => {
                return Err(Error::BadConfig {
                    layer,
                    reason: "unknown block MLP kind",
                })
            }
        };
        let b = BlockConfig {
            norm,
            mlp,
            pre_norm: w & bits::PRE_NORM != 0,
        };
        if !cfg!(feature = "block-options") && b.needs_feature() {
            return Err(Error::BadConfig {
                layer,
                reason: "LayerNorm blocks, channel mixing and the pre-norm need the runtime's `block-options` feature (on by default; firmware turns it on when its image has one)",
            });
        }
        Ok(b)
    }

    /// Whether these options need the runtime's `block-options` feature:
    /// LayerNorm, RWKV-7's channel mixing or the pre-norm (format 1's block
    /// and a block without an MLP do not).
    pub const fn needs_feature(&self) -> bool {
        matches!(self.norm, NormKind::Layer)
            || matches!(self.mlp, MlpKind::ChannelMix)
            || self.pre_norm
    }

    /// Encodes the block word (0 for the format-1 block).
    pub const fn to_word(&self) -> u32 {
        self.norm as u32
            | (self.mlp as u32) << bits::MLP_SHIFT
            | if self.pre_norm { bits::PRE_NORM } else { 0 }
    }

    /// The block options of layer record `layer` of the config section.
    pub const fn parse(section: &[u8], layer: u16) -> Result<BlockConfig> {
        let at = 4 * (MODEL_RECORD_WORDS + layer as usize * LAYER_RECORD_WORDS + 1 + BLOCK_WORD);
        match read_u32(section, at) {
            Some(w) => BlockConfig::from_word(w, Some(layer)),
            None => Err(Error::BadHeader("config section too short")),
        }
    }

    /// The oldest image format whose record holds these options: 1 for the
    /// format-1 block, [`BLOCK_FORMAT_VERSION`] otherwise.
    pub const fn min_format_version(&self) -> u32 {
        if self.to_word() == 0 {
            MIN_FORMAT_VERSION
        } else {
            BLOCK_FORMAT_VERSION
        }
    }

    /// Whether the block has an MLP (which needs `intermediate_size >= 1`).
    pub const fn has_mlp(&self) -> bool {
        !matches!(self.mlp, MlpKind::None)
    }

    /// Whether the integer token path runs this block (docs/integer-path.md,
    /// "The block"): RMSNorm, no pre-norm, a SwiGLU MLP or none.
    pub const fn integer_path_ok(&self) -> bool {
        matches!(self.norm, NormKind::Rms)
            && !self.pre_norm
            && !matches!(self.mlp, MlpKind::ChannelMix)
    }

    /// f32 words of state the block keeps for a model of width `hidden`:
    /// the channel mixing's previous input (`D`), else none.
    pub const fn state_len(&self, hidden: u32) -> u64 {
        match self.mlp {
            MlpKind::ChannelMix => hidden as u64,
            _ => 0,
        }
    }

    /// Appends the tensors before the mixer's: the pre-norm's and the
    /// pre-mixer norm's.
    pub fn push_pre_specs(&self, layer: u16, d: u32, s: &mut dyn SpecSink) {
        if self.pre_norm {
            self.push_norm(layer, d, Role::PreNorm, Role::PreNormBias, s);
        }
        self.push_norm(layer, d, Role::AttnNorm, Role::AttnNormBias, s);
    }

    /// Appends the tensors after the mixer's: the MLP's norm and matrices.
    pub fn push_post_specs(&self, layer: u16, d: u32, i: u32, s: &mut dyn SpecSink) {
        match self.mlp {
            MlpKind::None => {}
            MlpKind::SwiGlu => {
                self.push_norm(layer, d, Role::MlpNorm, Role::MlpNormBias, s);
                push(s, layer, Role::MlpGate, [i, d, 0], true);
                push(s, layer, Role::MlpUp, [i, d, 0], true);
                push(s, layer, Role::MlpDown, [d, i, 0], true);
            }
            MlpKind::ChannelMix => {
                self.push_norm(layer, d, Role::MlpNorm, Role::MlpNormBias, s);
                push(s, layer, Role::MlpShift, [d, 0, 0], false);
                push(s, layer, Role::MlpKey, [i, d, 0], true);
                push(s, layer, Role::MlpValue, [d, i, 0], true);
            }
        }
    }

    fn push_norm(&self, layer: u16, d: u32, weight: Role, bias: Role, s: &mut dyn SpecSink) {
        push(s, layer, weight, [d, 0, 0], false);
        if let NormKind::Layer = self.norm {
            push(s, layer, bias, [d, 0, 0], false);
        }
    }

    /// The norm with weight `weight` (and its bias, for a LayerNorm) of the
    /// layer's tensors: `out = norm(x)`.
    fn norm_into(
        &self,
        w: &LayerWeights<'_>,
        weight: Role,
        bias: Role,
        eps: f32,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        let b = match self.norm {
            NormKind::Layer if cfg!(feature = "block-options") => Some(w.get(bias)?),
            _ => None,
        };
        norm(&w.get(weight)?, b.as_ref(), eps, x, out);
        Ok(())
    }

    /// The block up to its mixer: the pre-norm of `h` (in place, through
    /// `x`), then `x = norm(h, attn_norm)`.
    pub(crate) fn pre_mixer(
        &self,
        w: &LayerWeights<'_>,
        eps: f32,
        h: &mut [f32],
        x: &mut [f32],
    ) -> Result<()> {
        if cfg!(feature = "block-options") && self.pre_norm {
            self.norm_into(w, Role::PreNorm, Role::PreNormBias, eps, h, x)?;
            // Both are the hidden size (the session's views); zip copies
            // without `copy_from_slice`'s length panic.
            h.iter_mut().zip(x.iter()).for_each(|(h, x)| *h = *x);
        }
        self.norm_into(w, Role::AttnNorm, Role::AttnNormBias, eps, h, x)
    }

    /// The block after its mixer: adds the MLP's output to `h`. `state` is
    /// the block's state ([`BlockConfig::state_len`] words), `x` and `out`
    /// `[D]`, `gate` and `up` `[I]` scratch.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mlp(
        &self,
        w: &LayerWeights<'_>,
        eps: f32,
        state: &mut [f32],
        act: &mut ActBuf<'_>,
        h: &mut [f32],
        x: &mut [f32],
        out: &mut [f32],
        gate: &mut [f32],
        up: &mut [f32],
    ) -> Result<()> {
        match self.mlp {
            MlpKind::None => return Ok(()),
            MlpKind::SwiGlu => {
                self.norm_into(w, Role::MlpNorm, Role::MlpNormBias, eps, h, x)?;
                let xin = act.input(x)?;
                w.get(Role::MlpGate)?.matvec(&xin, gate)?;
                w.get(Role::MlpUp)?.matvec(&xin, up)?;
                gate.iter_mut()
                    .zip(up.iter())
                    .for_each(|(g, u)| *g = silu(*g) * u);
                w.get(Role::MlpDown)?.matvec(&act.input(gate)?, out)?;
            }
            #[cfg(not(feature = "block-options"))]
            MlpKind::ChannelMix => {
                // Refused at load (`BlockConfig::from_word`): never reached.
                let _ = state;
                return Err(Error::Internal("channel mixing without its feature"));
            }
            #[cfg(feature = "block-options")]
            MlpKind::ChannelMix => {
                self.norm_into(w, Role::MlpNorm, Role::MlpNormBias, eps, h, x)?;
                let mix = w.get(Role::MlpShift)?;
                // out = x + (prev - x) * x_k, and the state moves on to x.
                for (c, ((o, &xc), prev)) in out.iter_mut().zip(x.iter()).zip(state).enumerate() {
                    *o = xc + (*prev - xc) * mix.at(c);
                    *prev = xc;
                }
                w.get(Role::MlpKey)?.matvec(&act.input(out)?, gate)?;
                gate.iter_mut().for_each(|g| {
                    let r = g.max(0.0);
                    *g = r * r;
                });
                w.get(Role::MlpValue)?.matvec(&act.input(gate)?, out)?;
            }
        }
        h.iter_mut().zip(out.iter()).for_each(|(a, b)| *a += b);
        Ok(())
    }
}

/// `out = rmsnorm(x) w` (no bias) or `layernorm(x) w + b` (with one; a
/// build without the `block-options` feature, whose loader refuses
/// LayerNorms, has only the first).
pub(crate) fn norm(
    weight: &Tensor<'_>,
    bias: Option<&Tensor<'_>>,
    eps: f32,
    x: &[f32],
    out: &mut [f32],
) {
    match bias {
        #[cfg(not(feature = "block-options"))]
        _ => {
            let _ = bias;
            rms_norm(weight, eps, x, out)
        }
        #[cfg(feature = "block-options")]
        None => rms_norm(weight, eps, x, out),
        #[cfg(feature = "block-options")]
        Some(b) => {
            let (mean, rstd) = mean_rstd(x, eps);
            for (i, (o, &xi)) in out.iter_mut().zip(x).enumerate() {
                *o = (xi - mean) * rstd * weight.at(i) + b.at(i);
            }
        }
    }
}

/// `out = rmsnorm(x) w`.
fn rms_norm(weight: &Tensor<'_>, eps: f32, x: &[f32], out: &mut [f32]) {
    let inv = rms_scale(x, eps);
    for (i, (o, &xi)) in out.iter_mut().zip(x).enumerate() {
        *o = xi * inv * weight.at(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_words_round_trip_and_zero_is_the_format_1_block() {
        assert_eq!(BlockConfig::from_word(0, None), Ok(BlockConfig::RMS_SWIGLU));
        assert_eq!(BlockConfig::RMS_SWIGLU.min_format_version(), 1);
        for norm in [NormKind::Rms, NormKind::Layer] {
            for mlp in [MlpKind::SwiGlu, MlpKind::None, MlpKind::ChannelMix] {
                for pre_norm in [false, true] {
                    let b = BlockConfig {
                        norm,
                        mlp,
                        pre_norm,
                    };
                    assert_eq!(BlockConfig::from_word(b.to_word(), None), Ok(b));
                    let plain = b == BlockConfig::RMS_SWIGLU;
                    assert_eq!(b.min_format_version() == 1, plain, "{b:?}");
                }
            }
        }
    }

    #[test]
    fn unknown_block_words_are_refused() {
        for (w, reason) in [
            (2, "unknown block norm kind"),
            (3 << 2, "unknown block MLP kind"),
            (1 << 5, "unknown block options"),
            (1 << 31, "unknown block options"),
        ] {
            assert_eq!(
                BlockConfig::from_word(w, Some(4)),
                Err(Error::BadConfig {
                    layer: Some(4),
                    reason
                })
            );
        }
    }

    #[test]
    fn only_the_channel_mix_keeps_state_and_only_mlps_need_a_width() {
        let mut b = BlockConfig::RMS_SWIGLU;
        assert_eq!((b.state_len(32), b.has_mlp()), (0, true));
        b.mlp = MlpKind::None;
        assert_eq!((b.state_len(32), b.has_mlp()), (0, false));
        b.mlp = MlpKind::ChannelMix;
        assert_eq!((b.state_len(32), b.has_mlp()), (32, true));
        assert!(!b.integer_path_ok());
    }
}
