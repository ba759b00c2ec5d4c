//! Issue 32 item 4: the shipped memory-lookup model (`models/cross-lookup/m64`,
//! docs/cross-attention.md, "The trained memory-lookup model") answers its
//! held-out queries on the runtime. The four held-out memories (seeds the
//! training never saw) are baked into the image by the tools' encoder, as
//! `ferrite quantize --memory` does, and every query of `heldout/queries.json`
//! is fed through a fresh session with its memory selected: the argmax logit
//! at a query position must be the value stored under its key.
//!
//! What is asserted is what docs/cross-attention.md and the model's README
//! state: every query right for the f32 and int8 images and on the integer
//! token path.

use std::path::{Path, PathBuf};

use ferrite::image::DType;
use ferrite::{Memory, Session, StateFormat, TokenPath};
use ferrite_tools::memory::{bake, MemoryText};
use ferrite_tools::model_dir::ModelDir;
use ferrite_tools::run::{session_buffer, AlignedImage};
use ferrite_tools::writer::{build_image, WriteOptions};

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/cross-lookup/m64")
}

/// The held-out memories, in file-name order (the index a query's
/// `memory` names).
fn memories(dir: &Path) -> Vec<(String, MemoryText)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("heldout"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read(&p).unwrap();
            (name.clone(), MemoryText { name, text })
        })
        .collect()
}

/// One held-out sequence: its memory's file name, the token stream and, per
/// position, the value expected next (-1 where nothing is asked).
struct Query {
    memory: usize,
    stream: Vec<u32>,
    targets: Vec<i64>,
}

fn queries(dir: &Path, names: &[String]) -> Vec<Query> {
    let text = std::fs::read_to_string(dir.join("heldout/queries.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|q| {
            let file = q["memory"].as_str().unwrap();
            let numbers = |key: &str| -> Vec<i64> {
                q[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_i64().unwrap())
                    .collect()
            };
            Query {
                memory: names.iter().position(|n| n == file).unwrap(),
                stream: numbers("stream").iter().map(|&t| t as u32).collect(),
                targets: numbers("targets"),
            }
        })
        .collect()
}

/// (hits, queries asked) of the image over every held-out sequence, each
/// with its baked memory selected.
fn score(image: &AlignedImage, qs: &[Query]) -> (usize, usize) {
    score_with(image, qs, |s, _, token| s.feed(token).map(<[f32]>::to_vec))
}

/// (hits, queries asked) over every held-out sequence, each token fed by
/// `feed` through a fresh session (its memory selected).
fn score_with(
    image: &AlignedImage,
    qs: &[Query],
    mut feed: impl FnMut(&mut Session<'_, '_>, &Query, u32) -> Result<Vec<f32>, ferrite::StepError>,
) -> (usize, usize) {
    let (mut hits, mut total) = (0, 0);
    for q in qs {
        let model = image.model().unwrap();
        let mut buf = session_buffer(&model, 0).unwrap();
        let mut s = Session::new(model, &mut buf).unwrap();
        s.select_memory(q.memory as u32).unwrap();
        for (&token, &target) in q.stream.iter().zip(&q.targets) {
            let logits = feed(&mut s, q, token).unwrap();
            if target < 0 {
                continue;
            }
            let best = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap();
            total += 1;
            hits += usize::from(best as i64 == target);
        }
    }
    (hits, total)
}

/// The shipped model with its four held-out memories baked (as `ferrite
/// quantize --memory` does), the memories' texts and the held-out queries.
fn setup() -> (ModelDir, Vec<MemoryText>, Vec<Query>) {
    let dir = model_dir();
    let named = memories(&dir);
    assert_eq!(named.len(), 4, "four held-out memories are shipped");
    let names: Vec<String> = named.iter().map(|(n, _)| n.clone()).collect();
    let texts: Vec<MemoryText> = named.into_iter().map(|(_, t)| t).collect();
    let qs = queries(&dir, &names);
    let mut d = ModelDir::open(&dir).unwrap();
    let baked = bake(&mut d, &texts).unwrap();
    assert_eq!(baked.slots, 64);
    (d, texts, qs)
}

/// The images every test runs: f32, int8, int8 on the integer token path.
fn cases() -> [(&'static str, WriteOptions); 3] {
    let int8 = WriteOptions {
        dtype: DType::I8,
        ..Default::default()
    };
    [
        ("f32", WriteOptions::default()),
        ("int8", int8.clone()),
        (
            "int8 --path int",
            WriteOptions {
                token_path: TokenPath::Int,
                state: StateFormat::Int16,
                ..int8
            },
        ),
    ]
}

#[test]
fn the_shipped_lookup_model_answers_every_held_out_query() {
    let (d, _, qs) = setup();
    for (what, opts) in cases() {
        let image = AlignedImage::new(&build_image(&d, &opts, |_, _| {}).unwrap().bytes);
        let (hits, total) = score(&image, &qs);
        println!("{what:<16} {hits}/{total}");
        assert_eq!(total, 128, "{what}: 4 memories x 32 queries");
        assert_eq!(hits, total, "{what}: {hits}/{total} held-out queries right");
    }
}

#[test]
fn memories_encoded_on_the_device_answer_every_held_out_query_on_both_token_paths_f32_and_int8() {
    // The application's way (docs/cross-attention.md, "Caller-owned
    // memories"): no baked memory is read; each memory text is encoded by
    // the session's own encoder (on the integer token path, with its
    // integer norm and products) into a caller buffer, then attended to.
    let (d, texts, qs) = setup();
    // Not the f32 image: its encoder writes the baked words bit for bit
    // (tests/cross_memory.rs).
    for (what, opts) in cases().into_iter().skip(1) {
        let image = AlignedImage::new(&build_image(&d, &opts, |_, _| {}).unwrap().bytes);
        let model = image.model().unwrap();
        let mut buf = session_buffer(&model, 0).unwrap();
        let mut encoder = Session::new(model, &mut buf).unwrap();
        // (slots, f32 words, int8 words, their scales) of each memory.
        type Encoded = (usize, Vec<f32>, Vec<i8>, Vec<f32>);
        let encoded: Vec<Encoded> = texts
            .iter()
            .map(|t| {
                let tokens: Vec<u32> = t.text.iter().map(|&b| u32::from(b)).collect();
                let words = ferrite::memory_len(image.bytes(), tokens.len()).unwrap();
                let rows = ferrite::memory_rows(image.bytes(), tokens.len()).unwrap();
                let (mut wide, mut q, mut scales) =
                    (vec![0f32; words], vec![0i8; words], vec![0f32; rows]);
                encoder.encode_memory(&tokens, &mut wide).unwrap();
                encoder
                    .encode_memory_i8(&tokens, &mut q, &mut scales)
                    .unwrap();
                (tokens.len(), wide, q, scales)
            })
            .collect();
        for words in ["f32", "int8"] {
            let (hits, total) = score_with(&image, &qs, |s, q, token| {
                let (slots, wide, q8, scales) = &encoded[q.memory];
                let memory = match words {
                    "f32" => Memory::new(&model, *slots, wide),
                    _ => Memory::new_i8(&model, *slots, q8, scales),
                }
                .unwrap();
                s.feed_with_memory(token, &memory).map(<[f32]>::to_vec)
            });
            println!("{what:<16} device-encoded {words} memories: {hits}/{total}");
            assert_eq!(total, 128, "{what}: 4 memories x 32 queries");
            assert_eq!(
                hits, total,
                "{what}, {words} memories: {hits}/{total} held-out queries right"
            );
        }
    }
}
