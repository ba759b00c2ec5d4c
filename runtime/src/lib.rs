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
//!
//! ## Quantized images and kernels
//!
//! int8/int4 images in the tiled layout run the integer path
//! ([`kernels::tiled`]): int8 activations, integer products and scales, one
//! f32 step per output row, bit-identical on every target. The tile kernels
//! are chosen at build time from the target (`build.rs`): SMLAD assembly on
//! Cortex-M4/M7 (and M33 with `-C target-cpu=cortex-m33`), Helium on the
//! Cortex-M55 (`-C target-cpu=cortex-m55`), dedicated loops on the Cortex-M3
//! and RV32, portable Rust elsewhere; `FERRITE_KERNELS=portable` in the build
//! environment forces the portable ones. The assembly lives in the
//! `ferrite-asm` crate; this crate has no `unsafe` code.
//!
//! ## Cargo features
//!
//! - `bpe` (default): the byte-level BPE tokenizer of format-2+ images
//!   (`BpeTokenizer`, `Tokenizer::Bpe`). Off (`default-features = false`),
//!   an image with one is refused at load with [`Error::BadConfig`] naming
//!   the feature, and about 8 KB of flash is saved. It adds a variant to
//!   [`Tokenizer`]: a crate that does not enable `bpe` itself should match a
//!   `Tokenizer` with a `_` arm, as another crate in the build may enable it.
//! - `mla` (default): the latent-compressed window mixer (`mla` layers,
//!   format 4), about 4 KB of flash. Off, an image with an `mla` layer is
//!   refused at load with [`Error::BadConfig`] naming the feature; the
//!   [`LayerConfig::Mla`] variant stays (only its step is left out), so
//!   matches do not depend on the feature.
//! - `defmt`: `defmt::Format` for the error and config types.
//! - `fast-math`: faster `exp`, `sigmoid` and `silu` than `libm`'s
//!   ([`math`]): integer arithmetic on the f32 bits where f32 is not in
//!   hardware (within 0.55 ulp), an f32 polynomial elsewhere (within 1.5 ulp
//!   for `exp`). It changes the output bits: a host compared with a board
//!   must use the same module. The QEMU boards enable it.
//! - `fast-math-int`: `fast-math` with the integer module on every target,
//!   for a host that must reproduce a board without an FPU bit for bit.
//! - `probe`: hosts only (nothing on targets without an OS): a per-thread
//!   hook that sees the input of every matrix-vector product
//!   (`probe::set`), what `ferrite quantize --calibrate` measures with.
//!
//! Every combination of `bpe` and `defmt`, each fast-math module and all of
//! them together are built in CI (`cargo xtask test`) for `thumbv6m-none-eabi`
//! and `thumbv7em-none-eabihf`; docs.rs documents all features.
//!
//! The tile kernels are not a feature but a build-time choice from the
//! target (above); `FERRITE_KERNELS=portable|dsp|helium|v7m|rv32` in the
//! build environment overrides it, [`kernels::arch::NAME`] says which one a
//! build got.
//!
//! ## MSRV and versions
//!
//! Rust 1.95 (`rust-version`), the toolchain CI builds with; older
//! toolchains are not checked, so none is claimed. The crate follows semantic
//! versioning; the image format has its own version
//! ([`image::FORMAT_VERSION`]); the repository's `CHANGELOG.md` says what
//! bumps which.
#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
// `x % n == 0` stays: `is_multiple_of` (which clippy suggests at MSRV 1.87+)
// answers rather than panics for n = 0, and changes code the boards' recorded
// sizes and instruction counts depend on.
#![allow(clippy::manual_is_multiple_of)]

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
#[cfg(all(feature = "probe", not(target_os = "none")))]
pub mod probe;
pub mod sampler;
pub mod session;
pub mod tensor;
pub mod tokenizer;
pub mod update;

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
/// their `static` buffers at compile time. Validates the header, the config
/// and the tokenizer section's counts as [`Model::load`] does, but not the
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
    /// State plus per-token scratch.
    pub total: usize,
}

/// Largest buffer (f32 words) whose byte size this target can address.
const MAX_WORDS: u64 = (isize::MAX as u64) / 4;

/// `a + b`, or the `SizeOverflow` error for `what` (const-compatible).
const fn checked_add(a: u64, b: u64, what: &'static str) -> Result<u64> {
    match a.checked_add(b) {
        Some(v) if v <= MAX_WORDS => Ok(v),
        _ => Err(Error::SizeOverflow { layer: None, what }),
    }
}

/// Sizes the session buffer of `image` ([`session_len`], [`Model::state_len`]):
/// every sum is checked, and so is the total against the address space.
pub(crate) const fn buffer_len(image: &[u8], pinned_max: usize) -> Result<BufferLen> {
    const TOO_LARGE: &str = "the session buffer exceeds what this target can address";
    let header = match Header::parse(image) {
        Ok(h) => h,
        Err(e) => return Err(e),
    };
    // Header::parse checked that the section lies inside the image.
    let section = match image.split_at_checked(header.config_off as usize) {
        Some((_, rest)) => match rest.split_at_checked(header.config_len as usize) {
            Some((section, _)) => section,
            None => return Err(Error::BadHeader("config section out of bounds")),
        },
        None => return Err(Error::BadHeader("config section out of bounds")),
    };
    let cfg = match Cfg::parse(section) {
        Ok(c) => c,
        Err(e) => return Err(e),
    };
    if let Err(e) = tokenizer::check_section(image, &header, &cfg) {
        return Err(e);
    }
    let mut state = 0u64;
    let mut mixer_scratch = 0u64;
    let mut layer = 0;
    while layer < cfg.num_layers {
        let lc = match Layer::parse(section, layer as u16) {
            Ok(l) => l,
            Err(e) => return Err(e),
        };
        // Saturating per layer (an absurd `pinned_max`), checked here.
        let s = lc.state_len(pinned_max);
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
    // h, x, out: D each; gate, up: I each; logits: vocab. Each is at most
    // MAX_DIM (2^20), so the fixed part cannot overflow a u64.
    let (d, i, vocab) = (
        cfg.hidden_size as u64,
        cfg.intermediate_size as u64,
        cfg.vocab_size as u64,
    );
    let fixed = 3 * d + 2 * i + vocab;
    let total = match checked_add(state, fixed, TOO_LARGE) {
        Ok(v) => v,
        Err(e) => return Err(e),
    };
    let total = match checked_add(total, mixer_scratch, TOO_LARGE) {
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
        total: total as usize,
    })
}
