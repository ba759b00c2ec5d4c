//! The session buffer's size, from the image alone: [`session_len`] (a
//! `const fn`, so that a board sizes its `static` buffer at compile time,
//! re-exported at the crate root) and the parts of it that [`crate::Model`]
//! and [`crate::Session`] use. Above `config` and `tokenizer` (it checks the
//! header, the config and the tokenizer section's counts), below `model`.

use crate::block::BlockConfig;
use crate::config::{LayerConfig as Layer, ModelConfig as Cfg, TokenPath};
use crate::error::{Error, Result};
use crate::image::{self, Header};
use crate::tensor;
use crate::tokenizer;

/// Whether any tensor table entry of `image` has the tiled layout (a const
/// scan of the layout bytes; [`crate::Model::load`] validates the entries).
pub(crate) const fn has_tiled_tensors(image: &[u8], header: &Header) -> bool {
    let mut i = 0u64;
    while i < header.tensor_count as u64 {
        let at = header.table_off as u64 + i * image::TENSOR_ENTRY_LEN as u64 + 5;
        if at < image.len() as u64 && image[at as usize] == image::Layout::Tiled as u8 {
            return true;
        }
        i += 1;
    }
    false
}

/// f32 words of the session's activation scratch ([`tensor::ActBuf`]): 0
/// unless some tensor runs the integer path, else enough for the widest
/// input of a product (`D`, `I` or a layer's `o_proj` columns).
pub(crate) const fn act_words(image: &[u8], header: &Header, cfg: &Cfg) -> Result<usize> {
    if !has_tiled_tensors(image, header) {
        return Ok(0);
    }
    let section = match config_section(image, header) {
        Ok(s) => s,
        Err(e) => return Err(e),
    };
    let (d, i) = (cfg.hidden_size as u64, cfg.intermediate_size as u64);
    let mut widest = if d > i { d } else { i };
    let mut layer = 0;
    while layer < cfg.num_layers {
        let cols = match Layer::parse(section, layer as u16) {
            Ok(l) => l.out_proj_cols(),
            Err(e) => return Err(e),
        };
        if cols > widest {
            widest = cols;
        }
        layer += 1;
    }
    // Dims are at most 2^20 (config checks), so this cannot overflow.
    Ok(tensor::ActBuf::words_for(widest as usize))
}

/// Words of the per-layer clamp counters: one per layer on the integer
/// token path, none otherwise.
pub(crate) const fn clamp_words(cfg: &Cfg) -> usize {
    match cfg.token_path {
        TokenPath::Int => cfg.num_layers as usize,
        TokenPath::F32 => 0,
    }
}

/// f32 words of the session buffer (state + scratch) for `image`, for a
/// session that may pin up to `pinned_max` tokens. `const`, so boards size
/// their `static` buffers at compile time. Validates the header, the config
/// and the tokenizer section's counts as [`crate::Model::load`] does, but not the
/// CRC, the tensors or the tokenizer's tables (`load` does). A buffer the
/// target could not address (more than `isize::MAX` bytes) is
/// [`Error::SizeOverflow`].
pub const fn session_len(image: &[u8], pinned_max: usize) -> Result<usize> {
    match buffer_len(image, pinned_max) {
        Ok(len) => Ok(len.total),
        Err(e) => Err(e),
    }
}

/// The f32 words of a session buffer: its state part and the whole.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BufferLen {
    /// Recurrent state of all layers.
    pub state: usize,
    /// Words of the value carried across layers (the widest
    /// [`Layer::carry_len`], 0 in most models).
    pub carry: usize,
    /// State plus per-token scratch.
    pub total: usize,
}

/// f32 words of layer `layer`'s state: its mixer's, then its block's
/// (`pinned_max` for SWA), saturating.
pub(crate) const fn layer_state_words(
    lc: &Layer,
    block: &BlockConfig,
    hidden: u32,
    pinned_max: usize,
) -> u64 {
    lc.state_len(pinned_max)
        .saturating_add(block.state_len(hidden))
}

/// Largest buffer (f32 words) whose byte size this target can address.
pub(crate) const MAX_WORDS: u64 = (isize::MAX as u64) / 4;

/// The config section of `image`, which [`Header::parse`] checked lies
/// inside it (const-compatible).
pub(crate) const fn config_section<'a>(image: &'a [u8], header: &Header) -> Result<&'a [u8]> {
    match image.split_at_checked(header.config_off as usize) {
        Some((_, rest)) => match rest.split_at_checked(header.config_len as usize) {
            Some((section, _)) => Ok(section),
            None => Err(Error::BadHeader("config section out of bounds")),
        },
        None => Err(Error::BadHeader("config section out of bounds")),
    }
}

/// The header, the config section and the model config of `image`,
/// parsed: where every size computed from the image alone starts
/// ([`session_len`], [`crate::snapshot_len`], [`crate::memory_len`]).
pub(crate) const fn parse_config(image: &[u8]) -> Result<(Header, &[u8], Cfg)> {
    let header = match Header::parse(image) {
        Ok(h) => h,
        Err(e) => return Err(e),
    };
    let section = match config_section(image, &header) {
        Ok(s) => s,
        Err(e) => return Err(e),
    };
    match Cfg::parse(section) {
        Ok(cfg) => Ok((header, section, cfg)),
        Err(e) => Err(e),
    }
}

/// `a + b`, or the `SizeOverflow` error for `what` (const-compatible).
pub(crate) const fn checked_add(a: u64, b: u64, what: &'static str) -> Result<u64> {
    match a.checked_add(b) {
        Some(v) if v <= MAX_WORDS => Ok(v),
        _ => Err(Error::SizeOverflow { layer: None, what }),
    }
}

/// Sizes the session buffer of `image` ([`session_len`], [`crate::Model::state_len`]):
/// every sum is checked, and so is the total against the address space.
pub(crate) const fn buffer_len(image: &[u8], pinned_max: usize) -> Result<BufferLen> {
    const TOO_LARGE: &str = "the session buffer exceeds what this target can address";
    let (header, section, cfg) = match parse_config(image) {
        Ok(parts) => parts,
        Err(e) => return Err(e),
    };
    if let Err(e) = tokenizer::check_section(image, &header, &cfg) {
        return Err(e);
    }
    let mut state = 0u64;
    let mut mixer_scratch = 0u64;
    let mut carry = 0u64;
    let mut layer = 0;
    while layer < cfg.num_layers {
        let lc = match Layer::parse(section, layer as u16) {
            Ok(l) => l,
            Err(e) => return Err(e),
        };
        let block = match BlockConfig::parse(section, layer as u16) {
            Ok(b) => b,
            Err(e) => return Err(e),
        };
        if let Err(e) = lc.check_hidden(cfg.hidden_size, layer as u16) {
            return Err(e);
        }
        if lc.carry_len() > carry {
            carry = lc.carry_len();
        }
        // Saturating per layer (an absurd `pinned_max`), checked here.
        let s = layer_state_words(&lc, &block, cfg.hidden_size, pinned_max);
        if s > MAX_WORDS {
            return Err(Error::SizeOverflow {
                layer: Some(layer as u16),
                what: "the layer's state exceeds what this target can address",
            });
        }
        state = match checked_add(state, s, TOO_LARGE) {
            Ok(v) => v,
            Err(e) => return Err(e),
        };
        let s = lc.scratch_len();
        if s > mixer_scratch {
            mixer_scratch = s;
        }
        layer += 1;
    }
    // h, x, out: D each; gate, up: I each; logits: vocab; the carried
    // value. Each is at most 2^20 (the carry H*V of a parsed record), so
    // the fixed part cannot overflow a u64.
    let (d, i, vocab) = (
        cfg.hidden_size as u64,
        cfg.intermediate_size as u64,
        cfg.vocab_size as u64,
    );
    let fixed = 3 * d + 2 * i + vocab + carry;
    let total = match checked_add(state, fixed, TOO_LARGE) {
        Ok(v) => v,
        Err(e) => return Err(e),
    };
    let total = match checked_add(total, mixer_scratch, TOO_LARGE) {
        Ok(v) => v,
        Err(e) => return Err(e),
    };
    // Clamp counters (at most 64 words).
    let total = match checked_add(total, clamp_words(&cfg) as u64, TOO_LARGE) {
        Ok(v) => v,
        Err(e) => return Err(e),
    };
    // Quantized activations, when some tensor runs the integer path.
    let act = match act_words(image, &header, &cfg) {
        Ok(a) => a as u64,
        Err(e) => return Err(e),
    };
    let total = match checked_add(total, act, TOO_LARGE) {
        Ok(v) => v,
        Err(e) => return Err(e),
    };
    // Both are at most MAX_WORDS < usize::MAX on every target.
    Ok(BufferLen {
        state: state as usize,
        carry: carry as usize,
        total: total as usize,
    })
}
