//! The model configuration as stored in an image: fixed-size little-endian
//! records that the tools derive from `config.json` (all defaults resolved).
//!
//! ```text
//! model record (8 words): vocab | hidden | intermediate | norm_eps (f32 bits)
//!                         | flags (bit 0: tied head, bit 1: integer token path,
//!                           bit 2: LayerNorm final norm) | num_layers
//!                         | tokenizer (0 bytes, 1 BPE) | provenance
//! layer record (16 words): kind | 13 kind-specific words (see each mixer's config)
//!                          | block options (word 14, `block::BlockConfig`) | state format (word 15)
//! ```
//! Parsing is `const` so that the RAM a model needs can be computed from an
//! embedded image at compile time (see [`crate::session_len`]).

use crate::block::{BlockConfig, NormKind};
use crate::error::{ensure, Error, Result};
use crate::format::{dim_ok, read_u32, StateFormat, BLOCK_WORD, STATE_WORD};
pub use crate::format::{LayerWords, LAYER_RECORD_WORDS, MAX_DIM, MODEL_RECORD_WORDS};
use crate::mixers::{
    BlaConfig, CrossConfig, GdnConfig, GlaConfig, GsaConfig, Mamba2Config, Mixer, MlaConfig,
    Rwkv7Config, SwaConfig,
};

/// Most layers a model may have.
pub const MAX_LAYERS: usize = 64;

/// Which tokenizer the image carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TokenizerKind {
    /// One token per byte (vocab 256).
    Bytes = 0,
    /// Byte-level BPE with a tokenizer section (format v2).
    Bpe = 1,
}

/// How a token is computed (model-record flag bit 1, image format 6): a
/// property of the image, never of the build, so that the host and every
/// board compute the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TokenPath {
    /// f32 activations, states and maths (every image before format 6).
    F32 = 0,
    /// The integer token path (docs/integer-path.md): block floating point
    /// activations, integer norms, activations, gates and residuals; each
    /// layer with an integer state format runs its mixer's integer step.
    Int = 1,
}

impl TokenPath {
    /// Name, as `ferrite inspect` and `ferrite quantize --path` spell it.
    pub const fn name(self) -> &'static str {
        match self {
            TokenPath::F32 => "f32",
            TokenPath::Int => "int",
        }
    }
}

/// Model flag bit 0: the head is the embedding table.
const FLAG_TIED: u32 = 1;
/// Model flag bit 1: the integer token path (format 6).
const FLAG_INT_PATH: u32 = 1 << 1;
/// Model flag bit 2: the final norm is a LayerNorm with a bias (format 8).
const FLAG_FINAL_LAYER_NORM: u32 = 1 << 2;

/// Model-wide configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelConfig {
    /// Vocabulary size.
    pub vocab_size: u32,
    /// Model width D.
    pub hidden_size: u32,
    /// MLP width I (0 in a format-8 model without an MLP).
    pub intermediate_size: u32,
    /// Epsilon of the block's norms and the final norm.
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
    /// f32 or the integer token path (flag bit 1).
    pub token_path: TokenPath,
    /// The final norm: RMSNorm, or a LayerNorm with a bias (flag bit 2,
    /// format 8).
    pub final_norm: NormKind,
}

/// Declares the mixer families from one table (below): a line per family,
///
/// ```text
/// /// doc (of the variant and of its kind code)
/// Variant(ConfigType) = KIND_CONST code, "name";
/// ```
///
/// and generates [`LayerConfig`] (a variant per family), the kind codes of
/// [`kind`], [`LayerConfig::KIND_NAMES`], the decoding of a layer record's
/// words by kind, and the methods of [`LayerConfig`] that dispatch to each
/// mixer's own: `from_words`, `to_words`, `layer_state_len`, `scratch_len`,
/// `out_proj_cols`, `min_format_version`, `state_format` (inherent
/// `const fn`s of the config type, so that sizing stays `const`) and its
/// [`Mixer`] impl.
///
/// Each family is a cargo feature of the same name (all on by default). A
/// family built without its feature keeps its variant, record and sizes;
/// [`LayerConfig::parse`] refuses its layers and [`LayerConfig::mixer`]
/// never returns its steps, so the linker leaves them out of the firmware
/// (TFLite Micro's op resolver, decided at build time).
macro_rules! mixer_table {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident($config:ident) = $kind:ident $code:literal, $name:literal;
    )*) => {
        /// One layer's mixer configuration.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum LayerConfig {
            $($(#[doc = $doc])* $variant($config),)*
        }

        /// Layer kind codes (word 0 of a layer record). A code is never reused.
        pub mod kind {
            $($(#[doc = $doc])* pub const $kind: u32 = $code;)*
        }

        impl LayerConfig {
            /// Short names of the mixer kinds, in the table's order (the
            /// `mixer` field of `config.json`, [`LayerConfig::kind_name`]).
            pub const KIND_NAMES: &'static [&'static str] = &[$($name),*];

            /// `Some(reason)` when the family of kind `code` is known but
            /// was built without its feature (its layers are refused).
            pub const fn not_built(code: u32) -> Option<&'static str> {
                match code {
                    $(kind::$kind if !cfg!(feature = $name) => Some(concat!(
                        $name,
                        " layers need the runtime's `",
                        $name,
                        "` feature (on by default; firmware turns it on when its image has one)"
                    )),)*
                    _ => None,
                }
            }

            /// Decodes and validates the kind-specific words `w` of a record
            /// of kind `code` (layer `layer`, for errors).
            const fn from_kind(code: u32, w: &LayerWords, layer: Option<u16>) -> Result<LayerConfig> {
                match code {
                    // A family built without its feature never gets here
                    // (`parse` refuses it first): its record parser is not
                    // linked.
                    $(kind::$kind if !cfg!(feature = $name) => Err(Error::BadConfig {
                        layer,
                        reason: "a mixer built without its feature",
                    }),
                    kind::$kind => match $config::from_words(w, layer) {
                        Ok(c) => Ok(LayerConfig::$variant(c)),
                        Err(e) => Err(e),
                    },)*
                    _ => Err(Error::BadConfig {
                        layer,
                        reason: "unknown mixer kind",
                    }),
                }
            }

            /// The kind code and the kind-specific words of the layer record.
            fn kind_and_words(&self) -> (u32, LayerWords) {
                match self {
                    $(LayerConfig::$variant(c) => (kind::$kind, c.to_words()),)*
                }
            }

            /// Short name of the mixer kind (`gdn`, `gsa`, `swa`, `bla`, `mla`).
            pub const fn kind_name(&self) -> &'static str {
                match self {
                    $(LayerConfig::$variant(_) => $name,)*
                }
            }

            /// The layer's mixer as a trait object: a family built without
            /// its feature (never parsed, see [`LayerConfig::not_built`])
            /// gets a mixer whose steps fail, so its own are not linked.
            pub fn mixer(&self) -> &dyn Mixer {
                match self {
                    $(LayerConfig::$variant(c) => {
                        #[cfg(feature = $name)]
                        let m: &dyn Mixer = c;
                        #[cfg(not(feature = $name))]
                        let m: &dyn Mixer = {
                            let _ = c;
                            &crate::mixers::NotBuilt
                        };
                        m
                    })*
                }
            }

            /// The oldest image format version whose layer record can hold
            /// this configuration: [`crate::image::COMPUTED_PHI_FORMAT_VERSION`]
            /// for a `bla` layer whose phi the runtime computes,
            /// [`crate::image::MIXER_OPTIONS_FORMAT_VERSION`] for the GDN
            /// family members other than Gated DeltaNet, GSA with a short
            /// convolution, dilated SWA and `mla`;
            /// [`crate::image::MIN_FORMAT_VERSION`] otherwise.
            pub const fn min_format_version(&self) -> u32 {
                match self {
                    $(LayerConfig::$variant(c) => c.min_format_version(),)*
                }
            }

            /// How the layer keeps its state (word 15 of its record): what
            /// its `from_words` read, [`StateFormat::F32`] for a mixer
            /// without an integer step.
            pub const fn state_format(&self) -> StateFormat {
                match self {
                    $(LayerConfig::$variant(c) => c.state_format(),)*
                }
            }

            /// f32 words of recurrent state this layer keeps (`pinned_max`: SWA
            /// pinned-prefix capacity). u64 so that no configuration overflows it.
            pub const fn state_len(&self, pinned_max: usize) -> u64 {
                match self {
                    $(LayerConfig::$variant(c) => c.layer_state_len(pinned_max),)*
                }
            }

            /// Input width of the layer's output projection (`o_proj` columns): with
            /// `D` and `I`, the widest vector a product of this layer reads.
            pub const fn out_proj_cols(&self) -> u64 {
                match self {
                    $(LayerConfig::$variant(c) => c.out_proj_cols(),)*
                }
            }

            /// f32 words of per-token scratch this layer's mixer needs.
            pub const fn scratch_len(&self) -> u64 {
                match self {
                    $(LayerConfig::$variant(c) => c.scratch_len(),)*
                }
            }
        }
    };
}

// The mixer families. A new one is a line here, its module in `mixers` and
// a cargo feature of its name (docs/adding-a-mixer.md).
mixer_table! {
    /// Gated DeltaNet.
    Gdn(GdnConfig) = GDN 1, "gdn";
    /// Gated Slot Attention.
    Gsa(GsaConfig) = GSA 2, "gsa";
    /// Sliding-window attention with sinks.
    Swa(SwaConfig) = SWA 3, "swa";
    /// Blurry Window Attention.
    Bla(BlaConfig) = BLA 4, "bla";
    /// Latent-compressed (MLA-style) sliding window (format 4).
    Mla(MlaConfig) = MLA 5, "mla";
    /// Mamba-2 (format 8).
    Mamba2(Mamba2Config) = MAMBA2 6, "mamba2";
    /// RWKV-7 time mixing (format 8).
    Rwkv7(Rwkv7Config) = RWKV7 7, "rwkv7";
    /// Per-key-decay linear attention: fla's GLA, HGRN2 and RetNet (format 8).
    Gla(GlaConfig) = GLA 8, "gla";
    /// Cross-attention over a fixed memory baked into the image (format 8).
    Cross(CrossConfig) = CROSS 9, "cross";
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
            tie_word_embeddings: w[4] & FLAG_TIED != 0,
            provenance: w[7],
            num_layers: w[5],
            tokenizer,
            token_path: if w[4] & FLAG_INT_PATH != 0 {
                TokenPath::Int
            } else {
                TokenPath::F32
            },
            final_norm: if w[4] & FLAG_FINAL_LAYER_NORM != 0 {
                NormKind::Layer
            } else {
                NormKind::Rms
            },
        };
        ensure!(
            w[4] & !(FLAG_TIED | FLAG_INT_PATH | FLAG_FINAL_LAYER_NORM) == 0,
            None,
            "unknown model flags"
        );
        ensure!(
            cfg!(feature = "block-options") || w[4] & FLAG_FINAL_LAYER_NORM == 0,
            None,
            "a LayerNorm final norm needs the runtime's `block-options` feature (on by default; firmware turns it on when its image has one)"
        );
        ensure!(dim_ok(cfg.vocab_size), None, "vocab_size out of range");
        ensure!(dim_ok(cfg.hidden_size), None, "hidden_size out of range");
        // 0 only where no layer has an MLP (checked below, once the layer
        // records are known to be there).
        ensure!(
            cfg.intermediate_size <= MAX_DIM,
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
        if cfg.intermediate_size == 0 {
            let mut layer = 0;
            while layer < cfg.num_layers {
                let at =
                    4 * (MODEL_RECORD_WORDS + layer as usize * LAYER_RECORD_WORDS + 1 + BLOCK_WORD);
                // An unknown block word is the layer parser's error; here
                // only a known MLP needs the width.
                let mlp = match read_u32(section, at) {
                    Some(w) => match BlockConfig::from_word(w, None) {
                        Ok(b) => b.has_mlp(),
                        Err(_) => false,
                    },
                    None => true,
                };
                ensure!(!mlp, None, "intermediate_size out of range");
                layer += 1;
            }
        }
        Ok(cfg)
    }

    /// Encodes the model record (used by the tools).
    pub fn encode(&self) -> [u32; MODEL_RECORD_WORDS] {
        [
            self.vocab_size,
            self.hidden_size,
            self.intermediate_size,
            self.norm_eps.to_bits(),
            self.tie_word_embeddings as u32
                | (self.token_path as u32) << 1
                | if matches!(self.final_norm, NormKind::Layer) {
                    FLAG_FINAL_LAYER_NORM
                } else {
                    0
                },
            self.num_layers,
            self.tokenizer as u32,
            self.provenance,
        ]
    }
}

impl LayerConfig {
    /// The integer state format this layer's mixer has an integer step for
    /// (docs/integer-path.md): int16 for a GDN layer with normalised keys
    /// and for GSA and BLA layers; int8 KV with log scales for SWA layers
    /// (their int8 KV with scale words, `Int8Kv`, still loads and runs);
    /// int8 KV for MLA layers and for `cross` layers (their integer step
    /// over int8 memories; the state stays one word); `None` for GDN
    /// without normalised keys (its f32 step only).
    pub const fn integer_state(&self) -> Option<StateFormat> {
        match self {
            LayerConfig::Gdn(c) if !matches!(c.qk_norm, crate::mixers::QkNorm::None) => {
                Some(StateFormat::Int16)
            }
            LayerConfig::Swa(_) => Some(StateFormat::Int8KvLog),
            LayerConfig::Gsa(_) => Some(StateFormat::Int16),
            LayerConfig::Bla(_) => Some(StateFormat::Int16),
            LayerConfig::Mla(_) => Some(StateFormat::Int8Kv),
            LayerConfig::Cross(_) => Some(StateFormat::Int8Kv),
            _ => None,
        }
    }

    /// This layer with state format `state`: f32 for every layer, an
    /// integer format only where [`LayerConfig::integer_state`] offers it,
    /// and for SWA layers also the older int8 KV (`None` otherwise).
    pub fn with_state(&self, state: StateFormat) -> Option<LayerConfig> {
        if state == StateFormat::F32 {
            return Some(match *self {
                LayerConfig::Gdn(c) => LayerConfig::Gdn(GdnConfig { state, ..c }),
                LayerConfig::Swa(c) => LayerConfig::Swa(SwaConfig { state, ..c }),
                LayerConfig::Gsa(c) => LayerConfig::Gsa(GsaConfig { state, ..c }),
                LayerConfig::Bla(c) => LayerConfig::Bla(BlaConfig { state, ..c }),
                LayerConfig::Mla(c) => LayerConfig::Mla(MlaConfig { state, ..c }),
                LayerConfig::Mamba2(c) => LayerConfig::Mamba2(c),
                LayerConfig::Rwkv7(c) => LayerConfig::Rwkv7(c),
                LayerConfig::Gla(c) => LayerConfig::Gla(c),
                LayerConfig::Cross(c) => LayerConfig::Cross(CrossConfig { state, ..c }),
            });
        }
        match *self {
            LayerConfig::Gdn(c) if self.integer_state() == Some(state) => {
                Some(LayerConfig::Gdn(GdnConfig { state, ..c }))
            }
            // SWA: the log-scale KV it is quantized with, or the older
            // int8 KV with scale words (images written before it).
            LayerConfig::Swa(c)
                if matches!(state, StateFormat::Int8Kv | StateFormat::Int8KvLog) =>
            {
                Some(LayerConfig::Swa(SwaConfig { state, ..c }))
            }
            LayerConfig::Gsa(c) if self.integer_state() == Some(state) => {
                Some(LayerConfig::Gsa(GsaConfig { state, ..c }))
            }
            LayerConfig::Bla(c) if self.integer_state() == Some(state) => {
                Some(LayerConfig::Bla(BlaConfig { state, ..c }))
            }
            LayerConfig::Mla(c) if self.integer_state() == Some(state) => {
                Some(LayerConfig::Mla(MlaConfig { state, ..c }))
            }
            LayerConfig::Cross(c) if self.integer_state() == Some(state) => {
                Some(LayerConfig::Cross(CrossConfig { state, ..c }))
            }
            _ => None,
        }
    }

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
        if let Some(reason) = LayerConfig::not_built(kind) {
            return Err(Error::BadConfig { layer: l, reason });
        }
        let lc = match LayerConfig::from_kind(kind, &w, l) {
            Ok(c) => c,
            Err(e) => return Err(e),
        };
        // A mixer without an integer state format leaves the word to this
        // check: only the code its config reports is accepted.
        if w[STATE_WORD] != lc.state_format() as u32 {
            return Err(Error::BadConfig {
                layer: l,
                reason: match StateFormat::from_code(w[STATE_WORD]) {
                    Some(_) => "this mixer has no step for that state format",
                    None => "unknown state format",
                },
            });
        }
        Ok(lc)
    }

    /// Encodes the layer record (used by the tools) with the format-1
    /// block ([`LayerConfig::encode_with`] for others).
    pub fn encode(&self) -> [u32; LAYER_RECORD_WORDS] {
        self.encode_with(&BlockConfig::RMS_SWIGLU)
    }

    /// Encodes the layer record with its block options in word 14.
    pub fn encode_with(&self, block: &BlockConfig) -> [u32; LAYER_RECORD_WORDS] {
        let (kind, mut words) = self.kind_and_words();
        words[STATE_WORD] = self.state_format() as u32;
        words[BLOCK_WORD] = block.to_word();
        let mut out = [0u32; LAYER_RECORD_WORDS];
        out[0] = kind;
        out[1..].copy_from_slice(&words);
        out
    }

    /// Checks what the layer's record cannot check alone: an `rwkv7`
    /// layer's key width `H * K` must be the model's `hidden_size` (its
    /// token shift and interpolations are over both).
    pub const fn check_hidden(&self, hidden: u32, layer: u16) -> Result<()> {
        if let LayerConfig::Rwkv7(c) = self {
            ensure!(
                c.key_width() == hidden as u64,
                Some(layer),
                "rwkv7 needs hidden_size = num_heads * head_dim"
            );
        }
        Ok(())
    }

    /// Runs one token of this layer's mixer ([`Mixer::step`]), with the
    /// value carried across layers (`carry`, the session's region of the
    /// widest [`LayerConfig::carry_len`], zeroed before each token) for the
    /// mixers that write or read it: what the block calls.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &self,
        ctx: &crate::mixers::StepCtx,
        w: &crate::weights::LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut crate::tensor::ActBuf<'_>,
        carry: &mut [f32],
        x: &[f32],
        out: &mut [f32],
    ) -> crate::error::StepResult<()> {
        match self {
            #[cfg(feature = "rwkv7")]
            LayerConfig::Rwkv7(c) => c.step_with_carry(w, state, scratch, act, carry, x, out),
            _ => {
                let _ = &carry;
                self.mixer().step(ctx, w, state, scratch, act, x, out)
            }
        }
    }

    /// f32 words of the value this layer's mixer passes to later layers or
    /// reads from an earlier one (RWKV-7's first-layer value; 0 for the
    /// other mixers): the session keeps the largest such width once per
    /// token, zeroed before the first layer (docs/spec.md §1.1).
    pub const fn carry_len(&self) -> u64 {
        match self {
            LayerConfig::Rwkv7(c) => c.carry_len(),
            _ => 0,
        }
    }
}
