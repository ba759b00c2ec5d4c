//! The token mixers, one file each, behind the [`Mixer`] trait, plus the
//! tensor lists that tie a configuration to the image's tensor table.

mod bla;
mod conv;
mod gdn;
mod gsa;
mod mla;
mod rope;
mod swa;

pub use bla::{BlaConfig, BlaDecay, BlaKernel};
pub use gdn::{retention_gamma, GdnConfig, GdnDecay, QkActivation, QkNorm};
pub use gsa::{FeatureMap, GsaConfig};
pub use mla::MlaConfig;
pub(crate) use mla::NOT_BUILT as MLA_NOT_BUILT;
pub use swa::SwaConfig;

use crate::config::{LayerConfig, ModelConfig};
use crate::error::Result;
use crate::image::{Role, TensorSpec};
use crate::model::LayerWeights;
use crate::tensor::ActBuf;

/// Most tensors one layer (mixer + block) may have.
pub const MAX_LAYER_TENSORS: usize = 24;

/// A fixed-capacity list of tensor specs.
pub type Specs = heapless::Vec<TensorSpec, MAX_LAYER_TENSORS>;

/// What a mixer needs to know about the stream besides its state.
#[derive(Clone, Copy, Debug)]
pub struct StepCtx {
    /// Tokens before the current one since the stream started: windows,
    /// sinks and BLA phases count with it.
    pub pos: u64,
    /// Absolute position of the current token: `pos` plus the position the
    /// stream started at ([`crate::Session::seek`]); RoPE angles use it.
    pub abs_pos: u64,
    /// Tokens pinned after the model's sinks (SWA only).
    pub pinned: usize,
    /// Pinned-prefix capacity the state was sized for (SWA only).
    pub pinned_max: usize,
    /// The model's RMSNorm epsilon.
    pub norm_eps: f32,
}

/// A token mixer: a fixed-size state updated once per token.
pub trait Mixer {
    /// Runs one token: reads `x` (`[D]`), updates `state`, writes `out` (`[D]`).
    /// `state` holds exactly the mixer's state words, `scratch` at least its
    /// scratch words; a new (or reset) state is all zeros. `act` quantizes
    /// the inputs of products with tensors on the integer path.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        ctx: &StepCtx,
        w: &LayerWeights<'_, '_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()>;

    /// Appends the mixer's tensors (roles after `attn.`) in canonical order.
    fn push_specs(&self, layer: u16, hidden: u32, specs: &mut Specs);
}

impl LayerConfig {
    /// The layer's mixer as a trait object.
    pub fn mixer(&self) -> &dyn Mixer {
        match self {
            LayerConfig::Gdn(c) => c,
            LayerConfig::Gsa(c) => c,
            LayerConfig::Swa(c) => c,
            LayerConfig::Bla(c) => c,
            LayerConfig::Mla(c) => c,
        }
    }
}

/// Pushes a spec; the capacity is sized for the largest layer, so a full
/// list is a bug in this crate, caught by the tests.
pub(crate) fn push(specs: &mut Specs, layer: u16, role: Role, dims: [u32; 3], matrix: bool) {
    let pushed = specs.push(TensorSpec {
        layer: Some(layer),
        role,
        dims,
        matrix,
    });
    debug_assert!(pushed.is_ok(), "MAX_LAYER_TENSORS too small");
}

/// The tensor dimension `a * b` (heads times head size, ...). Parsed configs
/// keep it at most [`crate::config::MAX_DIM`]; for a hand-built config it
/// saturates (a shape no image has) instead of overflowing.
pub(crate) const fn width(a: u32, b: u32) -> u32 {
    a.saturating_mul(b)
}

/// Saturating product, for state and scratch sizes: a parsed config is far
/// from overflow (see [`crate::config::MAX_DIM`]), a hand-built one saturates
/// to a size no buffer has (and [`crate::session_len`] refuses).
pub(crate) const fn product(factors: &[u64]) -> u64 {
    let mut p = 1u64;
    let mut i = 0;
    while i < factors.len() {
        p = p.saturating_mul(factors[i]);
        i += 1;
    }
    p
}

/// Saturating sum (see [`product`]).
pub(crate) const fn sum(terms: &[u64]) -> u64 {
    let mut s = 0u64;
    let mut i = 0;
    while i < terms.len() {
        s = s.saturating_add(terms[i]);
        i += 1;
    }
    s
}

/// Pushes the three short-convolution kernels `[C, 1, W]` of q, k and v.
pub(crate) fn push_conv_specs(specs: &mut Specs, layer: u16, channels: [u32; 3], width: u32) {
    for (role, c) in [Role::QConv, Role::KConv, Role::VConv]
        .into_iter()
        .zip(channels)
    {
        push(specs, layer, role, [c, 1, width], false);
    }
}

/// Model-wide tensors in canonical order.
pub fn global_specs(c: &ModelConfig) -> heapless::Vec<TensorSpec, 3> {
    let mut v = heapless::Vec::new();
    let (vocab, d) = (c.vocab_size, c.hidden_size);
    let mut add = |role, dims, matrix| {
        let _ = v.push(TensorSpec {
            layer: None,
            role,
            dims,
            matrix,
        });
    };
    add(Role::Embeddings, [vocab, d, 0], true);
    add(Role::FinalNorm, [d, 0, 0], false);
    if !c.tie_word_embeddings {
        add(Role::LmHead, [vocab, d, 0], true);
    }
    v
}

/// Tensors of one block (norms, mixer, MLP) in canonical order.
pub fn block_specs(c: &ModelConfig, layer_cfg: &LayerConfig, layer: u16) -> Specs {
    let (d, i) = (c.hidden_size, c.intermediate_size);
    let mut s = Specs::new();
    push(&mut s, layer, Role::AttnNorm, [d, 0, 0], false);
    layer_cfg.mixer().push_specs(layer, d, &mut s);
    push(&mut s, layer, Role::MlpNorm, [d, 0, 0], false);
    push(&mut s, layer, Role::MlpGate, [i, d, 0], true);
    push(&mut s, layer, Role::MlpUp, [i, d, 0], true);
    push(&mut s, layer, Role::MlpDown, [d, i, 0], true);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LayerWords, MAX_DIM};
    use crate::error::Error;

    fn words(w: &[u32]) -> LayerWords {
        let mut out = [0; 15];
        out[..w.len()].copy_from_slice(w);
        out
    }

    fn parse(kind: u32, w: &[u32]) -> crate::error::Result<LayerConfig> {
        let (w, l) = (words(w), Some(3));
        match kind {
            1 => GdnConfig::from_words(&w, l).map(LayerConfig::Gdn),
            2 => GsaConfig::from_words(&w, l).map(LayerConfig::Gsa),
            3 => SwaConfig::from_words(&w, l).map(LayerConfig::Swa),
            _ => BlaConfig::from_words(&w, l).map(LayerConfig::Bla),
        }
    }

    const BIG: u32 = 1 << 20;
    const GAMMA: u32 = 0x3f80_0000; // 1.0
    const EIGHT: u32 = 0x4100_0000; // 8.0

    #[test]
    fn widths_over_max_dim_are_size_overflows_not_panics() {
        let cases: [(u32, &[u32], &str); 7] = [
            (
                1,
                &[BIG, BIG, 4097, 4097, 2, 1],
                "gdn num_heads * head_k_dim",
            ),
            (1, &[1, BIG, 1, 4097, 2, 1], "gdn num_v_heads * head_v_dim"),
            (
                2,
                &[BIG, BIG, 4097, 8, 4, 0, EIGHT],
                "gsa num_heads * head_k_dim",
            ),
            (
                2,
                &[BIG, BIG, 1, 4097, 4, 0, EIGHT],
                "gsa num_heads * head_v_dim",
            ),
            (
                2,
                &[BIG, BIG, 1, 1, 4097, 0, EIGHT],
                "gsa num_kv_heads * num_slots",
            ),
            (
                3,
                &[BIG, BIG, 4098, 4, 0, EIGHT, 0, 0],
                "swa num_heads * head_dim",
            ),
            (
                4,
                &[BIG, 1, 4097, 4, 1, 3, 0, 0, GAMMA, 0, 0],
                "bla num_heads * head_v_dim",
            ),
        ];
        for (kind, w, what) in cases {
            match parse(kind, w) {
                Err(Error::SizeOverflow {
                    layer: Some(3),
                    what: got,
                }) => assert!(got.starts_with(what), "{got}"),
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    #[test]
    fn widths_of_exactly_max_dim_are_accepted() {
        let c = parse(1, &[1 << 10, 1 << 10, 1 << 10, 1 << 10, 2, 1]).unwrap();
        let specs = block_specs(&model(), &c, 0);
        assert!(specs.iter().any(|s| s.dims[0] == MAX_DIM));
        // S: HV*V*K = 2^30; conv caches: (2*H*K + HV*V) * (W - 1) = 3 * 2^20.
        assert_eq!(c.state_len(0), (1 << 30) + 3 * (1 << 20));
    }

    fn model() -> ModelConfig {
        ModelConfig {
            vocab_size: 256,
            hidden_size: 8,
            intermediate_size: 16,
            norm_eps: 1e-6,
            tie_word_embeddings: true,
            num_layers: 1,
            tokenizer: crate::config::TokenizerKind::Bytes,
            provenance: 0,
        }
    }

    /// Configs built by hand (public fields) skip validation: their sizes
    /// saturate instead of overflowing.
    #[test]
    fn hand_built_configs_saturate() {
        let m = u32::MAX;
        let layers = [
            LayerConfig::Gdn(GdnConfig {
                num_heads: m,
                num_v_heads: m,
                head_k_dim: m,
                head_v_dim: m,
                conv_size: m,
                use_gate: true,
                allow_neg_eigval: false,
                decay: GdnDecay::Gated,
                delta_rule: true,
                use_beta: true,
                qk_activation: QkActivation::Silu,
                qk_norm: QkNorm::L2,
            }),
            LayerConfig::Gsa(GsaConfig {
                num_heads: m,
                num_kv_heads: m,
                head_k_dim: m,
                head_v_dim: m,
                num_slots: m,
                feature_map: FeatureMap::Swish,
                gate_logit_normalizer: 1.0,
                conv_size: m,
            }),
            LayerConfig::Swa(SwaConfig {
                num_heads: m,
                num_kv_heads: m,
                head_dim: m,
                window: m,
                sinks: m,
                rope_theta: 1.0,
                use_rope: true,
                cache_positions: false,
                sink_logits: true,
                conv_size: m,
                dilation: m,
            }),
            LayerConfig::Bla(BlaConfig {
                num_heads: m,
                head_k_dim: m,
                head_v_dim: m,
                period: m,
                modes: m,
                slots: m,
                kernel: BlaKernel::Fejer,
                decay: BlaDecay::Gated,
                gamma: 1.0,
                conv_size: m,
            }),
            LayerConfig::Mla(MlaConfig {
                num_heads: m,
                head_dim: m,
                v_head_dim: m,
                rope_dim: m,
                kv_lora_rank: m,
                window: m,
                rope_theta: 1.0,
            }),
        ];
        for c in layers {
            assert_eq!(c.state_len(usize::MAX), u64::MAX, "{c:?}");
            assert_eq!(c.scratch_len(), u64::MAX, "{c:?}");
            let specs = block_specs(&model(), &c, 0);
            assert!(specs.iter().any(|s| s.dims[0] == u32::MAX), "{c:?}");
            assert!(specs.iter().all(|s| s.numel() > 0));
        }
        if let LayerConfig::Bla(b) = layers[3] {
            // 2 * m overflows a u32; Fejér weight 2 * (1 - 2^31 / 2^32).
            assert_eq!(b.mode_weight(1 << 31), 1.0);
        }
    }
}
