//! Fuzz what `ferrite quantize` reads from a model directory it did not
//! make (docs/fuzzing.md): `config.json` (ferrite's and fla's), a
//! `tokenizer.json` and the safetensors bytes of `model.safetensors`.
//!
//! The first input byte picks the parser (mod 3), the rest is the file.
//! Nothing may panic; every refusal is an `Err` with a message. A
//! `tokenizer.json` the tools accept must give a section the runtime
//! accepts: the two sides agree on what a valid tokenizer is.
#![no_main]

use std::collections::BTreeMap;

use ferrite_tools::fla::{self, FlaOptions};
use ferrite_tools::model_dir::parse_safetensors;
use ferrite_tools::{config_json, tokenizer_json};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [which, file @ ..] = data else {
        return;
    };
    match which % 3 {
        0 => {
            let Ok(value) = serde_json::from_slice::<serde_json::Value>(file) else {
                return;
            };
            if fla::is_fla(&value) {
                let _ = fla::parse(&value, &FlaOptions::default());
                let _ = fla::parse(
                    &value,
                    &FlaOptions {
                        window: Some(16),
                        ..FlaOptions::default()
                    },
                );
            } else {
                let _ = config_json::parse(&value);
            }
        }
        1 => {
            let Ok(value) = serde_json::from_slice::<serde_json::Value>(file) else {
                return;
            };
            let Ok(spec) = tokenizer_json::parse(&value) else {
                return;
            };
            let section = spec.section();
            let vocab = spec.tokens.len() as u32;
            if let Err(e) = ferrite::BpeTokenizer::parse(&section, vocab) {
                panic!("tokenizer.json accepted by the tools, section refused: {e}");
            }
        }
        _ => {
            let mut tensors = BTreeMap::new();
            let _ = parse_safetensors(file, &mut tensors);
        }
    }
});
