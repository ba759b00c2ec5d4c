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
//! Nine token-mixer families ([`LayerConfig::KIND_NAMES`]), freely mixed in
//! one stack: [`mixers::GdnConfig`] (Gated DeltaNet), [`mixers::GsaConfig`]
//! (Gated Slot Attention), [`mixers::SwaConfig`] (sliding-window attention
//! with sinks), [`mixers::BlaConfig`] (Blurry Window Attention),
//! [`mixers::MlaConfig`] (a latent-compressed, MLA-style sliding window;
//! the `mla` feature), [`mixers::Mamba2Config`] (Mamba-2),
//! [`mixers::Rwkv7Config`] (RWKV-7's time mixing) and [`mixers::GlaConfig`]
//! (fla's GLA, HGRN2 and RetNet: a decay per key channel) and
//! [`mixers::CrossConfig`] (cross-attention over a fixed memory baked into
//! the image, read in place; [`Session::select_memory`]), each in the block its
//! layer's record asks for ([`block::BlockConfig`]: RMSNorm or LayerNorm, a
//! SwiGLU MLP, RWKV-7's channel mixing or none). `docs/spec.md` (shared with the Python reference)
//! defines the maths; `docs/image-format.md` the image.
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
//! are chosen at build time from the target, once for this crate and its
//! assembly, by [`ferrite_asm::isa::choose`]: SMLAD assembly on
//! Cortex-M4/M7 (and M33 with `-C target-cpu=cortex-m33`), Helium on the
//! Cortex-M55 (`-C target-cpu=cortex-m55`), dedicated loops on the Cortex-M3
//! and on RV32 with the M extension, portable Rust elsewhere;
//! `FERRITE_KERNELS=portable` in the build environment forces the portable
//! ones. The assembly lives in the `ferrite-asm` crate; this crate has no
//! `unsafe` code.
//!
//! ## Cargo features
//!
//! - `bpe` (default): the byte-level BPE tokenizer of format-2+ images
//!   (`BpeTokenizer`, `Tokenizer::Bpe`). Off (`default-features = false`),
//!   an image with one is refused at load with [`Error::BadConfig`] naming
//!   the feature, and about 8 KB of flash is saved. It adds a variant to
//!   [`Tokenizer`]: a crate that does not enable `bpe` itself should match a
//!   `Tokenizer` with a `_` arm, as another crate in the build may enable it.
//! - `gdn` (default): Gated DeltaNet and its family (`gdn` layers).
//! - `gsa` (default): Gated Slot Attention (`gsa` layers).
//! - `swa` (default): sliding-window attention with sinks (`swa` layers).
//! - `bla` (default): Blurry Window Attention (`bla` layers).
//! - `mla` (default): the latent-compressed window (`mla` layers).
//! - `mamba2` (default): Mamba-2 (`mamba2` layers, format 8).
//! - `rwkv7` (default): RWKV-7's time mixing (`rwkv7` layers, format 8).
//! - `gla` (default): per-key-decay linear attention, fla's GLA, HGRN2 and
//!   RetNet (`gla` layers, format 8).
//! - `cross` (default): cross-attention over a fixed memory baked into the
//!   image (`cross` layers, format 8).
//! - `all-mixers` (default): the nine families above, one feature each. A
//!   family's steps are linked only with its feature; off, an image with one
//!   of its layers is refused at load with [`Error::BadConfig`] naming the
//!   feature ([`LayerConfig::not_built`]). Every [`LayerConfig`] variant
//!   stays, so matches do not depend on the features. Firmware turns on
//!   exactly the families of its image (TFLite Micro's op resolver, decided
//!   at build time): 58 KB less flash for a BLA-only model on the M0.
//! - `block-options` (default): format 8's block options beyond RMSNorm
//!   and SwiGLU or no MLP: LayerNorm blocks, RWKV-7's channel mixing and the
//!   pre-norm ([`block::BlockConfig`]). Off, an image that uses one is
//!   refused at load with [`Error::BadConfig`] naming the feature, and about
//!   2 KB of flash is saved; the firmware turns it on when its image needs it.
//! - `int-path` (default): the integer token path (format 6 images written
//!   with `ferrite quantize --path int`; `docs/integer-path.md`). Off, such
//!   an image is refused at load with [`Error::BadConfig`] naming the
//!   feature; the firmware turns it on when its image needs it.
//! - `verify`: signed images (format 7, `docs/signing.md`): `Model::load_signed`,
//!   `update::validate_signed` and `signature::verify` check an
//!   Ed25519 signature over the image's SHA-256 digest against the keys
//!   the firmware trusts, and its security counter (anti-rollback,
//!   [`rollback`]). Off, none of the cryptography is linked, and a signed
//!   image loads with [`Model::load`] like any other.
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
//! - `roofline`: every matrix-vector product timed with a clock the
//!   firmware supplies and counted with its multiply-accumulates
//!   (module `roofline`): the boards' `roofline:` line. Off, nothing of it is
//!   compiled; on, it needs a `critical-section` implementation.
//!
//! Every combination of `bpe` and `defmt`, one mixer family at a time, each
//! fast-math module, `verify` (alone and with `defmt`) and all of them
//! together are linted in CI (`cargo xtask test`) for `thumbv6m-none-eabi`
//! and `thumbv7em-none-eabihf`; docs.rs documents all features.
//!
//! The tile kernels are not a feature but a build-time choice from the
//! target (above); `FERRITE_KERNELS=portable` (or the target's own set) in
//! the build environment overrides it, [`kernels::arch::NAME`] says which
//! one a build got.
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

pub mod block;
pub mod config;
mod encoder;
pub mod error;
pub mod fixed;
mod format;
pub mod image;
#[cfg(feature = "int-path")]
mod int_token;
pub mod kernels;
mod macs;
pub mod math;
pub mod memory;
pub mod mixers;
pub mod model;
#[cfg(all(feature = "probe", not(target_os = "none")))]
pub mod probe;
pub mod rollback;
#[cfg(feature = "roofline")]
pub mod roofline;
pub mod sampler;
pub mod session;
pub mod signature;
mod sizes;
pub mod snapshot;
mod snapshot_error;
pub mod snapshot_slots;
pub mod tensor;
pub mod tensor_int;
pub mod tokenizer;
pub mod update;
mod weights;

pub use config::{LayerConfig, ModelConfig, TokenPath};
pub use error::{Error, Result, StepError};
pub use format::StateFormat;
pub use half::f16;
pub use memory::{memory_len, memory_rows, Memory, MemoryWords};
pub use model::Model;
pub use sampler::{Sampler, SamplerConfig, SamplerState};
pub use session::Session;
pub use sizes::session_len;
pub use snapshot::{snapshot_len, snapshot_with_sampler_len, SnapshotError};
#[cfg(feature = "bpe")]
pub use tokenizer::BpeTokenizer;
pub use tokenizer::{ByteTokenizer, Tokenizer};

/// Wrapper that gives embedded image bytes the 16-byte alignment that
/// [`Model::load`] requires: `static IMG: Aligned<[u8; N]> = Aligned(*include_bytes!(..))`.
#[repr(C, align(16))]
pub struct Aligned<T: ?Sized>(pub T);
