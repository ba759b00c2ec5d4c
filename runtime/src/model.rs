//! A validated, immutable model borrowed from an image (flash).

use crate::block::{BlockConfig, NormKind};
use crate::config::{LayerConfig, ModelConfig, TokenPath, TokenizerKind, MAX_LAYERS};
use crate::error::{Error, Result};
use crate::format::{Role, StateFormat};
use crate::image::{
    DType, Header, Layout, TensorEntry, TensorSpec, BLOCK_FORMAT_VERSION,
    COMPUTED_PHI_FORMAT_VERSION, CRC, CRC_START, IMAGE_ALIGN, INTEGER_PATH_FORMAT_VERSION,
    TENSOR_ALIGN, TENSOR_ENTRY_LEN, TILED_FORMAT_VERSION,
};
use crate::mixers::{SpecSink, Specs};
use crate::sizes::buffer_len;
use crate::tensor::Tensor;
#[cfg(feature = "bpe")]
use crate::tokenizer::BpeTokenizer;
use crate::tokenizer::{ByteTokenizer, Tokenizer};
pub use crate::weights::LayerWeights;

/// A model whose image has been fully validated: every tensor the config
/// needs is present, in bounds, aligned, of the right shape and dtype, and the
/// CRC matches. Cheap to copy; borrows the image.
#[derive(Clone, Copy, Debug)]
pub struct Model<'a> {
    image: &'a [u8],
    header: Header,
    config: ModelConfig,
    tokenizer: Tokenizer<'a>,
    /// Table index of each layer's first tensor.
    layer_first: [u16; MAX_LAYERS + 1],
}

/// Model-wide tensors in canonical order.
pub fn global_specs(c: &ModelConfig) -> heapless::Vec<TensorSpec, 4> {
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
    if let NormKind::Layer = c.final_norm {
        add(Role::FinalNormBias, [d, 0, 0], false);
    }
    if !c.tie_word_embeddings {
        add(Role::LmHead, [vocab, d, 0], true);
    }
    v
}

/// Tensors of one block (norms, mixer, MLP) in canonical order: the
/// block's pre-norm and pre-mixer norm, the mixer's tensors, the MLP's
/// (docs/spec.md §2).
pub fn block_specs(
    c: &ModelConfig,
    layer_cfg: &LayerConfig,
    block: &BlockConfig,
    layer: u16,
) -> Specs {
    let mut s = Specs::new();
    give_block_specs(c, layer_cfg, block, layer, &mut s);
    s
}

/// [`block_specs`] given to `sink` one at a time.
fn give_block_specs(
    c: &ModelConfig,
    layer_cfg: &LayerConfig,
    block: &BlockConfig,
    layer: u16,
    sink: &mut dyn SpecSink,
) {
    let (d, i) = (c.hidden_size, c.intermediate_size);
    block.push_pre_specs(layer, d, sink);
    layer_cfg.mixer().push_specs(layer, d, sink);
    block.push_post_specs(layer, d, i, sink);
}

/// A [`SpecSink`] that runs a check on each spec as it comes and keeps the
/// first error (the rest are skipped).
struct Checks<'f, F> {
    f: &'f mut F,
    err: Option<Error>,
}

impl<F: FnMut(TensorSpec) -> Result<()>> SpecSink for Checks<'_, F> {
    fn add(&mut self, spec: TensorSpec) {
        if self.err.is_none() {
            if let Err(e) = (self.f)(spec) {
                self.err = Some(e);
            }
        }
    }
}

/// Calls `f` with every tensor the configuration expects, in canonical
/// table order (no list of a layer's specs is kept: each is checked as its
/// mixer or block gives it).
pub fn for_each_spec(
    section: &[u8],
    config: &ModelConfig,
    mut f: impl FnMut(TensorSpec) -> Result<()>,
) -> Result<()> {
    for spec in global_specs(config) {
        f(spec)?;
    }
    for layer in 0..config.num_layers as u16 {
        let lc = LayerConfig::parse(section, layer)?;
        let block = BlockConfig::parse(section, layer)?;
        let mut checks = Checks {
            f: &mut f,
            err: None,
        };
        give_block_specs(config, &lc, &block, layer, &mut checks);
        if let Some(e) = checks.err {
            return Err(e);
        }
    }
    Ok(())
}

impl<'a> Model<'a> {
    /// Validates `image` once and returns the model. The image must start on a
    /// 16-byte boundary (see `docs/image-format.md`).
    pub fn load(image: &'a [u8]) -> Result<Model<'a>> {
        if image.as_ptr() as usize % IMAGE_ALIGN != 0 {
            return Err(Error::ImageMisaligned);
        }
        let header = Header::parse(image)?;
        // Header::parse checked 64 <= signed_len <= file_len <= image.len()
        // (the signature section, when there is one, is outside the CRC).
        let image = image
            .get(..header.file_len as usize)
            .ok_or(Error::Internal("file length"))?;
        let covered = image
            .get(CRC_START..header.signed_len() as usize)
            .ok_or(Error::Internal("signed length"))?;
        let computed = CRC.checksum(covered);
        if computed != header.crc32 {
            return Err(Error::CrcMismatch {
                stored: header.crc32,
                computed,
            });
        }
        let section = section(image, header.config_off, header.config_len);
        let config = ModelConfig::parse(section)?;
        // A session this target cannot address is refused first, as
        // `session_len` refuses it (it parses the same records): on a 32-bit
        // target a layer's state can overflow the address space while the
        // records are otherwise valid.
        crate::sizes::buffer_len(image, 0)?;
        let int_path = config.token_path == TokenPath::Int;
        if int_path && header.version < INTEGER_PATH_FORMAT_VERSION {
            return Err(Error::BadConfig {
                layer: None,
                reason: "the integer token path needs image format version 6",
            });
        }
        if int_path && cfg!(not(feature = "int-path")) {
            return Err(Error::BadConfig {
                layer: None,
                reason: "the image is on the integer token path: build ferrite with its `int-path` feature",
            });
        }
        if config.final_norm != NormKind::Rms || config.intermediate_size == 0 {
            if header.version < BLOCK_FORMAT_VERSION {
                return Err(Error::BadConfig {
                    layer: None,
                    reason: "a LayerNorm final norm or an intermediate_size of 0 needs image format version 8",
                });
            }
            if int_path && config.final_norm != NormKind::Rms {
                return Err(Error::BadConfig {
                    layer: None,
                    reason: "the integer token path runs RMSNorm blocks only",
                });
            }
        }
        // Layers that run their integer step (a bit per layer).
        let mut int_layers = 0u64;
        // The first cross layer: no memory encoder may run it.
        let mut first_cross: Option<u16> = None;
        for layer in 0..config.num_layers as u16 {
            let lc = LayerConfig::parse(section, layer)?;
            if let LayerConfig::Cross(c) = lc {
                let first = *first_cross.get_or_insert(layer);
                if c.encoder_layers > first as u32 {
                    return Err(Error::BadConfig {
                        layer: Some(layer),
                        reason: "cross memory_encoder_layers must not reach the first cross layer",
                    });
                }
            }
            let block = BlockConfig::parse(section, layer)?;
            if block.min_format_version() > header.version {
                return Err(Error::BadConfig {
                    layer: Some(layer),
                    reason: "these block options need image format version 8",
                });
            }
            if int_path && !block.integer_path_ok() {
                return Err(Error::BadConfig {
                    layer: Some(layer),
                    reason:
                        "the integer token path runs RMSNorm blocks only, with a SwiGLU MLP or none",
                });
            }
            let needs = lc.min_format_version();
            if needs > header.version {
                return Err(Error::BadConfig {
                    layer: Some(layer),
                    reason: if needs >= BLOCK_FORMAT_VERSION {
                        "this mixer needs image format version 8"
                    } else if needs >= INTEGER_PATH_FORMAT_VERSION {
                        "this state format needs image format version 6"
                    } else if needs >= COMPUTED_PHI_FORMAT_VERSION {
                        "this mixer option needs image format version 5"
                    } else {
                        "this mixer option needs image format version 4"
                    },
                });
            }
            if lc.state_format() != StateFormat::F32 {
                if !int_path {
                    return Err(Error::BadConfig {
                        layer: Some(layer),
                        reason: "an integer state format needs the integer token path",
                    });
                }
                int_layers |= 1 << layer;
            }
        }
        crate::tokenizer::check_section(image, &header, &config)?;
        let tokenizer = match config.tokenizer {
            TokenizerKind::Bytes => Tokenizer::Bytes(ByteTokenizer),
            TokenizerKind::Bpe => {
                #[cfg(feature = "bpe")]
                {
                    let s = self::section(image, header.tokenizer_off, header.tokenizer_len);
                    Tokenizer::Bpe(BpeTokenizer::parse(s, config.vocab_size)?)
                }
                #[cfg(not(feature = "bpe"))]
                return Err(Error::BadConfig {
                    layer: None,
                    reason: "the image has a BPE tokenizer: build ferrite with its `bpe` feature",
                });
            }
        };
        let mut model = Model {
            image,
            header,
            config,
            tokenizer,
            layer_first: [0; MAX_LAYERS + 1],
        };
        model.validate_tensors(section, int_path.then_some(int_layers))?;
        Ok(model)
    }

    /// Checks every table entry against the config. `int_layers`: on the
    /// integer token path, the layers that run their integer step (a bit
    /// each): their matrices, the MLPs', the embeddings and the head must
    /// be tiled.
    fn validate_tensors(&mut self, section: &[u8], int_layers: Option<u64>) -> Result<()> {
        let data_start = self.header.data_off as usize;
        // Header::parse checked data_off + data_len <= file_len (a u32).
        let data_end = data_start.saturating_add(self.header.data_len as usize);
        let mut index = 0u32;
        let mut cursor = data_start;
        let mut current_layer = None;
        let (image, count) = (self.image, self.header.tensor_count);
        let mut layer_first = self.layer_first;
        for_each_spec(section, &self.config, |spec| {
            if index >= count {
                return Err(Error::MissingTensor {
                    layer: spec.layer,
                    role: spec.role,
                });
            }
            let e = self.entry(index)?;
            if e.layer_index() != spec.layer || e.role != spec.role {
                if e.role == Role::BlaPhi {
                    // Only a bla layer whose record asks for the table has
                    // one (format 5 lets the record say phi is computed).
                    return Err(Error::BadTensor {
                        index,
                        reason: "attn.phi is stored where the config has none (a bla layer whose record says phi is computed)",
                    });
                }
                return Err(Error::MissingTensor {
                    layer: spec.layer,
                    role: spec.role,
                });
            }
            if e.dims != spec.dims {
                return Err(Error::ShapeMismatch {
                    layer: spec.layer,
                    role: spec.role,
                });
            }
            if e.dtype.is_quantized() && !spec.matrix {
                return Err(Error::BadTensor {
                    index,
                    reason: "only weight matrices may be quantized",
                });
            }
            if let Some(int_layers) = int_layers {
                let block_matrix = matches!(
                    spec.role,
                    Role::Embeddings | Role::LmHead | Role::MlpGate | Role::MlpUp | Role::MlpDown
                );
                // A `cross` layer's memories are row-major (3-D: never
                // tiled); its integer step reads int8 ones in place and
                // others by its f32 step.
                let memory = matches!(spec.role, Role::MemoryK | Role::MemoryV);
                let int_mixer = spec.layer.is_some_and(|l| int_layers >> l & 1 == 1) && !memory;
                if spec.matrix && (block_matrix || int_mixer) && e.layout != Layout::Tiled {
                    return Err(Error::BadTensor {
                        index,
                        reason: "the integer token path needs this matrix tiled (int8/int4)",
                    });
                }
                // Norms (and the vectors of integer steps) are read as f32 bits.
                let int_vector = spec.layer.is_none()
                    || matches!(spec.role, Role::AttnNorm | Role::MlpNorm)
                    || int_mixer;
                if !spec.matrix && int_vector && e.dtype != DType::F32 {
                    return Err(Error::BadTensor {
                        index,
                        reason: "the integer token path reads its vectors as f32",
                    });
                }
            }
            if e.layout != Layout::RowMajor && self.header.version < TILED_FORMAT_VERSION {
                return Err(Error::BadTensor {
                    index,
                    reason: "the tiled layout needs image format version 3",
                });
            }
            if !e.dtype.is_quantized() && (e.group_size != 0 || e.scale_len != 0) {
                return Err(Error::BadTensor {
                    index,
                    reason: "scales on an unquantized tensor",
                });
            }
            let mut regions = [(e.data_off, e.data_len), (e.scale_off, e.scale_len)];
            if e.dtype == DType::F32 || e.dtype == DType::F16 {
                regions[1] = (0, 0);
            }
            for (off, len) in regions {
                if len == 0 {
                    continue;
                }
                let (off, end) = (off as usize, (off as usize).saturating_add(len as usize));
                if off % TENSOR_ALIGN != 0 {
                    return Err(Error::BadTensor {
                        index,
                        reason: "payload not 32-byte aligned",
                    });
                }
                if off < cursor {
                    return Err(Error::BadTensor {
                        index,
                        reason: "payload overlaps another",
                    });
                }
                if end > data_end {
                    return Err(Error::BadTensor {
                        index,
                        reason: "payload outside the data section",
                    });
                }
                cursor = end;
            }
            Tensor::from_entry(image, &e, index)?;
            if let Some(l) = spec.layer {
                if current_layer != Some(l) {
                    current_layer = Some(l);
                    *layer_first
                        .get_mut(l as usize)
                        .ok_or(Error::Internal("layer index"))? = index as u16;
                }
            }
            index += 1;
            Ok(())
        })?;
        if index != count {
            return Err(Error::BadHeader(
                "tensor table has entries the config does not use",
            ));
        }
        *layer_first
            .get_mut(self.config.num_layers as usize)
            .ok_or(Error::Internal("layer count"))? = index as u16;
        self.layer_first = layer_first;
        Ok(())
    }

    /// The image this model reads from.
    pub fn image(&self) -> &'a [u8] {
        self.image
    }

    /// The parsed header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Model-wide configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The tokenizer the image carries (the byte tokenizer unless it has a BPE section).
    pub fn tokenizer(&self) -> Tokenizer<'a> {
        self.tokenizer
    }

    /// Configuration of layer `i`.
    pub fn layer(&self, i: usize) -> Result<LayerConfig> {
        if i >= self.config.num_layers as usize {
            return Err(Error::BadConfig {
                layer: None,
                reason: "layer index out of range",
            });
        }
        LayerConfig::parse(self.config_section(), i as u16)
    }

    /// Block options of layer `i` (the format-1 block in images before
    /// format 8).
    pub fn block(&self, i: usize) -> Result<BlockConfig> {
        if i >= self.config.num_layers as usize {
            return Err(Error::BadConfig {
                layer: None,
                reason: "layer index out of range",
            });
        }
        BlockConfig::parse(self.config_section(), i as u16)
    }

    /// f32 words of layer `i`'s state (its mixer's, then its block's) in a
    /// session that may pin `pinned_max` tokens.
    pub fn layer_state_len(&self, i: usize, pinned_max: usize) -> Result<usize> {
        let words = crate::sizes::layer_state_words(
            &self.layer(i)?,
            &self.block(i)?,
            self.config.hidden_size,
            pinned_max,
        );
        usize::try_from(words).map_err(|_| Error::SizeOverflow {
            layer: Some(i as u16),
            what: "the layer's state exceeds what this target can address",
        })
    }

    pub(crate) fn config_section(&self) -> &'a [u8] {
        section(self.image, self.header.config_off, self.header.config_len)
    }

    /// Tensor table entry `index`.
    pub fn entry(&self, index: u32) -> Result<TensorEntry> {
        if index >= self.header.tensor_count {
            return Err(Error::BadTensor {
                index,
                reason: "index outside the tensor table",
            });
        }
        TensorEntry::parse(self.table(), index)
    }

    /// The bytes of the tensor table.
    fn table(&self) -> &'a [u8] {
        // Header::parse checked that the table fits in the image (a u32).
        let table_len = self
            .header
            .tensor_count
            .saturating_mul(TENSOR_ENTRY_LEN as u32);
        section(self.image, self.header.table_off, table_len)
    }

    /// Number of tensors in the image.
    pub fn tensor_count(&self) -> u32 {
        self.header.tensor_count
    }

    /// Tensor `index` of the table.
    pub fn tensor(&self, index: u32) -> Result<Tensor<'a>> {
        Tensor::from_entry(self.image, &self.entry(index)?, index)
    }

    /// A model-wide tensor (embeddings, final norm, head; the head falls back
    /// to the embeddings when tied).
    pub fn global(&self, role: Role) -> Result<Tensor<'a>> {
        let role = if role == Role::LmHead && self.config.tie_word_embeddings {
            Role::Embeddings
        } else {
            role
        };
        // Model-wide tensors come first in the table, before layer 0's.
        for index in 0..u32::from(self.layer_first[0]) {
            let e = self.entry(index)?;
            if e.role == role {
                return Tensor::from_entry(self.image, &e, index);
            }
        }
        Err(Error::MissingTensor { layer: None, role })
    }

    /// The tensors of layer `i` (an index past the last layer gives an
    /// empty view, whose lookups fail with `MissingTensor`).
    pub fn layer_weights(&self, i: usize) -> LayerWeights<'a> {
        // `MAX_LAYERS` bounds `num_layers` (checked at load); the second
        // `min` states it, so the lookups below have no panic branch.
        let i = i.min(self.config.num_layers as usize).min(MAX_LAYERS);
        LayerWeights::new(
            self.image,
            self.table(),
            self.layer_first[i],
            self.layer_first[(i + 1).min(MAX_LAYERS)],
        )
    }

    /// f32 words of recurrent state (all layers) for a session that may pin up
    /// to `pinned_max` tokens; an error where [`Model::session_len`] is one.
    pub fn state_len(&self, pinned_max: usize) -> Result<usize> {
        buffer_len(self.image, pinned_max).map(|len| len.state)
    }

    /// f32 words of the whole session buffer (state + per-token scratch):
    /// [`crate::session_len`] of the model's image.
    pub fn session_len(&self, pinned_max: usize) -> Result<usize> {
        crate::sizes::session_len(self.image, pinned_max)
    }

    /// Bytes of the session buffer, as reported to users (`4 * session_len`).
    pub fn session_bytes(&self, pinned_max: usize) -> Result<usize> {
        words_to_bytes(self.session_len(pinned_max)?)
    }

    /// Bytes of recurrent state, the part that a transformer's KV cache would grow.
    pub fn state_bytes(&self, pinned_max: usize) -> Result<usize> {
        words_to_bytes(self.state_len(pinned_max)?)
    }

    /// Checks every stored number that is a float: f32 and f16 values and the
    /// f32 scales of int8/int4 tensors must be finite, else
    /// [`Error::BadTensor`] names the first tensor that is not.
    ///
    /// [`Model::load`] checks structure (header, CRC, records, shapes and
    /// offsets) in time independent of the weights; this reads every weight
    /// once (linear in the image), for a loader that must not switch to an
    /// image whose CRC is valid but whose numbers would make every logit NaN
    /// (an A/B update: `boards/src/bin/ota.rs`).
    pub fn check_values(&self) -> Result<()> {
        use crate::tensor::TensorData;
        fn finite(xs: &[f32]) -> bool {
            xs.iter().all(|x| x.is_finite())
        }
        for index in 0..self.tensor_count() {
            let ok = match *self.tensor(index)?.data() {
                TensorData::F32(v) => finite(v),
                TensorData::F16(v) => v.iter().all(|x| x.is_finite()),
                TensorData::I8 { scales, .. } | TensorData::I4 { scales, .. } => finite(scales),
                TensorData::TiledI8(t) => finite(t.row_scales),
                TensorData::TiledI4(t) => finite(t.row_scales),
            };
            if !ok {
                return Err(Error::BadTensor {
                    index,
                    reason: "a value or scale is NaN or infinite",
                });
            }
        }
        Ok(())
    }
}

/// Bytes of `words` f32 words (never more than `isize::MAX` for a size that
/// [`crate::session_len`] accepted; checked all the same).
fn words_to_bytes(words: usize) -> Result<usize> {
    words.checked_mul(4).ok_or(Error::SizeOverflow {
        layer: None,
        what: "the session buffer exceeds what this target can address",
    })
}

/// Bytes `off..off + len` of `image`, empty when out of bounds (the header
/// checks keep every section in bounds).
fn section(image: &[u8], off: u32, len: u32) -> &[u8] {
    let start = off as usize;
    start
        .checked_add(len as usize)
        .and_then(|end| image.get(start..end))
        .unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    //! The limits of the mixers' `from_words` and the sizes of hand-built
    //! configurations, through `LayerConfig` and the block's tensor specs.
    use super::*;
    use crate::config::{LayerWords, MAX_DIM};
    use crate::mixers::{
        BlaConfig, BlaDecay, BlaKernel, BlaPhiSource, FeatureMap, GdnConfig, GdnDecay, GsaConfig,
        MlaConfig, QkActivation, QkNorm, SwaConfig,
    };

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
        let specs = block_specs(&model(), &c, &BlockConfig::RMS_SWIGLU, 0);
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
            token_path: crate::config::TokenPath::F32,
            final_norm: NormKind::Rms,
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
                state: StateFormat::F32,
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
                state: StateFormat::F32,
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
                state: crate::format::StateFormat::F32,
            }),
            LayerConfig::Bla(BlaConfig {
                num_heads: m,
                num_kv_heads: m,
                head_k_dim: m,
                head_v_dim: m,
                period: m,
                modes: m,
                slots: m,
                kernel: BlaKernel::Fejer,
                decay: BlaDecay::Gated,
                gamma: 1.0,
                conv_size: m,
                phi_source: BlaPhiSource::Computed,
                state: StateFormat::F32,
            }),
            LayerConfig::Mla(MlaConfig {
                num_heads: m,
                head_dim: m,
                v_head_dim: m,
                rope_dim: m,
                kv_lora_rank: m,
                window: m,
                rope_theta: 1.0,
                state: StateFormat::F32,
            }),
        ];
        for c in layers {
            assert_eq!(c.state_len(usize::MAX), u64::MAX, "{c:?}");
            assert_eq!(c.scratch_len(), u64::MAX, "{c:?}");
            let specs = block_specs(&model(), &c, &BlockConfig::RMS_SWIGLU, 0);
            assert!(specs.iter().any(|s| s.dims[0] == u32::MAX), "{c:?}");
            assert!(specs.iter().all(|s| s.numel() > 0));
        }
        if let LayerConfig::Bla(b) = layers[3] {
            // 2 * m overflows a u32; Fejér weight 2 * (1 - 2^31 / 2^32).
            assert_eq!(b.mode_weight(1 << 31), 1.0);
        }
    }
}
