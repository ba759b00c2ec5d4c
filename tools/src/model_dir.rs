//! Reading a model directory: `config.json` + `model.safetensors` (f32, f16 or
//! bf16), and `tokenizer.json` (byte-level BPE) when there is one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, Context, Result};
use safetensors::{Dtype, SafeTensors};

use crate::config_json::{self, Config};
use crate::fla::{self, FlaOptions};
use crate::tokenizer_json::{self, BpeSpec};

/// One source tensor, converted to f32.
#[derive(Clone, Debug)]
pub struct SourceTensor {
    /// Shape as stored.
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub values: Vec<f32>,
}

/// A model directory's configuration and tensors.
#[derive(Clone, Debug)]
pub struct ModelDir {
    /// Parsed `config.json`.
    pub config: Config,
    /// Every tensor of `model.safetensors`, by name.
    pub tensors: BTreeMap<String, SourceTensor>,
    /// dtype of the source tensors (the least precise seen), for reports.
    pub source_dtype: String,
    /// Import warnings for the user (e.g. a window the model was not trained with).
    pub warnings: Vec<String>,
    /// The byte-level BPE of `tokenizer.json`, if the directory has one
    /// (`config.model.tokenizer` is then `Bpe`); `None`: the byte tokenizer.
    pub tokenizer: Option<BpeSpec>,
}

fn to_f32(dtype: Dtype, bytes: &[u8], name: &str) -> Result<Vec<f32>> {
    Ok(match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        other => bail!("tensor {name}: dtype {other:?} is not supported (use f32, f16 or bf16)"),
    })
}

/// Names of the source dtypes by their provenance code (bits 8-15 of
/// `ModelConfig::provenance`), as `ferrite inspect` prints them.
pub const SOURCE_DTYPES: [&str; 3] = ["f32", "f16", "bf16"];

/// Provenance code (bits 8-15 of `ModelConfig::provenance`) of a source dtype.
fn dtype_code(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::F16 => 1,
        Dtype::BF16 => 2,
        _ => 0,
    }
}

/// Reads every tensor of one safetensors file into `tensors`; returns the
/// widest-loss source dtype code seen.
fn read_safetensors(path: &Path, tensors: &mut BTreeMap<String, SourceTensor>) -> Result<u32> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_safetensors(&bytes, tensors)
        .with_context(|| format!("{} is not a valid safetensors file", path.display()))
}

/// Reads every tensor of one safetensors file's bytes into `tensors` (an
/// error on a name already there); returns the widest-loss source dtype code
/// seen. Untrusted bytes: fuzzed (`fuzz/fuzz_targets/tools_inputs.rs`).
pub fn parse_safetensors(
    bytes: &[u8],
    tensors: &mut BTreeMap<String, SourceTensor>,
) -> Result<u32> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut code = 0;
    for (name, view) in st.tensors() {
        let values = to_f32(view.dtype(), view.data(), &name)?;
        code = code.max(dtype_code(view.dtype()));
        if tensors
            .insert(
                name.clone(),
                SourceTensor {
                    shape: view.shape().to_vec(),
                    values,
                },
            )
            .is_some()
        {
            bail!("tensor {name} appears in more than one shard");
        }
    }
    Ok(code)
}

/// Whether a `weight_map` shard name is a file of the model directory itself
/// on every platform: not empty, no `..`, no separator (`/`, `\`) and no
/// drive prefix (`:`), so that joining it to the directory cannot leave it.
fn is_plain_file_name(file: &str) -> bool {
    !file.is_empty() && !file.contains("..") && !file.contains(['/', '\\', ':'])
}

/// Reads `dir/model.safetensors`, or the shards `dir/model.safetensors.index.json`
/// names (plain file names in `dir`, nothing outside it); returns the
/// tensors and the widest-loss source dtype code. Untrusted files: fuzzed
/// (`fuzz/fuzz_targets/sharded_checkpoint.rs`).
pub fn read_weights(dir: &Path) -> Result<(BTreeMap<String, SourceTensor>, u32)> {
    let mut tensors = BTreeMap::new();
    let single = dir.join("model.safetensors");
    let index_path = dir.join("model.safetensors.index.json");
    if single.exists() || !index_path.exists() {
        let code = read_safetensors(&single, &mut tensors)?;
        return Ok((tensors, code));
    }
    let text = std::fs::read_to_string(&index_path)
        .with_context(|| format!("cannot read {}", index_path.display()))?;
    let index: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", index_path.display()))?;
    let map = index
        .get("weight_map")
        .and_then(serde_json::Value::as_object)
        .with_context(|| format!("{} has no weight_map object", index_path.display()))?;
    // In the map's order, each once (a set: an index may list very many).
    let mut shards: Vec<&str> = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, file) in map {
        let file = file
            .as_str()
            .with_context(|| format!("weight_map entry {name} is not a file name"))?;
        if !is_plain_file_name(file) {
            bail!("weight_map entry {name} points outside the model directory: {file}");
        }
        if seen.insert(file) {
            shards.push(file);
        }
    }
    let mut code = 0;
    for shard in &shards {
        code = code.max(read_safetensors(&dir.join(shard), &mut tensors)?);
    }
    for (name, file) in map {
        if !tensors.contains_key(name) {
            bail!("weight_map names tensor {name} in {file}, which does not contain it");
        }
    }
    Ok((tensors, code))
}

/// Refuses a directory with RWKV's "world" tokenizer (65,536 tokens, a trie
/// over `rwkv_vocab_v20230424.txt`, no `tokenizer.json` ferrite reads):
/// run with the byte tokenizer it would be silently wrong (docs/fla.md).
fn refuse_rwkv_world_tokenizer(dir: &Path) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("rwkv_vocab") {
            bail!(
                "{name}: RWKV's world tokenizer (65,536 tokens) is not supported: ferrite runs byte-level tokens and tokenizer.json BPE"
            );
        }
    }
    let config = dir.join("tokenizer_config.json");
    if let Ok(text) = std::fs::read_to_string(&config) {
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let class = value
            .get("tokenizer_class")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        if class.to_ascii_lowercase().contains("rwkv") {
            bail!(
                "tokenizer_config.json: tokenizer_class {class:?} (RWKV's world tokenizer) is not supported: ferrite runs byte-level tokens and tokenizer.json BPE"
            );
        }
    }
    Ok(())
}

impl ModelDir {
    /// Reads a model directory with default import options.
    pub fn open(dir: &Path) -> Result<ModelDir> {
        Self::open_with(dir, &FlaOptions::default())
    }

    /// Reads `dir/config.json` (ferrite's format, docs/spec.md §1.2, or an fla checkpoint's)
    /// and `dir/model.safetensors` (or its shards).
    pub fn open_with(dir: &Path, fla_options: &FlaOptions) -> Result<ModelDir> {
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path)
            .with_context(|| format!("cannot read {}", config_path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", config_path.display()))?;
        fla::check_model_type(&value)?;
        refuse_rwkv_world_tokenizer(dir)?;
        let (mut config, warnings) = if fla::is_fla(&value) {
            let import = fla::parse(&value, fla_options)?;
            (import.config, import.warnings)
        } else {
            if let Some(w) = fla_options.window {
                bail!(
                    "--window {w} does nothing: {} is not an fla checkpoint (--window applies to fla attention layers without window_size)",
                    config_path.display()
                );
            }
            (config_json::parse(&value)?, Vec::new())
        };
        let (mut tensors, dtype) = read_weights(dir)?;
        if let Some(model_type) = value.get("model_type").and_then(|t| t.as_str()) {
            if fla::is_fla(&value) {
                let mut renamed = BTreeMap::new();
                for (name, t) in std::mem::take(&mut tensors) {
                    let to = fla::tensor_name(model_type, &name);
                    let t = SourceTensor {
                        shape: fla::tensor_shape(model_type, &to, &t.shape),
                        values: t.values,
                    };
                    if renamed.insert(to.clone(), t).is_some() {
                        bail!("tensor {name} and another both map to {to}");
                    }
                }
                tensors = renamed;
            }
        }
        config.model.provenance |= dtype << 8;
        let source_dtype = SOURCE_DTYPES[dtype as usize].to_string();
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer = if tokenizer_path.exists() {
            let spec = tokenizer_json::read(&tokenizer_path)?;
            config.model.tokenizer = ferrite::config::TokenizerKind::Bpe;
            Some(spec)
        } else {
            None
        };
        let dir = ModelDir {
            config,
            tensors,
            source_dtype,
            warnings,
            tokenizer,
        };
        dir.check_tokenizer()?;
        Ok(dir)
    }

    /// The model's vocabulary must cover the tokenizer's.
    pub fn check_tokenizer(&self) -> Result<()> {
        let vocab = self.config.model.vocab_size as usize;
        match &self.tokenizer {
            Some(t) if t.tokens.len() > vocab => bail!(
                "tokenizer.json has {} tokens but the model's vocab_size is {vocab}",
                t.tokens.len()
            ),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index of 100 000 distinct shards is refused at its first missing
    /// shard in the map's order, without a quadratic pass over the names
    /// first (`Vec::contains`: 19 s in the checked profile, now 0.35 s; the
    /// time is not asserted).
    #[test]
    fn a_long_index_is_refused_at_its_first_missing_shard() {
        let dir = std::env::temp_dir().join(format!("ferrite-index-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let map: serde_json::Map<String, serde_json::Value> = (0..100_000)
            .map(|i| {
                (
                    format!("t{i:06}"),
                    format!("s{:06}.safetensors", 99_999 - i).into(),
                )
            })
            .collect();
        let index = serde_json::json!({ "weight_map": map });
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
        let err = format!("{:#}", read_weights(&dir).unwrap_err());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("s099999.safetensors"), "{err}");
    }

    /// RWKV's world tokenizer, by its vocabulary file or its class name, is
    /// refused naming it; another tokenizer_config.json is not looked at
    /// further.
    #[test]
    fn rwkv_world_tokenizers_are_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("ferrite-world-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        refuse_rwkv_world_tokenizer(&dir).unwrap();
        std::fs::write(
            dir.join("tokenizer_config.json"),
            r#"{"tokenizer_class": "GPT2Tokenizer"}"#,
        )
        .unwrap();
        refuse_rwkv_world_tokenizer(&dir).unwrap();
        std::fs::write(
            dir.join("tokenizer_config.json"),
            r#"{"tokenizer_class": "RWKVWorldTokenizer"}"#,
        )
        .unwrap();
        let err = refuse_rwkv_world_tokenizer(&dir).unwrap_err().to_string();
        assert!(err.contains("RWKVWorldTokenizer"), "{err}");
        std::fs::remove_file(dir.join("tokenizer_config.json")).unwrap();
        std::fs::write(dir.join("rwkv_vocab_v20230424.txt"), "0 'a' 1\n").unwrap();
        let err = refuse_rwkv_world_tokenizer(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("rwkv_vocab_v20230424.txt"), "{err}");
    }

    /// `\` and `:` would leave the directory on Windows (`..\x`, `C:\x`,
    /// `C:x`), `/` and `..` everywhere.
    #[test]
    fn shard_names_stay_in_the_directory() {
        for ok in ["model-00001-of-00002.safetensors", "a.b", "x"] {
            assert!(is_plain_file_name(ok), "{ok}");
        }
        for bad in [
            "",
            "..",
            "../x",
            "/etc/x",
            "a/b",
            "..\\x",
            "C:\\x",
            "C:x",
            "\\\\srv\\x",
            "a..b",
        ] {
            assert!(!is_plain_file_name(bad), "{bad}");
        }
    }
}
