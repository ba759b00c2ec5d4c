//! Writing flash images (format in `ferrite::image`, prose in `docs/image-format.md`).

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use ferrite::block::NormKind;
use ferrite::config::{LayerConfig, TokenPath, TokenizerKind};
use ferrite::image::{
    DType, Header, Layout, Role, TensorEntry, TensorSpec, BPE_FORMAT_VERSION, CRC, CRC_FIELD,
    CRC_START, FLAG_SIGNED, GLOBAL_LAYER, HEADER_LEN, INTEGER_PATH_FORMAT_VERSION,
    MIN_FORMAT_VERSION, SIGNATURE_SECTION_LEN, SIGNED_FORMAT_VERSION, TENSOR_ALIGN,
    TENSOR_ENTRY_LEN, TILED_FORMAT_VERSION,
};
use ferrite::kernels::tiled::{MAX_TILED_GROUP, TILE_COLS};
use ferrite::mixers::BlaPhiSource;
use ferrite::model::{block_specs, global_specs};
use ferrite::StateFormat;

use crate::config_json::Config;
use crate::model_dir::ModelDir;
use crate::quant::{encode, encode_tiled, Encoded, Hessian, Scales};

/// How to store tensors.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// dtype of weight matrices and the embedding table.
    pub dtype: DType,
    /// Group size of quantized dtypes; `None` picks, per tensor, the largest
    /// of [`AUTO_GROUP_SIZES`] that divides its input dimension.
    pub group_size: Option<usize>,
    /// `(glob, dtype)` overrides; the first matching rule wins.
    pub rules: Vec<(String, DType)>,
    /// Layout of int8/int4 matrices: [`Layout::Tiled`] (the integer path;
    /// matrices whose input width is not a multiple of 16 stay row-major)
    /// or [`Layout::RowMajor`] (format 1-2 images, f32 activations).
    pub layout: Layout,
    /// How tiled int4 scales are chosen.
    pub scales: Scales,
    /// Input statistics per matrix name (`--calibrate`): tiled int4
    /// matrices are then quantized for the error of their products (GPTQ),
    /// except a tied embedding table (its lookups read the weights alone).
    pub calibration: Option<HashMap<String, Hessian>>,
    /// BLA layers' write weights: [`BlaPhiSource::Computed`] (the default:
    /// no `attn.phi` table, the runtime computes it; format 5) or
    /// [`BlaPhiSource::Table`] (the f32 table, readable by runtimes of
    /// formats 1-4). Applies to every `bla` layer; other layers ignore it.
    pub bla_phi: BlaPhiSource,
    /// The token path the image asks for (`--path`): f32, or the integer
    /// token path (format 6; every matrix the integer steps read tiled).
    pub token_path: TokenPath,
    /// Integer states or f32 (`--state`; only with the integer token path):
    /// any value but f32 gives every layer whose mixer has an integer step
    /// its mixer's integer format (int16 for GDN, GSA and BLA, int8 KV with
    /// log scales for SWA, int8 KV for MLA); other layers keep f32 states
    /// and run their f32 step. [`StateFormat::Int8Kv`] does the same but
    /// gives SWA layers the older int8 KV with scale words (the images
    /// written before the log scales; tests and comparisons).
    pub state: StateFormat,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            dtype: DType::F32,
            group_size: None,
            rules: Vec::new(),
            layout: Layout::Tiled,
            scales: Scales::default(),
            calibration: None,
            bla_phi: BlaPhiSource::Computed,
            token_path: TokenPath::F32,
            state: StateFormat::F32,
        }
    }
}

/// Group sizes tried, largest first, when none is given (row-major layout).
pub const AUTO_GROUP_SIZES: [usize; 4] = [64, 32, 16, 8];
/// Group sizes tried, largest first, when none is given (tiled int4):
/// groups of 32 score 0.02-0.04 bits per byte better than 64 on the shipped
/// LMs for 0.5-2% more flash (docs/quantization.md, "int4").
pub const AUTO_TILED_GROUP_SIZES: [usize; 2] = [32, 16];

/// The int4 image the defaults aim at: at most this fraction of the int8
/// image (issue 11's bound).
pub const INT4_BUDGET: f64 = 0.6;

/// Whether a quantized matrix with `cols` inputs and `ndim` dims can take
/// the tiled layout (and with group `requested`, if given).
pub fn tileable(ndim: usize, cols: usize, requested: Option<usize>) -> bool {
    ndim == 2
        && cols % TILE_COLS == 0
        && requested
            .is_none_or(|g| g > 0 && g % TILE_COLS == 0 && g <= MAX_TILED_GROUP && cols % g == 0)
}

/// The group size of a tiled tensor: `requested`; else for int8 one group
/// per row (the largest multiple of 16 up to 4096 dividing `cols`: on the
/// shipped LMs it scores the same bits per byte as groups of 64, and the
/// kernels then run whole row blocks per call), for int4 the largest of
/// [`AUTO_TILED_GROUP_SIZES`] dividing `cols` (one exists when [`tileable`]).
pub fn tiled_group_for(requested: Option<usize>, dtype: DType, cols: usize) -> usize {
    if let Some(g) = requested {
        return g;
    }
    if dtype == DType::I8 {
        return (1..=MAX_TILED_GROUP / TILE_COLS)
            .rev()
            .map(|t| t * TILE_COLS)
            .find(|g| cols % g == 0)
            .unwrap_or(TILE_COLS);
    }
    AUTO_TILED_GROUP_SIZES
        .into_iter()
        .find(|g| cols % g == 0)
        .unwrap_or(TILE_COLS)
}

/// The group size of a quantized tensor with `cols` inputs: `requested`
/// (which must divide `cols`, be even for int4 and fit the 16-bit table
/// field), or the largest of [`AUTO_GROUP_SIZES`] dividing `cols`.
pub fn group_size_for(
    requested: Option<usize>,
    dtype: DType,
    cols: usize,
    name: &str,
) -> Result<usize> {
    let Some(group) = requested else {
        return AUTO_GROUP_SIZES
            .into_iter()
            .find(|g| cols % g == 0)
            .with_context(|| {
                format!(
                    "no group size of {AUTO_GROUP_SIZES:?} divides the input dimension {cols} of tensor {name}; \
                     pass --group-size or keep it unquantized with --rule {name}=f16"
                )
            });
    };
    if group == 0 || group > u16::MAX as usize {
        bail!("group size {group} is out of range (1..=65535) for tensor {name}");
    }
    if cols % group != 0 {
        bail!("group size {group} does not divide the input dimension {cols} of tensor {name}");
    }
    if dtype == DType::I4 && group % 2 != 0 {
        bail!("int4 needs an even group size, got {group} for tensor {name}");
    }
    Ok(group)
}

/// Every dtype the runtime decodes ([`DType::from_code`]), in code order:
/// the dtypes `--dtype` and `--rule` take, by their runtime names
/// ([`DType::name`]; no second list here).
pub fn dtypes() -> impl Iterator<Item = DType> {
    (0..=u8::MAX).filter_map(DType::from_code)
}

/// The short spelling the command line also takes for a dtype (`i8`, `i4`).
pub fn dtype_alias(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::I8 => Some("i8"),
        DType::I4 => Some("i4"),
        DType::F32 | DType::F16 => None,
    }
}

/// Parses a dtype name as used on the command line: [`DType::name`] or
/// [`dtype_alias`].
pub fn parse_dtype(s: &str) -> Result<DType> {
    if let Some(dtype) = dtypes().find(|&d| d.name() == s || dtype_alias(d) == Some(s)) {
        return Ok(dtype);
    }
    let names: Vec<&str> = dtypes().map(DType::name).collect();
    match names.split_last() {
        Some((last, init)) if !init.is_empty() => {
            bail!("unknown dtype {s:?} (use {} or {last})", init.join(", "))
        }
        _ => bail!("unknown dtype {s:?} (use {})", names.join(", ")),
    }
}

/// Parses a rule `GLOB=DTYPE`, e.g. `lm_head.weight=f16` or `model.layers.*.mlp.*=int4`.
pub fn parse_rule(s: &str) -> Result<(String, DType)> {
    let (glob, dtype) = s
        .rsplit_once('=')
        .with_context(|| format!("rule {s:?} is not of the form GLOB=DTYPE"))?;
    Ok((glob.to_string(), parse_dtype(dtype)?))
}

/// Whether `name` matches `glob` (`*` matches any run of characters).
pub fn glob_match(glob: &str, name: &str) -> bool {
    match glob.split_once('*') {
        None => glob == name,
        Some((prefix, rest)) => {
            name.starts_with(prefix)
                && (0..=name.len() - prefix.len())
                    .any(|i| glob_match(rest, &name[prefix.len() + i..]))
        }
    }
}

/// The full tensor name of a spec (fla naming).
pub fn tensor_name(layer: Option<u16>, role: Role) -> String {
    match layer {
        Some(l) => format!("model.layers.{l}.{}", role.name()),
        None => role.name().to_string(),
    }
}

/// The configuration an image of `config` stores with `opts`: every `bla`
/// layer's phi source set to [`WriteOptions::bla_phi`].
pub fn stored_config(config: &Config, opts: &WriteOptions) -> Config {
    let mut stored = config.clone();
    stored.model.token_path = opts.token_path;
    for layer in &mut stored.layers {
        if let LayerConfig::Bla(c) = layer {
            c.phi_source = opts.bla_phi;
        }
        // An integer state: each layer's own integer format (int16 for
        // GDN, GSA and BLA, int8 KV with log scales for SWA, int8 KV for
        // MLA), where its mixer has one; `Int8Kv` asks SWA layers for the
        // older int8 KV with scale words.
        if opts.token_path == TokenPath::Int && opts.state != StateFormat::F32 {
            let own = layer.integer_state();
            let pick = match (opts.state, own) {
                (StateFormat::Int8Kv, Some(StateFormat::Int8KvLog)) => Some(StateFormat::Int8Kv),
                _ => own,
            };
            if let Some(l) = pick.and_then(|s| layer.with_state(s)) {
                *layer = l;
            }
        }
    }
    stored
}

/// The layers of `config` that keep an f32 state although `opts` asks for
/// an integer one (their mixers have no integer step yet): they run their
/// f32 step inside the integer token path.
pub fn f32_step_layers(config: &Config, opts: &WriteOptions) -> Vec<usize> {
    if opts.token_path != TokenPath::Int || opts.state == StateFormat::F32 {
        return Vec::new();
    }
    config
        .layers
        .iter()
        .enumerate()
        .filter(|(_, l)| l.integer_state().is_none())
        .map(|(i, _)| i)
        .collect()
}

/// How many `bla` layers `config` has (what `--bla-phi` acts on).
pub fn bla_layer_count(config: &Config) -> usize {
    config
        .layers
        .iter()
        .filter(|l| matches!(l, LayerConfig::Bla(_)))
        .count()
}

/// Every tensor a configuration needs, in canonical image order.
pub fn expected_specs(config: &Config) -> Vec<TensorSpec> {
    let mut specs: Vec<TensorSpec> = global_specs(&config.model).into_iter().collect();
    for (i, (layer, block)) in config.layers.iter().zip(&config.blocks).enumerate() {
        specs.extend(block_specs(&config.model, layer, block, i as u16));
    }
    specs
}

/// Refuses options that would not change the image of `dir` (the CLI's
/// policy; [`build_image`] itself accepts them): a rule that decides no
/// tensor (it matches none, or only tensors an earlier rule decides), a
/// group size when no tensor is quantized, and a dtype the user gave
/// (`dtype_given`) when rules decide every weight matrix.
pub fn check_options(dir: &ModelDir, opts: &WriteOptions, dtype_given: bool) -> Result<()> {
    let specs = expected_specs(&stored_config(&dir.config, opts));
    let mut decides = vec![false; opts.rules.len()];
    let mut matches = vec![false; opts.rules.len()];
    let mut quantized = false;
    let mut default_dtype_used = false;
    for spec in &specs {
        let name = tensor_name(spec.layer, spec.role);
        let mut first = true;
        for (i, (glob, _)) in opts.rules.iter().enumerate() {
            if glob_match(glob, &name) {
                matches[i] = true;
                decides[i] |= std::mem::take(&mut first);
            }
        }
        default_dtype_used |= spec.matrix && first;
        // A dtype the tensor cannot take is build_image's error to report.
        quantized |= dtype_for(opts, spec, &name).is_ok_and(|d| d.is_quantized());
    }
    for (i, (glob, dtype)) in opts.rules.iter().enumerate() {
        let rule = format!("{glob}={}", dtype.name());
        if !matches[i] {
            if dir.config.model.tie_word_embeddings && glob_match(glob, "lm_head.weight") {
                bail!(
                    "--rule {rule} matches no tensor of this model: its lm_head is tied to the embeddings (model.embeddings.weight) and not stored"
                );
            }
            bail!(
                "--rule {rule} matches no tensor of this model (tensor names are those `ferrite inspect` prints, e.g. {})",
                specs
                    .iter()
                    .find(|s| s.matrix)
                    .map(|s| tensor_name(s.layer, s.role))
                    .unwrap_or_default()
            );
        }
        if !decides[i] {
            bail!(
                "--rule {rule} decides no tensor: every tensor it matches matches an earlier --rule (the first match wins)"
            );
        }
    }
    if dtype_given && !default_dtype_used {
        bail!(
            "--dtype {} does nothing: a --rule decides every weight matrix",
            opts.dtype.name()
        );
    }
    if let (Some(group), false) = (opts.group_size, quantized) {
        bail!(
            "--group-size {group} does nothing: no tensor is quantized (--dtype {}{})",
            opts.dtype.name(),
            if opts.rules.is_empty() {
                ""
            } else {
                " and no --rule picks int8 or int4"
            }
        );
    }
    Ok(())
}

/// `--dtype int4`'s per-tensor default, decided by measurement
/// (docs/quantization.md, "int4"): the vocabulary matrices (the embedding
/// table and an untied `lm_head`) cost the most bits per byte at int4, so
/// they stay int8 when the image then stays within [`INT4_BUDGET`] of the
/// int8 image (`lm/large`; not `lm/small` nor the MQAR models, whose tables
/// are 11-18% of their weights). A `--rule` matching them decides instead.
/// Returns the rules added (appended to `opts.rules`) and a line for the
/// summary. Image sizes do not depend on the values, so they are measured
/// without the calibration.
pub fn apply_int4_defaults(dir: &ModelDir, opts: &mut WriteOptions) -> Result<Option<String>> {
    if opts.dtype != DType::I4 || opts.layout != Layout::Tiled {
        return Ok(None);
    }
    let vocab: Vec<String> = expected_specs(&stored_config(&dir.config, opts))
        .iter()
        .filter(|s| matches!(s.role, Role::Embeddings | Role::LmHead))
        .map(|s| tensor_name(s.layer, s.role))
        .collect();
    if vocab
        .iter()
        .any(|n| opts.rules.iter().any(|(g, _)| glob_match(g, n)))
    {
        return Ok(Some(format!(
            "int4 defaults: {} as --rule says",
            vocab.join(", ")
        )));
    }
    let sized = |dtype: DType, extra: bool| -> Result<usize> {
        let mut o = WriteOptions {
            dtype,
            calibration: None,
            ..opts.clone()
        };
        if extra {
            o.rules.extend(vocab.iter().map(|n| (n.clone(), DType::I8)));
        }
        Ok(build_image(dir, &o, |_, _| {})?.bytes.len())
    };
    let int8 = sized(DType::I8, false)?;
    let with = sized(DType::I4, true)?;
    let budget = INT4_BUDGET * int8 as f64;
    let ratio = with as f64 / int8 as f64;
    if with as f64 <= budget {
        opts.rules
            .extend(vocab.iter().map(|n| (n.clone(), DType::I8)));
        Ok(Some(format!(
            "int4 defaults: {} kept int8 (the image is {ratio:.3} x the int8 image's {int8} bytes, within {INT4_BUDGET})",
            vocab.join(", ")
        )))
    } else {
        Ok(Some(format!(
            "int4 defaults: {} int4 (int8 would make the image {ratio:.3} x the int8 image's {int8} bytes, over {INT4_BUDGET}; --rule overrides)",
            vocab.join(", ")
        )))
    }
}

/// How many tensors of `dir` `opts` stores as tiled int4 (what `--scales`
/// and `--calibrate` act on).
pub fn tiled_int4_count(dir: &ModelDir, opts: &WriteOptions) -> Result<usize> {
    let mut n = 0;
    for spec in expected_specs(&stored_config(&dir.config, opts)) {
        let name = tensor_name(spec.layer, spec.role);
        let cols = spec.numel() / spec.dims[0] as usize;
        if dtype_for(opts, &spec, &name)? == DType::I4
            && opts.layout == Layout::Tiled
            && tileable(spec.ndim(), cols, opts.group_size)
        {
            n += 1;
        }
    }
    Ok(n)
}

/// One tensor as written, for reports.
#[derive(Clone, Debug)]
pub struct WrittenTensor {
    /// Full name.
    pub name: String,
    /// Storage dtype.
    pub dtype: DType,
    /// Group size (quantized dtypes).
    pub group_size: usize,
    /// Layout of values and scales.
    pub layout: Layout,
    /// Shape.
    pub dims: Vec<u32>,
    /// Payload + scales bytes.
    pub bytes: usize,
    /// Relative RMS quantization error.
    pub rel_rms_error: f32,
}

/// A finished image and what went into it.
#[derive(Clone, Debug)]
pub struct Image {
    /// The image bytes.
    pub bytes: Vec<u8>,
    /// The tensors, in table order.
    pub tensors: Vec<WrittenTensor>,
    /// Number of parameters.
    pub params: usize,
    /// The format version written (the lowest that can represent the image).
    pub version: u32,
}

impl Image {
    /// Tensors per dtype (and layout) with the group sizes used, e.g.
    /// `int8 x32 tiled group 16/32, f32 x22`.
    pub fn dtype_summary(&self) -> String {
        let mut parts = Vec::new();
        for dtype in dtypes() {
            for layout in [Layout::RowMajor, Layout::Tiled] {
                let of: Vec<&WrittenTensor> = self
                    .tensors
                    .iter()
                    .filter(|t| t.dtype == dtype && t.layout == layout)
                    .collect();
                if of.is_empty() {
                    continue;
                }
                parts.push(summary_part(dtype, layout, &of));
            }
        }
        parts.join(", ")
    }
}

/// `int8 x32 tiled group 16/32` for tensors of one dtype and layout.
fn summary_part(dtype: DType, layout: Layout, of: &[&WrittenTensor]) -> String {
    let mut part = format!("{} x{}", dtype.name(), of.len());
    if dtype.is_quantized() {
        let mut groups: Vec<usize> = of.iter().map(|t| t.group_size).collect();
        groups.sort_unstable();
        groups.dedup();
        let g: Vec<String> = groups.iter().map(usize::to_string).collect();
        part += &format!(" {} group {}", layout.name(), g.join("/"));
    }
    part
}

fn align_up(v: usize, a: usize) -> usize {
    v.div_ceil(a) * a
}

/// Values of a spec: from the model directory, or computed (BLA's phi table).
fn source_values(dir: &ModelDir, spec: &TensorSpec, name: &str) -> Result<Vec<f32>> {
    if spec.role == Role::BlaPhi {
        let layer = spec.layer.map(usize::from).unwrap_or(0);
        let Some(LayerConfig::Bla(c)) = dir.config.layers.get(layer) else {
            bail!("internal: phi table for a non-BLA layer {layer}");
        };
        let mut v = Vec::with_capacity((c.period * c.slots) as usize);
        for r in 0..c.period {
            for n in 0..c.slots {
                v.push(c.phi(r, n) as f32);
            }
        }
        return Ok(v);
    }
    let t = dir
        .tensors
        .get(name)
        .with_context(|| format!("model.safetensors has no tensor {name} (the config needs it)"))?;
    let want: Vec<usize> = spec.dims[..spec.ndim()]
        .iter()
        .map(|&d| d as usize)
        .collect();
    if t.shape != want {
        bail!(
            "tensor {name} has shape {:?}, the config needs {want:?}",
            t.shape
        );
    }
    Ok(t.values.clone())
}

/// Chooses the dtype of one tensor.
fn dtype_for(opts: &WriteOptions, spec: &TensorSpec, name: &str) -> Result<DType> {
    let ruled = opts
        .rules
        .iter()
        .find(|(g, _)| glob_match(g, name))
        .map(|&(_, d)| d);
    let dtype = match (ruled, spec.matrix) {
        (Some(d), _) => d,
        (None, true) => opts.dtype,
        (None, false) => DType::F32,
    };
    if dtype.is_quantized() && !spec.matrix {
        bail!(
            "tensor {name} is not a weight matrix and cannot be stored as {}",
            dtype.name()
        );
    }
    if spec.role == Role::BlaPhi && dtype != DType::F32 {
        bail!("tensor {name} (BLA phi table) must stay f32");
    }
    Ok(dtype)
}

/// Refuses values an image cannot hold: NaN or infinite ones (the runtime's
/// `Model::check_values` refuses them, and quantized they would become
/// zeros or an infinite scale) and, stored as f16, values beyond its range
/// (they would become infinite).
fn check_representable(values: &[f32], name: &str, dtype: DType) -> Result<()> {
    if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        bail!("tensor {name} has a non-finite value ({v}) at index {i}");
    }
    let beyond_f16 = |v: &f32| half::f16::from_f32(*v).is_infinite();
    if let (DType::F16, Some(i)) = (dtype, values.iter().position(beyond_f16)) {
        bail!(
            "tensor {name} has the value {} at index {i}, beyond f16's range (65504): store it as f32 (--rule {name}=f32)",
            values[i]
        );
    }
    Ok(())
}

/// Builds an image from a model directory.
pub fn build_image(
    dir: &ModelDir,
    opts: &WriteOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<Image> {
    let config = stored_config(&dir.config, opts);
    let specs = expected_specs(&config);
    let names: Vec<String> = specs.iter().map(|s| tensor_name(s.layer, s.role)).collect();
    let tied = config.model.tie_word_embeddings;
    for name in dir.tensors.keys() {
        // A tied checkpoint may still carry its (identical) head: it is not stored.
        let used = names.contains(name) || (tied && name == "lm_head.weight");
        if !used {
            bail!("model.safetensors has tensor {name}, which the config does not use");
        }
    }

    let config_words: Vec<u32> = config
        .model
        .encode()
        .into_iter()
        .chain(
            config
                .layers
                .iter()
                .zip(&config.blocks)
                .flat_map(|(l, b)| l.encode_with(b)),
        )
        .collect();
    let config_off = HEADER_LEN;
    let config_len = 4 * config_words.len();
    let table_off = config_off + config_len;
    let tokenizer_off = table_off + TENSOR_ENTRY_LEN * specs.len();
    // The tokenizer section; the image is written in the lowest format
    // version that can represent it (v1 without one, v2 with BPE; then the
    // layers' and the tensors' needs: v4 mixer options, v5 a computed BLA
    // phi, v3 a tiled tensor).
    let (tokenizer, mut version) = match &dir.tokenizer {
        Some(t) => {
            dir.check_tokenizer()?;
            (t.section(), BPE_FORMAT_VERSION)
        }
        None => (Vec::new(), MIN_FORMAT_VERSION),
    };
    for (layer, block) in config.layers.iter().zip(&config.blocks) {
        version = version.max(layer.min_format_version());
        version = version.max(block.min_format_version());
    }
    if config.model.final_norm != NormKind::Rms || config.model.intermediate_size == 0 {
        version = version.max(ferrite::image::BLOCK_FORMAT_VERSION);
    }
    if config.blocks.len() != config.layers.len() {
        bail!("internal: a block configuration per layer is needed");
    }
    if config.model.token_path == TokenPath::Int {
        // docs/integer-path.md, "The block": RMSNorm blocks, SwiGLU or no MLP.
        if config.model.final_norm != NormKind::Rms {
            bail!("--path int: the final norm is a LayerNorm, which the integer token path does not run (RMSNorm only); use --path f32");
        }
        if let Some(i) = config.blocks.iter().position(|b| !b.integer_path_ok()) {
            bail!(
                "--path int: layer {i}'s block (LayerNorm, RWKV-7's channel mixing or the pre-norm) is not on the integer token path (RMSNorm blocks with a SwiGLU MLP or none); use --path f32"
            );
        }
    }
    if config.model.token_path == TokenPath::Int {
        version = version.max(INTEGER_PATH_FORMAT_VERSION);
    }
    if dir.tokenizer.is_some() != (config.model.tokenizer == TokenizerKind::Bpe) {
        bail!("internal: the config's tokenizer kind and the directory's tokenizer disagree");
    }
    let data_off = align_up(tokenizer_off + tokenizer.len(), TENSOR_ALIGN);

    let mut data = Vec::new();
    let mut entries = Vec::new();
    let mut written = Vec::new();
    let mut params = 0;
    for (i, (spec, name)) in specs.iter().zip(&names).enumerate() {
        progress(i, specs.len());
        let values = source_values(dir, spec, name)?;
        let dtype = dtype_for(opts, spec, name)?;
        check_representable(&values, name, dtype)?;
        let rows = spec.dims[0] as usize;
        let cols = spec.numel() / rows;
        let layout = if dtype.is_quantized()
            && opts.layout == Layout::Tiled
            && tileable(spec.ndim(), cols, opts.group_size)
        {
            Layout::Tiled
        } else {
            Layout::RowMajor
        };
        let (group, encoded) = match (dtype.is_quantized(), layout) {
            (false, _) => (0, encode(&values, cols, dtype, 0)),
            (true, Layout::Tiled) => {
                let group = tiled_group_for(opts.group_size, dtype, cols);
                let hessian = opts
                    .calibration
                    .as_ref()
                    .filter(|_| !(tied && spec.role == Role::Embeddings))
                    .and_then(|c| c.get(name))
                    .filter(|h| h.n == cols)
                    .map(|h| h.h.as_slice());
                let encoded = encode_tiled(&values, rows, cols, dtype, group, opts.scales, hessian);
                (group, encoded)
            }
            (true, Layout::RowMajor) => {
                let group = group_size_for(opts.group_size, dtype, cols, name)?;
                (group, encode(&values, cols, dtype, group))
            }
        };
        if layout == Layout::Tiled {
            version = version.max(TILED_FORMAT_VERSION);
        }
        if config.model.token_path == TokenPath::Int
            && !spec.matrix
            && dtype != DType::F32
            && read_by_integer_code(&config, spec)
        {
            bail!(
                "the integer token path reads {name} as f32 bits, but a rule stores it as {}",
                dtype.name()
            );
        }
        if config.model.token_path == TokenPath::Int
            && spec.matrix
            && layout != Layout::Tiled
            && read_by_integer_code(&config, spec)
        {
            bail!(
                "the integer token path needs {name} tiled (int8/int4, input dimension a multiple \
                 of 16, group a multiple of 16), but it would be stored as {} {}",
                dtype.name(),
                layout.name()
            );
        }
        let Encoded {
            payload,
            scales,
            rel_rms_error,
        } = encoded;
        let place = |data: &mut Vec<u8>, bytes: &[u8]| -> (u32, u32) {
            if bytes.is_empty() {
                return (0, 0);
            }
            data.resize(align_up(data.len(), TENSOR_ALIGN), 0);
            let off = data_off + data.len();
            data.extend_from_slice(bytes);
            (off as u32, bytes.len() as u32)
        };
        let (data_o, data_l) = place(&mut data, &payload);
        let (scale_off, scale_len) = place(&mut data, &scales);
        entries.push(TensorEntry {
            layer: spec.layer.unwrap_or(GLOBAL_LAYER),
            role: spec.role,
            dtype,
            layout,
            group_size: group as u16,
            dims: spec.dims,
            data_off: data_o,
            data_len: data_l,
            scale_off,
            scale_len,
            quant_error: rel_rms_error,
        });
        if spec.role != Role::BlaPhi {
            params += values.len();
        }
        written.push(WrittenTensor {
            name: name.clone(),
            dtype,
            group_size: group,
            layout,
            dims: spec.dims[..spec.ndim()].to_vec(),
            bytes: payload.len() + scales.len(),
            rel_rms_error,
        });
    }
    progress(specs.len(), specs.len());
    data.resize(align_up(data.len(), TENSOR_ALIGN), 0);

    let file_len = data_off + data.len();
    let mut bytes = vec![0u8; file_len];
    let header = Header {
        version,
        file_len: u32::try_from(file_len).context("image larger than 4 GiB")?,
        crc32: 0,
        config_off: config_off as u32,
        config_len: config_len as u32,
        table_off: table_off as u32,
        tensor_count: specs.len() as u32,
        tokenizer_off: tokenizer_off as u32,
        tokenizer_len: tokenizer.len() as u32,
        data_off: data_off as u32,
        data_len: data.len() as u32,
        flags: 0,
        security_counter: 0,
    };
    let mut head = [0u8; HEADER_LEN];
    header.encode(&mut head);
    bytes[..HEADER_LEN].copy_from_slice(&head);
    for (i, w) in config_words.iter().enumerate() {
        bytes[config_off + 4 * i..config_off + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    for (i, e) in entries.iter().enumerate() {
        let at = table_off + i * TENSOR_ENTRY_LEN;
        bytes[at..at + TENSOR_ENTRY_LEN].copy_from_slice(&e.encode());
    }
    bytes[tokenizer_off..tokenizer_off + tokenizer.len()].copy_from_slice(&tokenizer);
    bytes[data_off..].copy_from_slice(&data);
    seal(&mut bytes);
    Ok(Image {
        bytes,
        tensors: written,
        params,
        version,
    })
}

/// Whether the integer token path reads tensor `spec` in integer code (a
/// matrix through its integer products, tiled; a vector through its f32
/// bits): the embeddings, the head and the final norm, the block's norms
/// and MLPs, and every tensor of a layer with an integer state but a
/// `cross` layer's memories, which its step reads in place whatever their
/// dtype (what `Model::load` checks).
fn read_by_integer_code(config: &Config, spec: &TensorSpec) -> bool {
    match spec.layer {
        None => true,
        Some(_) if matches!(spec.role, Role::MemoryK | Role::MemoryV) => false,
        Some(l) => {
            matches!(
                spec.role,
                Role::MlpGate | Role::MlpUp | Role::MlpDown | Role::AttnNorm | Role::MlpNorm
            ) || config.layers[l as usize].state_format() != StateFormat::F32
        }
    }
}

/// Recomputes and stores the CRC of an image (also used by tests that craft images).
pub fn seal(bytes: &mut [u8]) {
    let end = crc_end(bytes);
    let crc = CRC.checksum(&bytes[CRC_START..end]);
    bytes[CRC_FIELD..CRC_FIELD + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Where the CRC of `bytes` ends: before the signature section of a
/// signed (version 7) image, else at the end. Read from the raw header
/// words, so that a test can seal an image the runtime would refuse.
pub fn crc_end(bytes: &[u8]) -> usize {
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let signed = word(8) >= SIGNED_FORMAT_VERSION && word(56) & FLAG_SIGNED != 0;
    if signed {
        bytes
            .len()
            .saturating_sub(SIGNATURE_SECTION_LEN)
            .max(CRC_START)
    } else {
        bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_dir::SourceTensor;

    /// A two-layer model directory with small values in every tensor.
    fn small_dir() -> ModelDir {
        let config = crate::config_json::parse(&serde_json::json!({
            "vocab_size": 256, "hidden_size": 16, "intermediate_size": 32,
            "layers": [{"mixer": "swa", "num_heads": 2, "head_dim": 8, "window": 4}]
        }))
        .unwrap();
        let tensors = expected_specs(&config)
            .iter()
            .map(|spec| {
                let shape: Vec<usize> = spec.dims[..spec.ndim()]
                    .iter()
                    .map(|&d| d as usize)
                    .collect();
                let values = (0..spec.numel()).map(|i| (i % 7) as f32 * 0.01).collect();
                let name = tensor_name(spec.layer, spec.role);
                (name, SourceTensor { shape, values })
            })
            .collect();
        ModelDir {
            config,
            tensors,
            source_dtype: "f32".into(),
            warnings: Vec::new(),
            tokenizer: None,
        }
    }

    /// Found by `fuzz/fuzz_targets/quantize_hostile.rs`: a NaN or infinite
    /// weight gave an image the runtime's `check_values` refuses (int8 made
    /// NaN a silent 0), and f16 turned values beyond 65504 into infinities.
    #[test]
    fn values_an_image_cannot_hold_are_refused() {
        let opts = |dtype| WriteOptions {
            dtype,
            ..WriteOptions::default()
        };
        let name = "model.layers.0.mlp.up_proj.weight";
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut dir = small_dir();
            dir.tensors.get_mut(name).unwrap().values[5] = bad;
            for dtype in [DType::F32, DType::F16, DType::I8, DType::I4] {
                let err = build_image(&dir, &opts(dtype), |_, _| {}).unwrap_err();
                assert!(err.to_string().contains("non-finite value"), "{err}");
            }
        }
        let mut dir = small_dir();
        dir.tensors.get_mut(name).unwrap().values[3] = -7e4;
        let err = build_image(&dir, &opts(DType::F16), |_, _| {}).unwrap_err();
        assert!(err.to_string().contains("beyond f16's range"), "{err}");
        for dtype in [DType::F32, DType::I8, DType::I4] {
            build_image(&dir, &opts(dtype), |_, _| {}).unwrap();
        }
        // 65519 still rounds to f16's largest value.
        dir.tensors.get_mut(name).unwrap().values[3] = 65519.0;
        build_image(&dir, &opts(DType::F16), |_, _| {}).unwrap();
    }

    #[test]
    fn globs() {
        assert!(glob_match("lm_head.weight", "lm_head.weight"));
        assert!(glob_match(
            "model.layers.*.mlp.*",
            "model.layers.3.mlp.up_proj.weight"
        ));
        assert!(!glob_match(
            "model.layers.*.mlp.*",
            "model.layers.3.attn.q_proj.weight"
        ));
        assert!(glob_match("*", "x"));
        assert!(
            parse_rule("a=int4").is_ok() && parse_rule("a").is_err() && parse_rule("a=i3").is_err()
        );
    }

    /// The command line's dtype names are the runtime's: every dtype it
    /// decodes parses from its name (and alias), and an unknown name is told
    /// them all.
    #[test]
    fn dtype_names_are_the_runtime_s() {
        let all: Vec<DType> = dtypes().collect();
        assert_eq!(all, [DType::F32, DType::F16, DType::I8, DType::I4]);
        for d in all {
            assert_eq!(parse_dtype(d.name()).unwrap(), d);
            if let Some(alias) = dtype_alias(d) {
                assert_eq!(parse_dtype(alias).unwrap(), d);
            }
        }
        assert_eq!(
            parse_dtype("i3").unwrap_err().to_string(),
            "unknown dtype \"i3\" (use f32, f16, int8 or int4)"
        );
    }
}
