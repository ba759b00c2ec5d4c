//! Importing flash-linear-attention (fla) checkpoints: `config.json` written by
//! `save_pretrained` for `model_type` `gated_deltanet`, `delta_net`, `gsa`,
//! `mamba2` (`fla/mamba2.rs`), `rwkv7` (`fla/rwkv7.rs`), `gla`, `hgrn2` or
//! `retnet` (`gla` layers, `fla/gla.rs`), with fla's hybrid `attn`
//! entry mapped to ferrite `swa` layers. `delta_net` becomes a `gdn` layer
//! of the DeltaNet configuration (no decay gate); the last two bring their
//! own blocks (docs/spec.md §1.1) and tensor names ([`tensor_name`], [`tensor_shape`]).
//!
//! Every fla field is either mapped, known to leave inference maths unchanged
//! (kernel choice, fused training ops, token ids, cache flags), or refused with
//! a one-line reason naming it. Absent fields take fla's class defaults, except
//! `tie_word_embeddings`, which `save_pretrained` omits when it equals the
//! transformers base default (true).

use anyhow::{bail, Context, Result};
use ferrite::config::{LayerConfig, ModelConfig, TokenizerKind};
use ferrite::mixers::{GdnConfig, GdnDecay, QkNorm, SwaConfig};
use serde_json::Value;

use crate::config_json::{self, Config, Fields};

mod common;
mod gla;
mod mamba2;
mod rwkv7;

use common::{nullable, require, NO_MATHS};
pub use common::{source, FlaImport, Mamba2Groups, NamedTensor, RawTensor};

/// The fla `model_type`s the importer runs, each with its source-format code
/// ([`source`]); the one list `is_fla`, the parser, the refusal of other
/// types and `ferrite inspect` read.
pub const MODEL_TYPES: &[(&str, u32)] = &[
    ("gated_deltanet", source::FLA_GATED_DELTANET),
    ("gsa", source::FLA_GSA),
    ("delta_net", source::FLA_DELTA_NET),
    ("mamba2", source::FLA_MAMBA2),
    ("rwkv7", source::FLA_RWKV7),
    ("gla", source::FLA_GLA),
    ("hgrn2", source::FLA_HGRN2),
    ("retnet", source::FLA_RETNET),
];

/// The names of [`MODEL_TYPES`].
fn model_type_names() -> Vec<&'static str> {
    MODEL_TYPES.iter().map(|&(name, _)| name).collect()
}

/// Options of an fla import.
#[derive(Clone, Debug, Default)]
pub struct FlaOptions {
    /// Window for attention layers that have none (fla full attention).
    pub window: Option<u32>,
    /// Which Mamba-2 head reads which group of B and C, for a `mamba2`
    /// checkpoint with `n_groups > 1` (fla 0.6.0 has two: [`Mamba2Groups`]);
    /// such a checkpoint is refused without it.
    pub mamba2_groups: Option<Mamba2Groups>,
}

/// Whether `config.json` comes from fla (a model type of [`MODEL_TYPES`]).
pub fn is_fla(value: &Value) -> bool {
    let model_type = value.get("model_type").and_then(Value::as_str);
    MODEL_TYPES
        .iter()
        .any(|&(name, _)| Some(name) == model_type)
}

/// Refuses a `config.json` whose `model_type` is a string that neither
/// ferrite's own format ([`config_json::MODEL_TYPE`]) nor this importer
/// runs, naming those that are run (an fla user's `rwkv7` is then told which
/// fla types are, not only that `ferrite` is).
pub fn check_model_type(value: &Value) -> Result<()> {
    match value.get("model_type").and_then(Value::as_str) {
        Some(t) if t != config_json::MODEL_TYPE && !is_fla(value) => {
            let fla: Vec<String> = model_type_names()
                .iter()
                .map(|n| format!("{n:?}"))
                .collect();
            bail!(
                "config: model_type {t:?} is not supported: ferrite runs {:?}, and fla's {}",
                config_json::MODEL_TYPE,
                fla.join(", ")
            )
        }
        _ => Ok(()),
    }
}

/// ferrite's name of a checkpoint tensor of `model_type` (docs/fla.md):
/// `mamba2`'s `backbone.*` and `rwkv7`'s `ffn*` renamed; the other types'
/// names are ferrite's already.
pub fn tensor_name(model_type: &str, name: &str) -> String {
    match model_type {
        "mamba2" => mamba2::tensor_name(name),
        "rwkv7" => rwkv7::tensor_name(name),
        "gla" | "hgrn2" | "retnet" => gla::tensor_name(model_type, name),
        _ => name.to_string(),
    }
}

/// Tensors ferrite computes from a checkpoint's, after [`tensor_name`]:
/// `hgrn2`'s per-layer lower bounds from its `model.lower_bounds` (taken
/// with `take`, which removes a checkpoint tensor by name; docs/fla.md);
/// nothing for the other types.
pub fn derived_tensors(
    value: &Value,
    config: &Config,
    take: &mut dyn FnMut(&str) -> Option<RawTensor>,
) -> Result<Vec<NamedTensor>> {
    match value.get("model_type").and_then(Value::as_str) {
        Some("hgrn2") => gla::lower_bounds(
            value,
            &config.layers,
            config.model.hidden_size as usize,
            take("model.lower_bounds"),
        ),
        _ => Ok(Vec::new()),
    }
}

/// ferrite's shape of the checkpoint tensor ferrite calls `name`:
/// `rwkv7`'s `[1, 1, D]` interpolations are `[D]`.
pub fn tensor_shape(model_type: &str, name: &str, shape: &[usize]) -> Vec<usize> {
    match model_type {
        "rwkv7" => rwkv7::tensor_shape(name, shape),
        _ => shape.to_vec(),
    }
}

/// Maps an fla `config.json` to a ferrite configuration.
pub fn parse(value: &Value, opts: &FlaOptions) -> Result<FlaImport> {
    match value.get("model_type").and_then(Value::as_str) {
        Some("mamba2") | Some("rwkv7") if opts.window.is_some() => {
            bail!("--window does nothing: the checkpoint has no attention layer")
        }
        Some(t) if t != "mamba2" && opts.mamba2_groups.is_some() => bail!(
            "--mamba2-groups does nothing: the checkpoint's model_type is {t:?}, not \"mamba2\""
        ),
        Some("mamba2") => return mamba2::parse(value, opts.mamba2_groups),
        Some("rwkv7") => return rwkv7::parse(value),
        _ => {}
    }
    let mut f = Fields::new(value, "config")?;
    for name in [
        "num_v_heads",
        "num_kv_heads",
        "intermediate_size",
        "hidden_ratio",
        "attn",
    ] {
        nullable(&mut f, value, name);
    }
    let model_type = f.choice("model_type", &model_type_names(), None)?;
    let hidden = f.int("hidden_size", Some(2048), 1)?;
    let num_layers = f.int(
        "num_hidden_layers",
        Some(if model_type == "gated_deltanet" {
            21
        } else {
            24
        }),
        1,
    )?;
    let vocab_size = f.int("vocab_size", Some(32000), 1)?;
    let norm_eps = f.positive("norm_eps", 1e-6)? as f32;
    let tie_word_embeddings = f.flag("tie_word_embeddings", true)?;
    // fla's RetNetConfig defaults hidden_ratio to 2, the others to 4.
    let hidden_ratio = f.int(
        "hidden_ratio",
        Some(if model_type == "retnet" { 2 } else { 4 }),
        1,
    )?;
    let intermediate_size = match f.take("intermediate_size") {
        Some(v) => v
            .as_u64()
            .filter(|&n| n >= 1 && n <= u32::MAX as u64)
            .map(|n| n as u32)
            .ok_or_else(|| {
                anyhow::anyhow!("config: field 'intermediate_size' must be a positive integer")
            })?,
        // fla's GatedMLP: int(hidden * ratio * 2/3), rounded up to a multiple of 256.
        None => {
            let raw = (hidden as u64 * hidden_ratio as u64 * 2 / 3) as u32;
            raw.div_ceil(256) * 256
        }
    };
    f.choice("hidden_act", &["swish", "silu"], Some("swish"))?;

    let mut warnings = Vec::new();
    let mixer = match model_type.as_str() {
        "gsa" => gsa_layer(&mut f, hidden)?,
        "delta_net" => delta_net_layer(&mut f, hidden, &mut warnings)?,
        "gla" => gla::gla_layer(&mut f, value, hidden, &mut warnings)?,
        "retnet" => gla::retnet_layer(&mut f, value, hidden, &mut warnings)?,
        "hgrn2" => gla::hgrn2_layer(&mut f, value, hidden)?,
        _ => gdn_layer(&mut f)?,
    };
    let mut layers = vec![mixer; num_layers as usize];
    // fla's `attn` is one attention spec or a list of them.
    let specs = match f.take("attn") {
        None => Vec::new(),
        Some(Value::Array(list)) => list,
        Some(spec) => vec![spec],
    };
    let mut assigned = vec![false; layers.len()];
    let mut window_used = false;
    for spec in &specs {
        let (indices, swa, warning) = attn_layers(spec, hidden, opts)?;
        // attn_layers warns exactly when it applies --window.
        window_used |= warning.is_some();
        warnings.extend(warning);
        for i in indices {
            if i >= layers.len() {
                bail!("config: attn.layers names layer {i}, the model has {num_layers}");
            }
            if std::mem::replace(&mut assigned[i], true) {
                bail!("config: attn assigns layer {i} twice");
            }
            layers[i] = swa;
        }
    }
    if let (Some(w), false) = (opts.window, window_used) {
        bail!(
            "--window {w} does nothing: {}",
            if specs.is_empty() {
                "the checkpoint has no attention layer"
            } else {
                "every attention layer of the checkpoint has its own window_size"
            }
        );
    }
    require(
        &mut f,
        "attnres_block_size",
        &Value::Null,
        "attention residuals are not implemented",
    )?;
    for name in NO_MATHS {
        f.take(name);
    }
    f.finish()?;
    let source_format = MODEL_TYPES
        .iter()
        .find(|&&(name, _)| name == model_type)
        .map(|&(_, code)| code)
        .context("internal: a model_type without a source code")?;
    let model = ModelConfig {
        vocab_size,
        hidden_size: hidden,
        intermediate_size,
        norm_eps,
        tie_word_embeddings,
        num_layers,
        tokenizer: TokenizerKind::Bytes,
        provenance: source_format,
        token_path: ferrite::TokenPath::F32,
        final_norm: ferrite::block::NormKind::Rms,
    };
    Ok(FlaImport {
        config: Config::with_plain_blocks(model, layers),
        warnings,
    })
}

fn gdn_layer(f: &mut Fields) -> Result<LayerConfig> {
    require(
        f,
        "use_short_conv",
        &Value::Bool(true),
        "ferrite's GDN always has the short convolution",
    )?;
    f.choice("output_gate_activation", &["swish", "silu"], Some("swish"))?;
    let num_heads = f.int("num_heads", Some(6), 1)?;
    let head_k_dim = f.int("head_dim", Some(256), 1)?;
    crate::config_json::gdn_rest(f, num_heads, head_k_dim)
}

/// fla's `DeltaNet` layer (`delta_net` model type): a `gdn` layer with no
/// decay, one value head per q/k head, and fla's DeltaNet defaults.
fn delta_net_layer(f: &mut Fields, hidden: u32, warnings: &mut Vec<String>) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", Some(16), 1)?;
    let expand_k = f.positive("expand_k", 1.0)?;
    let expand_v = f.positive("expand_v", 1.0)?;
    let head_k_dim = f.exact_div(
        hidden as f64 * expand_k,
        num_heads,
        "hidden_size * expand_k / num_heads",
    )?;
    let head_v_dim = f.exact_div(
        hidden as f64 * expand_v,
        num_heads,
        "hidden_size * expand_v / num_heads",
    )?;
    let use_short_conv = f.flag("use_short_conv", true)?;
    let conv_size = f.int("conv_size", Some(4), 1)?;
    if !f.flag("use_output_norm", true)? {
        // fla 0.6.0's DeltaNetBlock passes it on and DeltaNet drops it (**kwargs):
        // o_norm is applied either way, and so it is here.
        warnings.push(
            "use_output_norm = false is ignored by fla's DeltaNet layer (it always applies o_norm); ferrite does the same".into(),
        );
    }
    let qk_activation = crate::config_json::qk_activation(f)?;
    let qk_norm = match f.choice("qk_norm", &["l2", "sum"], Some("l2"))?.as_str() {
        "sum" => QkNorm::Sum,
        _ => QkNorm::L2,
    };
    Ok(LayerConfig::Gdn(GdnConfig {
        num_heads,
        num_v_heads: num_heads,
        head_k_dim,
        head_v_dim,
        conv_size: if use_short_conv { conv_size } else { 0 },
        use_gate: f.flag("use_gate", false)?,
        allow_neg_eigval: f.flag("allow_neg_eigval", false)?,
        decay: GdnDecay::None,
        delta_rule: true,
        use_beta: f.flag("use_beta", true)?,
        qk_activation,
        qk_norm,
        state: ferrite::StateFormat::F32,
    }))
}

fn gsa_layer(f: &mut Fields, hidden: u32) -> Result<LayerConfig> {
    // use_short_conv and conv_size: read by parse_gsa (fla's default is off).
    require(
        f,
        "use_output_gate",
        &Value::Bool(false),
        "the output gate is not implemented",
    )?;
    require(
        f,
        "use_norm",
        &Value::Bool(true),
        "GSA without g_norm is not implemented",
    )?;
    require(
        f,
        "elementwise_affine",
        &Value::Bool(true),
        "g_norm without weight is not implemented",
    )?;
    require(
        f,
        "clamp_min",
        &Value::Null,
        "clamped forget gates are not implemented",
    )?;
    require(
        f,
        "clamp_max",
        &Value::Null,
        "clamped forget gates are not implemented",
    )?;
    // fla's constructor spells `exapnd_k`/`exapnd_v`, but save_pretrained writes
    // the attributes, `expand_k`/`expand_v`, which the shared parser reads.
    crate::config_json::parse_gsa(f, hidden, Some(4))
}

/// fla's hybrid attention entry: the layer indices and the `swa` layer they become.
fn attn_layers(
    attn: &Value,
    hidden: u32,
    opts: &FlaOptions,
) -> Result<(Vec<usize>, LayerConfig, Option<String>)> {
    let mut f = Fields::new(attn, "config.attn")?;
    for name in ["num_kv_heads", "window_size", "rope_theta"] {
        nullable(&mut f, attn, name);
    }
    let indices: Vec<usize> = match f.take("layers") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_u64().map(|i| i as usize))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                anyhow::anyhow!("config.attn: field 'layers' must be a list of layer indices")
            })?,
        _ => bail!("config.attn: field 'layers' must be a list of layer indices"),
    };
    let num_heads = f.int("num_heads", None, 1)?;
    let num_kv_heads = f.divisor_heads("num_kv_heads", num_heads)?;
    require(
        &mut f,
        "qkv_bias",
        &Value::Bool(false),
        "attention biases are not implemented",
    )?;
    require(
        &mut f,
        "qk_norm",
        &Value::Bool(false),
        "q/k norms are not implemented",
    )?;
    let head_dim = f.exact_div(hidden as f64, num_heads, "hidden_size / num_heads")?;
    if head_dim % 2 != 0 {
        bail!("config.attn: head_dim {head_dim} must be even for RoPE");
    }
    let rope_theta = f.positive("rope_theta", 10000.0)? as f32;
    let (window, warning) = match (f.take("window_size"), opts.window) {
        (Some(v), _) => {
            let w = v.as_u64().filter(|&w| w >= 1 && w <= u32::MAX as u64).ok_or_else(|| {
                anyhow::anyhow!("config.attn: field 'window_size' must be a positive integer")
            })?;
            (w as u32, None)
        }
        (None, Some(w)) => (
            w,
            Some(format!(
                "attention layers {indices:?} were trained without a window; ferrite runs them with --window {w}, which changes their outputs beyond {w} tokens"
            )),
        ),
        (None, None) => bail!(
            "config.attn: attention layers {indices:?} have no window_size: unbounded memory cannot run in fixed state; pass --window N to run them as sliding-window attention"
        ),
    };
    f.finish()?;
    let swa = LayerConfig::Swa(SwaConfig {
        num_heads,
        num_kv_heads,
        head_dim,
        window,
        sinks: 0,
        rope_theta,
        use_rope: true,
        cache_positions: false,
        sink_logits: false,
        conv_size: 0,
        dilation: 1,
        state: ferrite::StateFormat::F32,
    });
    Ok((indices, swa, warning))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite::mixers::FeatureMap;
    use serde_json::json;

    fn gdn_config() -> Value {
        json!({"model_type": "gated_deltanet", "hidden_size": 64, "num_hidden_layers": 3,
               "num_heads": 2, "head_dim": 16, "num_v_heads": 4, "expand_v": 1.0,
               "intermediate_size": null, "hidden_ratio": 4, "vocab_size": 300,
               "use_short_conv": true, "tie_word_embeddings": false, "fuse_norm": true,
               "attn": {"layers": [1], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": false,
                        "window_size": 32, "rope_theta": 10000.0},
               "transformers_version": "4.50.0", "architectures": ["GatedDeltaNetForCausalLM"]})
    }

    #[test]
    fn gated_deltanet_hybrid_maps_to_gdn_and_swa() {
        let import = parse(&gdn_config(), &FlaOptions::default()).unwrap();
        let c = import.config;
        // int(64 * 4 * 2/3) = 170, rounded up to 256.
        assert_eq!(c.model.intermediate_size, 256);
        assert_eq!(c.model.provenance, source::FLA_GATED_DELTANET);
        assert!(
            matches!(c.layers[0], LayerConfig::Gdn(g) if g.num_v_heads == 4 && g.head_v_dim == 16)
        );
        assert!(
            matches!(c.layers[1], LayerConfig::Swa(s) if s.window == 32 && s.head_dim == 16 && s.num_kv_heads == 2)
        );
        assert!(matches!(c.layers[2], LayerConfig::Gdn(_)));
        assert!(import.warnings.is_empty());
    }

    #[test]
    fn unsupported_fields_are_refused_by_name() {
        let cases = [
            ("use_short_conv", json!(false)),
            ("attnres_block_size", json!(4)),
            ("hidden_act", json!("gelu")),
        ];
        for (field, v) in cases {
            let mut c = gdn_config();
            c[field] = v;
            let err = parse(&c, &FlaOptions::default()).unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
        let mut c = gdn_config();
        c["attn"]["qkv_bias"] = json!(true);
        assert!(parse(&c, &FlaOptions::default())
            .unwrap_err()
            .to_string()
            .contains("qkv_bias"));
        let mut c = gdn_config();
        c["model_type"] = json!("rwkv6");
        assert!(!is_fla(&c));
    }

    #[test]
    fn attention_without_window_needs_an_explicit_one() {
        let mut c = gdn_config();
        c["attn"]["window_size"] = Value::Null;
        let err = parse(&c, &FlaOptions::default()).unwrap_err().to_string();
        assert!(err.contains("--window"), "{err}");
        let import = parse(
            &c,
            &FlaOptions {
                window: Some(64),
                ..FlaOptions::default()
            },
        )
        .unwrap();
        assert!(matches!(import.config.layers[1], LayerConfig::Swa(s) if s.window == 64));
        assert_eq!(import.warnings.len(), 1);
        // A --window that no layer needs would do nothing: refused.
        let err = parse(
            &gdn_config(),
            &FlaOptions {
                window: Some(64),
                ..FlaOptions::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("its own window_size"), "{err}");
        let mut c = gdn_config();
        c.as_object_mut().unwrap().remove("attn");
        let err = parse(
            &c,
            &FlaOptions {
                window: Some(64),
                ..FlaOptions::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("no attention layer"), "{err}");
    }

    #[test]
    fn gsa_maps_with_fla_defaults() {
        let c = json!({"model_type": "gsa", "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 4,
                       "num_kv_heads": 2, "num_slots": 16, "expand_k": 1, "expand_v": 1,
                       "feature_map": "relu", "use_short_conv": false, "use_output_gate": false,
                       "use_norm": true, "clamp_min": null, "clamp_max": null, "vocab_size": 256,
                       "intermediate_size": 128});
        let import = parse(&c, &FlaOptions::default()).unwrap();
        assert!(
            import.config.model.tie_word_embeddings,
            "absent means the transformers default"
        );
        assert!(matches!(import.config.layers[0], LayerConfig::Gsa(g)
            if g.head_k_dim == 16 && g.num_slots == 16 && g.feature_map == FeatureMap::Relu));
        let mut bad = c.clone();
        bad["clamp_min"] = json!(-1.0);
        assert!(parse(&bad, &FlaOptions::default())
            .unwrap_err()
            .to_string()
            .contains("clamp_min"));
    }

    fn delta_net_config() -> Value {
        json!({"model_type": "delta_net", "hidden_size": 32, "num_hidden_layers": 2, "num_heads": 4,
               "expand_k": 1.0, "expand_v": 2.0, "use_gate": true, "use_beta": false,
               "qk_activation": "relu", "qk_norm": "sum", "conv_size": 3, "use_short_conv": true,
               "use_output_norm": true, "allow_neg_eigval": false, "vocab_size": 256,
               "tie_word_embeddings": false,
               "intermediate_size": 64, "attn": null, "attnres_block_size": null})
    }

    #[test]
    fn delta_net_maps_to_gdn_without_decay() {
        let import = parse(&delta_net_config(), &FlaOptions::default()).unwrap();
        let c = import.config;
        assert_eq!(c.model.provenance, source::FLA_DELTA_NET);
        assert!(!c.model.tie_word_embeddings);
        let LayerConfig::Gdn(g) = c.layers[1] else {
            panic!("{:?}", c.layers[1])
        };
        assert_eq!(
            (
                g.num_heads,
                g.num_v_heads,
                g.head_k_dim,
                g.head_v_dim,
                g.conv_size
            ),
            (4, 4, 8, 16, 3)
        );
        assert_eq!(g.decay, GdnDecay::None);
        assert!(g.delta_rule && g.use_gate && !g.use_beta);
        assert_eq!(g.qk_norm, QkNorm::Sum);
        assert_eq!(g.qk_activation, ferrite::mixers::QkActivation::Relu);
        assert!(import.warnings.is_empty());
        // fla's defaults: 16 heads, expand 1, beta, conv 4, silu, l2, no gate.
        let d = parse(
            &json!({"model_type": "delta_net", "hidden_size": 64}),
            &FlaOptions::default(),
        )
        .unwrap();
        let LayerConfig::Gdn(g) = d.config.layers[0] else {
            panic!()
        };
        assert_eq!((g.num_heads, g.head_k_dim, g.conv_size), (16, 4, 4));
        assert!(g.use_beta && !g.use_gate && g.qk_norm == QkNorm::L2);
        assert_eq!(d.config.layers.len(), 24);
    }

    #[test]
    fn delta_net_without_output_norm_warns_and_keeps_it_like_fla() {
        let mut c = delta_net_config();
        c["use_output_norm"] = json!(false);
        let import = parse(&c, &FlaOptions::default()).unwrap();
        assert_eq!(import.warnings.len(), 1);
        assert!(import.warnings[0].contains("use_output_norm"));
    }

    #[test]
    fn delta_net_values_ferrite_lacks_are_refused_by_name() {
        for (field, v) in [
            ("qk_norm", json!("none")),
            ("qk_activation", json!("gelu")),
            ("conv_bias", json!(true)),
            ("expand_k", json!(0.3)),
            ("hidden_act", json!("gelu")),
        ] {
            let mut c = delta_net_config();
            c[field] = v;
            let err = parse(&c, &FlaOptions::default()).unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
        let mut c = delta_net_config();
        c["model_type"] = json!("linear_attn");
        assert!(!is_fla(&c));
        assert!(is_fla(&delta_net_config()));
    }

    /// A model type neither ferrite nor the importer runs is refused naming
    /// those they do; theirs (and none) pass to their parsers.
    #[test]
    fn other_model_types_are_told_the_ones_that_run() {
        let err = check_model_type(&json!({"model_type": "rwkv6"})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config: model_type \"rwkv6\" is not supported: ferrite runs \"ferrite\", and fla's \"gated_deltanet\", \"gsa\", \"delta_net\", \"mamba2\", \"rwkv7\", \"gla\", \"hgrn2\", \"retnet\""
        );
        for ok in [
            json!({}),
            json!({"model_type": "ferrite"}),
            delta_net_config(),
            gdn_config(),
        ] {
            check_model_type(&ok).unwrap();
        }
        // Every listed type is one the parser takes (it fails on a field, not the type).
        for (name, _) in MODEL_TYPES {
            let err = parse(
                &json!({"model_type": name, "num_heads": "x"}),
                &FlaOptions::default(),
            )
            .unwrap_err()
            .to_string();
            assert!(!err.contains("model_type"), "{name}: {err}");
        }
    }

    #[test]
    fn gsa_short_conv_is_imported() {
        let c = json!({"model_type": "gsa", "hidden_size": 64, "num_hidden_layers": 1, "num_heads": 4,
                       "num_slots": 8, "use_short_conv": true, "conv_size": 2, "vocab_size": 256,
                       "intermediate_size": 128});
        let import = parse(&c, &FlaOptions::default()).unwrap();
        assert!(matches!(import.config.layers[0], LayerConfig::Gsa(g) if g.conv_size == 2));
    }
}
