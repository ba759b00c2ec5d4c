//! `config.json` (docs/spec.md §1.2) to the image's binary configuration.
//!
//! Strict: every field is type-checked, every default of docs/spec.md §1.2 is filled in, and an
//! unknown mixer kind or field is an error naming it (a field ferrite does not
//! understand may change the maths, so it is never ignored). The defaults match
//! the Python reference (`tools/python/ferrite_ref/config.py`).

use anyhow::{bail, Context, Result};
use ferrite::block::{BlockConfig, MlpKind, NormKind};
use ferrite::config::{LayerConfig, ModelConfig, TokenizerKind};
use ferrite::mixers::{
    BlaConfig, BlaDecay, BlaKernel, BlaPhiSource, CrossConfig, FeatureMap, GdnConfig, GdnDecay,
    GlaConfig, GlaVariant, GsaConfig, KkNorm, Mamba2Config, MlaConfig, QkActivation, QkNorm,
    Rwkv7Config, SwaConfig,
};
use serde_json::{Map, Value};

/// Takes typed fields out of one JSON object; whatever is left is unknown.
pub(crate) struct Fields {
    map: Map<String, Value>,
    pub(crate) at: String,
}

impl Fields {
    pub(crate) fn new(value: &Value, at: impl Into<String>) -> Result<Fields> {
        let at = at.into();
        match value {
            Value::Object(map) => Ok(Fields {
                map: map.clone(),
                at,
            }),
            _ => bail!("{at}: expected a JSON object"),
        }
    }

    pub(crate) fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name)
    }

    pub(crate) fn int(&mut self, name: &str, default: Option<u64>, min: u64) -> Result<u32> {
        let v = match (self.take(name), default) {
            (Some(v), _) => v.as_u64().with_context(|| {
                format!("{}: field '{name}' must be a non-negative integer", self.at)
            })?,
            (None, Some(d)) => d,
            (None, None) => bail!("{}: missing required field '{name}'", self.at),
        };
        if v < min || v > u32::MAX as u64 {
            bail!("{}: field '{name}' must be >= {min}, got {v}", self.at);
        }
        Ok(v as u32)
    }

    pub(crate) fn positive(&mut self, name: &str, default: f64) -> Result<f64> {
        let v = match self.take(name) {
            Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
            Some(other) => bail!("{}: field '{name}' must be a number, got {other}", self.at),
            None => default,
        };
        if !(v.is_finite() && v > 0.0) {
            bail!(
                "{}: field '{name}' must be a positive finite number, got {v}",
                self.at
            );
        }
        Ok(v)
    }

    pub(crate) fn flag(&mut self, name: &str, default: bool) -> Result<bool> {
        match self.take(name) {
            Some(Value::Bool(b)) => Ok(b),
            Some(other) => bail!(
                "{}: field '{name}' must be true or false, got {other}",
                self.at
            ),
            None => Ok(default),
        }
    }

    pub(crate) fn choice(
        &mut self,
        name: &str,
        choices: &[&str],
        default: Option<&str>,
    ) -> Result<String> {
        let v = match (self.take(name), default) {
            (Some(Value::String(s)), _) => s,
            (Some(other), _) => bail!("{}: field '{name}' must be a string, got {other}", self.at),
            (None, Some(d)) => d.to_string(),
            (None, None) => bail!("{}: missing required field '{name}'", self.at),
        };
        if !choices.contains(&v.as_str()) {
            bail!(
                "{}: field '{name}' must be one of {choices:?}, got {v:?}",
                self.at
            );
        }
        Ok(v)
    }

    pub(crate) fn finish(self) -> Result<()> {
        if !self.map.is_empty() {
            let names: Vec<_> = self.map.keys().cloned().collect();
            bail!("{}: unknown field(s) {names:?}", self.at);
        }
        Ok(())
    }

    /// `numerator / denominator`, which must be a positive whole number.
    pub(crate) fn exact_div(&self, numerator: f64, denominator: u32, what: &str) -> Result<u32> {
        let q = numerator / denominator as f64;
        if q < 1.0 || q.fract() != 0.0 || q > u32::MAX as f64 {
            bail!(
                "{}: {what} = {numerator} / {denominator} is not a positive integer",
                self.at
            );
        }
        Ok(q as u32)
    }

    /// `head_dim`, by default `hidden_size / num_heads`.
    pub(crate) fn head_dim(&mut self, hidden: u32, heads: u32) -> Result<u32> {
        if self.map.contains_key("head_dim") {
            return self.int("head_dim", None, 1);
        }
        self.exact_div(
            hidden as f64,
            heads,
            "default head_dim = hidden_size / num_heads",
        )
    }

    /// `name` (default `heads`), which must divide `heads`.
    pub(crate) fn divisor_heads(&mut self, name: &str, heads: u32) -> Result<u32> {
        let n = self.int(name, Some(heads as u64), 1)?;
        if heads % n != 0 {
            bail!(
                "{}: num_heads {heads} must be a multiple of {name} {n}",
                self.at
            );
        }
        Ok(n)
    }

    /// The short-convolution width when `use_short_conv` is set, else 0.
    pub(crate) fn short_conv(&mut self) -> Result<u32> {
        let on = self.flag("use_short_conv", false)?;
        let size = self.int("conv_size", Some(4), 1)?;
        Ok(if on { size } else { 0 })
    }
}

fn parse_gdn(f: &mut Fields, hidden: u32) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", None, 1)?;
    let head_k_dim = f.head_dim(hidden, num_heads)?;
    let layer = gdn_rest(f, num_heads, head_k_dim)?;
    gdn_family(f, layer)
}

/// The rest of a GDN layer once its head count and head size are known (their
/// defaults differ between ferrite's config.json and fla's).
pub(crate) fn gdn_rest(f: &mut Fields, num_heads: u32, head_k_dim: u32) -> Result<LayerConfig> {
    let num_v_heads = f.int("num_v_heads", Some(num_heads as u64), 1)?;
    if num_v_heads % num_heads != 0 {
        bail!(
            "{}: num_v_heads {num_v_heads} must be a multiple of num_heads {num_heads}",
            f.at
        );
    }
    let expand_v = f.positive("expand_v", 2.0)?;
    let head_v_dim = f.exact_div(head_k_dim as f64 * expand_v, 1, "head_dim * expand_v")?;
    let conv_size = f.int("conv_size", Some(4), 1)?;
    if conv_size > 64 {
        bail!(
            "{}: field 'conv_size' must be 1..=64, got {conv_size}",
            f.at
        );
    }
    Ok(LayerConfig::Gdn(GdnConfig {
        num_heads,
        num_v_heads,
        head_k_dim,
        head_v_dim,
        conv_size,
        use_gate: f.flag("use_gate", true)?,
        allow_neg_eigval: f.flag("allow_neg_eigval", false)?,
        decay: GdnDecay::Gated,
        delta_rule: true,
        use_beta: true,
        qk_activation: QkActivation::Silu,
        qk_norm: QkNorm::L2,
        state: ferrite::StateFormat::F32,
    }))
}

/// The GDN family options of ferrite's `config.json` (docs/spec.md §3.1.1):
/// `decay`, `update`, `use_beta`, `qk_activation`, `qk_norm` and
/// `use_short_conv`, applied to a parsed Gated DeltaNet layer.
fn gdn_family(f: &mut Fields, layer: LayerConfig) -> Result<LayerConfig> {
    let LayerConfig::Gdn(mut c) = layer else {
        return Ok(layer);
    };
    c.decay = match f
        .choice("decay", &["gated", "none", "retention"], Some("gated"))?
        .as_str()
    {
        "none" => GdnDecay::None,
        "retention" => GdnDecay::Retention,
        _ => GdnDecay::Gated,
    };
    c.delta_rule = f.choice("update", &["delta", "additive"], Some("delta"))? == "delta";
    c.use_beta = f.flag("use_beta", true)?;
    c.qk_activation = qk_activation(f)?;
    c.qk_norm = match f
        .choice("qk_norm", &["l2", "sum", "none"], Some("l2"))?
        .as_str()
    {
        "sum" => QkNorm::Sum,
        "none" => QkNorm::None,
        _ => QkNorm::L2,
    };
    if !f.flag("use_short_conv", true)? {
        c.conv_size = 0;
    }
    if c.delta_rule && c.qk_norm == QkNorm::None {
        // I - beta k k^T has eigenvalues beyond (-1, 1) once |k| > 1: the state diverges.
        bail!(
            "{}: field 'qk_norm' = \"none\" needs 'update' = \"additive\": the delta rule diverges without normalised keys",
            f.at
        );
    }
    Ok(LayerConfig::Gdn(c))
}

/// `qk_activation`: `silu` (default), `relu`, `elu` (elu + 1) or `identity`.
pub(crate) fn qk_activation(f: &mut Fields) -> Result<QkActivation> {
    Ok(
        match f
            .choice(
                "qk_activation",
                &["silu", "relu", "elu", "identity"],
                Some("silu"),
            )?
            .as_str()
        {
            "relu" => QkActivation::Relu,
            "elu" => QkActivation::EluPlusOne,
            "identity" => QkActivation::Identity,
            _ => QkActivation::Silu,
        },
    )
}

/// A GSA layer; `default_heads` is fla's class default (ferrite's format has none).
pub(crate) fn parse_gsa(
    f: &mut Fields,
    hidden: u32,
    default_heads: Option<u64>,
) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", default_heads, 1)?;
    let num_kv_heads = f.divisor_heads("num_kv_heads", num_heads)?;
    let expand_k = f.positive("expand_k", 1.0)?;
    let expand_v = f.positive("expand_v", 1.0)?;
    let feature_map = match f
        .choice("feature_map", &["swish", "relu"], Some("swish"))?
        .as_str()
    {
        "relu" => FeatureMap::Relu,
        _ => FeatureMap::Swish,
    };
    Ok(LayerConfig::Gsa(GsaConfig {
        num_heads,
        num_kv_heads,
        head_k_dim: f.exact_div(
            hidden as f64 * expand_k,
            num_heads,
            "hidden_size * expand_k / num_heads",
        )?,
        head_v_dim: f.exact_div(
            hidden as f64 * expand_v,
            num_heads,
            "hidden_size * expand_v / num_heads",
        )?,
        num_slots: f.int("num_slots", Some(64), 1)?,
        feature_map,
        gate_logit_normalizer: f.positive("gate_logit_normalizer", 8.0)? as f32,
        conv_size: f.short_conv()?,
        state: ferrite::StateFormat::F32,
    }))
}

fn parse_swa(f: &mut Fields, hidden: u32) -> Result<LayerConfig> {
    let dilation = f.int("dilation", Some(1), 1)?;
    let num_heads = f.int("num_heads", None, 1)?;
    let num_kv_heads = f.divisor_heads("num_kv_heads", num_heads)?;
    let head_dim = f.head_dim(hidden, num_heads)?;
    if head_dim % 2 != 0 {
        bail!("{}: head_dim {head_dim} must be even for RoPE", f.at);
    }
    let cache_positions =
        f.choice("rope_positions", &["absolute", "cache"], Some("absolute"))? == "cache";
    if dilation > 1 && cache_positions {
        bail!(
            "{}: field 'dilation' > 1 needs rope_positions \"absolute\"",
            f.at
        );
    }
    Ok(LayerConfig::Swa(SwaConfig {
        num_heads,
        num_kv_heads,
        head_dim,
        window: f.int("window", None, 1)?,
        sinks: f.int("sinks", Some(0), 0)?,
        rope_theta: f.positive("rope_theta", 10000.0)? as f32,
        use_rope: true,
        cache_positions,
        sink_logits: f.flag("sink_logits", false)?,
        conv_size: f.short_conv()?,
        dilation,
        state: ferrite::StateFormat::F32,
    }))
}

fn parse_bla(f: &mut Fields, hidden: u32) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", None, 1)?;
    let num_kv_heads = f.divisor_heads("num_kv_heads", num_heads)?;
    let head_dim = f.head_dim(hidden, num_heads)?;
    let period = f.int("period", None, 1)?;
    let modes = f.int("modes", None, 0)?;
    if 2 * modes as u64 > period as u64 {
        bail!(
            "{}: modes {modes} above the Nyquist limit period/2 = {}",
            f.at,
            period as f64 / 2.0
        );
    }
    let gamma = f.positive("gamma", 1.0)?;
    if gamma > 1.0 {
        bail!("{}: field 'gamma' must be in (0, 1], got {gamma}", f.at);
    }
    let kernel = match f
        .choice("kernel", &["dirichlet", "fejer"], Some("dirichlet"))?
        .as_str()
    {
        "fejer" => BlaKernel::Fejer,
        _ => BlaKernel::Dirichlet,
    };
    let decay = match f
        .choice("decay", &["gated", "scalar", "none"], Some("gated"))?
        .as_str()
    {
        "scalar" => BlaDecay::Scalar,
        "none" => BlaDecay::None,
        _ => BlaDecay::Gated,
    };
    Ok(LayerConfig::Bla(BlaConfig {
        num_heads,
        num_kv_heads,
        head_k_dim: head_dim,
        head_v_dim: head_dim,
        period,
        modes,
        slots: f.int("slots", Some(2 * modes as u64 + 1), 1)?,
        kernel,
        decay,
        gamma: gamma as f32,
        conv_size: f.short_conv()?,
        // Not a property of the model but of its image: the writer's
        // `WriteOptions::bla_phi` (`ferrite quantize --bla-phi`) sets it;
        // this is that option's default.
        phi_source: BlaPhiSource::Computed,
        state: ferrite::StateFormat::F32,
    }))
}

fn parse_mla(f: &mut Fields, hidden: u32) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", None, 1)?;
    let head_dim = f.head_dim(hidden, num_heads)?;
    let rope_dim = f.int("rope_dim", Some(0), 0)?;
    if rope_dim % 2 != 0 {
        bail!("{}: rope_dim {rope_dim} must be even for RoPE", f.at);
    }
    Ok(LayerConfig::Mla(MlaConfig {
        num_heads,
        head_dim,
        v_head_dim: f.int("v_head_dim", Some(head_dim as u64), 1)?,
        rope_dim,
        kv_lora_rank: f.int("kv_lora_rank", None, 1)?,
        window: f.int("window", None, 1)?,
        rope_theta: f.positive("rope_theta", 10000.0)? as f32,
        state: ferrite::StateFormat::F32,
    }))
}

fn parse_mamba2(f: &mut Fields) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", None, 1)?;
    let n_groups = f.int("n_groups", Some(1), 1)?;
    if num_heads % n_groups != 0 {
        bail!(
            "{}: num_heads {num_heads} must be a multiple of n_groups {n_groups}",
            f.at
        );
    }
    let conv_size = f.int("conv_size", Some(4), 1)?;
    if conv_size > 64 {
        bail!(
            "{}: field 'conv_size' must be 1..=64, got {conv_size}",
            f.at
        );
    }
    let gated_norm = f.flag("gated_norm", true)?;
    let norm_before_gate = f.flag("norm_before_gate", false)?;
    if norm_before_gate && !gated_norm {
        bail!(
            "{}: field 'norm_before_gate' needs 'gated_norm' = true",
            f.at
        );
    }
    Ok(LayerConfig::Mamba2(Mamba2Config {
        num_heads,
        head_dim: f.int("head_dim", None, 1)?,
        state_size: f.int("state_size", Some(16), 1)?,
        n_groups,
        conv_size,
        conv_bias: f.flag("conv_bias", true)?,
        gated_norm,
        norm_before_gate,
        d_per_channel: f.flag("d_per_channel", false)?,
        groups_interleaved: f.choice(
            "group_heads",
            &["blocked", "interleaved"],
            Some("blocked"),
        )? == "interleaved",
    }))
}

/// A `gla` layer (docs/spec.md §3.9): fla's GLA (`variant` "gla", the
/// default), HGRN2 ("hgrn2") or RetNet ("retention"); the fields of one
/// variant are refused on another (as unknown fields).
fn parse_gla(f: &mut Fields) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", None, 1)?;
    let head_k_dim = f.int("head_k_dim", None, 1)?;
    let head_v_dim = f.int("head_v_dim", None, 1)?;
    let variant = match f
        .choice("variant", &["gla", "hgrn2", "retention"], Some("gla"))?
        .as_str()
    {
        "hgrn2" => GlaVariant::Hgrn2,
        "retention" => GlaVariant::Retention,
        _ => GlaVariant::Gla,
    };
    let mut c = GlaConfig {
        num_heads,
        head_k_dim,
        head_v_dim,
        variant,
        gate_low_rank_dim: 0,
        gate_logit_normalizer: 0,
        output_gate: false,
        rope_theta: 0.0,
        o_norm_eps: 0.0,
    };
    // The output norm's own epsilon (fla's HGRN2: 1e-5); absent, the model's.
    if f.map.contains_key("o_norm_eps") {
        c.o_norm_eps = f.positive("o_norm_eps", 1e-5)? as f32;
    }
    match variant {
        GlaVariant::Gla => {
            c.gate_low_rank_dim = f.int("gate_low_rank_dim", Some(16), 1)?;
            c.gate_logit_normalizer = f.int("gate_logit_normalizer", Some(16), 1)?;
            if c.gate_logit_normalizer > 1 << 16 {
                bail!("{}: field 'gate_logit_normalizer' must be 1..=65536", f.at);
            }
            c.output_gate = f.flag("output_gate", true)?;
        }
        GlaVariant::Hgrn2 => {}
        GlaVariant::Retention => {
            c.output_gate = f.flag("output_gate", true)?;
            c.rope_theta = f.positive("rope_theta", 10_000.0)? as f32;
            if c.rope_theta <= 1.0 {
                bail!("{}: field 'rope_theta' must be > 1", f.at);
            }
            if head_k_dim % 2 != 0 {
                bail!("{}: retention's head_k_dim must be even (RoPE)", f.at);
            }
        }
    }
    Ok(LayerConfig::Gla(c))
}

/// A `cross` layer (docs/spec.md §3.10): cross-attention over `memories`
/// baked memories of `memory_slots` slots each; `num_kv_heads` defaults to
/// `num_heads`, `head_dim` to `hidden_size / num_heads`,
/// `memory_encoder_layers` (the layers the memory encoder runs before the
/// layer's norm and `k_proj`/`v_proj`) to 0; `Model::load` refuses one
/// that reaches the first cross layer. The record's own
/// checks (`CrossConfig::from_words`) refuse the rest by reason.
fn parse_cross(f: &mut Fields, hidden: u32, first: usize) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", None, 1)?;
    let num_kv_heads = f.divisor_heads("num_kv_heads", num_heads)?;
    let head_dim = f.head_dim(hidden, num_heads)?;
    let memory_slots = f.int("memory_slots", None, 1)?;
    let memories = f.int("memories", Some(1), 1)?;
    if memories > ferrite::mixers::MAX_MEMORIES {
        bail!(
            "{}: field 'memories' must be 1..={}, got {memories}",
            f.at,
            ferrite::mixers::MAX_MEMORIES
        );
    }
    let c = CrossConfig {
        num_heads,
        num_kv_heads,
        head_dim,
        memory_slots,
        memories,
        output_gate: f.flag("output_gate", false)?,
        encoder_layers: f.int("memory_encoder_layers", Some(0), 0)?,
        state: ferrite::StateFormat::F32,
    };
    CrossConfig::from_words(&c.to_words(), None).map_err(|e| anyhow::anyhow!("{}: {e}", f.at))?;
    // The encoder runs layers 0..E of the stack, none of them a cross
    // layer: E is at most the first cross layer's index (this one's, when
    // it is the first: `first`).
    if c.encoder_layers as usize > first {
        bail!(
            "{}: field 'memory_encoder_layers' must be at most {first} (the memory encoder runs layers before the first cross layer, layer {first}), got {}",
            f.at,
            c.encoder_layers
        );
    }
    Ok(LayerConfig::Cross(c))
}

fn is_cross(l: &LayerConfig) -> bool {
    matches!(l, LayerConfig::Cross(_))
}

/// An RWKV-7 layer; `first` (layer 0) passes its value to later layers
/// (fla's `v_first`) and has no value-residual projection.
pub(crate) fn parse_rwkv7(
    f: &mut Fields,
    hidden: u32,
    norm_eps: f64,
    first: bool,
) -> Result<LayerConfig> {
    let num_heads = f.int("num_heads", None, 1)?;
    let head_dim = f.head_dim(hidden, num_heads)?;
    if num_heads as u64 * head_dim as u64 != hidden as u64 {
        bail!(
            "{}: num_heads {num_heads} * head_dim {head_dim} must be hidden_size {hidden} (RWKV-7's key width)",
            f.at
        );
    }
    let head_v_dim = f.int("head_v_dim", Some(head_dim as u64), 1)?;
    let decay_rank = f.int("decay_low_rank_dim", Some(64), 1)?;
    let a_rank = f.int("a_low_rank_dim", Some(64), 1)?;
    let v_rank = f.int("v_low_rank_dim", Some(16), 1)?;
    let gate_rank = f.int("gate_low_rank_dim", Some(128), 1)?;
    let kk_norm = match f
        .choice("kk_norm", &["l2", "normalize"], Some("l2"))?
        .as_str()
    {
        "normalize" => KkNorm::Normalize,
        _ => KkNorm::L2,
    };
    // fla: GroupNorm(eps = head_dim * norm_eps), in f64 then f32.
    let g_norm_eps = f.positive("g_norm_eps", head_dim as f64 * norm_eps)? as f32;
    Ok(LayerConfig::Rwkv7(Rwkv7Config {
        num_heads,
        head_dim,
        head_v_dim,
        decay_rank,
        a_rank,
        v_rank: if first { 0 } else { v_rank },
        gate_rank,
        value_first: first,
        kk_norm,
        g_norm_eps,
    }))
}

/// A layer's block options (docs/spec.md §1.1): `mlp` and `pre_norm`, with
/// the model's norm kind.
fn parse_block(f: &mut Fields, norm: NormKind) -> Result<BlockConfig> {
    let mlp = match f
        .choice("mlp", &["swiglu", "none", "channel_mix"], Some("swiglu"))?
        .as_str()
    {
        "none" => MlpKind::None,
        "channel_mix" => MlpKind::ChannelMix,
        _ => MlpKind::SwiGlu,
    };
    Ok(BlockConfig {
        norm,
        mlp,
        pre_norm: f.flag("pre_norm", false)?,
    })
}

/// A parsed `config.json`: the model record and one record per layer.
#[derive(Clone, Debug)]
pub struct Config {
    /// Model-wide configuration.
    pub model: ModelConfig,
    /// One mixer configuration per layer.
    pub layers: Vec<LayerConfig>,
    /// One block configuration per layer (docs/spec.md §1.1).
    pub blocks: Vec<BlockConfig>,
}

impl Config {
    /// A configuration whose every layer has the format-1 block.
    pub fn with_plain_blocks(model: ModelConfig, layers: Vec<LayerConfig>) -> Config {
        let blocks = vec![BlockConfig::RMS_SWIGLU; layers.len()];
        Config {
            model,
            layers,
            blocks,
        }
    }
}

/// The `model_type` of ferrite's own `config.json` (also its default).
pub const MODEL_TYPE: &str = "ferrite";

/// Parses a `config.json` value (docs/spec.md §1.2).
pub fn parse(value: &Value) -> Result<Config> {
    let mut f = Fields::new(value, "config")?;
    f.choice("model_type", &[MODEL_TYPE], Some(MODEL_TYPE))?;
    let hidden = f.int("hidden_size", None, 1)?;
    let norm_eps = f.positive("norm_eps", 1e-6)?;
    let norm = match f
        .choice("norm", &["rmsnorm", "layernorm"], Some("rmsnorm"))?
        .as_str()
    {
        "layernorm" => NormKind::Layer,
        _ => NormKind::Rms,
    };
    let raw_layers = match f.take("layers") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => bail!("config: field 'layers' must be a non-empty list"),
    };
    let mut layers = Vec::with_capacity(raw_layers.len());
    let mut blocks = Vec::with_capacity(raw_layers.len());
    for (i, raw) in raw_layers.iter().enumerate() {
        let mut lf = Fields::new(raw, format!("layers[{i}]"))?;
        // The runtime's kinds (its mixer table); each needs a parser below
        // (`every_runtime_mixer_kind_has_a_parser`).
        let kind = lf.choice("mixer", LayerConfig::KIND_NAMES, None)?;
        let layer = match kind.as_str() {
            "gdn" => parse_gdn(&mut lf, hidden)?,
            "gsa" => parse_gsa(&mut lf, hidden, None)?,
            "swa" => parse_swa(&mut lf, hidden)?,
            "bla" => parse_bla(&mut lf, hidden)?,
            "mla" => parse_mla(&mut lf, hidden)?,
            "mamba2" => parse_mamba2(&mut lf)?,
            "rwkv7" => parse_rwkv7(&mut lf, hidden, norm_eps, i == 0)?,
            "gla" => parse_gla(&mut lf)?,
            "cross" => parse_cross(
                &mut lf,
                hidden,
                layers.iter().position(is_cross).unwrap_or(i),
            )?,
            other => bail!(
                "{}: mixer {other:?} has no config.json parser in ferrite-tools",
                lf.at
            ),
        };
        blocks.push(parse_block(&mut lf, norm)?);
        lf.finish()?;
        layers.push(layer);
    }
    // Required where a layer has an MLP; 0 (and absent) without one.
    let intermediate_size = if blocks.iter().any(BlockConfig::has_mlp) {
        f.int("intermediate_size", None, 1)?
    } else {
        f.int("intermediate_size", Some(0), 0)?
    };
    let model = ModelConfig {
        vocab_size: f.int("vocab_size", None, 1)?,
        hidden_size: hidden,
        intermediate_size,
        norm_eps: norm_eps as f32,
        tie_word_embeddings: f.flag("tie_word_embeddings", false)?,
        num_layers: layers.len() as u32,
        tokenizer: {
            // Format v1 knows one tokenizer; the choice still rejects others by name.
            f.choice("tokenizer", &["bytes"], Some("bytes"))?;
            TokenizerKind::Bytes
        },
        provenance: 0,
        token_path: ferrite::TokenPath::F32,
        final_norm: norm,
    };
    f.finish()?;
    Ok(Config {
        model,
        layers,
        blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spec_example_parses_with_defaults() {
        let c = parse(&json!({"vocab_size": 256, "hidden_size": 128, "intermediate_size": 384,
            "layers": [{"mixer": "gdn", "num_heads": 2}, {"mixer": "bla", "num_heads": 2, "period": 64, "modes": 8}]}))
        .unwrap();
        assert!(!c.model.tie_word_embeddings);
        match c.layers[0] {
            LayerConfig::Gdn(g) => {
                assert_eq!((g.head_k_dim, g.head_v_dim, g.conv_size), (64, 128, 4))
            }
            _ => panic!(),
        }
        match c.layers[1] {
            LayerConfig::Bla(b) => assert_eq!((b.slots, b.head_k_dim, b.conv_size), (17, 64, 0)),
            _ => panic!(),
        }
    }

    /// The typed fields at their edges: an integer at its minimum and at
    /// `u32::MAX` taken, below or above refused; a positive number refusing
    /// 0 and negatives; a quotient a whole number in 1..=u32::MAX.
    #[test]
    fn fields_take_their_edges_and_refuse_past_them() {
        let max = u64::from(u32::MAX);
        let mut f = Fields::new(
            &json!({"a": 3, "b": 2, "c": max, "d": max + 1, "z": 0.0, "n": -1.0, "p": 1e-300}),
            "t",
        )
        .unwrap();
        assert_eq!(f.int("a", None, 3).unwrap(), 3);
        assert!(f.int("b", None, 3).is_err());
        assert_eq!(f.int("c", None, 1).unwrap(), u32::MAX);
        assert!(f.int("d", None, 1).is_err());
        assert!(f.positive("z", 1.0).is_err());
        assert!(f.positive("n", 1.0).is_err());
        assert_eq!(f.positive("p", 1.0).unwrap(), 1e-300);
        assert_eq!(f.exact_div(4.0, 4, "q").unwrap(), 1);
        assert!(f.exact_div(0.0, 4, "q").is_err());
        assert!(f.exact_div(6.0, 4, "q").is_err());
        assert_eq!(f.exact_div(max as f64, 1, "q").unwrap(), u32::MAX);
        assert!(f.exact_div((max + 1) as f64, 1, "q").is_err());
    }

    /// `base` with the fields of `extra` added (or replaced).
    fn with(mut base: Value, extra: Value) -> Value {
        let extra = extra.as_object().unwrap().clone();
        base.as_object_mut().unwrap().extend(extra);
        base
    }

    /// One layer in a model of width 64 (vocab 256, MLP 32).
    fn one_layer(layer: Value) -> Result<LayerConfig> {
        parse(
            &json!({"vocab_size": 256, "hidden_size": 64, "intermediate_size": 32,
            "layers": [layer]}),
        )
        .map(|c| c.layers[0])
    }

    /// Every option value maps to its own variant (not to the default's),
    /// and each family's bounds hold at their edges.
    #[test]
    fn layer_options_map_to_their_variants_and_bounds_hold_at_the_edges() {
        let gdn = |extra: Value| {
            let layer = with(json!({"mixer": "gdn", "num_heads": 2}), extra);
            match one_layer(layer) {
                Ok(LayerConfig::Gdn(c)) => Ok(c),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e),
            }
        };
        assert!(matches!(
            gdn(json!({"decay": "none"})).unwrap().decay,
            GdnDecay::None
        ));
        assert!(matches!(
            gdn(json!({"decay": "retention"})).unwrap().decay,
            GdnDecay::Retention
        ));
        assert!(gdn(json!({})).unwrap().delta_rule);
        let additive = gdn(json!({"update": "additive", "qk_norm": "none"})).unwrap();
        assert!(!additive.delta_rule && matches!(additive.qk_norm, QkNorm::None));
        assert!(matches!(
            gdn(json!({"qk_norm": "sum"})).unwrap().qk_norm,
            QkNorm::Sum
        ));
        assert!(matches!(
            gdn(json!({"qk_activation": "elu"})).unwrap().qk_activation,
            QkActivation::EluPlusOne
        ));
        assert!(matches!(
            gdn(json!({"qk_activation": "identity"}))
                .unwrap()
                .qk_activation,
            QkActivation::Identity
        ));
        assert_eq!(gdn(json!({"conv_size": 64})).unwrap().conv_size, 64);
        assert!(gdn(json!({"conv_size": 65})).is_err());

        let Ok(LayerConfig::Gsa(g)) =
            one_layer(json!({"mixer": "gsa", "num_heads": 2, "expand_k": 2.0, "expand_v": 0.5}))
        else {
            panic!()
        };
        assert_eq!((g.head_k_dim, g.head_v_dim), (64, 16));

        let swa = |extra: Value| {
            let layer = with(json!({"mixer": "swa", "num_heads": 2, "window": 8}), extra);
            one_layer(layer)
        };
        let Ok(LayerConfig::Swa(cached)) = swa(json!({"rope_positions": "cache"})) else {
            panic!()
        };
        assert!(cached.cache_positions);
        let Ok(LayerConfig::Swa(plain)) = swa(json!({})) else {
            panic!()
        };
        assert!(!plain.cache_positions);
        assert!(swa(json!({"dilation": 2, "rope_positions": "cache"})).is_err());
        assert!(swa(json!({"dilation": 2})).is_ok());

        let bla = |extra: Value| {
            let layer = with(
                json!({"mixer": "bla", "num_heads": 2, "period": 16, "modes": 4}),
                extra,
            );
            match one_layer(layer) {
                Ok(LayerConfig::Bla(c)) => Ok(c),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e),
            }
        };
        assert_eq!(bla(json!({"modes": 8})).unwrap().modes, 8);
        assert!(bla(json!({"modes": 9})).is_err());
        assert_eq!(bla(json!({"gamma": 0.5})).unwrap().gamma, 0.5);
        assert!(bla(json!({"gamma": 1.5})).is_err());
        assert!(matches!(
            bla(json!({"kernel": "fejer"})).unwrap().kernel,
            BlaKernel::Fejer
        ));
        assert!(matches!(
            bla(json!({"decay": "scalar"})).unwrap().decay,
            BlaDecay::Scalar
        ));
        assert!(matches!(
            bla(json!({"decay": "none"})).unwrap().decay,
            BlaDecay::None
        ));
        // Shared key/value heads (issue 28): default one per query head;
        // 0 and a non-divisor are refused in one line each.
        assert_eq!(bla(json!({})).unwrap().num_kv_heads, 2);
        assert_eq!(bla(json!({"num_kv_heads": 1})).unwrap().num_kv_heads, 1);
        for bad in [0, 3] {
            let e = bla(json!({ "num_kv_heads": bad })).unwrap_err().to_string();
            assert!(e.contains("num_kv_heads") && !e.contains('\n'), "{e}");
        }

        let mla = |rope_dim: u32| {
            one_layer(json!({"mixer": "mla", "num_heads": 2, "rope_dim": rope_dim,
                "kv_lora_rank": 8, "window": 8}))
        };
        assert!(mla(2).is_ok());
        assert!(mla(3).is_err());

        let mamba2 = |extra: Value| {
            let layer = with(
                json!({"mixer": "mamba2", "num_heads": 2, "head_dim": 16}),
                extra,
            );
            one_layer(layer)
        };
        assert!(mamba2(json!({"conv_size": 64})).is_ok());
        assert!(mamba2(json!({"conv_size": 65})).is_err());
        assert!(mamba2(json!({"norm_before_gate": true})).is_ok());
        assert!(mamba2(json!({"norm_before_gate": true, "gated_norm": false})).is_err());
        assert!(mamba2(json!({"gated_norm": false})).is_ok());

        let empty = parse(&json!({"vocab_size": 256, "hidden_size": 64, "layers": []}));
        assert!(empty.unwrap_err().to_string().contains("non-empty"));
    }

    /// docs/spec.md §3.10: a `cross` layer's defaults, and every bad value
    /// refused by name or by the record's reason.
    #[test]
    fn cross_parses_with_defaults_and_refuses_bad_values() {
        // An encoder of 1 layer before a cross layer at index 1; one that
        // reaches the first cross layer is refused in a later layer too.
        let two = |e: u32| {
            parse(
                &json!({"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64,
                "layers": [{"mixer": "gdn", "num_heads": 2},
                    {"mixer": "cross", "num_heads": 4, "memory_slots": 4, "memory_encoder_layers": 1},
                    {"mixer": "cross", "num_heads": 4, "memory_slots": 4, "memory_encoder_layers": e}]}),
            )
        };
        assert!(matches!(
            two(1).unwrap().layers[2],
            LayerConfig::Cross(CrossConfig {
                encoder_layers: 1,
                ..
            })
        ));
        let err = format!("{:#}", two(2).unwrap_err());
        assert!(err.contains("must be at most 1"), "{err}");
        let cross = |layer: Value| {
            parse(
                &json!({"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64,
                "layers": [layer]}),
            )
        };
        let c = cross(json!({"mixer": "cross", "num_heads": 4, "memory_slots": 16})).unwrap();
        assert_eq!(
            c.layers[0],
            LayerConfig::Cross(CrossConfig {
                num_heads: 4,
                num_kv_heads: 4,
                head_dim: 8,
                memory_slots: 16,
                memories: 1,
                output_gate: false,
                encoder_layers: 0,
                state: ferrite::StateFormat::F32,
            })
        );
        let c = cross(json!({"mixer": "cross", "num_heads": 4, "num_kv_heads": 2,
            "head_dim": 4, "memory_slots": 3, "memories": 8, "output_gate": true}))
        .unwrap();
        assert!(matches!(
            c.layers[0],
            LayerConfig::Cross(CrossConfig {
                memories: 8,
                output_gate: true,
                head_dim: 4,
                ..
            })
        ));
        for (bad, says) in [
            (
                json!({"num_heads": 4}),
                "missing required field 'memory_slots'",
            ),
            (
                json!({"num_heads": 4, "memory_slots": 0}),
                "'memory_slots' must be >= 1",
            ),
            (
                json!({"num_heads": 4, "memory_slots": 4, "memories": 9}),
                "'memories' must be 1..=8",
            ),
            (
                json!({"num_heads": 4, "memory_slots": 4, "memories": 0}),
                "'memories' must be >= 1",
            ),
            (
                json!({"num_heads": 4, "memory_slots": 4, "num_kv_heads": 3}),
                "multiple of num_kv_heads",
            ),
            (json!({"num_heads": 3, "memory_slots": 4}), "head_dim"),
            (
                json!({"num_heads": 4, "memory_slots": 1 << 20, "head_dim": 8}),
                "exceeds 2^20",
            ),
            (
                json!({"num_heads": 4, "memory_slots": 4, "window": 4}),
                "window",
            ),
            (
                json!({"num_heads": 4, "memory_slots": 4, "output_gate": 1}),
                "output_gate",
            ),
            (
                json!({"num_heads": 4, "memory_slots": 4, "memory_encoder_layers": 1}),
                "'memory_encoder_layers' must be at most 0",
            ),
        ] {
            let mut layer = bad.clone();
            layer["mixer"] = json!("cross");
            let err = format!("{:#}", cross(layer).unwrap_err());
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    /// Every mixer kind of the runtime's table (`config::mixer_table!`,
    /// whose `KIND_NAMES` is the list `mixer` takes) has a parser here: a
    /// layer with only its `mixer` field fails on a field of that kind, not
    /// on the kind.
    #[test]
    fn every_runtime_mixer_kind_has_a_parser() {
        for name in LayerConfig::KIND_NAMES {
            let err = parse(&json!({"vocab_size": 256, "hidden_size": 32,
                "intermediate_size": 64, "layers": [{"mixer": name}]}))
            .unwrap_err()
            .to_string();
            assert!(err.contains("missing required field"), "{name}: {err}");
            assert!(!err.contains("'mixer'"), "{name}: {err}");
        }
    }

    /// docs/spec.md §1.2: each layer's `mlp` and `pre_norm`, the model's
    /// `norm`, `intermediate_size` 0 without an MLP, RWKV-7's layer 0
    /// passing its value on, Mamba-2's defaults.
    #[test]
    fn block_options_and_the_new_families_parse_with_defaults() {
        let c = parse(
            &json!({"vocab_size": 256, "hidden_size": 64, "norm": "layernorm",
            "norm_eps": 1e-5, "layers": [
                {"mixer": "rwkv7", "num_heads": 4, "mlp": "channel_mix", "pre_norm": true},
                {"mixer": "rwkv7", "num_heads": 4, "mlp": "none"},
                {"mixer": "mamba2", "num_heads": 4, "head_dim": 32, "mlp": "none"}],
            "intermediate_size": 32}),
        )
        .unwrap();
        assert_eq!(c.model.final_norm, NormKind::Layer);
        assert_eq!(
            c.blocks
                .iter()
                .map(|b| (b.mlp, b.pre_norm))
                .collect::<Vec<_>>(),
            [
                (MlpKind::ChannelMix, true),
                (MlpKind::None, false),
                (MlpKind::None, false)
            ]
        );
        let (LayerConfig::Rwkv7(first), LayerConfig::Rwkv7(later)) = (c.layers[0], c.layers[1])
        else {
            panic!("{:?}", c.layers)
        };
        assert!(first.value_first && first.v_rank == 0 && !later.value_first);
        assert_eq!(
            (later.head_dim, later.head_v_dim, later.v_rank),
            (16, 16, 16)
        );
        assert_eq!(later.g_norm_eps, (16.0 * 1e-5f64) as f32);
        let LayerConfig::Mamba2(m) = c.layers[2] else {
            panic!()
        };
        assert_eq!((m.state_size, m.n_groups, m.conv_size), (16, 1, 4));
        assert!(m.conv_bias && m.gated_norm && !m.groups_interleaved);
        // Without any MLP the width is 0 (and may be left out); with one it is required.
        let none = parse(&json!({"vocab_size": 256, "hidden_size": 32,
            "layers": [{"mixer": "mamba2", "num_heads": 2, "head_dim": 16, "mlp": "none"}]}))
        .unwrap();
        assert_eq!(none.model.intermediate_size, 0);
        let err = parse(&json!({"vocab_size": 256, "hidden_size": 32,
            "layers": [{"mixer": "mamba2", "num_heads": 2, "head_dim": 16}]}))
        .unwrap_err()
        .to_string();
        assert!(err.contains("intermediate_size"), "{err}");
        for (layer, field) in [
            (
                json!({"mixer": "rwkv7", "num_heads": 4, "head_dim": 8}),
                "hidden_size",
            ),
            (
                json!({"mixer": "gdn", "num_heads": 2, "mlp": "geglu"}),
                "mlp",
            ),
            (
                json!({"mixer": "mamba2", "num_heads": 4, "head_dim": 8, "n_groups": 3}),
                "n_groups",
            ),
        ] {
            let err = parse(&json!({"vocab_size": 256, "hidden_size": 64,
                "intermediate_size": 32, "layers": [layer]}))
            .unwrap_err()
            .to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn unknown_fields_and_kinds_are_refused() {
        let base = |layer: Value| json!({"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "layers": [layer]});
        let err = parse(&base(json!({"mixer": "mamba", "num_heads": 2})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("mixer"), "{err}");
        let err = parse(&base(
            json!({"mixer": "swa", "num_heads": 2, "window": 8, "alibi": true}),
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("alibi"), "{err}");
        let err = parse(&base(
            json!({"mixer": "bla", "num_heads": 2, "period": 8, "modes": 5}),
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("Nyquist"), "{err}");
    }
}
