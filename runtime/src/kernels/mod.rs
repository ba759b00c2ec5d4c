//! Matrix-vector kernels, in the style of tract-linalg: a portable
//! reference ([`generic`]) and fast modules, each tested against it.
//!
//! Two paths, chosen by a tensor's layout ([`crate::image::Layout`]):
//! - **row-major** tensors (f32, f16, and the int8/int4 of format 1-2
//!   images) run the [`generic`] kernels with f32 activations: `w` is
//!   row-major `[rows, cols]`, `x` has `cols` elements, `y` has `rows`;
//!   quantized kernels take one f32 scale per `group` inputs of a row;
//! - **tiled** int8/int4 tensors run the integer path of [`tiled`]: int8
//!   activations, i32 tile products, integer group scales, one f32 multiply
//!   per row. The tile kernel comes from the module chosen for the target
//!   at build time, once for the runtime and its assembly, by
//!   [`ferrite_asm::isa::choose`] (cfg `ferrite_kernels`, read by
//!   `runtime/build.rs` from `ferrite-asm`'s build script):
//!
//! | `ferrite_kernels` | targets | module |
//! |---|---|---|
//! | `dsp` | thumbv7em (Cortex-M4/M7), thumbv8m.main with `target-cpu=cortex-m33` or `cortex-m35p` | SMLAD/SXTB16 assembly of the `ferrite-asm` crate |
//! | `helium` | thumbv8m.main with `target-cpu=cortex-m55` | `helium`: `VMLAVA.S8` assembly of `ferrite-asm` (int8), safe code LLVM turns into MVE (int4) |
//! | `v7m` | thumbv7m (Cortex-M3) | `LDRSB`/`MLA` assembly of `ferrite-asm` (int8), [`portable`] (int4) |
//! | `v6m` | thumbv6m (Cortex-M0, M0+) | `LDRSB`/`MULS`/`ADD` assembly of `ferrite-asm` (int8), [`portable`] (int4) |
//! | `rv32` | riscv32 with the M extension (RV32IMAC, RV32IMAFC, RV32IMC) | `LB`/`MUL`/`ADD` assembly of `ferrite-asm` (int8), [`portable`] (int4) |
//! | `portable` | everything else (RV32I without M, the host) | [`portable`] |
//!
//! Setting `FERRITE_KERNELS=portable` when building forces the portable
//! module (for comparisons); naming a set other than `portable` and the
//! target's own fails the build. Every module's results are bit-identical to
//! [`generic::matvec_tiled_i8`] / [`generic::matvec_tiled_i4`]: the
//! arithmetic is exact integer arithmetic in any order.

pub mod generic;
#[cfg(ferrite_kernels = "helium")]
pub mod helium;
pub mod portable;
mod tile;
pub mod tiled;

#[cfg(ferrite_kernels = "dsp")]
mod dsp;
#[cfg(ferrite_kernels = "rv32")]
mod rv32;
#[cfg(ferrite_kernels = "v6m")]
mod v6m;
#[cfg(ferrite_kernels = "v7m")]
mod v7m;

pub mod calls;

pub use ferrite_asm::Kernels;
pub use generic::{matvec_f16, matvec_f32, matvec_i4, matvec_i8};

/// The tile kernels of this build (see the table above).
pub mod arch {
    #[cfg(ferrite_kernels = "dsp")]
    pub use super::dsp::{dot4_i4, dot4_i8, prepare, rows_i8, WIDE};
    #[cfg(ferrite_kernels = "helium")]
    pub use super::helium::{dot4_i4, dot4_i8, prepare, rows_i8, WIDE};
    #[cfg(not(any(
        ferrite_kernels = "dsp",
        ferrite_kernels = "helium",
        ferrite_kernels = "rv32",
        ferrite_kernels = "v6m",
        ferrite_kernels = "v7m"
    )))]
    pub use super::portable::{dot4_i4, dot4_i8, prepare, rows_i8, WIDE};
    #[cfg(ferrite_kernels = "rv32")]
    pub use super::rv32::{dot4_i4, dot4_i8, prepare, rows_i8, WIDE};
    #[cfg(ferrite_kernels = "v6m")]
    pub use super::v6m::{dot4_i4, dot4_i8, prepare, rows_i8, WIDE};
    #[cfg(ferrite_kernels = "v7m")]
    pub use super::v7m::{dot4_i4, dot4_i8, prepare, rows_i8, WIDE};

    /// The kernel set of this build, as `ferrite-asm` chose it
    /// ([`ferrite_asm::isa::choose`], or `FERRITE_KERNELS`).
    pub const KERNELS: super::Kernels = ferrite_asm::KERNELS;

    /// Name of the module, as reported by the boards and benchmarks
    /// ([`ferrite_asm::Kernels::name`]).
    pub const NAME: &str = KERNELS.name();
}
