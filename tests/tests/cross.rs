//! Cross-attention over baked memories (`cross`, docs/spec.md §3.10,
//! docs/cross-attention.md; issue 32 stage 1): every baked memory of the
//! committed fixtures against the f64 reference (f32 images within
//! docs/spec.md §5's 1e-4; int8 and f16 memories within the bounds below),
//! the selection API and its typed errors, and the state the selection is.

use std::path::PathBuf;

use ferrite::image::{DType, Layout, Role};
use ferrite::{Error, LayerConfig, Model, Session, StateFormat, TokenPath};
use ferrite_tests::{expected, fixtures_dir, image_of, max_abs_diff};
use ferrite_tools::run::{session_buffer, AlignedImage};
use ferrite_tools::writer::{seal, WriteOptions};
use safetensors::SafeTensors;

/// The committed fixtures with `cross` layers.
const FIXTURES: [&str; 3] = ["cross_memories", "hybrid_gdn_cross", "cross_encoder"];

/// docs/spec.md §5's tolerance for f32 images.
const F32_TOLERANCE: f32 = 1e-4;

fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

/// The reference logits of memory `n` (`logits` for memory 0, every
/// token; `logits_memory_{n}` after it, the first tokens: the fixtures'
/// README).
fn reference_logits(name: &str, n: u32) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(fixture(name).join("expected.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let key = if n == 0 {
        "logits".to_string()
    } else {
        format!("logits_memory_{n}")
    };
    let view = st
        .tensor(&key)
        .unwrap_or_else(|_| panic!("{name}: no {key}"));
    let vocab = view.shape()[1];
    let flat: Vec<f32> = view
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    flat.chunks(vocab).map(<[f32]>::to_vec).collect()
}

/// The memories every cross layer of `model` has (the fixtures give them
/// all the same count).
fn memories(model: &Model<'_>) -> u32 {
    (0..model.config().num_layers as usize)
        .find_map(|i| match model.layer(i).unwrap() {
            LayerConfig::Cross(c) => Some(c.memories),
            _ => None,
        })
        .expect("a cross layer")
}

/// The logits of `tokens` from a fresh session attending to memory `n`.
fn run(model: Model<'_>, tokens: &[u32], n: u32) -> Vec<Vec<f32>> {
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut s = Session::new(model, &mut buf).unwrap();
    s.select_memory(n).unwrap();
    tokens
        .iter()
        .map(|&t| s.feed(t).unwrap().to_vec())
        .collect()
}

/// Relative RMS difference `‖a - b‖ / ‖b‖` of two logit tables.
fn rel_rms(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    let (mut err, mut norm) = (0f64, 0f64);
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        err += (*x as f64 - *y as f64).powi(2);
        norm += (*y as f64).powi(2);
    }
    (err / norm).sqrt()
}

#[test]
fn every_memory_matches_the_reference_on_f32_images() {
    for name in FIXTURES {
        let exp = expected(&fixture(name));
        let image = image_of(&fixture(name), &WriteOptions::default());
        let n_mem = memories(&image.model().unwrap());
        assert!(n_mem >= 2, "{name}: the fixture must have several memories");
        let mut previous: Option<Vec<Vec<f32>>> = None;
        for n in 0..n_mem {
            let want = reference_logits(name, n);
            let got = run(image.model().unwrap(), &exp.tokens[..want.len()], n);
            let diff = max_abs_diff(&got, &want);
            println!("{name:<20} memory {n} f32 max|diff| = {diff:.3e}");
            assert!(diff <= F32_TOLERANCE, "{name} memory {n}: {diff:e}");
            // The memories differ: a session that ignored the selection
            // would fail here.
            if let Some(p) = &previous {
                let k = p.len().min(got.len());
                assert!(max_abs_diff(&got[..k], &p[..k]) > 1e-2, "{name} memory {n}");
            }
            previous = Some(got);
        }
    }
}

/// (options, its name, bound on the relative RMS logit error against the
/// f64 reference for every memory: hybrid_gdn_swa's bound on the integer
/// path, as the memories after 0 cover the first 16 tokens only, where the
/// error is largest). The int8 rows quantize the memories
/// to int8 like the matrices (row-major: a memory is 3-D, never tiled).
fn quantized_cases() -> Vec<(WriteOptions, &'static str, f64)> {
    let int8 = WriteOptions {
        dtype: DType::I8,
        ..Default::default()
    };
    vec![
        (
            WriteOptions {
                rules: vec![("*.memory_*".into(), DType::F16)],
                ..Default::default()
            },
            "f32, f16 memories",
            1e-3,
        ),
        (int8.clone(), "int8", 0.06),
        (
            WriteOptions {
                token_path: TokenPath::Int,
                state: StateFormat::Int16,
                ..int8
            },
            "int8 --path int",
            0.06,
        ),
    ]
}

#[test]
fn quantized_memories_stay_within_their_bounds() {
    for name in FIXTURES {
        let exp = expected(&fixture(name));
        for (opts, what, bound) in quantized_cases() {
            let image = image_of(&fixture(name), &opts);
            let model = image.model().unwrap();
            // The memories' dtype: int8 (row-major) with --dtype int8, f16 by the rule.
            for i in 0..model.tensor_count() {
                let e = model.entry(i).unwrap();
                if matches!(e.role, Role::MemoryK | Role::MemoryV) {
                    let want = if opts.dtype == DType::I8 {
                        DType::I8
                    } else {
                        DType::F16
                    };
                    assert_eq!(e.dtype, want, "{name} {what}");
                    assert_eq!(e.layout, Layout::RowMajor, "{name} {what}");
                }
            }
            for n in 0..memories(&model) {
                let want = reference_logits(name, n);
                let got = run(image.model().unwrap(), &exp.tokens[..want.len()], n);
                let (d_max, d_rms) = (max_abs_diff(&got, &want), rel_rms(&got, &want));
                println!(
                    "{name:<20} memory {n} {what:<18} max|diff| {d_max:.3e} rel RMS {d_rms:.3e}"
                );
                assert!(
                    d_rms <= bound,
                    "{name} memory {n} {what}: {d_rms:e} > {bound:e}"
                );
            }
        }
    }
}

/// `bytes` with layer `layer`'s record word 15, its state format
/// (docs/spec.md §2: the config section's 8-word model record, then a
/// 16-word record a layer), set to `format`, resealed.
fn with_layer_state(bytes: &[u8], layer: usize, format: StateFormat) -> AlignedImage {
    let mut b = bytes.to_vec();
    let config_off = u32::from_le_bytes(b[24..28].try_into().unwrap()) as usize;
    let at = config_off + 4 * (8 + 16 * layer + 15);
    b[at..at + 4].copy_from_slice(&(format as u32).to_le_bytes());
    seal(&mut b);
    AlignedImage::new(&b)
}

/// Relative RMS bound between the integer step's logits and the f32
/// step's on the same int8 image (docs/cross-attention.md, "The integer
/// step"): both quantize the same memory; the integer step adds an int8
/// query and fixed-point logits and weights.
const INT_STEP_VS_F32_STEP: f64 = 0.02;

#[test]
fn the_integer_step_reads_int8_memories_and_other_memories_take_the_f32_step() {
    for name in FIXTURES {
        let exp = expected(&fixture(name));
        let tokens = &exp.tokens[..16];
        for (rules, integer) in [
            (vec![], true),
            (vec![("*.memory_*".to_string(), DType::F16)], false),
        ] {
            let opts = WriteOptions {
                dtype: DType::I8,
                token_path: TokenPath::Int,
                state: StateFormat::Int16,
                rules,
                ..Default::default()
            };
            let image = image_of(&fixture(name), &opts);
            let model = image.model().unwrap();
            let cross: Vec<usize> = (0..model.config().num_layers as usize)
                .filter(|&l| matches!(model.layer(l).unwrap(), LayerConfig::Cross(_)))
                .collect();
            // `quantize --path int` asks every cross layer for its integer
            // step; the same image with the records asking for the f32 step.
            let mut f32_step = image.bytes().to_vec();
            for &l in &cross {
                let state = model.layer(l).unwrap().state_format();
                assert_eq!(state, StateFormat::Int8Kv, "{name} layer {l}");
                f32_step = with_layer_state(&f32_step, l, StateFormat::F32)
                    .bytes()
                    .to_vec();
            }
            let f32_step = AlignedImage::new(&f32_step);
            let f32_model = f32_step.model().unwrap();
            for &l in &cross {
                let state = f32_model.layer(l).unwrap().state_format();
                assert_eq!(state, StateFormat::F32, "{name} layer {l}");
            }
            for n in 0..memories(&model) {
                let got = run(image.model().unwrap(), tokens, n);
                let f32_got = run(f32_step.model().unwrap(), tokens, n);
                let d = rel_rms(&got, &f32_got);
                println!(
                    "{name:<20} memory {n} integer: {integer} rel RMS to the f32 step {d:.3e}"
                );
                if integer {
                    // A different step (not a bit of it the f32 step's), as
                    // close as the bound says.
                    assert!(got != f32_got, "{name} memory {n}");
                    assert!(d <= INT_STEP_VS_F32_STEP, "{name} memory {n}: {d:e}");
                } else {
                    // An f16 memory: the f32 step, bit for bit.
                    assert_eq!(got, f32_got, "{name} memory {n}");
                }
            }
        }
    }
}

#[test]
fn the_selection_is_one_word_of_state_kept_by_snapshots_and_reset_to_0() {
    let image = image_of(&fixture("hybrid_gdn_cross"), &WriteOptions::default());
    let model = image.model().unwrap();
    // Layer 1 is the cross layer: one f32 word of state.
    assert!(matches!(model.layer(1).unwrap(), LayerConfig::Cross(_)));
    assert_eq!(model.layer_state_len(1, 0).unwrap(), 1);
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut s = Session::new(model, &mut buf).unwrap();
    assert_eq!(s.layer_state(1).unwrap().1.len(), 4);
    assert_eq!(s.selected_memory(1).unwrap(), Some(0));
    assert_eq!(s.selected_memory(0).unwrap(), None);
    s.select_memory(1).unwrap();
    assert_eq!(s.selected_memory(1).unwrap(), Some(1));
    for t in [3, 1, 4, 1, 5] {
        s.feed(t).unwrap();
    }
    let mut snap = vec![0u8; s.snapshot_len()];
    s.snapshot(&mut snap).unwrap();
    let after = s.feed(9).unwrap().to_vec();
    s.reset();
    assert_eq!(s.selected_memory(1).unwrap(), Some(0));
    s.restore(&snap).unwrap();
    assert_eq!(s.selected_memory(1).unwrap(), Some(1));
    assert_eq!(s.feed(9).unwrap(), &after[..]);
    // select_layer_memory changes one layer; selecting mid-stream takes
    // effect from the next token.
    s.select_layer_memory(1, 0).unwrap();
    assert_eq!(s.selected_memory(1).unwrap(), Some(0));
}

#[test]
fn bad_selections_get_typed_errors_and_change_nothing() {
    let image = image_of(&fixture("hybrid_gdn_cross"), &WriteOptions::default());
    let model = image.model().unwrap();
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut s = Session::new(model, &mut buf).unwrap();
    s.select_memory(1).unwrap();
    let state = s.state().to_vec();
    assert_eq!(
        s.select_memory(2),
        Err(Error::NoSuchMemory {
            layer: None,
            index: 2,
            count: 2
        })
    );
    assert_eq!(
        s.select_memory(u32::MAX),
        Err(Error::NoSuchMemory {
            layer: None,
            index: u32::MAX,
            count: 2
        })
    );
    assert_eq!(
        s.select_layer_memory(1, 2),
        Err(Error::NoSuchMemory {
            layer: Some(1),
            index: 2,
            count: 2
        })
    );
    // Layer 0 is a GDN, layer 2 an SWA: not cross layers.
    for layer in [0, 2] {
        assert_eq!(
            s.select_layer_memory(layer, 0),
            Err(Error::NoSuchMemory {
                layer: Some(layer as u16),
                index: 0,
                count: 0
            })
        );
    }
    assert!(matches!(
        s.select_layer_memory(3, 0),
        Err(Error::BadConfig { layer: None, .. })
    ));
    assert!(matches!(
        s.selected_memory(usize::MAX),
        Err(Error::BadConfig { .. })
    ));
    assert_eq!(
        s.state(),
        &state[..],
        "a refused selection changed the state"
    );
    let message = Error::NoSuchMemory {
        layer: Some(1),
        index: 2,
        count: 2,
    }
    .to_string();
    assert_eq!(message, "no memory 2 in layer 1: it has 2 (0..=1)");

    // A model without a cross layer.
    let image = image_of(&fixtures_dir().join("gla_gla"), &WriteOptions::default());
    let model = image.model().unwrap();
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut s = Session::new(model, &mut buf).unwrap();
    assert_eq!(
        s.select_memory(0),
        Err(Error::NoSuchMemory {
            layer: None,
            index: 0,
            count: 0
        })
    );
}

/// `ferrite inspect`'s numbers: the memories' bytes in flash are their
/// tensors' payloads; the session's RAM does not grow with them.
#[test]
fn memories_cost_flash_not_ram() {
    let image = image_of(&fixture("cross_memories"), &WriteOptions::default());
    let model = image.model().unwrap();
    let mut memory_bytes = 0u64;
    for i in 0..model.tensor_count() {
        let e = model.entry(i).unwrap();
        if matches!(e.role, Role::MemoryK | Role::MemoryV) {
            memory_bytes += u64::from(e.data_len) + u64::from(e.scale_len);
        }
    }
    // Two layers: 3 memories x 12 slots x 2 kv heads x 8, then 3 x 5 x 1 x 16; keys and values, f32.
    assert_eq!(memory_bytes, 2 * 4 * (3 * 12 * 16 + 3 * 5 * 16));
    // The state: one word per cross layer (and no MLP state).
    assert_eq!(model.state_bytes(0).unwrap(), 2 * 4);
}
