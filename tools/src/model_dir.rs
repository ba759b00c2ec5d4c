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
                let mut take = |name: &str| tensors.remove(name).map(|t| (t.shape, t.values));
                for (name, shape, values) in fla::derived_tensors(&value, &config, &mut take)? {
                    tensors.insert(name, SourceTensor { shape, values });
                }
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

    /// A tensor of a test file: name, dtype, shape, bytes.
    type Entry<'a> = (&'a str, &'a str, &'a [usize], &'a [u8]);

    /// A safetensors file: the 8-byte header length, the JSON header (padded
    /// with spaces to 8 bytes) and each tensor's bytes in turn.
    fn safetensors(tensors: &[Entry]) -> Vec<u8> {
        let (mut header, mut data) = (serde_json::Map::new(), Vec::new());
        for &(name, dtype, shape, bytes) in tensors {
            let at = [data.len(), data.len() + bytes.len()];
            header.insert(
                name.into(),
                serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": at}),
            );
            data.extend_from_slice(bytes);
        }
        let mut head = serde_json::Value::Object(header).to_string();
        while head.len() % 8 != 0 {
            head.push(' ');
        }
        let mut out = (head.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(&data);
        out
    }

    /// A fresh, empty directory under the system's temporary one.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ferrite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// f32, f16 and bf16 decode little-endian to their values (1.5 is
    /// 0x3E00 in f16, -2.0 is 0xC000 in bf16); other dtypes are refused
    /// naming the tensor and the dtype.
    #[test]
    fn each_source_dtype_decodes_to_its_values() {
        let f32s: Vec<u8> = [0.25f32, -3.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(to_f32(Dtype::F32, &f32s, "w").unwrap(), [0.25, -3.0]);
        let f16s = [0x00, 0x3E, 0x00, 0xBC];
        assert_eq!(to_f32(Dtype::F16, &f16s, "w").unwrap(), [1.5, -1.0]);
        let bf16s = [0x00, 0xC0, 0x80, 0x3F];
        assert_eq!(to_f32(Dtype::BF16, &bf16s, "w").unwrap(), [-2.0, 1.0]);
        let err = to_f32(Dtype::I32, &[0; 4], "w").unwrap_err().to_string();
        assert_eq!(
            err,
            "tensor w: dtype I32 is not supported (use f32, f16 or bf16)"
        );
    }

    /// The provenance code of each dtype is its index in `SOURCE_DTYPES`,
    /// and a file's code is that of its least precise tensor.
    #[test]
    fn a_files_dtype_code_is_its_least_precise_tensors() {
        for (dtype, name) in [
            (Dtype::F32, "f32"),
            (Dtype::F16, "f16"),
            (Dtype::BF16, "bf16"),
        ] {
            assert_eq!(SOURCE_DTYPES[dtype_code(dtype) as usize], name);
        }
        let one = 1.0f32.to_le_bytes();
        let cases: [(&[Entry], u32); 4] = [
            (&[("a", "F32", &[1], &one)], 0),
            (
                &[("a", "F32", &[1], &one), ("b", "F16", &[1], &[0x00, 0x3C])],
                1,
            ),
            (
                &[("a", "BF16", &[1], &[0x80, 0x3F]), ("b", "F32", &[1], &one)],
                2,
            ),
            (
                &[
                    ("a", "F16", &[1], &[0x00, 0x3C]),
                    ("b", "BF16", &[1], &[0x80, 0x3F]),
                ],
                2,
            ),
        ];
        for (file, code) in cases {
            let mut tensors = BTreeMap::new();
            assert_eq!(
                parse_safetensors(&safetensors(file), &mut tensors).unwrap(),
                code
            );
            assert_eq!(tensors.len(), file.len());
            for t in tensors.values() {
                assert_eq!(
                    (t.shape.as_slice(), t.values.as_slice()),
                    (&[1][..], &[1.0][..])
                );
            }
        }
    }

    /// A tensor already read (from another shard) is refused by name.
    #[test]
    fn a_tensor_in_two_shards_is_refused() {
        let file = safetensors(&[("w", "F16", &[1], &[0x00, 0x3C])]);
        let mut tensors = BTreeMap::new();
        parse_safetensors(&file, &mut tensors).unwrap();
        let err = parse_safetensors(&file, &mut tensors)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "tensor w appears in more than one shard");
    }

    /// `model.safetensors` is read when it is there (an index beside it is
    /// ignored) and when there is no index (then its absence is the error);
    /// without it, the index's shards are read, each once.
    #[test]
    fn weights_come_from_the_single_file_or_the_shards_of_the_index() {
        let dir = scratch("weights");
        let err = format!("{:#}", read_weights(&dir).unwrap_err());
        assert!(
            err.starts_with("cannot read ") && err.contains("model.safetensors:"),
            "{err}"
        );
        let index = serde_json::json!({"weight_map": {"a": "s1", "b": "s2", "c": "s1"}});
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
        let s1 = safetensors(&[
            ("a", "F32", &[1], &2.0f32.to_le_bytes()),
            ("c", "F16", &[2], &[0x00, 0x3C, 0x00, 0x40]),
        ]);
        std::fs::write(dir.join("s1"), s1).unwrap();
        std::fs::write(
            dir.join("s2"),
            safetensors(&[("b", "BF16", &[1], &[0x40, 0x40])]),
        )
        .unwrap();
        let (tensors, code) = read_weights(&dir).unwrap();
        assert_eq!(code, 2);
        let values: Vec<(&str, &[f32])> = tensors
            .iter()
            .map(|(k, t)| (k.as_str(), t.values.as_slice()))
            .collect();
        assert_eq!(
            values,
            [("a", &[2.0][..]), ("b", &[3.0][..]), ("c", &[1.0, 2.0][..])]
        );
        std::fs::write(
            dir.join("model.safetensors"),
            safetensors(&[("w", "F16", &[1], &[0x00, 0x3C])]),
        )
        .unwrap();
        let (tensors, code) = read_weights(&dir).unwrap();
        assert_eq!(
            (tensors.keys().collect::<Vec<_>>(), code),
            (vec![&"w".to_string()], 1)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The index must name each tensor's shard: a tensor its shard lacks and
    /// a shard outside the directory are refused naming both.
    #[test]
    fn an_index_naming_a_tensor_its_shard_lacks_is_refused() {
        let dir = scratch("shard-lacks");
        std::fs::write(dir.join("s1"), safetensors(&[("a", "F32", &[1], &[0; 4])])).unwrap();
        let index = serde_json::json!({"weight_map": {"a": "s1", "z": "s1"}});
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
        let err = read_weights(&dir).unwrap_err().to_string();
        assert_eq!(
            err,
            "weight_map names tensor z in \"s1\", which does not contain it"
        );
        let index = serde_json::json!({"weight_map": {"a": "../s1"}});
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
        let err = read_weights(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            err,
            "weight_map entry a points outside the model directory: ../s1"
        );
    }

    /// A ferrite config.json's model gets the source dtype in bits 8-15 of
    /// its provenance (bf16: 2), its name for reports, and no tokenizer
    /// without a tokenizer.json.
    #[test]
    fn opening_a_directory_records_the_source_dtype_in_the_provenance() {
        let dir = scratch("open-bf16");
        let config = serde_json::json!({"vocab_size": 256, "hidden_size": 8, "intermediate_size": 16,
            "layers": [{"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0, "conv_size": 2}]});
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let w = safetensors(&[("w", "BF16", &[2], &[0x80, 0x3F, 0x00, 0xC0])]);
        std::fs::write(dir.join("model.safetensors"), w).unwrap();
        let m = ModelDir::open(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(m.config.model.provenance, 2 << 8);
        assert_eq!(m.source_dtype, "bf16");
        assert_eq!(m.tensors["w"].values, [1.0, -2.0]);
        assert!(m.tokenizer.is_none());
    }

    /// The model's vocabulary must hold every token of the tokenizer: as
    /// many is enough, one more is refused with both counts.
    #[test]
    fn the_tokenizer_must_fit_the_vocabulary() {
        let config = config_json::parse(&serde_json::json!({"vocab_size": 300, "hidden_size": 8,
            "intermediate_size": 16, "layers": [{"mixer": "gdn", "num_heads": 1, "head_dim": 8}]}))
        .unwrap();
        let with = |tokens: usize| ModelDir {
            config: config.clone(),
            tensors: BTreeMap::new(),
            source_dtype: "f32".into(),
            warnings: Vec::new(),
            tokenizer: Some(BpeSpec {
                tokens: vec![vec![0]; tokens],
                merges: Vec::new(),
            }),
        };
        with(299).check_tokenizer().unwrap();
        with(300).check_tokenizer().unwrap();
        let err = with(301).check_tokenizer().unwrap_err().to_string();
        assert_eq!(
            err,
            "tokenizer.json has 301 tokens but the model's vocab_size is 300"
        );
        let mut none = with(0);
        none.tokenizer = None;
        none.check_tokenizer().unwrap();
    }

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
