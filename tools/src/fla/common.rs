//! What the fla importer's parsers share (`fla.rs` and one file per
//! family that brings its own block, `mamba2.rs`, `rwkv7.rs`): the result
//! type, the source codes, the fields without maths and the field helpers.

use anyhow::{bail, Result};
use serde_json::Value;

use crate::config_json::{Config, Fields};

/// Source-format codes of [`ferrite::config::ModelConfig::provenance`] (bits 0-7).
pub mod source {
    /// A ferrite model directory.
    pub const FERRITE: u32 = 0;
    /// fla `gated_deltanet`.
    pub const FLA_GATED_DELTANET: u32 = 1;
    /// fla `gsa`.
    pub const FLA_GSA: u32 = 2;
    /// fla `delta_net`.
    pub const FLA_DELTA_NET: u32 = 3;
    /// fla `mamba2`.
    pub const FLA_MAMBA2: u32 = 4;
    /// fla `rwkv7`.
    pub const FLA_RWKV7: u32 = 5;
    /// fla `gla`.
    pub const FLA_GLA: u32 = 6;
    /// fla `hgrn2`.
    pub const FLA_HGRN2: u32 = 7;
    /// fla `retnet`.
    pub const FLA_RETNET: u32 = 8;
}

/// Fields that change nothing in single-stream f32 inference.
pub(super) const NO_MATHS: &[&str] = &[
    "attn_mode",
    "max_position_embeddings",
    "use_cache",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "initializer_range",
    "fuse_norm",
    "fuse_swiglu",
    "fuse_cross_entropy",
    "fuse_linear_cross_entropy",
    "use_l2warp",
    "architectures",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "_name_or_path",
    "auto_map",
];

/// How the heads of a Mamba-2 layer share its `n_groups` groups of B and C
/// (`ferrite quantize --mamba2-groups`): fla 0.6.0's two code paths differ
/// when `n_groups > 1`, and a checkpoint does not say which one trained it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mamba2Groups {
    /// Head `h` reads group `h / (H / G)`: the `mamba_ssm` kernels fla
    /// trains with where they are installed, and fla's one-token decode step.
    Blocked,
    /// Head `h` reads group `h mod G`: fla's PyTorch forward (`B.repeat`),
    /// what trains and evaluates without `mamba_ssm` (the fixture of
    /// tests/fla).
    Interleaved,
}

/// Drops `name` when it is JSON `null`, so that its default applies.
pub(super) fn nullable(f: &mut Fields, value: &Value, name: &str) {
    if value.get(name).is_some_and(Value::is_null) {
        f.take(name);
    }
}

/// Refuses `name` unless it is absent or equal to `ok` (a value ferrite implements).
pub(super) fn require(f: &mut Fields, name: &str, ok: &Value, why: &str) -> Result<()> {
    match f.take(name) {
        Some(v) if &v != ok => bail!("{}: field '{name}' = {v} is not supported: {why}", f.at),
        _ => Ok(()),
    }
}

/// A tensor the importer computes: name, shape, values.
pub type NamedTensor = (String, Vec<usize>, Vec<f32>);

/// A checkpoint tensor's shape and values.
pub type RawTensor = (Vec<usize>, Vec<f32>);

/// A parsed fla checkpoint config, plus warnings for the user.
#[derive(Clone, Debug)]
pub struct FlaImport {
    /// The ferrite configuration.
    pub config: Config,
    /// Things the user should know (e.g. a window that training did not use).
    pub warnings: Vec<String>,
}
