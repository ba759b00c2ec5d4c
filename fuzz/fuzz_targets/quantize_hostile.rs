//! Fuzz the quantizer (`writer::build_image`, as `ferrite quantize` runs it)
//! on tensors that parse but are hostile (docs/fuzzing.md): NaN, infinite,
//! huge, denormal, all-equal values and zero rows, in every dtype (f32,
//! f16, int8, int4), tiled and row-major, with or without a calibration.
//!
//! The model directory is built in memory: one of two small configs (hidden
//! 16, so that matrices can be tiled), every tensor filled with small
//! deterministic values, then edited as the input says.
//!
//! Input layout: `[options: u8][group: u8][edit x N]`, each edit
//! `[tensor: u8][at: u16][count: u8][kind: u8][value: f32]` (9 bytes,
//! little-endian). Options: bits 0-1 dtype (f32, f16, int8, int4), bit 2
//! row-major, bit 3 absmax scales, bit 4 the tied config, bit 5 calibrate
//! (a hessian per matrix from its own values), bits 6-7 the group size
//! (auto, 16, 32, `group`). Edit kinds (`% 6`): 0 set `count` values from
//! `at` to `value`, 1 the same with a special value (`value`'s low byte
//! picks NaN, inf, a denormal, ...), 2 multiply them by `value`, 3 set the
//! whole tensor to `value`, 4 zero the row at `at`, 5 a `--rule` giving the
//! tensor the dtype `at % 4`.
//!
//! Asserted: nothing panics; an image is built only from finite values (in
//! f16's range where stored f16), and then the runtime loads it, finds its
//! values finite and runs it; every value the runtime reads back is within
//! the bound its dtype promises (f32 exact, f16 half an ulp, int8/int4 half
//! a scale step; tiled int4 with scale search: a group's squared error at
//! most absmax's bound); logits are finite when every weight is within
//! [`FINITE_LOGITS_BOUND`].
#![no_main]

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use ferrite::image::{DType, Layout};
use ferrite::{Model, Session};
use ferrite_tools::config_json::{self, Config};
use ferrite_tools::model_dir::{ModelDir, SourceTensor};
use ferrite_tools::quant::Hessian;
use ferrite_tools::quant::Scales;
use ferrite_tools::run::AlignedImage;
use ferrite_tools::writer::{self, WriteOptions};
use libfuzzer_sys::fuzz_target;

/// Tensors with a value above this are not checked against the bounds.
const HUGE: f32 = f32::MAX / 256.0;
/// Weights of at most this magnitude must give finite logits.
const FINITE_LOGITS_BOUND: f32 = 4.0;

const CONFIGS: [&str; 2] = [
    r#"{"vocab_size": 256, "hidden_size": 16, "intermediate_size": 32,
        "layers": [
          {"mixer": "gdn", "num_heads": 1, "head_dim": 16, "expand_v": 1.0, "conv_size": 2},
          {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1, "head_dim": 8, "window": 4, "sinks": 1}]}"#,
    r#"{"vocab_size": 256, "hidden_size": 16, "intermediate_size": 48, "tie_word_embeddings": true,
        "layers": [
          {"mixer": "gsa", "num_heads": 2, "num_kv_heads": 1, "num_slots": 4},
          {"mixer": "bla", "num_heads": 1, "head_dim": 16, "period": 4, "modes": 1,
           "use_short_conv": true, "conv_size": 2}]}"#,
];

const SPECIAL: [f32; 16] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    f32::MAX,
    f32::MIN,
    f32::MIN_POSITIVE,
    1e-45,
    -3e-39,
    65504.0,
    65520.0,
    -1e5,
    6e-8,
    1e30,
    1e-30,
];

/// The two model directories with their default values.
fn dirs() -> &'static [ModelDir; 2] {
    static DIRS: OnceLock<[ModelDir; 2]> = OnceLock::new();
    DIRS.get_or_init(|| {
        CONFIGS.map(|c| dir_of(config_json::parse(&serde_json::from_str(c).unwrap()).unwrap()))
    })
}

fn dir_of(config: Config) -> ModelDir {
    let mut tensors = BTreeMap::new();
    let mut x = 1u32;
    for spec in writer::expected_specs(&config) {
        if spec.role == ferrite::image::Role::BlaPhi {
            continue;
        }
        let shape: Vec<usize> = spec.dims[..spec.ndim()]
            .iter()
            .map(|&d| d as usize)
            .collect();
        let name = writer::tensor_name(spec.layer, spec.role);
        let norm = name.ends_with("norm.weight");
        let values = (0..spec.numel())
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let u = (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                if norm {
                    1.0 + 0.1 * u
                } else {
                    0.5 * u
                }
            })
            .collect();
        tensors.insert(name, SourceTensor { shape, values });
    }
    ModelDir {
        config,
        tensors,
        source_dtype: "f32".into(),
        warnings: Vec::new(),
        tokenizer: None,
    }
}

const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::I8, DType::I4];

fn edit(dir: &mut ModelDir, rules: &mut Vec<(String, DType)>, e: &[u8]) {
    let names: Vec<String> = dir.tensors.keys().cloned().collect();
    let name = &names[usize::from(e[0]) % names.len()];
    let t = dir.tensors.get_mut(name).unwrap();
    let at = usize::from(u16::from_le_bytes([e[1], e[2]]));
    let count = usize::from(e[3]) + 1;
    let value = f32::from_le_bytes(e[5..9].try_into().unwrap());
    let len = t.values.len();
    let cols = len / t.shape[0];
    let range = at % len..(at % len + count).min(len);
    match e[4] % 6 {
        0 => t.values[range].fill(value),
        1 => t.values[range].fill(SPECIAL[usize::from(e[5] % 16)]),
        2 => t.values[range].iter_mut().for_each(|v| *v *= value),
        3 => t.values.fill(value),
        4 => {
            let r = at % t.shape[0];
            t.values[r * cols..(r + 1) * cols].fill(0.0);
        }
        _ => rules.push((name.clone(), DTYPES[at % 4])),
    }
}

/// A hessian per matrix: `x xᵀ + I` of its first row.
fn calibration(dir: &ModelDir) -> HashMap<String, Hessian> {
    dir.tensors
        .iter()
        .filter(|(_, t)| t.shape.len() == 2)
        .map(|(name, t)| {
            let n = t.shape[1];
            let row = &t.values[..n];
            let h = (0..n * n)
                .map(|k| {
                    let (i, j) = (k / n, k % n);
                    f64::from(row[i]) * f64::from(row[j]) + f64::from(u8::from(i == j))
                })
                .collect();
            (name.clone(), Hessian { n, h, count: 1 })
        })
        .collect()
}

/// Largest error of `decoded` from `orig` the tensor's storage promises
/// (checked per group for int4 scale search).
fn check_values(
    name: &str,
    w: &writer::WrittenTensor,
    orig: &[f32],
    decoded: &[f32],
    search: bool,
) {
    let cols = orig.len() / w.dims[0] as usize;
    let rel = 1e-5f32;
    match w.dtype {
        DType::F32 => assert!(
            orig.iter()
                .zip(decoded)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}: f32 values changed"
        ),
        DType::F16 => {
            for (a, b) in orig.iter().zip(decoded) {
                let bound = (a.abs() * 2f32.powi(-11)).max(2f32.powi(-25));
                assert!((a - b).abs() <= bound, "{name}: f16 of {a} reads {b}");
            }
        }
        DType::I8 | DType::I4 => {
            let qmax = if w.dtype == DType::I8 { 127.0 } else { 7.0 };
            let group = w.group_size;
            for (r, (row, back)) in orig.chunks(cols).zip(decoded.chunks(cols)).enumerate() {
                let amax = |g: &[f32]| g.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                // Tiled: the scale d * m is at most one row step d above s.
                let step = if w.layout == Layout::Tiled {
                    amax(row) / qmax / 255.0
                } else {
                    0.0
                };
                for (g, (vals, got)) in row.chunks(group).zip(back.chunks(group)).enumerate() {
                    let s = amax(vals) / qmax;
                    let half = 0.5 * (s + step) * (1.0 + rel) + amax(vals) * rel + 2e-36;
                    if search && w.layout == Layout::Tiled && w.dtype == DType::I4 {
                        let sse: f64 = vals
                            .iter()
                            .zip(got)
                            .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
                            .sum();
                        let bound = vals.len() as f64 * f64::from(half).powi(2) * 1.0001;
                        assert!(
                            sse <= bound,
                            "{name} row {r} group {g}: error {sse} > {bound}"
                        );
                    } else {
                        for (a, b) in vals.iter().zip(got) {
                            assert!(
                                (a - b).abs() <= half,
                                "{name} row {r} group {g}: {a} reads {b} (scale {s})"
                            );
                        }
                    }
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [options, group, edits @ ..] = data else {
        return;
    };
    let mut dir = dirs()[usize::from(options >> 4 & 1)].clone();
    let mut opts = WriteOptions {
        dtype: DTYPES[usize::from(options & 3)],
        group_size: match options >> 6 {
            0 => None,
            1 => Some(16),
            2 => Some(32),
            _ => Some(usize::from(*group)),
        },
        layout: if options & 4 != 0 {
            Layout::RowMajor
        } else {
            Layout::Tiled
        },
        scales: if options & 8 != 0 {
            Scales::Absmax
        } else {
            Scales::Search
        },
        ..WriteOptions::default()
    };
    for e in edits.chunks_exact(9) {
        edit(&mut dir, &mut opts.rules, e);
    }
    if options & 32 != 0 {
        opts.calibration = Some(calibration(&dir));
    }
    let Ok(image) = writer::build_image(&dir, &opts, |_, _| {}) else {
        return;
    };
    let values = |name: &str| dir.tensors.get(name).map(|t| &t.values[..]);
    let finite = dir
        .tensors
        .values()
        .all(|t| t.values.iter().all(|v| v.is_finite()));
    assert!(finite, "an image was built from non-finite values");
    let aligned = AlignedImage::new(&image.bytes);
    let model = Model::load(aligned.bytes()).expect("the built image loads");
    model
        .check_values()
        .expect("the built image has finite values and scales");
    let search = opts.scales == Scales::Search && opts.calibration.is_none();
    for (i, w) in image.tensors.iter().enumerate() {
        let Some(orig) = values(&w.name) else {
            continue;
        };
        // Within 2^-8 of f32's largest value, q * scale may round past it
        // (the runtime then reads an infinity): not checked.
        if orig.iter().any(|v| v.abs() > HUGE) {
            continue;
        }
        assert!(
            w.rel_rms_error.is_finite() && w.rel_rms_error >= 0.0,
            "{}: {}",
            w.name,
            w.rel_rms_error
        );
        let t = model.tensor(i as u32).unwrap();
        let decoded: Vec<f32> = (0..orig.len()).map(|k| t.at(k)).collect();
        let gptq = w.dtype == DType::I4 && opts.calibration.is_some() && w.layout == Layout::Tiled;
        if !gptq {
            check_values(&w.name, w, orig, &decoded, search);
        }
    }
    let mut buf = vec![f32::NAN; model.session_len(0).unwrap()];
    let mut session = Session::new(model, &mut buf).unwrap();
    let bounded = dir
        .tensors
        .values()
        .all(|t| t.values.iter().all(|v| v.abs() <= FINITE_LOGITS_BOUND));
    for token in [0, 7, model.config().vocab_size - 1] {
        let logits = session.feed(token).expect("the built image runs");
        if bounded {
            assert!(logits.iter().all(|l| l.is_finite()), "non-finite logits");
        }
    }
});
