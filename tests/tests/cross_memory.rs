//! Issue 32 stage 2: the memory encoder and caller-owned memories
//! (docs/cross-attention.md, "The memory encoder" and "Caller-owned
//! memories"). The tools' baked keys and values against the f64 reference's
//! encoder (the `cross_encoder` fixture: a 1-layer and a 0-layer encoder),
//! an image baked from the texts against the reference's logits over them,
//! the device encoder against the baked memories, a caller-owned memory
//! against the same baked memory bit for bit, and every refusal's typed
//! error.

use std::path::PathBuf;

use ferrite::image::{DType, Role};
use ferrite::{Error, LayerConfig, Memory, Model, Session, StepError};
use ferrite_tests::{fixtures_dir, image_of, max_abs_diff};
use ferrite_tools::memory::{bake, MemoryText};
use ferrite_tools::model_dir::ModelDir;
use ferrite_tools::run::{session_buffer, AlignedImage};
use ferrite_tools::writer::{build_image, tensor_name, WriteOptions};
use safetensors::SafeTensors;

/// The baked keys and values against the f64 encoder: both run the same
/// f32 weights, the runtime in f32 (through one gdn layer for layer 1), so
/// they differ by f32 rounding. Measured 2026-12-07: below 1e-6.
const ENCODER_TOLERANCE: f32 = 1e-5;

/// docs/spec.md §5's tolerance for f32 images.
const F32_TOLERANCE: f32 = 1e-4;

fn dir() -> PathBuf {
    fixtures_dir().join("cross_encoder")
}

/// A tensor of the fixture's expected.safetensors as f32 (int32 tokens
/// converted).
fn tensor(name: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(dir().join("expected.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let v = st.tensor(name).unwrap_or_else(|_| panic!("no {name}"));
    let values = v
        .data()
        .chunks_exact(4)
        .map(|c| {
            let b = [c[0], c[1], c[2], c[3]];
            match v.dtype() {
                safetensors::Dtype::I32 => i32::from_le_bytes(b) as f32,
                _ => f32::from_le_bytes(b),
            }
        })
        .collect();
    (v.shape().to_vec(), values)
}

/// The fixture's memory texts (memory n: `memory_tokens_{n}`, bytes).
fn texts() -> Vec<MemoryText> {
    (0..2)
        .map(|n| MemoryText {
            name: format!("memory {n}"),
            text: tensor(&format!("memory_tokens_{n}"))
                .1
                .iter()
                .map(|&t| t as u8)
                .collect(),
        })
        .collect()
}

/// The fixture's model directory with the texts baked in.
fn baked_dir() -> ModelDir {
    let mut d = ModelDir::open(&dir()).unwrap();
    let baked = bake(&mut d, &texts()).unwrap();
    assert_eq!(baked.slots, 23);
    d
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn baked_keys_and_values_match_the_f64_encoder() {
    let d = baked_dir();
    for layer in [1u16, 2] {
        let LayerConfig::Cross(c) = d.config.layers[layer as usize] else {
            panic!("layer {layer} is a cross layer");
        };
        assert_eq!((c.memories, c.memory_slots), (2, 23));
        for (role, what) in [(Role::MemoryK, "keys"), (Role::MemoryV, "values")] {
            let t = &d.tensors[&tensor_name(Some(layer), role)];
            let kv = c.kv_width() as usize;
            assert_eq!(t.shape, vec![2, 23, kv]);
            for n in 0..2 {
                let (shape, want) = tensor(&format!("encoded_{what}_{layer}_{n}"));
                assert_eq!(shape, vec![23, kv]);
                let got = &t.values[n * 23 * kv..(n + 1) * 23 * kv];
                let diff = max_diff(got, &want);
                println!("layer {layer} {what} memory {n}: max|diff| = {diff:.3e}");
                assert!(
                    diff <= ENCODER_TOLERANCE,
                    "layer {layer} {what} {n}: {diff:e}"
                );
            }
        }
    }
}

#[test]
fn an_image_baked_from_texts_generates_like_the_reference() {
    let d = baked_dir();
    let image = image_with(&d, &WriteOptions::default());
    let tokens = ferrite_tests::expected(&dir()).tokens;
    for n in 0..2u32 {
        let (shape, flat) = tensor(&format!("logits_encoded_{n}"));
        let want: Vec<Vec<f32>> = flat.chunks(shape[1]).map(<[f32]>::to_vec).collect();
        let model = image.model().unwrap();
        let mut buf = session_buffer(&model, 0).unwrap();
        let mut s = Session::new(model, &mut buf).unwrap();
        s.select_memory(n).unwrap();
        let got: Vec<Vec<f32>> = tokens[..want.len()]
            .iter()
            .map(|&t| s.feed(t).unwrap().to_vec())
            .collect();
        let diff = max_abs_diff(&got, &want);
        println!("memory {n}: max|diff| = {diff:.3e}");
        assert!(diff <= F32_TOLERANCE, "memory {n}: {diff:e}");
    }
}

/// The f32 image of the baked directory.
/// The image of `d` written with `opts`.
fn image_with(d: &ModelDir, opts: &WriteOptions) -> AlignedImage {
    AlignedImage::new(&build_image(d, opts, |_, _| {}).unwrap().bytes)
}

fn baked_image() -> AlignedImage {
    image_with(&baked_dir(), &WriteOptions::default())
}

/// Memory `n` of every cross layer of `model`, in [`Memory`]'s layout
/// (keys then values per layer), read from the baked f32 tensors.
fn baked_words(model: &Model<'_>, n: usize) -> Vec<f32> {
    let mut words = Vec::new();
    for l in 0..model.config().num_layers as usize {
        let LayerConfig::Cross(c) = model.layer(l).unwrap() else {
            continue;
        };
        let w = model.layer_weights(l);
        let len = c.memory_values() as usize;
        for role in [Role::MemoryK, Role::MemoryV] {
            let t = w.get(role).unwrap();
            words.extend((0..len).map(|i| t.at(n * len + i)));
        }
    }
    words
}

#[test]
fn the_device_encoder_writes_what_the_tools_bake_bit_for_bit() {
    let image = baked_image();
    let model = image.model().unwrap();
    const SLOTS: usize = 23;
    let words = ferrite::memory_len(image.bytes(), SLOTS).unwrap();
    // Layer 1: one kv head of 8, layer 2: two of 8; keys and values.
    assert_eq!(words, 2 * SLOTS * 8 + 2 * SLOTS * 16);
    assert_eq!(
        words,
        ferrite::mixers::cross_memory_len(SLOTS, 1, 8)
            + ferrite::mixers::cross_memory_len(SLOTS, 2, 8)
    );
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut s = Session::new(model, &mut buf).unwrap();
    s.feed(7).unwrap();
    s.select_memory(1).unwrap();
    for (n, text) in texts().iter().enumerate() {
        let tokens: Vec<u32> = text.text.iter().map(|&b| b as u32).collect();
        let mut out = vec![f32::NAN; words];
        let memory = s.encode_memory(&tokens, &mut out).unwrap();
        assert_eq!(memory.slots(), SLOTS);
        // The encoder leaves a reset stream on memory 0.
        assert_eq!(s.stream_len(), 0);
        assert_eq!(s.selected_memory(1).unwrap(), Some(0));
        let want = baked_words(&model, n);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out), bits(&want), "memory {n}");
    }
}

#[test]
fn a_caller_memory_equals_the_same_baked_memory_bit_for_bit() {
    let image = baked_image();
    let model = image.model().unwrap();
    let tokens = ferrite_tests::expected(&dir()).tokens;
    for n in 0..2u32 {
        let words = baked_words(&model, n as usize);
        let memory = Memory::new(&model, 23, &words).unwrap();
        let mut buf = session_buffer(&model, 0).unwrap();
        let mut baked = Session::new(model, &mut buf).unwrap();
        baked.select_memory(n).unwrap();
        let mut buf2 = session_buffer(&model, 0).unwrap();
        // The caller session stays on baked memory 1 - n: the caller's
        // memory is what it attends to.
        let mut caller = Session::new(model, &mut buf2).unwrap();
        caller.select_memory(1 - n).unwrap();
        for &t in &tokens[..32] {
            let a = baked.feed(t).unwrap().to_vec();
            let b = caller.feed_with_memory(t, &memory).unwrap();
            assert_eq!(
                a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "memory {n}"
            );
        }
        // generate_with_memory: the same tokens as generating on the baked one.
        let mut sampler = ferrite::Sampler::greedy();
        let (mut g1, mut g2) = (Vec::new(), Vec::new());
        baked.reset();
        baked.select_memory(n).unwrap();
        baked
            .generate(&tokens[..4], 12, &mut sampler, |t| {
                g1.push(t);
                true
            })
            .unwrap();
        caller.reset();
        caller
            .generate_with_memory(&tokens[..4], 12, &mut sampler, &memory, |t| {
                g2.push(t);
                true
            })
            .unwrap();
        assert_eq!(g1, g2, "memory {n}");
    }
}

/// The relative RMS bound of f16 memories against f32 ones: the bound the
/// baked f16 memories meet against the f64 reference (tests/cross.rs,
/// "f32, f16 memories").
const F16_MEMORY_BOUND: f64 = 1e-3;

#[test]
fn an_f16_memory_is_the_f32_one_rounded_and_reads_back_exactly() {
    let image = baked_image();
    let model = image.model().unwrap();
    let tokens = ferrite_tests::expected(&dir()).tokens;
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut s = Session::new(model, &mut buf).unwrap();
    let words = ferrite::memory_len(image.bytes(), 23).unwrap();
    for (n, text) in texts().iter().enumerate() {
        let text: Vec<u32> = text.text.iter().map(|&b| b as u32).collect();
        let mut wide = vec![f32::NAN; words];
        let mut narrow = vec![ferrite::f16::NAN; words];
        s.encode_memory(&text, &mut wide).unwrap();
        let memory16 = s.encode_memory_f16(&text, &mut narrow).unwrap();
        assert_eq!(memory16.slots(), 23);
        // The encoder's f16 words are its f32 words rounded to nearest.
        let rounded: Vec<f32> = wide
            .iter()
            .map(|&v| ferrite::f16::from_f32(v).to_f32())
            .collect();
        let ferrite::MemoryWords::F16(narrow) = memory16.words() else {
            panic!("encode_memory_f16 makes an f16 memory");
        };
        assert_eq!(
            narrow
                .iter()
                .map(|v| v.to_f32().to_bits())
                .collect::<Vec<_>>(),
            rounded.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "memory {n}"
        );
        // The step reads f16 words exactly: the same bits as an f32 memory
        // of the rounded words; against the unrounded memory within the
        // f16 bound.
        let memory32 = Memory::new(&model, 23, &wide).unwrap();
        let memory_r = Memory::new(&model, 23, &rounded).unwrap();
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for (memory, out) in [
            (&memory16, &mut a),
            (&memory_r, &mut b),
            (&memory32, &mut c),
        ] {
            s.reset();
            for &t in &tokens[..24] {
                out.push(s.feed_with_memory(t, memory).unwrap().to_vec());
            }
        }
        let bits = |v: &Vec<Vec<f32>>| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b), "memory {n}");
        let (num, den) = a
            .iter()
            .flatten()
            .zip(c.iter().flatten())
            .fold((0f64, 0f64), |(n2, d2), (&x, &y)| {
                (n2 + f64::from(x - y).powi(2), d2 + f64::from(y).powi(2))
            });
        let rel = (num / den).sqrt();
        println!("memory {n}: f16 vs f32 caller memory, rel RMS {rel:.3e}");
        assert!(rel > 0.0 && rel <= F16_MEMORY_BOUND, "memory {n}: {rel:e}");
    }
    // Wrong lengths are refused for f16 words as for f32 ones.
    let short = vec![ferrite::f16::ZERO; words - 1];
    assert!(matches!(
        Memory::new_f16(&model, 23, &short),
        Err(Error::BadMemory(_))
    ));
    let mut short = vec![ferrite::f16::ZERO; words - 1];
    assert!(matches!(
        s.encode_memory_f16(&[1; 23], &mut short),
        Err(Error::BadMemory(_))
    ));
}

/// The relative RMS bound of int8 caller memories (a scale a row) against
/// f32 ones, over the logits of 24 tokens of every memory on both token
/// paths (measured at most 1.1e-2; docs/cross-attention.md).
const I8_MEMORY_BOUND: f64 = 0.02;

#[test]
fn an_int8_memory_is_the_f32_one_quantized_a_row_at_a_time() {
    let d = baked_dir();
    let tokens = ferrite_tests::expected(&dir()).tokens;
    for path in [ferrite::TokenPath::F32, ferrite::TokenPath::Int] {
        // int8 weights (the integer token path needs them).
        let opts = WriteOptions {
            dtype: DType::I8,
            token_path: path,
            ..Default::default()
        };
        let image = image_with(&d, &opts);
        let model = image.model().unwrap();
        let mut buf = session_buffer(&model, 0).unwrap();
        let mut s = Session::new(model, &mut buf).unwrap();
        let words = ferrite::memory_len(image.bytes(), 23).unwrap();
        let rows = ferrite::memory_rows(image.bytes(), 23).unwrap();
        // Two cross layers: 23 key and 23 value rows each.
        assert_eq!(rows, 2 * 2 * 23);
        // The rows' widths in the words' order (keys, then values, a layer at a time).
        let widths: Vec<usize> = (0..model.config().num_layers as usize)
            .filter_map(|l| match model.layer(l).unwrap() {
                LayerConfig::Cross(c) => Some(c.kv_width() as usize),
                _ => None,
            })
            .flat_map(|w| std::iter::repeat_n(w, 2 * 23))
            .collect();
        assert_eq!(widths.len(), rows);
        assert_eq!(widths.iter().sum::<usize>(), words);
        for (n, text) in texts().iter().enumerate() {
            let text: Vec<u32> = text.text.iter().map(|&b| b as u32).collect();
            let mut wide = vec![f32::NAN; words];
            s.encode_memory(&text, &mut wide).unwrap();
            let (mut q, mut scales) = (vec![0i8; words], vec![f32::NAN; rows]);
            let memory8 = s.encode_memory_i8(&text, &mut q, &mut scales).unwrap();
            assert_eq!(memory8.slots(), 23);
            let ferrite::MemoryWords::I8 { q, scales } = memory8.words() else {
                panic!("encode_memory_i8 makes an int8 memory");
            };
            // Each row: its scale the largest magnitude / 127, each word
            // within half a step of the f32 encoder's.
            let mut at = 0;
            for (r, &width) in widths.iter().enumerate() {
                let row = &wide[at..at + width];
                let top = row.iter().fold(0f32, |a, v| a.max(v.abs()));
                assert_eq!(scales[r], top / 127.0, "{path:?} memory {n} row {r}");
                for (i, &v) in row.iter().enumerate() {
                    let got = f32::from(q[at + i]) * scales[r];
                    assert!(
                        (got - v).abs() <= 0.5001 * scales[r],
                        "{path:?} memory {n} row {r}: {got} {v}"
                    );
                }
                at += width;
            }
            // The logits through it, against the f32 memory's.
            let memory32 = Memory::new(&model, 23, &wide).unwrap();
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for (memory, out) in [(&memory8, &mut a), (&memory32, &mut b)] {
                s.reset();
                for &t in &tokens[..24] {
                    out.extend_from_slice(s.feed_with_memory(t, memory).unwrap());
                }
            }
            let (num, den) = a.iter().zip(&b).fold((0f64, 0f64), |(n2, d2), (&x, &y)| {
                (n2 + f64::from(x - y).powi(2), d2 + f64::from(y).powi(2))
            });
            let rel = (num / den).sqrt();
            println!("{path:?} memory {n}: int8 vs f32 caller memory, rel RMS {rel:.3e}");
            assert!(
                rel > 0.0 && rel <= I8_MEMORY_BOUND,
                "{path:?} memory {n}: {rel:e}"
            );
        }
        // Wrong lengths of words or scales are refused.
        let (q, scales) = (vec![0i8; words], vec![0f32; rows]);
        assert!(Memory::new_i8(&model, 23, &q, &scales).is_ok());
        assert!(matches!(
            Memory::new_i8(&model, 23, &q[1..], &scales),
            Err(Error::BadMemory(_))
        ));
        assert!(matches!(
            Memory::new_i8(&model, 23, &q, &scales[1..]),
            Err(Error::BadMemory(_))
        ));
        let (mut q, mut scales) = (vec![0i8; words], vec![0f32; rows - 1]);
        assert!(matches!(
            s.encode_memory_i8(&[1; 23], &mut q, &mut scales),
            Err(Error::BadMemory(_))
        ));
        assert!(matches!(
            s.encode_memory_i8(&[], &mut q, &mut scales),
            Err(Error::BadMemory(_))
        ));
    }
}

#[test]
fn a_caller_memory_runs_on_quantized_images_and_the_integer_token_path() {
    // int8 weights (the memories int8 too, unused here) with an f32 caller
    // memory: the same logits as the int8 image's baked memory within the
    // int8 memories' error, on both token paths.
    let d = baked_dir();
    let f32_image = image_with(&d, &WriteOptions::default());
    let words = baked_words(&f32_image.model().unwrap(), 0);
    for path in [ferrite::TokenPath::F32, ferrite::TokenPath::Int] {
        let opts = WriteOptions {
            dtype: DType::I8,
            token_path: path,
            ..Default::default()
        };
        let image = image_with(&d, &opts);
        let model = image.model().unwrap();
        let memory = Memory::new(&model, 23, &words).unwrap();
        let mut buf = session_buffer(&model, 0).unwrap();
        let mut s = Session::new(model, &mut buf).unwrap();
        let mut buf2 = session_buffer(&model, 0).unwrap();
        let mut b = Session::new(model, &mut buf2).unwrap();
        let (mut worst, mut scale) = (0f32, 0f32);
        for t in [5u32, 80, 200, 3, 17, 99] {
            let x = s.feed_with_memory(t, &memory).unwrap().to_vec();
            let y = b.feed(t).unwrap();
            worst = worst.max(max_diff(&x, y));
            scale = scale.max(y.iter().fold(0f32, |a, v| a.max(v.abs())));
        }
        println!("{path:?}: caller f32 memory vs baked int8: max|diff| {worst:.3e} of {scale:.3e}");
        assert!(
            worst > 0.0 && worst <= 0.05 * scale,
            "{path:?}: {worst} of {scale}"
        );
    }
}

#[test]
fn the_device_encoder_runs_on_the_integer_token_path() {
    // An int8 image on the integer token path encodes its memories with
    // the integer path's norm and products: within 3% of the largest key
    // or value of the f32 encoder's words (the tools' bake), f16 words the
    // f32 ones rounded, and the logits read through it within the 5% bound
    // the baked int8 memories are held to above.
    let d = baked_dir();
    let f32_image = image_with(&d, &WriteOptions::default());
    let opts = WriteOptions {
        dtype: DType::I8,
        token_path: ferrite::TokenPath::Int,
        ..Default::default()
    };
    let image = image_with(&d, &opts);
    let model = image.model().unwrap();
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut s = Session::new(model, &mut buf).unwrap();
    let mut buf2 = session_buffer(&model, 0).unwrap();
    let mut b = Session::new(model, &mut buf2).unwrap();
    for (n, text) in texts().iter().enumerate() {
        let tokens: Vec<u32> = text.text.iter().map(|&b| b as u32).collect();
        let want = baked_words(&f32_image.model().unwrap(), n);
        let mut out = vec![f32::NAN; want.len()];
        s.encode_memory(&tokens, &mut out).unwrap();
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let diff = max_diff(&out, &want);
        println!(
            "memory {n}: integer-path encoder vs f32 bake: max|diff| {diff:.3e} of {scale:.3e}"
        );
        assert!(
            diff > 0.0 && diff <= 0.03 * scale,
            "memory {n}: {diff} of {scale}"
        );
        let mut half = vec![ferrite::f16::ZERO; want.len()];
        s.encode_memory_f16(&tokens, &mut half).unwrap();
        assert!(
            half.iter()
                .zip(&out)
                .all(|(h, &v)| *h == ferrite::f16::from_f32(v)),
            "memory {n}: the f16 words are the f32 ones rounded"
        );
        // The encoder leaves a reset stream, and the memory reads as one.
        assert_eq!(s.stream_len(), 0);
        let memory = Memory::new(&model, tokens.len(), &out).unwrap();
        b.reset();
        b.select_memory(n as u32).unwrap();
        s.reset();
        let (mut worst, mut top) = (0f32, 0f32);
        for t in [5u32, 80, 200, 3, 17, 99] {
            let x = s.feed_with_memory(t, &memory).unwrap().to_vec();
            let y = b.feed(t).unwrap();
            worst = worst.max(max_diff(&x, y));
            top = top.max(y.iter().fold(0f32, |a, v| a.max(v.abs())));
        }
        println!("memory {n}: logits vs the baked int8 memory: max|diff| {worst:.3e} of {top:.3e}");
        assert!(worst <= 0.05 * top, "memory {n}: {worst} of {top}");
    }
}

#[test]
fn bad_memories_are_refused_with_typed_errors() {
    let image = baked_image();
    let model = image.model().unwrap();
    let words = ferrite::memory_len(image.bytes(), 4).unwrap();
    // memory_len: 0 slots; a model without a cross layer.
    assert!(matches!(
        ferrite::memory_len(image.bytes(), 0),
        Err(Error::BadMemory(_))
    ));
    let plain = image_of(&fixtures_dir().join("gdn_gate"), &WriteOptions::default());
    assert_eq!(
        ferrite::memory_len(plain.bytes(), 4),
        Err(Error::BadMemory("the model has no cross layer"))
    );
    // Memory::new: a length that is not memory_len.
    let w = vec![0f32; words + 1];
    assert!(matches!(
        Memory::new(&model, 4, &w),
        Err(Error::BadMemory(_))
    ));
    assert!(matches!(
        Memory::new(&model, 4, &w[..words - 1]),
        Err(Error::BadMemory(_))
    ));
    // encode_memory: no tokens, another length, a token outside the vocabulary.
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut s = Session::new(model, &mut buf).unwrap();
    let mut out = vec![0f32; words];
    assert!(matches!(
        s.encode_memory(&[], &mut out),
        Err(Error::BadMemory(_))
    ));
    assert!(matches!(
        s.encode_memory(&[1, 2, 3], &mut out),
        Err(Error::BadMemory(_))
    ));
    assert_eq!(
        s.encode_memory(&[1, 2, 256, 3], &mut out).unwrap_err(),
        Error::TokenOutOfRange {
            token: 256,
            vocab: 256
        }
    );
    // A memory of another model (same slots, another length) at a step:
    // refused, the state unchanged.
    let other = image_of(
        &fixtures_dir().join("hybrid_gdn_cross"),
        &WriteOptions::default(),
    );
    let other_model = other.model().unwrap();
    let ow = vec![0f32; ferrite::memory_len(other.bytes(), 4).unwrap()];
    let foreign = Memory::new(&other_model, 4, &ow).unwrap();
    s.feed(3).unwrap();
    let before = s.state().to_vec();
    assert!(matches!(
        s.feed_with_memory(5, &foreign),
        Err(StepError::BadMemory(_))
    ));
    assert_eq!(s.state(), &before[..]);
    assert_eq!(s.stream_len(), 1);
    assert_eq!(
        Error::from(StepError::BadMemory("x")).to_string(),
        "bad memory: x"
    );
}

#[test]
fn quantize_memory_refusals_are_one_line() {
    // bake's refusals (the CLI prints them as one line: tools/tests/cli.rs).
    let mut d = ModelDir::open(&dir()).unwrap();
    let one = |s: &str| MemoryText {
        name: s.into(),
        text: s.as_bytes().to_vec(),
    };
    let err = |d: &mut ModelDir, m: &[MemoryText]| format!("{:#}", bake(d, m).err().unwrap());
    assert!(err(&mut d, &[]).contains("1..=8 memories"));
    let nine: Vec<MemoryText> = (0..9).map(|_| one("abc")).collect();
    assert!(err(&mut d, &nine).contains("1..=8 memories per image, got 9"));
    assert!(err(&mut d, &[one("abc"), one("abcd")]).contains("same number of tokens"));
    assert!(err(&mut d, &[one("")]).contains("empty"));
    let mut plain = ModelDir::open(&fixtures_dir().join("gdn_gate")).unwrap();
    assert!(err(&mut plain, &[one("abc")]).contains("a cross layer; this one has none"));
}
