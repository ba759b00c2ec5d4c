//! # ferrite-asm
//!
//! The integer tile kernels of the `ferrite` runtime in assembly, for the
//! cores where safe Rust cannot reach the instructions that matter:
//! - [`dsp`]: Cortex-M4/M7/M33 (DSP extension), int8 and int4 weights
//!   against i16 activations, two multiply-accumulates per `SMLAD`;
//! - [`helium`]: Cortex-M55 (Helium, MVE), int8 weights against int8 activations,
//!   16 multiply-accumulates per `VMLAVA.S8`;
//! - [`v7m`]: Cortex-M3 (no DSP), int8 weights and activations, one
//!   `LDRSB` + `MLA` per multiply-accumulate, the activation loaded once
//!   per column for the four rows of a tile;
//! - [`v6m`]: Cortex-M0/M0+ (ARMv6-M, Thumb-1), int8 weights and
//!   activations, `LDRSB` + `MULS` + `ADD` per multiply-accumulate, the
//!   four rows' sums in high registers;
//! - [`rv32`]: RV32IM (no packed-SIMD extension), int8 weights and
//!   activations, `LB` + `MUL` + `ADD` per multiply-accumulate, the
//!   activation loaded once per column.
//!
//! This crate holds all of ferrite's `unsafe` code: assembly functions
//! (`global_asm!`, so that they own every register they use) and the calls
//! to them. The public functions are safe: they check lengths and
//! alignment and return `None` instead of calling the assembly when a check
//! fails, and always on targets without it, so that a caller can fall back
//! to portable code.
//!
//! Which assembly a target gets is decided once, by [`isa::choose`]: this
//! crate's `build.rs` includes that module, builds the chosen set
//! (`cfg(ferrite_kernels = "...")`, [`KERNELS`]) and hands its name to the
//! runtime's build script (cargo `links` metadata,
//! `DEP_FERRITE_ASM_KERNELS`), and host tools call [`isa::for_target`] to
//! say what a target of theirs gets.
//!
//! Layout (the runtime's tiled layout, `docs/image-format.md`): a tile is
//! 4 rows x 16 columns, each row 16 contiguous int8 values (int4: 8 bytes,
//! per 8 columns byte `j` holding column `j` low and `j + 4` high); a row
//! block is `n` tiles side by side, and row blocks follow each other.
#![no_std]
#![deny(missing_docs)]
// `x % n == 0` stays: `is_multiple_of` (which clippy suggests at MSRV 1.87+)
// answers rather than panics for n = 0, and changes code the boards' recorded
// sizes and instruction counts depend on.
#![allow(clippy::manual_is_multiple_of)]

pub mod dsp;
pub mod helium;
/// Which tile kernels a target gets, decided once: [`isa::choose`] from
/// the target triple, `-C target-cpu` and the target features (what this
/// crate's `build.rs` calls, and through it the runtime's), and
/// [`isa::for_target`] from the triple alone (what host tools call to fill
/// their tables). Dependency-free and usable on the host.
pub mod isa;
pub mod rv32;
pub mod v6m;
pub mod v7m;

pub use isa::Kernels;

/// The kernels this build was compiled for: [`isa::choose`] for the target,
/// or the `FERRITE_KERNELS` build variable (`portable` or the target's own
/// set).
pub const KERNELS: Kernels = BUILT;

#[cfg(ferrite_kernels = "dsp")]
const BUILT: Kernels = Kernels::Dsp;
#[cfg(ferrite_kernels = "helium")]
const BUILT: Kernels = Kernels::Helium;
#[cfg(ferrite_kernels = "v6m")]
const BUILT: Kernels = Kernels::V6m;
#[cfg(ferrite_kernels = "v7m")]
const BUILT: Kernels = Kernels::V7m;
#[cfg(ferrite_kernels = "rv32")]
const BUILT: Kernels = Kernels::Rv32;
#[cfg(ferrite_kernels = "portable")]
const BUILT: Kernels = Kernels::Portable;

/// Rows of a tile.
pub const TILE_ROWS: usize = 4;
/// Columns of a tile.
pub const TILE_COLS: usize = 16;

/// Whether `ptr` is on a 4-byte boundary.
fn word_aligned<T>(ptr: *const T) -> bool {
    (ptr as usize) % 4 == 0
}

/// `(tiles per block, blocks)` when `weights` bytes hold `out.len() / 4`
/// row blocks of `columns / 16` tiles of `tile_bytes`, and the counts fit
/// the assembly's u32 registers; `None` otherwise (or when empty).
fn shape(weights: usize, tile_bytes: usize, columns: usize, out: usize) -> Option<(u32, u32)> {
    let tiles = columns / TILE_COLS;
    let blocks = out / TILE_ROWS;
    let fits = tiles > 0
        && blocks > 0
        && columns == tiles * TILE_COLS
        && out == blocks * TILE_ROWS
        && Some(weights) == tiles.checked_mul(blocks)?.checked_mul(tile_bytes);
    if !fits {
        return None;
    }
    Some((u32::try_from(tiles).ok()?, u32::try_from(blocks).ok()?))
}
