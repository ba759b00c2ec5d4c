//! Reading a model directory: `config.json` + `model.safetensors` (f32, f16 or bf16).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use safetensors::{Dtype, SafeTensors};

use crate::config_json::{self, Config};

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
    /// dtype of the source tensors (the widest seen), for reports.
    pub source_dtype: String,
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

impl ModelDir {
    /// Reads `dir/config.json` and `dir/model.safetensors`.
    pub fn open(dir: &Path) -> Result<ModelDir> {
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path)
            .with_context(|| format!("cannot read {}", config_path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", config_path.display()))?;
        let config = config_json::parse(&value)?;
        let st_path = dir.join("model.safetensors");
        let bytes = std::fs::read(&st_path)
            .with_context(|| format!("cannot read {}", st_path.display()))?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| {
            anyhow::anyhow!("{} is not a valid safetensors file: {e}", st_path.display())
        })?;
        let mut tensors = BTreeMap::new();
        let mut source_dtype = String::from("f32");
        for (name, view) in st.tensors() {
            let values = to_f32(view.dtype(), view.data(), &name)?;
            if view.dtype() != Dtype::F32 {
                source_dtype = format!("{:?}", view.dtype()).to_lowercase();
            }
            tensors.insert(
                name,
                SourceTensor {
                    shape: view.shape().to_vec(),
                    values,
                },
            );
        }
        Ok(ModelDir {
            config,
            tensors,
            source_dtype,
        })
    }
}
