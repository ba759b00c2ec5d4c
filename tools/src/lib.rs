//! Host side of ferrite: `config.json` parsing, model directories, quantization
//! and the image writer, plus helpers to run images with the runtime.

// `x % n == 0` stays: `is_multiple_of` (which clippy suggests at MSRV 1.87+)
// answers rather than panics for n = 0 (as in the runtime).
#![allow(clippy::manual_is_multiple_of)]

pub mod calibrate;
pub mod config_json;
pub mod eval;
pub mod fla;
pub mod memory;
pub mod model_dir;
pub mod mqar;
pub mod quant;
pub mod run;
pub mod sign;
pub mod soak;
pub mod tokenizer_json;
pub mod writer;
