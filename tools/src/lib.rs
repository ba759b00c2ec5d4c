//! Host side of ferrite: `config.json` parsing, model directories, quantization
//! and the image writer, plus helpers to run images with the runtime.

pub mod config_json;
pub mod eval;
pub mod fla;
pub mod model_dir;
pub mod mqar;
pub mod quant;
pub mod run;
pub mod tokenizer_json;
pub mod writer;
