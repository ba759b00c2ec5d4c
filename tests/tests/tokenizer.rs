//! Byte-level BPE against the HuggingFace `tokenizers` library: the committed
//! `tests/tokenizer/tokenizer.json` (trained by
//! `ferrite-tokenizer-fixture`, tools/python) goes into an image, and the
//! runtime's encoder must give the library's ids (`tests/tokenizer/expected.json`)
//! for every sample, and decode them back to the text.

use std::path::Path;

use ferrite::image::{BPE_FORMAT_VERSION, MIN_FORMAT_VERSION};
use ferrite::{Model, Tokenizer};
use ferrite_tests::random_model;
use ferrite_tools::run::AlignedImage;
use ferrite_tools::tokenizer_json::{self, BpeSpec};
use ferrite_tools::writer::{build_image, WriteOptions};

fn fixture_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tokenizer")
}

fn spec() -> BpeSpec {
    tokenizer_json::read(&fixture_dir().join("tokenizer.json")).expect("fixture tokenizer")
}

/// An image of a small random model (vocab 832) with the fixture tokenizer.
fn bpe_image() -> AlignedImage {
    let json = serde_json::json!({
        "vocab_size": 832, "hidden_size": 8, "intermediate_size": 16,
        "tie_word_embeddings": true,
        "layers": [{"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0, "conv_size": 2}]
    });
    let mut config = ferrite_tools::config_json::parse(&json).unwrap();
    config.model.tokenizer = ferrite::config::TokenizerKind::Bpe;
    let mut dir = random_model(config, 5);
    dir.tokenizer = Some(spec());
    let image = build_image(&dir, &WriteOptions::default(), |_, _| {}).expect("image builds");
    AlignedImage::new(&image.bytes)
}

fn encode(t: &Tokenizer<'_>, text: &[u8]) -> Vec<u32> {
    let mut ids = vec![0u32; text.len()];
    let n = t.encode(text, &mut ids).expect("encodes");
    ids.truncate(n);
    ids
}

fn decode(t: &Tokenizer<'_>, ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|&i| t.decode(i).to_vec()).collect()
}

#[test]
fn encodes_like_the_tokenizers_library() {
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("expected.json")).unwrap(),
    )
    .unwrap();
    let image = bpe_image();
    let model = Model::load(image.bytes()).expect("BPE image loads");
    assert_eq!(model.header().version, BPE_FORMAT_VERSION);
    let t = model.tokenizer();
    assert_eq!(t.kind_name(), "bpe");
    assert_eq!(
        t.vocab_len() as u64,
        expected["vocab_size"].as_u64().unwrap()
    );
    let samples = expected["samples"].as_array().unwrap();
    assert!(samples.len() >= 20);
    for s in samples {
        let text = s["text"].as_str().unwrap();
        let want: Vec<u32> = s["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = encode(&t, text.as_bytes());
        assert_eq!(got, want, "ids of {text:?}");
        assert_eq!(decode(&t, &got), text.as_bytes(), "round trip of {text:?}");
    }
}

#[test]
fn long_pieces_and_invalid_utf8_round_trip() {
    let image = bpe_image();
    let model = Model::load(image.bytes()).unwrap();
    let t = model.tokenizer();
    let long = format!(
        "{}x{}{}\u{e9}",
        " ".repeat(300),
        "-".repeat(200),
        "abc".repeat(90)
    );
    for text in [long.as_bytes(), b"\xff\xfe bad \xc3 utf8 \xed\xa0\x80", b""] {
        let ids = encode(&t, text);
        assert!(ids.len() <= text.len());
        assert!(ids.iter().all(|&i| i < t.vocab_len()));
        assert_eq!(decode(&t, &ids), text);
    }
    // A buffer too small is an error, not a panic.
    let mut small = [0u32; 2];
    assert!(t.encode(b"Hello, world!", &mut small).is_err());
}

#[test]
fn byte_tokenizer_images_stay_version_1() {
    let json = serde_json::json!({
        "vocab_size": 256, "hidden_size": 8, "intermediate_size": 16,
        "layers": [{"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0, "conv_size": 2}]
    });
    let config = ferrite_tools::config_json::parse(&json).unwrap();
    let image = ferrite_tests::image_of_model(&random_model(config, 1));
    let model = Model::load(image.bytes()).unwrap();
    assert_eq!(model.header().version, MIN_FORMAT_VERSION);
    assert_eq!(model.header().tokenizer_len, 0);
    assert_eq!(model.tokenizer().kind_name(), "bytes");
    assert_eq!(encode(&model.tokenizer(), b"hi"), [104, 105]);
}

#[test]
fn a_model_vocab_smaller_than_the_tokenizer_is_refused() {
    let json = serde_json::json!({
        "vocab_size": 512, "hidden_size": 8, "intermediate_size": 16,
        "layers": [{"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0, "conv_size": 2}]
    });
    let mut config = ferrite_tools::config_json::parse(&json).unwrap();
    config.model.tokenizer = ferrite::config::TokenizerKind::Bpe;
    let mut dir = random_model(config, 5);
    dir.tokenizer = Some(spec());
    let err = build_image(&dir, &WriteOptions::default(), |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("vocab_size is 512"), "{err}");
}

#[test]
fn tokenizer_json_fields_that_change_encoding_are_refused_by_name() {
    use serde_json::json;
    let cases = [
        ("model.type", "/model/type", json!("WordPiece")),
        ("normalizer", "/normalizer", json!({"type": "NFC"})),
        (
            "pre_tokenizer",
            "/pre_tokenizer",
            json!({"type": "Whitespace"}),
        ),
        (
            "pre_tokenizer.use_regex",
            "/pre_tokenizer/use_regex",
            json!(false),
        ),
        (
            "pre_tokenizer.add_prefix_space",
            "/pre_tokenizer/add_prefix_space",
            json!(true),
        ),
        ("decoder", "/decoder", json!({"type": "WordPiece"})),
        (
            "post_processor",
            "/post_processor",
            json!({"type": "TemplateProcessing"}),
        ),
        ("model.dropout", "/model/dropout", json!(0.1)),
        ("model.byte_fallback", "/model/byte_fallback", json!(true)),
        ("model.ignore_merges", "/model/ignore_merges", json!(true)),
        (
            "model.continuing_subword_prefix",
            "/model/continuing_subword_prefix",
            json!("##"),
        ),
        (
            "model.end_of_word_suffix",
            "/model/end_of_word_suffix",
            json!("</w>"),
        ),
        ("truncation", "/truncation", json!({"max_length": 8})),
        ("padding", "/padding", json!({"strategy": "BatchLongest"})),
        ("added_tokens", "/added_tokens/0/special", json!(false)),
    ];
    let original: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("tokenizer.json")).unwrap(),
    )
    .unwrap();
    tokenizer_json::parse(&original).expect("the fixture is accepted");
    for (field, pointer, value) in cases {
        let mut v = original.clone();
        *v.pointer_mut(pointer).expect(pointer) = value;
        let msg = tokenizer_json::parse(&v).unwrap_err().to_string();
        assert!(msg.contains(field), "{field}: {msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }
}

#[test]
fn ids_outside_the_tokenizer_decode_to_nothing() {
    let image = bpe_image();
    let model = Model::load(image.bytes()).unwrap();
    let t = model.tokenizer();
    let n = t.vocab_len();
    assert!(!t.decode(n - 1).is_empty());
    // u32::MAX + 1 overflows a 32-bit usize: decode never computes it.
    for id in [n, n + 1, u32::MAX - 1, u32::MAX] {
        assert!(t.decode(id).is_empty(), "{id}");
    }
    // The const fn checks the tokenizer section's counts too, and agrees.
    assert_eq!(ferrite::session_len(image.bytes(), 0), model.session_len(0));
}
