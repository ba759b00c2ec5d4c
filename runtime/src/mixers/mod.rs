//! The token mixers, one file each, behind the [`Mixer`] trait: each
//! mixer's configuration, its layer record (`from_words`, `to_words`), its
//! sizes, its tensors and its step.
//!
//! The mixers sit below `config` (whose [`LayerConfig`](crate::LayerConfig)
//! is one variant per mixer) and need nothing above `weights`: the module
//! order is in `docs/adding-a-mixer.md`.

mod bla;
mod bla_config;
#[cfg_attr(not(feature = "int-path"), allow(dead_code))]
mod bla_int;
mod conv;
pub mod conv_int;
mod cross;
mod cross_config;
#[cfg_attr(not(feature = "int-path"), allow(dead_code))]
mod cross_int;
mod gdn;
mod gdn_config;
#[cfg_attr(not(feature = "int-path"), allow(dead_code))]
mod gdn_int;
mod gla;
mod gla_config;
mod gsa;
mod gsa_config;
#[cfg_attr(not(feature = "int-path"), allow(dead_code))]
mod gsa_int;
mod mamba2;
mod mamba2_config;
mod mla;
mod mla_config;
#[cfg_attr(not(feature = "int-path"), allow(dead_code))]
mod mla_int;
mod rope;
#[cfg_attr(not(feature = "int-path"), allow(dead_code))]
mod rope_int;
mod rwkv7;
mod rwkv7_config;
#[cfg_attr(not(feature = "int-path"), allow(dead_code))]
mod slots_int;
mod swa;
mod swa_config;
#[cfg_attr(not(feature = "int-path"), allow(dead_code))]
mod swa_int;
#[cfg_attr(not(feature = "int-path"), allow(dead_code))]
mod swa_logkv;

pub use bla_config::{BlaConfig, BlaDecay, BlaKernel, BlaPhiSource};
pub(crate) use bla_int::state_max_abs as bla_state_max_abs;
pub(crate) use cross::memory_index as cross_memory_index;
pub use cross_config::{cross_memory_len, CrossConfig, MAX_MEMORIES};
pub use gdn::{retention_gamma, GdnConfig, GdnDecay, QkActivation, QkNorm};
pub(crate) use gdn_int::state_max_abs as gdn_state_max_abs;
pub use gla_config::{GlaConfig, GlaVariant};
pub use gsa_config::{FeatureMap, GsaConfig};
pub(crate) use gsa_int::state_max_abs as gsa_state_max_abs;
pub use mamba2_config::Mamba2Config;
pub use mla_config::MlaConfig;
pub(crate) use mla_int::state_max_abs as mla_state_max_abs;
pub use rwkv7_config::{KkNorm, Rwkv7Config};
pub use swa::SwaConfig;
pub(crate) use swa_int::state_max_abs as swa_state_max_abs;
pub(crate) use swa_logkv::state_max_abs as swa_log_state_max_abs;

use crate::error::StepResult;
use crate::format::Role;
use crate::image::TensorSpec;
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

/// Most tensors one layer (mixer + block) may have (an RWKV-7 layer in
/// fla's block: 33).
pub const MAX_LAYER_TENSORS: usize = 40;

/// A fixed-capacity list of tensor specs (one layer's, for the tools:
/// [`crate::model::block_specs`]).
pub type Specs = heapless::Vec<TensorSpec, MAX_LAYER_TENSORS>;

/// Where a layer's tensor specs go, one at a time in canonical order: a
/// list ([`Specs`]) or a check of each as it comes (`Model::load`, which so
/// keeps no list of a layer's specs on the stack).
pub trait SpecSink {
    /// Takes the next spec.
    fn add(&mut self, spec: TensorSpec);
}

impl SpecSink for Specs {
    /// Appends; the capacity is sized for the largest layer, so a full
    /// list is a bug in this crate, caught by the tests.
    fn add(&mut self, spec: TensorSpec) {
        let pushed = self.push(spec);
        debug_assert!(pushed.is_ok(), "MAX_LAYER_TENSORS too small");
    }
}

/// The words of a caller-owned memory: f32, f16 for half the RAM, or int8
/// with a scale a row for a quarter (the step reads each in place, as it
/// reads baked memories of that type).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum MemoryWords<'m> {
    /// f32 words.
    F32(&'m [f32]),
    /// f16 words.
    F16(&'m [half::f16]),
    /// int8 words, a row's value `q[i] * scales[row]` (a row: one slot's
    /// key or value in one layer, `Hkv*d` words; rows in the words' order).
    I8 {
        /// The quantized words.
        q: &'m [i8],
        /// One scale a row.
        scales: &'m [f32],
    },
}

impl<'m> MemoryWords<'m> {
    /// Number of words (keys and values of every `cross` layer).
    pub fn len(&self) -> usize {
        match self {
            MemoryWords::F32(w) => w.len(),
            MemoryWords::F16(w) => w.len(),
            MemoryWords::I8 { q, .. } => q.len(),
        }
    }

    /// Whether there is no word (never for a [`crate::Memory`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Words `at.words..at.words + len` and, for int8 words, their
    /// `len / row` scales from `at.rows` (`None` past the end).
    pub(crate) fn part(&self, at: MemoryAt, len: usize, row: usize) -> Option<MemoryWords<'m>> {
        let range = at.words..at.words.checked_add(len)?;
        Some(match self {
            MemoryWords::F32(w) => MemoryWords::F32(w.get(range)?),
            MemoryWords::F16(w) => MemoryWords::F16(w.get(range)?),
            MemoryWords::I8 { q, scales } => MemoryWords::I8 {
                q: q.get(range)?,
                scales: scales.get(at.rows..at.rows.checked_add(len.checked_div(row)?)?)?,
            },
        })
    }
}

/// Where the next `cross` layer's part of a caller memory starts: its
/// first word and (for int8 words) its first row's scale.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MemoryAt {
    /// The first word.
    pub words: usize,
    /// The first row.
    pub rows: usize,
}

/// One `cross` layer's part of a caller-owned memory ([`crate::memory::Memory`]),
/// as its step reads it.
#[derive(Clone, Copy, Debug)]
pub struct LayerMemory<'m> {
    /// Keys then values, `[slots, Hkv*d]` each.
    pub words: MemoryWords<'m>,
    /// Slots `m`.
    pub slots: usize,
}

/// What a mixer needs to know about the stream besides its state.
#[derive(Clone, Copy, Debug)]
pub struct StepCtx<'m> {
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
    /// A `cross` layer's caller-owned memory, attended to instead of its
    /// baked one ([`crate::Session::feed_with_memory`]): set per layer by
    /// the session, `None` for every other layer and call.
    pub memory: Option<LayerMemory<'m>>,
}

/// A token mixer: a fixed-size state updated once per token.
pub trait Mixer {
    /// Runs one token: reads `x` (`[D]`), updates `state`, writes `out` (`[D]`).
    /// `state` holds exactly the mixer's state words, `scratch` at least its
    /// scratch words; a new (or reset) state is all zeros. `act` quantizes
    /// the inputs of products with tensors on the integer path. The layer's
    /// record and tensors were checked at load, so an error is a failed
    /// invariant ([`crate::StepError::Internal`]).
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        ctx: &StepCtx,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> StepResult<()>;

    /// Gives the mixer's tensors (roles after `attn.`) to `specs` in
    /// canonical order.
    fn push_specs(&self, layer: u16, hidden: u32, specs: &mut dyn SpecSink);

    /// Whether a layer of this mixer whose state format is not f32 takes
    /// its integer step for this token, given the token's context, the
    /// layer's weights and its state: always, but for `cross`, whose
    /// integer step reads int8 memories only (another memory takes its f32
    /// step, `mixers/cross_int.rs`).
    #[cfg(feature = "int-path")]
    fn takes_integer_step(&self, ctx: &StepCtx, w: &LayerWeights<'_>, state: &[f32]) -> bool {
        let _ = (ctx, w, state);
        true
    }

    /// The integer step (docs/integer-path.md), run for a layer whose state
    /// format is not f32 in an image on the integer token path: reads the
    /// normal block `x` (`[D]`, the normed input), updates `state` (the
    /// mixer's own integer layout, exactly its state words, all zero when
    /// new), writes `out` (`[D]`) as a normal block and returns its
    /// exponent. Products go through [`ActBuf::input_int`] and
    /// [`crate::tensor::Tensor::matvec_int`]. Every value it clamps (a state
    /// or intermediate out of its range) adds one to `clamps`. Mixers
    /// without an integer state format keep this default, which is never
    /// called (their layers' state format is f32: checked at load).
    #[cfg(feature = "int-path")]
    #[allow(clippy::too_many_arguments)]
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
        let _ = (ctx, w, state, scratch, act, x, out, clamps);
        Err(crate::error::StepError::Internal(
            "this mixer has no integer step",
        ))
    }
}

/// The mixer of a family built without its cargo feature: its layers are
/// refused at load ([`crate::LayerConfig::not_built`]), so these steps are
/// never run; they stand in so that the family's own are not linked.
#[cfg(not(all(
    feature = "gdn",
    feature = "gsa",
    feature = "swa",
    feature = "bla",
    feature = "mla",
    feature = "mamba2",
    feature = "rwkv7",
    feature = "gla",
    feature = "cross"
)))]
pub(crate) struct NotBuilt;

#[cfg(not(all(
    feature = "gdn",
    feature = "gsa",
    feature = "swa",
    feature = "bla",
    feature = "mla",
    feature = "mamba2",
    feature = "rwkv7",
    feature = "gla",
    feature = "cross"
)))]
impl Mixer for NotBuilt {
    fn step(
        &self,
        _: &StepCtx,
        _: &LayerWeights<'_>,
        _: &mut [f32],
        _: &mut [f32],
        _: &mut ActBuf<'_>,
        _: &[f32],
        _: &mut [f32],
    ) -> StepResult<()> {
        Err(crate::error::StepError::Internal(
            "a mixer built without its feature",
        ))
    }

    fn push_specs(&self, _: u16, _: u32, _: &mut dyn SpecSink) {}
}

/// Gives `specs` the spec of layer `layer`'s tensor `role`.
pub(crate) fn push(specs: &mut dyn SpecSink, layer: u16, role: Role, dims: [u32; 3], matrix: bool) {
    specs.add(TensorSpec {
        layer: Some(layer),
        role,
        dims,
        matrix,
    });
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
pub(crate) fn push_conv_specs(
    specs: &mut dyn SpecSink,
    layer: u16,
    channels: [u32; 3],
    width: u32,
) {
    for (role, c) in [Role::QConv, Role::KConv, Role::VConv]
        .into_iter()
        .zip(channels)
    {
        push(specs, layer, role, [c, 1, width], false);
    }
}
