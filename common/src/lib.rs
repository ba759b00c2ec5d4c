//! What ferrite's host side (`ferrite-tools`, `cargo xtask`) and its firmware
//! (`boards/`) must agree on, defined once: the target table, the exit
//! statuses, the FNV-1a checksum, the MQAR generator, the bits-per-byte sum
//! and the report lines. `no_std`, no allocation.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod fnv;
pub mod mqar;
pub mod nll;
pub mod report;
pub mod roofline;
pub mod status;
pub mod target;

pub use fnv::{fnv1a, Fnv1a};
pub use target::{Target, TARGETS};
