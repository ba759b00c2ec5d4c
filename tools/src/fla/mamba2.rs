//! fla's `mamba2` checkpoints (`Mamba2ForCausalLM`): every layer a
//! `mamba2` mixer in a block with RMSNorm and no MLP (fla's `Mamba2Block`),
//! RMSNorm final norm (`norm_f`), tensors under `backbone.` renamed to
//! ferrite's (docs/fla.md).

use anyhow::{bail, Result};
use ferrite::block::{BlockConfig, MlpKind, NormKind};
use ferrite::config::{LayerConfig, ModelConfig, TokenizerKind};
use ferrite::mixers::Mamba2Config;
use serde_json::Value;

use super::common::{nullable, require, source, FlaImport, Mamba2Groups, NO_MATHS};
use crate::config_json::{Config, Fields};

/// Fields of fla's `Mamba2Config` that only initialise weights or choose
/// kernels: they leave a trained checkpoint's maths alone.
const INIT_ONLY: &[&str] = &[
    "A_init_range",
    "dt_min",
    "dt_max",
    "dt_init_floor",
    "conv_init",
    "rescale_prenorm_residual",
    "chunk_size",
    // The residual stream in f32 when the model runs in bf16: ferrite's is f32.
    "residual_in_fp32",
];

/// fla's `dt_limit` default `(0.0, inf)`, as `save_pretrained` writes it
/// (`[0.0, {"__float__": "Infinity"}]`, or a plain `"Infinity"`).
fn is_default_dt_limit(v: &Value) -> bool {
    let Some([lo, hi]) = v.as_array().map(Vec::as_slice) else {
        return false;
    };
    let inf = match hi {
        Value::Object(o) => o.len() == 1 && o.get("__float__") == Some(&Value::from("Infinity")),
        Value::String(s) => s == "Infinity" || s == "inf",
        _ => false,
    };
    lo.as_f64() == Some(0.0) && inf
}

/// Maps an fla `mamba2` `config.json`; `groups` says how heads read the
/// groups of B and C (needed when `n_groups > 1`, [`Mamba2Groups`]).
pub(super) fn parse(value: &Value, groups: Option<Mamba2Groups>) -> Result<FlaImport> {
    let mut f = Fields::new(value, "config")?;
    f.take("model_type");
    nullable(&mut f, value, "conv_init");
    let hidden = f.int("hidden_size", Some(2048), 1)?;
    let num_layers = f.int("num_hidden_layers", Some(48), 1)?;
    let vocab_size = f.int("vocab_size", Some(32000), 1)?;
    let norm_eps = f.positive("norm_eps", 1e-5)? as f32;
    let tie_word_embeddings = f.flag("tie_word_embeddings", true)?;
    let head_dim = f.int("head_dim", Some(64), 1)?;
    let expand = f.int("expand", Some(2), 1)?;
    let inner = hidden as u64 * expand as u64;
    if inner % head_dim as u64 != 0 {
        bail!("config: expand * hidden_size = {inner} is not a multiple of head_dim {head_dim}");
    }
    let num_heads = (inner / head_dim as u64) as u32;
    match f.take("num_heads") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64() == Some(num_heads as u64) => {}
        Some(v) => bail!(
            "config: field 'num_heads' = {v} is not expand * hidden_size / head_dim = {num_heads}"
        ),
    }
    f.choice("hidden_act", &["silu", "swish"], Some("silu"))?;
    require(
        &mut f,
        "use_bias",
        &Value::Bool(false),
        "in_proj and out_proj biases are not implemented",
    )?;
    if let Some(v) = f.take("dt_limit") {
        if !is_default_dt_limit(&v) {
            bail!("config: field 'dt_limit' = {v} is not supported: ferrite runs dt unclamped, fla's default (0.0, inf)");
        }
    }
    let rmsnorm = f.flag("rmsnorm", true)?;
    let norm_before_gate = f.flag("norm_before_gate", false)?;
    let n_groups = f.int("n_groups", Some(1), 1)?;
    let groups_interleaved = match (n_groups, groups) {
        (1, None) => false,
        (1, Some(_)) => bail!("--mamba2-groups does nothing: the checkpoint has n_groups 1"),
        (_, Some(g)) => g == Mamba2Groups::Interleaved,
        (_, None) => bail!(
            "config: field 'n_groups' = {n_groups}: fla 0.6.0 maps heads to groups two ways \
             (its PyTorch forward: head h reads group h mod {n_groups}; mamba_ssm's kernels and its \
             decode step: h / (num_heads / {n_groups})) and the checkpoint does not say which trained it: \
             pass --mamba2-groups interleaved (trained without mamba_ssm) or blocked (with it)"
        ),
    };
    let layer = LayerConfig::Mamba2(Mamba2Config {
        num_heads,
        head_dim,
        state_size: f.int("state_size", Some(128), 1)?,
        n_groups,
        conv_size: f.int("conv_kernel", Some(4), 1)?,
        conv_bias: f.flag("use_conv_bias", true)?,
        gated_norm: rmsnorm,
        // Without the norm there is nothing before or after the gate.
        norm_before_gate: rmsnorm && norm_before_gate,
        d_per_channel: f.flag("D_has_hdim", false)?,
        groups_interleaved,
    });
    if let LayerConfig::Mamba2(c) = layer {
        if num_heads % c.n_groups != 0 {
            bail!(
                "config: n_groups {} must divide num_heads {num_heads}",
                c.n_groups
            );
        }
        if c.conv_size > 64 {
            bail!(
                "config: field 'conv_kernel' must be 1..=64, got {}",
                c.conv_size
            );
        }
    }
    for name in NO_MATHS.iter().chain(INIT_ONLY) {
        f.take(name);
    }
    f.finish()?;
    let model = ModelConfig {
        vocab_size,
        hidden_size: hidden,
        intermediate_size: 0,
        norm_eps,
        tie_word_embeddings,
        num_layers,
        tokenizer: TokenizerKind::Bytes,
        provenance: source::FLA_MAMBA2,
        token_path: ferrite::TokenPath::F32,
        final_norm: NormKind::Rms,
    };
    let block = BlockConfig {
        norm: NormKind::Rms,
        mlp: MlpKind::None,
        pre_norm: false,
    };
    Ok(FlaImport {
        config: Config {
            model,
            layers: vec![layer; num_layers as usize],
            blocks: vec![block; num_layers as usize],
        },
        warnings: Vec::new(),
    })
}

/// ferrite's name of an fla `mamba2` tensor: `backbone.` is `model.`, a
/// layer's `norm` its `attn_norm`, its `mixer` its `attn`, `norm_f` the
/// final norm (names it does not know are kept, and refused as unused).
pub(super) fn tensor_name(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("backbone.") {
        if rest == "norm_f.weight" {
            return "model.norm.weight".into();
        }
        // fla's load hook renames `embedding.` to `embeddings.`.
        if rest == "embedding.weight" {
            return "model.embeddings.weight".into();
        }
        if let Some(layer) = rest.strip_prefix("layers.") {
            if let Some((i, t)) = layer.split_once('.') {
                if t == "norm.weight" {
                    return format!("model.layers.{i}.attn_norm.weight");
                }
                if let Some(m) = t.strip_prefix("mixer.") {
                    return format!("model.layers.{i}.attn.{m}");
                }
            }
        }
        return format!("model.{rest}");
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> Value {
        json!({"model_type": "mamba2", "hidden_size": 32, "expand": 2, "head_dim": 16,
               "num_heads": 4, "state_size": 16, "n_groups": 2, "conv_kernel": 4,
               "use_conv_bias": true, "norm_before_gate": false, "rmsnorm": true,
               "D_has_hdim": false, "use_bias": false, "num_hidden_layers": 2,
               "vocab_size": 256, "tie_word_embeddings": false, "norm_eps": 1e-5,
               "dt_limit": [0.0, {"__float__": "Infinity"}], "conv_init": null,
               "A_init_range": [1, 16], "residual_in_fp32": true, "hidden_act": "silu"})
    }

    #[test]
    fn the_fixture_config_maps_to_mamba2_blocks_without_an_mlp() {
        let import = parse(&config(), Some(Mamba2Groups::Interleaved)).unwrap();
        let c = import.config;
        assert_eq!(c.model.intermediate_size, 0);
        assert_eq!(c.model.provenance, source::FLA_MAMBA2);
        let LayerConfig::Mamba2(m) = c.layers[1] else {
            panic!("{:?}", c.layers[1])
        };
        assert_eq!(
            (
                m.num_heads,
                m.head_dim,
                m.state_size,
                m.n_groups,
                m.conv_size
            ),
            (4, 16, 16, 2, 4)
        );
        assert!(m.conv_bias && m.gated_norm && !m.norm_before_gate && !m.d_per_channel);
        assert!(m.groups_interleaved);
        assert!(c.blocks.iter().all(|b| b.mlp == MlpKind::None));
        let blocked = parse(&config(), Some(Mamba2Groups::Blocked)).unwrap();
        assert!(
            matches!(blocked.config.layers[0], LayerConfig::Mamba2(m) if !m.groups_interleaved)
        );
    }

    /// Two groups need the user to say how heads read them; one group does
    /// not, and is told the option does nothing.
    #[test]
    fn groups_need_their_head_order_and_one_group_needs_none() {
        let err = parse(&config(), None).unwrap_err().to_string();
        assert!(
            err.contains("n_groups") && err.contains("--mamba2-groups"),
            "{err}"
        );
        let mut one = config();
        one["n_groups"] = json!(1);
        assert!(parse(&one, None).is_ok());
        let err = parse(&one, Some(Mamba2Groups::Blocked))
            .unwrap_err()
            .to_string();
        assert!(err.contains("does nothing"), "{err}");
    }

    #[test]
    fn options_ferrite_cannot_run_exactly_are_refused_by_name() {
        for (field, v) in [
            ("use_bias", json!(true)),
            ("dt_limit", json!([0.0, 6.0])),
            ("hidden_act", json!("gelu")),
            ("num_heads", json!(3)),
            ("head_dim", json!(12)),
            ("unknown_field", json!(1)),
        ] {
            let mut c = config();
            c[field] = v;
            let err = parse(&c, Some(Mamba2Groups::Blocked))
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn tensor_names_map_to_ferrite_s() {
        for (fla, ferrite) in [
            ("backbone.embeddings.weight", "model.embeddings.weight"),
            ("backbone.embedding.weight", "model.embeddings.weight"),
            ("backbone.norm_f.weight", "model.norm.weight"),
            (
                "backbone.layers.3.norm.weight",
                "model.layers.3.attn_norm.weight",
            ),
            (
                "backbone.layers.0.mixer.in_proj.weight",
                "model.layers.0.attn.in_proj.weight",
            ),
            ("backbone.layers.1.mixer.D", "model.layers.1.attn.D"),
            ("lm_head.weight", "lm_head.weight"),
        ] {
            assert_eq!(tensor_name(fla), ferrite);
        }
    }
}
