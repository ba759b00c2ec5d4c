//! The integer path's error against the f32 path on the shipped trained
//! models, cheaply enough for CI: int8 in the tiled layout (int8 activations,
//! `ferrite quantize --dtype int8`, the default layout) against the f32 image
//! of the same model directory.
//!
//! Targets (docs/quantization.md, "The integer path"): bits per byte of
//! `models/lm/*` at most 0.01 above f32 on the held-out text, MQAR accuracy
//! of `models/mqar/*` within 0.005 of f32 on the 1,000 recorded sequences.
//! The full table (every model; f32, int8 and int4 in both layouts; whole
//! held-out text, all 1,000 sequences) is measured by
//! `ferrite-eval-models` (tools/python) into each `metrics.json`, and
//! `recorded_figures_meet_the_targets` below checks it; the other tests
//! re-measure a subset with the runtime (13-14 s of CPU in `--profile
//! checked`: 7-10 s on 2 idle cores, ~22 s with the machine's 2 cores
//! loaded 2.5x by other work): the first 16 KB (small) / 6 KB (large) of the
//! held-out text, and the first 200 of the 1,000 MQAR sequences of the
//! three models the boards run.

use std::path::{Path, PathBuf};

use ferrite::image::{DType, Layout};
use ferrite::sampler::argmax;
use ferrite::{Model, Session};
use ferrite_tests::image_of;
use ferrite_tools::eval::text_score;
use ferrite_tools::mqar::{generate, MqarParams, MqarSequence};
use ferrite_tools::run::{session_buffer, AlignedImage};
use ferrite_tools::writer::WriteOptions;

/// Largest rise in bits per byte allowed on the integer path.
const MAX_BPB_RISE: f64 = 0.01;
/// Largest change in MQAR accuracy allowed on the integer path.
const MAX_ACCURACY_CHANGE: f64 = 0.005;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The f32 image and the integer-path int8 image of a model directory.
fn images(dir: &Path) -> (AlignedImage, AlignedImage) {
    let f32_image = image_of(dir, &WriteOptions::default());
    let int8 = image_of(
        dir,
        &WriteOptions {
            dtype: DType::I8,
            layout: Layout::Tiled,
            ..Default::default()
        },
    );
    // Every weight matrix of the shipped models is 16 columns wide or a
    // multiple: all of them must be on the integer path, or this test
    // measures something else.
    let model = int8.model().unwrap();
    for i in 0..model.tensor_count() {
        let e = model.entry(i).unwrap();
        if e.dtype == DType::I8 {
            assert_eq!(e.layout, Layout::Tiled, "{}: tensor {i}", dir.display());
        }
    }
    (f32_image, int8)
}

/// f32 and int8-tiled bits per byte of the first `bytes` of the held-out
/// text (chunks of 512, as `ferrite eval --text`).
fn lm_check(name: &str, bytes: usize) {
    let dir = root().join("models/lm").join(name);
    let text = std::fs::read(root().join("models/lm/heldout.txt")).unwrap();
    let text = &text[..bytes];
    let (f32_image, int8) = images(&dir);
    let bpb = |image: &AlignedImage| {
        text_score(image.model().unwrap(), text, 512, |_| {})
            .unwrap()
            .bits_per_byte()
    };
    let (reference, got) = (bpb(&f32_image), bpb(&int8));
    println!(
        "lm/{name}, first {bytes} bytes of heldout.txt: f32 {reference:.4}, int8 tiled {got:.4} ({:+.4})",
        got - reference
    );
    assert!(
        got - reference <= MAX_BPB_RISE,
        "lm/{name}: int8 tiled {got:.4} bits per byte is more than {MAX_BPB_RISE} above f32 {reference:.4}"
    );
}

#[test]
fn small_lm_int8_tiled_bits_per_byte_within_0_01_of_f32() {
    // Measured: +0.0038 on these 16 KB, +0.0034 on the whole file.
    lm_check("small", 16 * 1024);
}

#[test]
fn large_lm_int8_tiled_bits_per_byte_within_0_01_of_f32() {
    // Measured: +0.0023 on these 6 KB, +0.0036 on the whole file.
    lm_check("large", 6 * 1024);
}

/// The argmax after every query key, sequence after sequence from a reset state.
fn predictions(model: Model<'_>, seqs: &[MqarSequence]) -> Vec<u32> {
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut session = Session::new(model, &mut buf).unwrap();
    let mut out = Vec::new();
    for seq in seqs {
        session.reset();
        let mut targets = seq.targets.iter().peekable();
        for (pos, &token) in seq.tokens.iter().enumerate() {
            let logits = session.feed(token).unwrap();
            if targets.next_if(|&&(at, _)| at == pos).is_some() {
                out.push(argmax(logits));
            }
        }
    }
    out
}

#[test]
fn mqar_int8_tiled_accuracy_within_0_005_of_f32() {
    // The first 200 of the recorded sequences (seed 0, 8 pairs, 64 tokens).
    // Mid-accuracy models have many near-ties whose argmax flips either way
    // (bla-m3 loses 27 of these 1,600 queries but only 32 of all 8,000), so
    // a subset this small guards the models that are mostly right: the
    // three the boards run (`cargo xtask test-boards`). Measured: -1, +2
    // and -2 of 1,600 queries, with 1, 42 and 4 predictions changed.
    let seqs = generate(0, 200, MqarParams::default()).unwrap();
    let answers: Vec<u32> = seqs
        .iter()
        .flat_map(|s| s.targets.iter().map(|&(_, v)| v))
        .collect();
    let mut failures = Vec::new();
    for name in ["bla-m15", "bla-m7", "gdn-2k-lr3e-3"] {
        let (f32_image, int8) = images(&root().join("models/mqar").join(name));
        let reference = predictions(f32_image.model().unwrap(), &seqs);
        let got = predictions(int8.model().unwrap(), &seqs);
        let correct = |p: &[u32]| p.iter().zip(&answers).filter(|(a, b)| a == b).count();
        let n = answers.len() as f64;
        let (acc_f32, acc_int8) = (correct(&reference) as f64 / n, correct(&got) as f64 / n);
        let changed = reference.iter().zip(&got).filter(|(a, b)| a != b).count();
        println!(
            "{name:<14} {} queries: f32 {acc_f32:.4}, int8 tiled {acc_int8:.4} ({:+.4}), {changed} predictions changed",
            answers.len(),
            acc_int8 - acc_f32
        );
        if (acc_int8 - acc_f32).abs() > MAX_ACCURACY_CHANGE {
            failures.push(format!(
                "{name}: int8 tiled {acc_int8:.4} vs f32 {acc_f32:.4}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
#[ignore = "the full MQAR measurement, ~4 minutes: cargo test --profile checked -p ferrite-tests --test integer_path -- --ignored --nocapture"]
fn mqar_all_models_on_the_recorded_sequences() {
    // Every shipped MQAR model on all 1,000 recorded sequences: the correct
    // counts of ferrite-eval-models (f32, int8 rows, int8 tiled) and
    // how many of the 8,000 predictions each int8 layout changes, which the
    // accuracy alone hides (docs/quantization.md).
    let seqs = generate(0, 1000, MqarParams::default()).unwrap();
    let answers: Vec<u32> = seqs
        .iter()
        .flat_map(|s| s.targets.iter().map(|&(_, v)| v))
        .collect();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("models/mqar"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("metrics.json").exists())
        .collect();
    dirs.sort();
    let mut failures = Vec::new();
    for dir in dirs {
        let (f32_image, tiled) = images(&dir);
        let rows = image_of(
            &dir,
            &WriteOptions {
                dtype: DType::I8,
                layout: Layout::RowMajor,
                ..Default::default()
            },
        );
        let reference = predictions(f32_image.model().unwrap(), &seqs);
        let correct = |p: &[u32]| p.iter().zip(&answers).filter(|(a, b)| a == b).count();
        let changed = |p: &[u32]| p.iter().zip(&reference).filter(|(a, b)| a != b).count();
        let mut line = format!(
            "{:<18} f32 {:>4}",
            dir.file_name().unwrap().to_string_lossy(),
            correct(&reference)
        );
        for (layout, image) in [("rows", &rows), ("tiled", &tiled)] {
            let got = predictions(image.model().unwrap(), &seqs);
            let delta = correct(&got) as i64 - correct(&reference) as i64;
            line += &format!(
                " | int8 {layout} {:>4} ({delta:+}), {:>3} changed",
                correct(&got),
                changed(&got)
            );
            if layout == "tiled" && delta.abs() as f64 > MAX_ACCURACY_CHANGE * answers.len() as f64
            {
                failures.push(line.clone());
            }
        }
        println!("{line}");
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

fn number(v: &serde_json::Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |v, k| &v[k])
        .as_f64()
        .unwrap_or_else(|| panic!("no number at {}", path.join(".")))
}

#[test]
fn recorded_figures_meet_the_targets() {
    // The full measurement (docs/quantization.md's table) as recorded in
    // metrics.json by ferrite-eval-models (tools/python).
    let mut dirs: Vec<PathBuf> = ["models/lm", "models/mqar"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root().join(d)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("metrics.json").exists())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 25, "6 LMs and 19 MQAR models");
    for dir in dirs {
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap();
        let name = dir.display();
        if m["task"] == "mqar" {
            let (f, t) = (
                number(&m, &["runtime", "f32", "accuracy"]),
                number(&m, &["runtime", "int8_tiled", "accuracy"]),
            );
            assert!(
                (t - f).abs() <= MAX_ACCURACY_CHANGE,
                "{name}: {t} vs f32 {f}"
            );
        } else {
            // The English LMs also record the fortunes' held-out text.
            for key in ["bits_per_byte", "bits_per_byte_fortunes"] {
                if m["runtime"]["f32"].get(key).is_none() {
                    continue;
                }
                let (f, t) = (
                    number(&m, &["runtime", "f32", key]),
                    number(&m, &["runtime", "int8_tiled", key]),
                );
                assert!(t - f <= MAX_BPB_RISE, "{name} {key}: {t} vs f32 {f}");
            }
        }
    }
}
