//! fla's `rwkv7` checkpoints (`RWKV7ForCausalLM`): every layer an `rwkv7`
//! time mixing in a LayerNorm block with RWKV-7's channel mixing, layer 0
//! with the extra pre-norm (`norm_first`) and the value passed to later
//! layers, a LayerNorm final norm (docs/fla.md).

use anyhow::{bail, Result};
use ferrite::block::{BlockConfig, MlpKind, NormKind};
use ferrite::config::{ModelConfig, TokenizerKind};
use serde_json::Value;

use super::common::{nullable, require, source, FlaImport, NO_MATHS};
use crate::config_json::{parse_rwkv7, Config, Fields};

/// The per-layer value widths of fla's `value_dim` (an int, a list or null:
/// `hidden_size` each).
fn value_dims(v: Option<Value>, hidden: u32, layers: u32) -> Result<Vec<u64>> {
    let dims = match v {
        None | Some(Value::Null) => vec![hidden as u64; layers as usize],
        Some(Value::Number(n)) => vec![n.as_u64().unwrap_or(0); layers as usize],
        Some(Value::Array(a)) => a.iter().map(|d| d.as_u64().unwrap_or(0)).collect(),
        Some(other) => bail!("config: field 'value_dim' = {other} must be an integer or a list"),
    };
    if dims.len() != layers as usize || dims.contains(&0) {
        bail!(
            "config: field 'value_dim' must give a positive width for each of the {layers} layers"
        );
    }
    if dims.iter().any(|&d| d != dims[0]) {
        bail!(
            "config: field 'value_dim' = {dims:?} is not supported: the first layer's value passed to the others needs one width"
        );
    }
    Ok(dims)
}

/// Maps an fla `rwkv7` `config.json`.
pub(super) fn parse(value: &Value) -> Result<FlaImport> {
    let mut f = Fields::new(value, "config")?;
    f.take("model_type");
    for name in [
        "intermediate_size",
        "hidden_ratio",
        "attn",
        "head_dim",
        "num_heads",
        "value_dim",
    ] {
        nullable(&mut f, value, name);
    }
    let hidden = f.int("hidden_size", Some(2048), 1)?;
    let num_layers = f.int("num_hidden_layers", Some(24), 1)?;
    let vocab_size = f.int("vocab_size", Some(32000), 1)?;
    let norm_eps = f.positive("norm_eps", 1e-5)?;
    let tie_word_embeddings = f.flag("tie_word_embeddings", true)?;
    let hidden_ratio = f.int("hidden_ratio", Some(4), 1)?;
    // fla's RWKV7FeedForward: int(hidden * ratio), rounded up to a multiple
    // of 32, unless given (null was dropped above).
    let default_width = (hidden as u64 * hidden_ratio as u64).div_ceil(32) * 32;
    let intermediate_size = f.int("intermediate_size", Some(default_width), 1)?;
    f.choice("hidden_act", &["sqrelu"], Some("sqrelu"))?;
    require(
        &mut f,
        "norm_bias",
        &Value::Bool(true),
        "LayerNorms without a bias are not implemented",
    )?;
    require(
        &mut f,
        "attn",
        &Value::Null,
        "hybrid attention layers in an RWKV-7 model are not imported",
    )?;
    let norm_first = f.flag("norm_first", true)?;
    // fla: head_dim wins when given, else hidden / num_heads.
    let (num_heads, head_dim) = match (f.take("head_dim"), f.take("num_heads")) {
        (Some(d), _) => {
            let d = d.as_u64().filter(|&d| d >= 1).ok_or_else(|| {
                anyhow::anyhow!("config: field 'head_dim' must be a positive integer")
            })?;
            if hidden as u64 % d != 0 {
                bail!("config: field 'head_dim' = {d} does not divide hidden_size {hidden}");
            }
            ((hidden as u64 / d) as u32, d as u32)
        }
        (None, Some(h)) => {
            let h = h
                .as_u64()
                .filter(|&h| h >= 1 && hidden as u64 % h == 0)
                .ok_or_else(|| {
                    anyhow::anyhow!("config: field 'num_heads' must divide hidden_size {hidden}")
                })?;
            (h as u32, (hidden as u64 / h) as u32)
        }
        // fla's class default: head_dim 64.
        (None, None) => {
            if hidden % 64 != 0 {
                bail!("config: the default head_dim 64 does not divide hidden_size {hidden}");
            }
            (hidden / 64, 64)
        }
    };
    let value_dim = value_dims(f.take("value_dim"), hidden, num_layers)?[0];
    if value_dim % num_heads as u64 != 0 {
        bail!("config: value_dim {value_dim} is not a multiple of num_heads {num_heads}");
    }
    // fla's `fuse_norm` picks the removal key's norm (l2_norm or F.normalize).
    let fused = f.flag("fuse_norm", true)?;
    let mut layer_fields = serde_json::Map::new();
    for (name, default) in [
        ("decay_low_rank_dim", 64u64),
        ("a_low_rank_dim", 64),
        ("v_low_rank_dim", 16),
        ("gate_low_rank_dim", 128),
    ] {
        nullable(&mut f, value, name);
        let v = f.int(name, Some(default), 1)?;
        layer_fields.insert(name.into(), v.into());
    }
    layer_fields.insert("num_heads".into(), num_heads.into());
    layer_fields.insert("head_dim".into(), head_dim.into());
    layer_fields.insert("head_v_dim".into(), (value_dim / num_heads as u64).into());
    layer_fields.insert(
        "kk_norm".into(),
        if fused { "l2" } else { "normalize" }.into(),
    );
    let layer_value = Value::Object(layer_fields);
    let mut layers = Vec::with_capacity(num_layers as usize);
    for i in 0..num_layers {
        let mut lf = Fields::new(&layer_value, "config")?;
        layers.push(parse_rwkv7(&mut lf, hidden, norm_eps, i == 0)?);
        lf.finish()?;
    }
    for name in NO_MATHS {
        f.take(name);
    }
    f.finish()?;
    let blocks = (0..num_layers)
        .map(|i| BlockConfig {
            norm: NormKind::Layer,
            mlp: MlpKind::ChannelMix,
            pre_norm: norm_first && i == 0,
        })
        .collect();
    let model = ModelConfig {
        vocab_size,
        hidden_size: hidden,
        intermediate_size,
        norm_eps: norm_eps as f32,
        tie_word_embeddings,
        num_layers,
        tokenizer: TokenizerKind::Bytes,
        provenance: source::FLA_RWKV7,
        token_path: ferrite::TokenPath::F32,
        final_norm: NormKind::Layer,
    };
    Ok(FlaImport {
        config: Config {
            model,
            layers,
            blocks,
        },
        warnings: Vec::new(),
    })
}

/// ferrite's name of an fla `rwkv7` tensor: the channel mixing's `ffn_norm`
/// and `ffn.*` are the block's `mlp_norm` and `mlp.*`; the rest keep fla's
/// names.
pub(super) fn tensor_name(name: &str) -> String {
    if let Some(layer) = name.strip_prefix("model.layers.") {
        if let Some((i, t)) = layer.split_once('.') {
            if let Some(rest) = t.strip_prefix("ffn_norm.") {
                return format!("model.layers.{i}.mlp_norm.{rest}");
            }
            if let Some(rest) = t.strip_prefix("ffn.") {
                return format!("model.layers.{i}.mlp.{rest}");
            }
        }
    }
    name.to_string()
}

/// fla's `[1, 1, D]` token-shift interpolations (`attn.x_r` ... `attn.x_g`)
/// are vectors `[D]` in ferrite.
pub(super) fn tensor_shape(name: &str, shape: &[usize]) -> Vec<usize> {
    let mix = ["x_r", "x_w", "x_k", "x_v", "x_a", "x_g"]
        .iter()
        .any(|m| name.ends_with(&format!(".attn.{m}")));
    match shape {
        [1, 1, d] if mix => vec![*d],
        _ => shape.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite::config::LayerConfig;
    use ferrite::mixers::KkNorm;
    use serde_json::json;

    fn config() -> Value {
        json!({"model_type": "rwkv7", "hidden_size": 32, "head_dim": 16, "num_heads": 2,
               "decay_low_rank_dim": 8, "gate_low_rank_dim": 16, "a_low_rank_dim": 8,
               "v_low_rank_dim": 8, "intermediate_size": 64, "hidden_ratio": 4,
               "hidden_act": "sqrelu", "norm_first": true, "norm_bias": true, "norm_eps": 1e-5,
               "num_hidden_layers": 2, "vocab_size": 256, "tie_word_embeddings": false,
               "value_dim": [32, 32], "attn": null, "attn_mode": "chunk", "fuse_norm": true,
               "use_l2warp": true, "max_position_embeddings": 2048})
    }

    #[test]
    fn the_fixture_config_maps_to_rwkv7_in_layernorm_channel_mix_blocks() {
        let c = parse(&config()).unwrap().config;
        assert_eq!(c.model.intermediate_size, 64);
        assert_eq!(c.model.final_norm, NormKind::Layer);
        assert_eq!(c.model.provenance, source::FLA_RWKV7);
        let LayerConfig::Rwkv7(first) = c.layers[0] else {
            panic!()
        };
        let LayerConfig::Rwkv7(later) = c.layers[1] else {
            panic!()
        };
        assert!(first.value_first && first.v_rank == 0 && !later.value_first);
        assert_eq!(
            (
                later.num_heads,
                later.head_dim,
                later.head_v_dim,
                later.v_rank
            ),
            (2, 16, 16, 8)
        );
        assert_eq!(later.kk_norm, KkNorm::L2);
        assert_eq!(later.g_norm_eps, (16.0 * 1e-5f64) as f32);
        assert!(c.blocks[0].pre_norm && !c.blocks[1].pre_norm);
        assert!(c.blocks.iter().all(|b| b.mlp == MlpKind::ChannelMix));
    }

    #[test]
    fn options_ferrite_cannot_run_exactly_are_refused_by_name() {
        for (field, v) in [
            ("norm_bias", json!(false)),
            ("hidden_act", json!("gelu")),
            ("value_dim", json!([32, 64])),
            ("attn", json!({"layers": [1], "num_heads": 2})),
            ("head_dim", json!(12)),
            ("unknown_field", json!(1)),
        ] {
            let mut c = config();
            c[field] = v;
            let err = parse(&c).unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
        // fla's fuse_norm = false: F.normalize for the removal key.
        let mut c = config();
        c["fuse_norm"] = json!(false);
        let LayerConfig::Rwkv7(l) = parse(&c).unwrap().config.layers[1] else {
            panic!()
        };
        assert_eq!(l.kk_norm, KkNorm::Normalize);
    }

    #[test]
    fn tensor_names_and_shapes_map_to_ferrite_s() {
        for (fla, ferrite) in [
            (
                "model.layers.1.ffn_norm.bias",
                "model.layers.1.mlp_norm.bias",
            ),
            (
                "model.layers.0.ffn.key.weight",
                "model.layers.0.mlp.key.weight",
            ),
            ("model.layers.0.ffn.x_k", "model.layers.0.mlp.x_k"),
            ("model.layers.0.attn.x_k", "model.layers.0.attn.x_k"),
            (
                "model.layers.0.pre_norm.weight",
                "model.layers.0.pre_norm.weight",
            ),
            ("model.norm.bias", "model.norm.bias"),
        ] {
            assert_eq!(tensor_name(fla), ferrite);
        }
        assert_eq!(tensor_shape("model.layers.0.attn.x_g", &[1, 1, 32]), [32]);
        assert_eq!(tensor_shape("model.layers.0.attn.r_k", &[2, 16]), [2, 16]);
    }
}
