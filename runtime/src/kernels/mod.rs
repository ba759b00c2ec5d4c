//! Matrix-vector kernels, one per storage dtype.
//!
//! [`generic`] is the portable reference; architecture-specific modules (to
//! come) must match it and are tested against it. Every kernel has the same
//! contract: `w` is row-major `[rows, cols]`, `x` has `cols` elements, `y` has
//! `rows`; quantized kernels take one f32 scale per `group` inputs of a row.

pub mod generic;

pub use generic::{matvec_f16, matvec_f32, matvec_i4, matvec_i8};
