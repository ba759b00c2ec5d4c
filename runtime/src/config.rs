//! The model configuration as stored in an image: fixed-size little-endian
//! records that the tools derive from `config.json` (all defaults resolved).
//!
//! ```text
//! model record (8 words): vocab | hidden | intermediate | norm_eps (f32 bits)
//!                         | flags (bit 0: tied head) | num_layers | tokenizer (0 bytes, 1 BPE) | provenance
//! layer record (16 words): kind | 15 kind-specific words (see each mixer's config)
//! ```
//! Parsing is `const` so that the RAM a model needs can be computed from an
//! embedded image at compile time (see [`crate::session_len`]).

use crate::error::{Error, Result};
use crate::image::read_u32;
use crate::mixers::{BlaConfig, GdnConfig, GsaConfig, MlaConfig, SwaConfig};

/// Words in the model record.
pub const MODEL_RECORD_WORDS: usize = 8;
/// Words in one layer record.
pub const LAYER_RECORD_WORDS: usize = 16;
/// Most layers a model may have.
pub const MAX_LAYERS: usize = 64;
/// Largest single dimension accepted: every config field that is a size, and
/// every tensor dimension derived from two of them (heads times head size,
/// kv heads times slots). Keeps every size computation far from overflow:
/// a layer's state is at most a product of two such dimensions (u64), and
/// the session total is checked against the target's address space.
pub const MAX_DIM: u32 = 1 << 20;

/// A layer record's kind-specific words.
pub type LayerWords = [u32; LAYER_RECORD_WORDS - 1];

/// Which tokenizer the image carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TokenizerKind {
    /// One token per byte (vocab 256).
    Bytes = 0,
    /// Byte-level BPE with a tokenizer section (format v2).
    Bpe = 1,
}

/// Model-wide configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelConfig {
    /// Vocabulary size.
    pub vocab_size: u32,
    /// Model width D.
    pub hidden_size: u32,
    /// MLP width I.
    pub intermediate_size: u32,
    /// RMSNorm epsilon.
    pub norm_eps: f32,
    /// Whether `lm_head` is the embedding table.
    pub tie_word_embeddings: bool,
    /// Number of layers.
    pub num_layers: u32,
    /// Tokenizer.
    pub tokenizer: TokenizerKind,
    /// Where the weights came from, for reports only (never used in the maths):
    /// bits 0-7 source format (0 ferrite, 1 fla `gated_deltanet`, 2 fla `gsa`),
    /// bits 8-15 source dtype (0 f32, 1 f16, 2 bf16). Zero in images that
    /// predate the field.
    pub provenance: u32,
}

/// One layer's mixer configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LayerConfig {
    /// Gated DeltaNet.
    Gdn(GdnConfig),
    /// Gated Slot Attention.
    Gsa(GsaConfig),
    /// Sliding-window attention with sinks.
    Swa(SwaConfig),
    /// Blurry Window Attention.
    Bla(BlaConfig),
    /// Latent-compressed (MLA-style) sliding window (format 4).
    Mla(MlaConfig),
}

/// Layer kind codes (word 0 of a layer record).
pub mod kind {
    /// Gated DeltaNet.
    pub const GDN: u32 = 1;
    /// Gated Slot Attention.
    pub const GSA: u32 = 2;
    /// Sliding-window attention.
    pub const SWA: u32 = 3;
    /// Blurry Window Attention.
    pub const BLA: u32 = 4;
    /// Latent-compressed (MLA-style) sliding window (format 4).
    pub const MLA: u32 = 5;
}

/// Returns `Err` from a const fn when `cond` is false.
macro_rules! ensure {
    ($cond:expr, $layer:expr, $reason:literal) => {
        if !$cond {
            return Err(Error::BadConfig {
                layer: $layer,
                reason: $reason,
            });
        }
    };
}
pub(crate) use ensure;

/// Returns [`Error::SizeOverflow`] from a const fn when `cond` is false.
macro_rules! ensure_size {
    ($cond:expr, $layer:expr, $what:literal) => {
        if !$cond {
            return Err(Error::SizeOverflow {
                layer: $layer,
                what: $what,
            });
        }
    };
}
pub(crate) use ensure_size;

/// Whether `v` is a usable dimension (1..=MAX_DIM).
pub(crate) const fn dim_ok(v: u32) -> bool {
    v >= 1 && v <= MAX_DIM
}

/// Whether the tensor dimension `a * b` is at most [`MAX_DIM`] (computed in
/// u64: two u32 factors cannot overflow it).
pub(crate) const fn width_ok(a: u32, b: u32) -> bool {
    a as u64 * b as u64 <= MAX_DIM as u64
}

impl ModelConfig {
    /// Parses the model record at the start of the config section.
    pub const fn parse(section: &[u8]) -> Result<ModelConfig> {
        let mut w = [0u32; MODEL_RECORD_WORDS];
        let mut i = 0;
        while i < MODEL_RECORD_WORDS {
            w[i] = match read_u32(section, 4 * i) {
                Some(v) => v,
                None => return Err(Error::BadHeader("config section too short")),
            };
            i += 1;
        }
        let tokenizer = match w[6] {
            0 => TokenizerKind::Bytes,
            1 => TokenizerKind::Bpe,
            _ => {
                return Err(Error::BadConfig {
                    layer: None,
                    reason: "unknown tokenizer kind",
                })
            }
        };
        let cfg = ModelConfig {
            vocab_size: w[0],
            hidden_size: w[1],
            intermediate_size: w[2],
            norm_eps: f32::from_bits(w[3]),
            tie_word_embeddings: w[4] & 1 != 0,
            provenance: w[7],
            num_layers: w[5],
            tokenizer,
        };
        ensure!(w[4] & !1 == 0, None, "unknown model flags");
        ensure!(dim_ok(cfg.vocab_size), None, "vocab_size out of range");
        ensure!(dim_ok(cfg.hidden_size), None, "hidden_size out of range");
        ensure!(
            dim_ok(cfg.intermediate_size),
            None,
            "intermediate_size out of range"
        );
        ensure!(
            cfg.norm_eps.is_finite() && cfg.norm_eps >= 0.0,
            None,
            "norm_eps must be finite and >= 0"
        );
        ensure!(
            cfg.num_layers >= 1,
            None,
            "a model needs at least one layer"
        );
        ensure!(
            cfg.num_layers as usize <= MAX_LAYERS,
            None,
            "too many layers (max 64)"
        );
        // num_layers <= MAX_LAYERS (checked above): no overflow.
        let needed = 4 * (MODEL_RECORD_WORDS + cfg.num_layers as usize * LAYER_RECORD_WORDS);
        ensure!(
            section.len() >= needed,
            None,
            "config section shorter than its layers"
        );
        Ok(cfg)
    }

    /// Encodes the model record (used by the tools).
    pub fn encode(&self) -> [u32; MODEL_RECORD_WORDS] {
        [
            self.vocab_size,
            self.hidden_size,
            self.intermediate_size,
            self.norm_eps.to_bits(),
            self.tie_word_embeddings as u32,
            self.num_layers,
            self.tokenizer as u32,
            self.provenance,
        ]
    }
}

impl LayerConfig {
    /// Parses and validates layer record `layer` of the config section.
    pub const fn parse(section: &[u8], layer: u16) -> Result<LayerConfig> {
        let base = 4 * (MODEL_RECORD_WORDS + layer as usize * LAYER_RECORD_WORDS);
        let kind = match read_u32(section, base) {
            Some(k) => k,
            None => return Err(Error::BadHeader("config section too short")),
        };
        let mut w: LayerWords = [0; LAYER_RECORD_WORDS - 1];
        let mut i = 0;
        while i < w.len() {
            w[i] = match read_u32(section, base + 4 * (i + 1)) {
                Some(v) => v,
                None => return Err(Error::BadHeader("config section too short")),
            };
            i += 1;
        }
        let l = Some(layer);
        match kind {
            kind::GDN => match GdnConfig::from_words(&w, l) {
                Ok(c) => Ok(LayerConfig::Gdn(c)),
                Err(e) => Err(e),
            },
            kind::GSA => match GsaConfig::from_words(&w, l) {
                Ok(c) => Ok(LayerConfig::Gsa(c)),
                Err(e) => Err(e),
            },
            kind::SWA => match SwaConfig::from_words(&w, l) {
                Ok(c) => Ok(LayerConfig::Swa(c)),
                Err(e) => Err(e),
            },
            kind::BLA => match BlaConfig::from_words(&w, l) {
                Ok(c) => Ok(LayerConfig::Bla(c)),
                Err(e) => Err(e),
            },
            kind::MLA if cfg!(not(feature = "mla")) => Err(Error::BadConfig {
                layer: l,
                reason: crate::mixers::MLA_NOT_BUILT,
            }),
            kind::MLA => match MlaConfig::from_words(&w, l) {
                Ok(c) => Ok(LayerConfig::Mla(c)),
                Err(e) => Err(e),
            },
            _ => Err(Error::BadConfig {
                layer: l,
                reason: "unknown mixer kind",
            }),
        }
    }

    /// Encodes the layer record (used by the tools).
    pub fn encode(&self) -> [u32; LAYER_RECORD_WORDS] {
        let (kind, words) = match self {
            LayerConfig::Gdn(c) => (kind::GDN, c.to_words()),
            LayerConfig::Gsa(c) => (kind::GSA, c.to_words()),
            LayerConfig::Swa(c) => (kind::SWA, c.to_words()),
            LayerConfig::Bla(c) => (kind::BLA, c.to_words()),
            LayerConfig::Mla(c) => (kind::MLA, c.to_words()),
        };
        let mut out = [0u32; LAYER_RECORD_WORDS];
        out[0] = kind;
        out[1..].copy_from_slice(&words);
        out
    }

    /// Short name of the mixer kind (`gdn`, `gsa`, `swa`, `bla`, `mla`).
    pub const fn kind_name(&self) -> &'static str {
        match self {
            LayerConfig::Gdn(_) => "gdn",
            LayerConfig::Gsa(_) => "gsa",
            LayerConfig::Swa(_) => "swa",
            LayerConfig::Bla(_) => "bla",
            LayerConfig::Mla(_) => "mla",
        }
    }

    /// The oldest image format version whose layer record can hold this
    /// configuration: [`crate::image::MIXER_OPTIONS_FORMAT_VERSION`] for the
    /// GDN family members other than Gated DeltaNet, GSA with a short
    /// convolution, dilated SWA and `mla`; [`crate::image::MIN_FORMAT_VERSION`]
    /// otherwise.
    pub const fn min_format_version(&self) -> u32 {
        let new = match self {
            LayerConfig::Gdn(c) => !c.is_gated_deltanet() || c.conv_size == 0,
            LayerConfig::Gsa(c) => c.conv_size > 0,
            LayerConfig::Swa(c) => c.dilation > 1,
            LayerConfig::Bla(_) => false,
            LayerConfig::Mla(_) => true,
        };
        if new {
            crate::image::MIXER_OPTIONS_FORMAT_VERSION
        } else {
            crate::image::MIN_FORMAT_VERSION
        }
    }

    /// f32 words of recurrent state this layer keeps (`pinned_max`: SWA
    /// pinned-prefix capacity). u64 so that no configuration overflows it.
    pub const fn state_len(&self, pinned_max: usize) -> u64 {
        match self {
            LayerConfig::Gdn(c) => c.state_len(),
            LayerConfig::Gsa(c) => c.state_len(),
            LayerConfig::Swa(c) => c.state_len(pinned_max),
            LayerConfig::Bla(c) => c.state_len(),
            LayerConfig::Mla(c) => c.state_len(),
        }
    }

    /// Input width of the layer's output projection (`o_proj` columns): with
    /// `D` and `I`, the widest vector a product of this layer reads.
    pub const fn out_proj_cols(&self) -> u64 {
        match self {
            LayerConfig::Gdn(c) => c.num_v_heads as u64 * c.head_v_dim as u64,
            LayerConfig::Gsa(c) => c.num_heads as u64 * c.head_v_dim as u64,
            LayerConfig::Swa(c) => c.num_heads as u64 * c.head_dim as u64,
            LayerConfig::Bla(c) => c.num_heads as u64 * c.head_v_dim as u64,
            LayerConfig::Mla(c) => c.num_heads as u64 * c.v_head_dim as u64,
        }
    }

    /// f32 words of per-token scratch this layer's mixer needs.
    pub const fn scratch_len(&self) -> u64 {
        match self {
            LayerConfig::Gdn(c) => c.scratch_len(),
            LayerConfig::Gsa(c) => c.scratch_len(),
            LayerConfig::Swa(c) => c.scratch_len(),
            LayerConfig::Bla(c) => c.scratch_len(),
            LayerConfig::Mla(c) => c.scratch_len(),
        }
    }
}
