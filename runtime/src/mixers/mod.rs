//! The token mixers, one file each, behind the [`Mixer`] trait, plus the
//! tensor lists that tie a configuration to the image's tensor table.

mod bla;
mod conv;
mod gdn;
mod gsa;
mod swa;

pub use bla::{BlaConfig, BlaDecay, BlaKernel};
pub use gdn::GdnConfig;
pub use gsa::{FeatureMap, GsaConfig};
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
    /// Position of the current token in the stream (0-based).
    pub pos: u64,
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
