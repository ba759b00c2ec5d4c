//! # ferrite
//!
//! A `no_std`, allocation-free runtime for small recurrent ("fixed-state")
//! language models on microcontrollers. A model's memory is fixed when it is
//! built and never grows, however long it generates.
//!
//! ```text
//! image (&'static [u8], flash) ──Model::load──▶ Model (validated, zero-copy)
//! caller's static [f32; session_len] ──Session::new──▶ feed(token) -> logits
//! ```
//!
//! Four token-mixer families, freely mixed in one stack: [`mixers::GdnConfig`]
//! (Gated DeltaNet), [`mixers::GsaConfig`] (Gated Slot Attention),
//! [`mixers::SwaConfig`] (sliding-window attention with sinks) and
//! [`mixers::BlaConfig`] (Blurry Window Attention). `docs/spec.md` (shared with
//! the Python reference) defines the maths; `docs/image-format.md` the image.
//!
//! The exact buffer a model needs is a `const fn` of its image, so a board
//! sizes a `static` at compile time (the whole program:
//! `runtime/examples/static_buffer.rs`, run by the tests):
//! ```text
//! static IMAGE: ferrite::Aligned<[u8; N]> = ferrite::Aligned(*include_bytes!("model.fer"));
//! const LEN: usize = match ferrite::session_len(&IMAGE.0, 0) { Ok(n) => n, Err(_) => panic!() };
//! static BUF: Mutex<[f32; LEN]> = ...;   // or a `static mut` / StaticCell on a board
//! ```
#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(target_endian = "big")]
compile_error!(
    "ferrite images are little-endian and used in place: big-endian targets are not supported"
);

pub mod config;
pub mod error;
pub mod image;
pub mod kernels;
pub mod math;
pub mod mixers;
pub mod model;
pub mod sampler;
pub mod session;
pub mod tensor;
pub mod tokenizer;

pub use config::{LayerConfig, ModelConfig};
pub use error::{Error, Result};
pub use model::Model;
pub use sampler::{Sampler, SamplerConfig};
pub use session::Session;
#[cfg(feature = "bpe")]
pub use tokenizer::BpeTokenizer;
pub use tokenizer::{ByteTokenizer, Tokenizer};

use config::{LayerConfig as Layer, ModelConfig as Cfg};
use image::Header;

/// Wrapper that gives embedded image bytes the 16-byte alignment that
/// [`Model::load`] requires: `static IMG: Aligned<[u8; N]> = Aligned(*include_bytes!(..))`.
#[repr(C, align(16))]
pub struct Aligned<T: ?Sized>(pub T);

/// Whether any tensor table entry of `image` has the tiled layout (a const
/// scan of the layout bytes; [`Model::load`] validates the entries).
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
    let section = image
        .split_at(header.config_off as usize)
        .1
        .split_at(header.config_len as usize)
        .0;
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

/// f32 words of the session buffer (state + scratch) for `image`, for a
/// session that may pin up to `pinned_max` tokens. `const`, so boards size
/// their `static` buffers at compile time; validates header and config but
/// not the CRC or tensors ([`Model::load`] does).
pub const fn session_len(image: &[u8], pinned_max: usize) -> Result<usize> {
    let header = match Header::parse(image) {
        Ok(h) => h,
        Err(e) => return Err(e),
    };
    let start = header.config_off as usize;
    let section = image
        .split_at(start)
        .1
        .split_at(header.config_len as usize)
        .0;
    let cfg = match Cfg::parse(section) {
        Ok(c) => c,
        Err(e) => return Err(e),
    };
    let (d, i, vocab) = (
        cfg.hidden_size as u64,
        cfg.intermediate_size as u64,
        cfg.vocab_size as u64,
    );
    let mut state = 0u64;
    let mut mixer_scratch = 0u64;
    let mut layer = 0;
    while layer < cfg.num_layers {
        let lc = match Layer::parse(section, layer as u16) {
            Ok(l) => l,
            Err(e) => return Err(e),
        };
        state = state.saturating_add(lc.state_len(pinned_max));
        let s = lc.scratch_len();
        if s > mixer_scratch {
            mixer_scratch = s;
        }
        layer += 1;
    }
    let act = match act_words(image, &header, &cfg) {
        Ok(a) => a as u64,
        Err(e) => return Err(e),
    };
    let total = state.saturating_add(3 * d + 2 * i + vocab + mixer_scratch + act);
    // Keep the byte size addressable on this target (4 bytes per word).
    if total > (isize::MAX as u64) / 4 {
        return Err(Error::BadConfig {
            layer: None,
            reason: "the model needs more memory than this target can address",
        });
    }
    Ok(total as usize)
}
