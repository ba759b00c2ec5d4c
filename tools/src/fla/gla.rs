//! fla's `gla`, `hgrn2` and `retnet` checkpoints (`GLAForCausalLM`,
//! `HGRN2ForCausalLM`, `RetNetForCausalLM`): their layers are `gla` layers
//! (docs/spec.md §3.9) of the variant of the same name, in fla's usual block
//! (RMSNorm, SwiGLU MLP); the hybrid `attn` entry and the model fields are
//! `fla.rs`'s. GLA's and RetNet's fused `g_norm_swish_gate` is ferrite's
//! `g_norm`, HGRN2's `i_proj` its `v_proj`, and HGRN2's model-level
//! `lower_bounds` become each layer's `lower_bound` ([`lower_bounds`]).

use anyhow::{bail, Result};
use ferrite::config::LayerConfig;
use ferrite::mixers::{GlaConfig, GlaVariant};
use serde_json::Value;

use super::common::{nullable, require, NamedTensor, RawTensor};
use crate::config_json::Fields;

/// fla's `GatedLinearAttention` defaults its block does not override: the
/// rank of `gk_proj` and the normalizer of its log decay.
const GLA_GATE_LOW_RANK_DIM: u32 = 16;
/// See [`GLA_GATE_LOW_RANK_DIM`].
const GLA_GATE_LOGIT_NORMALIZER: u32 = 16;
/// The epsilon of HGRN2's output norm: `rms_norm_linear`'s default, which
/// fla's `HGRN2Attention` does not override (its `norm_eps` is unused).
const HGRN2_O_NORM_EPS: f32 = 1e-5;
/// fla's `RotaryEmbedding` base in `MultiScaleRetention`.
const RETNET_ROPE_THETA: f32 = 10_000.0;

/// Refuses the fields GLA and RetNet share and ferrite does not implement:
/// GQA, a feature map, `g_norm` without weight.
fn refuse_shared(f: &mut Fields, value: &Value, heads: u32) -> Result<()> {
    nullable(f, value, "feature_map");
    require(
        f,
        "feature_map",
        &Value::Null,
        "feature maps on q and k are not implemented",
    )?;
    match f.take("num_kv_heads") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64() == Some(heads as u64) => {}
        Some(v) => bail!(
            "config: field 'num_kv_heads' = {v} is not supported: grouped keys and values are not implemented"
        ),
    }
    require(
        f,
        "elementwise_affine",
        &Value::Bool(true),
        "g_norm without weight is not implemented",
    )?;
    Ok(())
}

/// Key and value widths per head: `int(hidden * expand) / num_heads`.
fn head_dims(f: &mut Fields, hidden: u32, heads: u32, k: f64, v: f64) -> Result<(u32, u32)> {
    let expand_k = f.positive("expand_k", k)?;
    let expand_v = f.positive("expand_v", v)?;
    let key = (hidden as f64 * expand_k).floor();
    let val = (hidden as f64 * expand_v).floor();
    Ok((
        f.exact_div(key, heads, "int(hidden_size * expand_k) / num_heads")?,
        f.exact_div(val, heads, "int(hidden_size * expand_v) / num_heads")?,
    ))
}

/// fla's `GatedLinearAttention` as `GLABlock` builds it.
pub(super) fn gla_layer(
    f: &mut Fields,
    value: &Value,
    hidden: u32,
    warnings: &mut Vec<String>,
) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", Some(4), 1)?;
    refuse_shared(f, value, num_heads)?;
    let (head_k_dim, head_v_dim) = head_dims(f, hidden, num_heads, 0.5, 1.0)?;
    require(
        f,
        "use_short_conv",
        &Value::Bool(false),
        "GLA's short convolutions are not implemented",
    )?;
    f.take("conv_size");
    nullable(f, value, "clamp_min");
    require(
        f,
        "clamp_min",
        &Value::Null,
        "clamped decays are not implemented",
    )?;
    // GLABlock never passes these to the layer: they change nothing.
    let use_gk = f.flag("use_gk", true)?;
    let use_gv = f.flag("use_gv", false)?;
    if !use_gk || use_gv {
        warnings.push(format!(
            "use_gk = {use_gk}, use_gv = {use_gv} are ignored by fla's GLA layer (it always has gk_proj and no gv); ferrite does the same"
        ));
    }
    Ok(LayerConfig::Gla(GlaConfig {
        num_heads,
        head_k_dim,
        head_v_dim,
        variant: GlaVariant::Gla,
        gate_low_rank_dim: GLA_GATE_LOW_RANK_DIM,
        gate_logit_normalizer: GLA_GATE_LOGIT_NORMALIZER,
        output_gate: f.flag("use_output_gate", true)?,
        rope_theta: 0.0,
        o_norm_eps: 0.0,
    }))
}

/// fla's `MultiScaleRetention` as `RetNetBlock` builds it.
pub(super) fn retnet_layer(
    f: &mut Fields,
    value: &Value,
    hidden: u32,
    warnings: &mut Vec<String>,
) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", Some(8), 1)?;
    refuse_shared(f, value, num_heads)?;
    let (head_k_dim, head_v_dim) = head_dims(f, hidden, num_heads, 1.0, 2.0)?;
    if head_k_dim % 2 != 0 || head_k_dim > 256 {
        bail!("config: RetNet's key head dim {head_k_dim} must be even and at most 256 (fla's rotary)");
    }
    // RetNetBlock never passes these to the layer (it has no convolution).
    if f.flag("use_short_conv", false)? {
        warnings.push(
            "use_short_conv = true is ignored by fla's RetNet block (its layer gets no convolution); ferrite does the same".into(),
        );
    }
    f.take("conv_size");
    Ok(LayerConfig::Gla(GlaConfig {
        num_heads,
        head_k_dim,
        head_v_dim,
        variant: GlaVariant::Retention,
        gate_low_rank_dim: 0,
        gate_logit_normalizer: 0,
        output_gate: f.flag("use_output_gate", true)?,
        rope_theta: RETNET_ROPE_THETA,
        o_norm_eps: 0.0,
    }))
}

/// fla's `HGRN2Attention` as `HGRN2Block` builds it (`expand_ratio` wins
/// over `num_heads`, as in the layer); whether the model has
/// `lower_bounds` is its `use_lower_bound`, read by [`lower_bounds`].
pub(super) fn hgrn2_layer(f: &mut Fields, value: &Value, hidden: u32) -> Result<LayerConfig> {
    nullable(f, value, "expand_ratio");
    nullable(f, value, "num_heads");
    let ratio = f.take("expand_ratio");
    let heads = f.take("num_heads");
    let as_u32 = |v: &Value, name: &str| {
        v.as_u64()
            .filter(|&n| n >= 1 && n <= u32::MAX as u64)
            .map(|n| n as u32)
            .ok_or_else(|| anyhow::anyhow!("config: field '{name}' must be a positive integer"))
    };
    let expand_ratio = match (&ratio, &heads) {
        (Some(r), _) => as_u32(r, "expand_ratio")?,
        (None, Some(h)) => hidden / as_u32(h, "num_heads")?,
        // fla's default expand_ratio.
        (None, None) => 128,
    };
    if expand_ratio == 0 || hidden % expand_ratio != 0 {
        bail!("config: hidden_size {hidden} must be a multiple of expand_ratio {expand_ratio} (the forget width must be hidden_size)");
    }
    let num_heads = hidden / expand_ratio;
    if let (Some(_), Some(h)) = (&ratio, &heads) {
        if as_u32(h, "num_heads")? != num_heads {
            bail!(
                "config: field 'num_heads' = {h} is not hidden_size / expand_ratio = {num_heads}"
            );
        }
    }
    require(
        f,
        "use_short_conv",
        &Value::Bool(false),
        "HGRN2's short convolutions are not implemented",
    )?;
    f.take("conv_size");
    require(
        f,
        "elementwise_affine",
        &Value::Bool(true),
        "g_norm without weight is not implemented",
    )?;
    f.flag("use_lower_bound", true)?;
    Ok(LayerConfig::Gla(GlaConfig {
        num_heads,
        head_k_dim: expand_ratio,
        head_v_dim: hidden / num_heads,
        variant: GlaVariant::Hgrn2,
        gate_low_rank_dim: 0,
        gate_logit_normalizer: 0,
        output_gate: false,
        rope_theta: 0.0,
        // fla's `rms_norm_linear` (g_norm fused with o_proj) is called without
        // the layer's eps: its default 1e-5 applies, not `norm_eps`.
        o_norm_eps: HGRN2_O_NORM_EPS,
    }))
}

/// ferrite's name of a `gla`, `hgrn2` or `retnet` tensor.
pub(super) fn tensor_name(model_type: &str, name: &str) -> String {
    if let Some(stem) = name.strip_suffix(".attn.g_norm_swish_gate.weight") {
        return format!("{stem}.attn.g_norm.weight");
    }
    if model_type == "hgrn2" {
        if let Some(stem) = name.strip_suffix(".attn.i_proj.weight") {
            return format!("{stem}.attn.v_proj.weight");
        }
    }
    name.to_string()
}

/// HGRN2's lower bounds: fla keeps one `[L, D]` parameter
/// `model.lower_bounds` and gives layer `i > 0` the bound
/// `cumsum(softmax(lower_bounds, 0))[i] - softmax(lower_bounds, 0)[0]` (in
/// f32; layer 0 none, which is the bound 0). From it (`raw`: its shape and
/// values), each `gla` layer's `model.layers.{i}.attn.lower_bound` `[D]`
/// (zeros for layer 0, and for every layer when the model has none:
/// `use_lower_bound: false`).
pub(super) fn lower_bounds(
    value: &Value,
    layers: &[LayerConfig],
    hidden: usize,
    raw: Option<RawTensor>,
) -> Result<Vec<NamedTensor>> {
    let use_lb = value
        .get("use_lower_bound")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let n = layers.len();
    let table: Vec<f32> = match (use_lb, raw) {
        (true, Some((shape, values))) => {
            if shape != [n, hidden] {
                bail!("tensor model.lower_bounds has shape {shape:?}, expected [{n}, {hidden}]");
            }
            let mut out = vec![0f32; n * hidden];
            for c in 0..hidden {
                let col: Vec<f32> = (0..n).map(|i| values[i * hidden + c]).collect();
                let max = col.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = col.iter().map(|&x| (x - max).exp()).collect();
                let total: f32 = e.iter().sum();
                let sm: Vec<f32> = e.iter().map(|&x| x / total).collect();
                let mut acc = 0f32;
                for (i, &s) in sm.iter().enumerate() {
                    acc += s;
                    out[i * hidden + c] = if i == 0 { 0.0 } else { acc - sm[0] };
                }
            }
            out
        }
        (true, None) => {
            bail!("use_lower_bound is true but the checkpoint has no model.lower_bounds")
        }
        (false, Some(_)) => {
            bail!("use_lower_bound is false but the checkpoint has model.lower_bounds")
        }
        (false, None) => vec![0f32; n * hidden],
    };
    Ok(layers
        .iter()
        .enumerate()
        .filter(|(_, layer)| matches!(layer, LayerConfig::Gla(_)))
        .map(|(i, _)| {
            (
                format!("model.layers.{i}.attn.lower_bound"),
                vec![hidden],
                table[i * hidden..(i + 1) * hidden].to_vec(),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fixture_configs_map_to_gla_layers() {
        let v = json!({"num_heads": 2, "expand_k": 0.5, "expand_v": 1.0});
        let mut f = Fields::new(&v, "config").unwrap();
        let mut w = Vec::new();
        let LayerConfig::Gla(c) = gla_layer(&mut f, &v, 32, &mut w).unwrap() else {
            panic!()
        };
        assert_eq!((c.num_heads, c.head_k_dim, c.head_v_dim), (2, 8, 16));
        assert_eq!(c.gate_low_rank_dim, 16);
        assert!(c.output_gate && w.is_empty());

        let v = json!({"expand_ratio": 8, "num_heads": 4});
        let mut f = Fields::new(&v, "config").unwrap();
        let LayerConfig::Gla(c) = hgrn2_layer(&mut f, &v, 32).unwrap() else {
            panic!()
        };
        assert_eq!((c.num_heads, c.head_k_dim, c.head_v_dim), (4, 8, 8));

        let v = json!({"num_heads": 2, "expand_k": 1.0, "expand_v": 2.0, "use_short_conv": true});
        let mut f = Fields::new(&v, "config").unwrap();
        let LayerConfig::Gla(c) = retnet_layer(&mut f, &v, 32, &mut w).unwrap() else {
            panic!()
        };
        assert_eq!((c.num_heads, c.head_k_dim, c.head_v_dim), (2, 16, 32));
        assert_eq!(c.rope_theta, 10_000.0);
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn unimplemented_options_are_refused_by_name() {
        for (v, name) in [
            (json!({"num_heads": 2, "num_kv_heads": 1}), "num_kv_heads"),
            (
                json!({"num_heads": 2, "feature_map": "relu"}),
                "feature_map",
            ),
            (
                json!({"num_heads": 2, "use_short_conv": true}),
                "use_short_conv",
            ),
            (json!({"num_heads": 2, "clamp_min": -1.0}), "clamp_min"),
            (
                json!({"num_heads": 2, "elementwise_affine": false}),
                "elementwise_affine",
            ),
        ] {
            let mut f = Fields::new(&v, "config").unwrap();
            let err = gla_layer(&mut f, &v, 32, &mut Vec::new())
                .unwrap_err()
                .to_string();
            assert!(err.contains(name), "{name}: {err}");
        }
        let v = json!({"expand_ratio": 8, "use_short_conv": true});
        let mut f = Fields::new(&v, "config").unwrap();
        let err = hgrn2_layer(&mut f, &v, 32).unwrap_err().to_string();
        assert!(err.contains("use_short_conv"), "{err}");
    }

    #[test]
    fn lower_bounds_are_fla_s_cumulative_softmax() {
        let layers = vec![
            LayerConfig::Gla(GlaConfig {
                num_heads: 1,
                head_k_dim: 2,
                head_v_dim: 2,
                variant: GlaVariant::Hgrn2,
                gate_low_rank_dim: 0,
                gate_logit_normalizer: 0,
                output_gate: false,
                rope_theta: 0.0,
                o_norm_eps: 1e-5,
            });
            3
        ];
        let raw = (vec![3, 2], vec![0.0, 1.0, 0.0, 0.0, 0.0, -1.0]);
        let t = lower_bounds(&json!({}), &layers, 2, Some(raw)).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[2].0, "model.layers.2.attn.lower_bound");
        let at = |i: usize| t[i].2.clone();
        assert_eq!(at(0), [0.0, 0.0]);
        let third = 1.0f32 / 3.0;
        assert!((at(1)[0] - third).abs() < 1e-7 && (at(2)[0] - 2.0 * third).abs() < 1e-7);
        let e = [1f32.exp(), 1.0, (-1f32).exp()];
        let s: f32 = e.iter().sum();
        assert!((at(2)[1] - (e[1] + e[2]) / s).abs() < 1e-7);
    }
}
