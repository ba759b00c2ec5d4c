//! The committed corpus of broken images, `tests/corrupt/`: every file must be
//! refused by `Model::load` with exactly the error `tests/corrupt/MANIFEST`
//! gives for it (`tools/tests/cli.rs` runs `ferrite inspect` on the same
//! files: non-zero exit, that message on one line, no panic).
//!
//! The corpus is generated here from a small valid image (int4, one GDN
//! layer, ~4 KB), and the `bpe_*` cases from the same model with a small
//! byte-level BPE tokenizer (format v2). Regenerate it (files and MANIFEST) after a format change with
//!
//! ```text
//! FERRITE_OVERWRITE=1 cargo test -p ferrite-tests --test corrupt
//! ```
//!
//! Images whose damage lies behind the CRC (tensor table, config, header
//! fields) are re-sealed with a fresh CRC so that the deeper check fires; the
//! `crc_*` cases are not.
//!
//! The `signed_*` cases start from the same image signed by the test key
//! (format 7, `tests/keys/`): the signature section's header checks, the
//! CRC ending before the section, and `signed_overflow_gdn_heads`, a hostile
//! image signed anew after its damage (a valid signature by a trusted key
//! does not make a broken image load).
//!
//! The `overflow_*` cases ask for sizes whose products overflow a u32 (or a
//! 32-bit usize) although each field is in range on its own. They must be
//! refused without panicking with overflow checks on (`cargo xtask test` runs
//! this file in the `checked` profile), and `ferrite::session_len` must refuse
//! them with the same error as `Model::load`.

use std::path::{Path, PathBuf};

use ferrite::config::{kind, TokenizerKind, LAYER_RECORD_WORDS, MODEL_RECORD_WORDS};
use ferrite::image::{
    DType, CRC_FIELD, FORMAT_VERSION, HEADER_LEN, SIGNATURE_SECTION_LEN, TENSOR_ENTRY_LEN,
};
use ferrite::mixers::BlaPhiSource;
use ferrite::{Error, Model};
use ferrite_tests::random_model;
use ferrite_tools::run::AlignedImage;
use ferrite_tools::tokenizer_json::BpeSpec;
use ferrite_tools::writer::{build_image, seal, WriteOptions};

/// The valid image every case starts from.
fn base_image() -> Vec<u8> {
    image_with(256, None)
}

/// A byte-level BPE of 260 tokens: the 256 bytes, then `ab`, `abc`, ` a`,
/// `cd` (merge ranks in that order).
fn small_bpe() -> BpeSpec {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    tokens.extend([
        b"ab".to_vec(),
        b"abc".to_vec(),
        b" a".to_vec(),
        b"cd".to_vec(),
    ]);
    BpeSpec {
        tokens,
        merges: vec![(97, 98, 256), (256, 99, 257), (32, 97, 258), (99, 100, 259)],
    }
}

/// The valid image every `bpe_*` case starts from (vocab 260, format v2).
fn bpe_base_image() -> Vec<u8> {
    image_with(260, Some(small_bpe()))
}

/// The valid image every `tiled_*` case starts from: hidden 16, int8 in the
/// tiled layout of the integer path (format v3), groups of 16.
fn tiled_base_image() -> Vec<u8> {
    let json = serde_json::json!({
        "vocab_size": 256, "hidden_size": 16, "intermediate_size": 32,
        "tie_word_embeddings": true, "tokenizer": "bytes",
        "layers": [{"mixer": "gdn", "num_heads": 1, "head_dim": 16, "expand_v": 1.0, "conv_size": 2}]
    });
    let config = ferrite_tools::config_json::parse(&json).expect("valid config");
    let dir = random_model(config, 5);
    let opts = WriteOptions {
        dtype: DType::I8,
        group_size: Some(16),
        ..Default::default()
    };
    build_image(&dir, &opts, |_, _| {})
        .expect("image builds")
        .bytes
}

/// The valid images every `bla_*` case starts from: one BLA layer, hidden 8,
/// f32, its phi computed by the runtime (format 5) or stored as a table
/// (format 1).
fn bla_base_image(bla_phi: BlaPhiSource) -> Vec<u8> {
    let json = serde_json::json!({
        "vocab_size": 256, "hidden_size": 8, "intermediate_size": 16,
        "tie_word_embeddings": true, "tokenizer": "bytes",
        "layers": [{"mixer": "bla", "num_heads": 1, "head_dim": 8, "period": 6, "modes": 2}]
    });
    let config = ferrite_tools::config_json::parse(&json).expect("valid config");
    let dir = random_model(config, 7);
    let opts = WriteOptions {
        bla_phi,
        ..Default::default()
    };
    build_image(&dir, &opts, |_, _| {})
        .expect("image builds")
        .bytes
}

fn image_with(vocab: u32, tokenizer: Option<BpeSpec>) -> Vec<u8> {
    let json = serde_json::json!({
        "vocab_size": vocab, "hidden_size": 8, "intermediate_size": 16,
        "tie_word_embeddings": true, "tokenizer": "bytes",
        "layers": [{"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0, "conv_size": 2}]
    });
    let mut config = ferrite_tools::config_json::parse(&json).expect("valid config");
    if tokenizer.is_some() {
        config.model.tokenizer = TokenizerKind::Bpe;
    }
    let mut dir = random_model(config, 3);
    dir.tokenizer = tokenizer;
    let opts = WriteOptions {
        dtype: DType::I4,
        group_size: Some(8),
        rules: Vec::new(),
        // The corpus predates the tiled layout; its images stay format 1-2.
        layout: ferrite::image::Layout::RowMajor,
        ..Default::default()
    };
    build_image(&dir, &opts, |_, _| {})
        .expect("image builds")
        .bytes
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corrupt")
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn set_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Byte offset of field `field` of tensor table entry `i`.
fn entry(b: &[u8], i: usize, field: usize) -> usize {
    u32_at(b, 32) as usize + i * TENSOR_ENTRY_LEN + field
}

// Header word offsets (after the 8-byte magic) and entry field offsets.
const VERSION: usize = 8;
const HEADER_LEN_FIELD: usize = 12;
const FILE_LEN: usize = 16;
const CONFIG_OFF: usize = 24;
const TENSOR_COUNT: usize = 36;
const TOKENIZER_OFF: usize = 40;
const TOKENIZER_LEN: usize = 44;
const DATA_LEN: usize = 52;
const E_ROLE: usize = 2;
const E_DTYPE: usize = 4;
const E_GROUP: usize = 6;
const E_DIM1: usize = 12;
const E_DATA_OFF: usize = 24;
const E_DATA_LEN: usize = 28;
const E_SCALE_LEN: usize = 36;
// Tensors of the base image: 0 embeddings [256, 8] int4, 1 final norm f32,
// 2 attn_norm f32, 3 q_proj [8, 8] int4.
const EMB: usize = 0;
const NORM: usize = 1;
const Q_PROJ: usize = 3;

/// A broken image: name, what was done, and whether to re-seal the CRC.
struct Case {
    name: &'static str,
    reseal: bool,
    damage: fn(&mut Vec<u8>),
}

const fn case(name: &'static str, reseal: bool, damage: fn(&mut Vec<u8>)) -> Case {
    Case {
        name,
        reseal,
        damage,
    }
}

fn cases() -> Vec<Case> {
    vec![
        case("empty", false, |b| b.clear()),
        case("bad_magic", false, |b| b[0] = b'X'),
        case("not_an_image", false, |b| {
            *b = b"{\"model_type\": \"ferrite\"}\n".repeat(4)
        }),
        case("version_0", true, |b| set_u32(b, VERSION, 0)),
        case("version_newer", true, |b| {
            set_u32(b, VERSION, FORMAT_VERSION + 1)
        }),
        case("header_len", true, |b| set_u32(b, HEADER_LEN_FIELD, 128)),
        case("truncated_header", false, |b| b.truncate(HEADER_LEN - 4)),
        case("truncated_body", false, |b| {
            let n = b.len() - 100;
            b.truncate(n)
        }),
        case("crc_flipped_weight", false, |b| {
            let i = b.len() - 200;
            b[i] ^= 0x10
        }),
        case("crc_flipped_crc", false, |b| b[CRC_FIELD] ^= 1),
        case("config_section_out_of_bounds", true, |b| {
            set_u32(b, CONFIG_OFF, u32::MAX - 8)
        }),
        case("config_hidden_zero", true, |b| {
            let c = u32_at(b, CONFIG_OFF) as usize;
            set_u32(b, c + 4, 0)
        }),
        case("config_unknown_mixer", true, |b| {
            let c = u32_at(b, CONFIG_OFF) as usize;
            set_u32(b, c + 32, 255)
        }),
        case("config_mixer_option_needs_v4", true, |b| {
            // The GDN layer's flags (record word 6) ask for DeltaNet's "no
            // decay", a format-4 option, in a version-3 image.
            let c = u32_at(b, CONFIG_OFF) as usize;
            let flags = u32_at(b, c + 56);
            set_u32(b, c + 56, flags | 1 << 2)
        }),
        case("tensor_missing", true, |b| {
            let n = u32_at(b, TENSOR_COUNT);
            set_u32(b, TENSOR_COUNT, n - 1)
        }),
        case("tensor_out_of_order", true, |b| {
            let (a, c) = (entry(b, NORM, 0), entry(b, 2, 0));
            let first: Vec<u8> = b[a..a + TENSOR_ENTRY_LEN].to_vec();
            b.copy_within(c..c + TENSOR_ENTRY_LEN, a);
            b[c..c + TENSOR_ENTRY_LEN].copy_from_slice(&first);
        }),
        case("tensor_unknown_role", true, |b| {
            let e = entry(b, NORM, E_ROLE);
            b[e..e + 2].copy_from_slice(&999u16.to_le_bytes())
        }),
        case("tensor_unknown_dtype", true, |b| {
            let e = entry(b, Q_PROJ, E_DTYPE);
            b[e] = 7
        }),
        case("tensor_shape_contradicts_config", true, |b| {
            let e = entry(b, Q_PROJ, E_DIM1);
            set_u32(b, e, 16)
        }),
        case("tensor_dtype_contradicts_config", true, |b| {
            // A norm vector may not be quantized.
            let e = entry(b, NORM, E_DTYPE);
            b[e] = DType::I8 as u8
        }),
        case("tensor_group_size_not_dividing", true, |b| {
            let e = entry(b, Q_PROJ, E_GROUP);
            b[e..e + 2].copy_from_slice(&6u16.to_le_bytes())
        }),
        case("tensor_group_size_scale_count", true, |b| {
            // Group 4 divides 8, but the stored scales are for group 8.
            let e = entry(b, Q_PROJ, E_GROUP);
            b[e..e + 2].copy_from_slice(&4u16.to_le_bytes())
        }),
        case("tensor_payload_length", true, |b| {
            let e = entry(b, Q_PROJ, E_DATA_LEN);
            let v = u32_at(b, e);
            set_u32(b, e, v - 4)
        }),
        case("tensor_scales_on_f32", true, |b| {
            let e = entry(b, NORM, E_SCALE_LEN);
            set_u32(b, e, 32)
        }),
        case("tensor_misaligned", true, |b| {
            let e = entry(b, Q_PROJ, E_DATA_OFF);
            let v = u32_at(b, e);
            set_u32(b, e, v + 16)
        }),
        case("tensor_overlap", true, |b| {
            let prev = u32_at(b, entry(b, EMB, E_DATA_OFF));
            let e = entry(b, NORM, E_DATA_OFF);
            set_u32(b, e, prev)
        }),
        case("tensor_out_of_bounds", true, |b| {
            let end = u32_at(b, FILE_LEN);
            let e = entry(b, Q_PROJ, E_DATA_OFF);
            set_u32(b, e, end + 64)
        }),
        case("tensor_offset_overflow", true, |b| {
            let e = entry(b, Q_PROJ, E_DATA_OFF);
            set_u32(b, e, 0xFFFF_FFE0)
        }),
        case("bytes_with_tokenizer_section", true, |b| {
            set_u32(b, TOKENIZER_LEN, 4)
        }),
        // Sizes whose products overflow a u32 (the runtime once computed them
        // in u32 and panicked with overflow checks on). Each field is in range
        // on its own; heads times head size is not.
        case("overflow_gdn_heads", true, |b| {
            // H = HV = 2^20, K = V = 2^12 + 1: H*K = 2^32 + 2^20.
            set_layer(b, kind::GDN, &[1 << 20, 1 << 20, 4097, 4097, 2, 1])
        }),
        case("overflow_gsa_heads", true, |b| {
            set_layer(
                b,
                kind::GSA,
                &[1 << 20, 1 << 20, 4097, 8, 4, 0, f32_bits(8.0)],
            )
        }),
        case("overflow_gsa_slots", true, |b| {
            // Hkv*M = 2^32 + 2^20 while H*K and H*V are in range.
            set_layer(
                b,
                kind::GSA,
                &[1 << 20, 1 << 20, 1, 1, 4097, 0, f32_bits(8.0)],
            )
        }),
        case("overflow_swa_heads", true, |b| {
            set_layer(
                b,
                kind::SWA,
                &[1 << 20, 1 << 20, 4098, 4, 0, f32_bits(10000.0), 0, 0],
            )
        }),
        case("overflow_bla_heads", true, |b| {
            let gamma = f32_bits(1.0);
            set_layer(
                b,
                kind::BLA,
                &[1 << 20, 4097, 4097, 4, 1, 3, 0, 0, gamma, 0, 0],
            )
        }),
        // Model-wide sizes: 3 * D, 2 * I and vocab overflow a u32.
        case("overflow_vocab", true, |b| set_model_word(b, 0, u32::MAX)),
        case("overflow_hidden", true, |b| {
            set_model_word(b, 1, 0x8000_0000)
        }),
        case("overflow_intermediate", true, |b| {
            set_model_word(b, 2, 0x8000_0000)
        }),
    ]
}

/// Sets word `i` of the model record.
fn set_model_word(b: &mut [u8], i: usize, v: u32) {
    let c = u32_at(b, CONFIG_OFF) as usize;
    set_u32(b, c + 4 * i, v)
}

/// Replaces layer 0's record: its kind and its first words (the rest 0).
fn set_layer(b: &mut [u8], kind: u32, words: &[u32]) {
    let at = u32_at(b, CONFIG_OFF) as usize + 4 * MODEL_RECORD_WORDS;
    set_u32(b, at, kind);
    for i in 1..LAYER_RECORD_WORDS {
        set_u32(b, at + 4 * i, words.get(i - 1).copied().unwrap_or(0));
    }
}

fn f32_bits(v: f32) -> u32 {
    v.to_bits()
}

/// Byte offset of word `i` of the BPE section.
fn tok_word(b: &[u8], i: usize) -> usize {
    u32_at(b, TOKENIZER_OFF) as usize + 4 * i
}

// Word indices in the BPE section of `bpe_base_image` (V = 260, M = 4).
const T_VOCAB: usize = 0;
const T_MERGES: usize = 1;
const T_FLAGS: usize = 2;
const T_BYTES: usize = 3;
const T_BYTE_IDS: usize = 4;
const T_OFFSETS: usize = T_BYTE_IDS + 256;
const T_MERGE0: usize = T_OFFSETS + 261;

/// Damage to the BPE base image (all re-sealed: the section is behind the CRC).
fn bpe_cases() -> Vec<Case> {
    vec![
        case("bpe_in_a_v1_image", true, |b| set_u32(b, VERSION, 1)),
        case("bpe_section_misaligned", true, |b| {
            let off = u32_at(b, TOKENIZER_OFF);
            set_u32(b, TOKENIZER_OFF, off + 2)
        }),
        case("bpe_section_short", true, |b| set_u32(b, TOKENIZER_LEN, 12)),
        case("bpe_token_count_over_vocab", true, |b| {
            let at = tok_word(b, T_VOCAB);
            set_u32(b, at, 261)
        }),
        case("bpe_merge_count", true, |b| {
            let at = tok_word(b, T_MERGES);
            set_u32(b, at, 260)
        }),
        case("bpe_unknown_flags", true, |b| {
            let at = tok_word(b, T_FLAGS);
            set_u32(b, at, 3)
        }),
        case("bpe_no_pretokenizer", true, |b| {
            let at = tok_word(b, T_FLAGS);
            set_u32(b, at, 0)
        }),
        case("bpe_length_mismatch", true, |b| {
            let at = tok_word(b, T_BYTES);
            let v = u32_at(b, at);
            set_u32(b, at, v + 4)
        }),
        case("bpe_offsets_span", true, |b| {
            let at = tok_word(b, T_OFFSETS);
            set_u32(b, at, 1)
        }),
        case("bpe_offsets_decrease", true, |b| {
            let at = tok_word(b, T_OFFSETS + 100);
            set_u32(b, at, 200)
        }),
        case("bpe_byte_table", true, |b| {
            let at = tok_word(b, T_BYTE_IDS + 65);
            set_u32(b, at, 66)
        }),
        case("bpe_merge_outside_vocab", true, |b| {
            let at = tok_word(b, T_MERGE0);
            set_u32(b, at, 5000)
        }),
        case("bpe_merge_rank", true, |b| {
            let at = tok_word(b, T_MERGE0 + 3);
            set_u32(b, at, 4)
        }),
        case("bpe_merges_unsorted", true, |b| {
            let (a, c) = (tok_word(b, T_MERGE0), tok_word(b, T_MERGE0 + 4));
            let first: Vec<u8> = b[a..a + 16].to_vec();
            b.copy_within(c..c + 16, a);
            b[c..c + 16].copy_from_slice(&first);
        }),
        case("bpe_merge_bytes", true, |b| {
            let at = tok_word(b, T_MERGE0 + 2);
            set_u32(b, at, 259)
        }),
        // Counts whose section length overflows a u32 (a 32-bit usize).
        case("overflow_bpe_token_count", true, |b| {
            let (v, m) = (tok_word(b, T_VOCAB), tok_word(b, T_MERGES));
            set_u32(b, v, u32::MAX);
            set_u32(b, m, 0x4000_0000)
        }),
        case("overflow_bpe_byte_count", true, |b| {
            // Every count at its limit: vocab 2^20 tokens, 2^20 - 1 merges
            // and u32::MAX bytes of token strings.
            set_model_word(b, 0, 1 << 20);
            let (v, m, n) = (
                tok_word(b, T_VOCAB),
                tok_word(b, T_MERGES),
                tok_word(b, T_BYTES),
            );
            set_u32(b, v, 1 << 20);
            set_u32(b, m, (1 << 20) - 1);
            set_u32(b, n, u32::MAX)
        }),
    ]
}

// Entry field of the layout byte (format v3).
const E_LAYOUT: usize = 5;

/// Damage to the tiled base image (tensors: 0 embeddings [256, 16] int8
/// tiled, 1 final norm, 2 attn_norm, 3 q_proj [16, 16] int8 tiled).
fn tiled_cases() -> Vec<Case> {
    vec![
        case("tiled_in_a_v2_image", true, |b| set_u32(b, VERSION, 2)),
        case("tiled_unknown_layout", true, |b| {
            let at = entry(b, Q_PROJ, E_LAYOUT);
            b[at] = 9
        }),
        case("tiled_f32_tensor", true, |b| {
            let at = entry(b, NORM, E_LAYOUT);
            b[at] = 1
        }),
        case("tiled_group_not_16", true, |b| {
            let at = entry(b, Q_PROJ, E_GROUP);
            b[at..at + 2].copy_from_slice(&8u16.to_le_bytes())
        }),
        case("tiled_scale_count", true, |b| {
            let at = entry(b, Q_PROJ, E_SCALE_LEN);
            let v = u32_at(b, at);
            set_u32(b, at, v - 4)
        }),
        case("tiled_payload_length", true, |b| {
            let at = entry(b, EMB, E_DATA_LEN);
            let v = u32_at(b, at);
            set_u32(b, at, v - 64)
        }),
    ]
}

/// The valid image every `int_*` case starts from: the integer token path
/// (format 6), int8 tiled, hidden 16; layer 0 GDN with an int16 state,
/// layer 1 SWA (f32 state: its f32 step). Tensors: 0 embeddings, 1 final
/// norm, 2 attn_norm, 3 q_proj, ...
fn int_base_image() -> Vec<u8> {
    let json = serde_json::json!({
        "vocab_size": 256, "hidden_size": 16, "intermediate_size": 32,
        "tie_word_embeddings": true, "tokenizer": "bytes",
        "layers": [
            {"mixer": "gdn", "num_heads": 1, "head_dim": 16, "expand_v": 1.0, "conv_size": 2},
            {"mixer": "swa", "num_heads": 1, "head_dim": 16, "window": 4}
        ]
    });
    let config = ferrite_tools::config_json::parse(&json).expect("valid config");
    let dir = random_model(config, 11);
    let opts = WriteOptions {
        dtype: DType::I8,
        token_path: ferrite::TokenPath::Int,
        state: ferrite::StateFormat::Int16,
        ..Default::default()
    };
    build_image(&dir, &opts, |_, _| {})
        .expect("image builds")
        .bytes
}

/// Byte offset of word `word` of layer `layer`'s record.
fn layer_word(b: &[u8], layer: usize, word: usize) -> usize {
    u32_at(b, CONFIG_OFF) as usize + 4 * (MODEL_RECORD_WORDS + layer * LAYER_RECORD_WORDS + word)
}

/// Byte offset of the model record's flags (word 4).
fn model_flags(b: &[u8]) -> usize {
    u32_at(b, CONFIG_OFF) as usize + 16
}

/// Damage to the integer token path's base image.
fn int_cases() -> Vec<Case> {
    vec![
        case("int_path_in_a_v5_image", true, |b| set_u32(b, VERSION, 5)),
        // The f32 path with a layer whose state is int16.
        case("int_state_on_the_f32_path", true, |b| {
            let at = model_flags(b);
            let f = u32_at(b, at);
            set_u32(b, at, f & !2)
        }),
        case("int_state_in_a_v5_image", true, |b| {
            let at = model_flags(b);
            let f = u32_at(b, at);
            set_u32(b, at, f & !2);
            set_u32(b, VERSION, 5)
        }),
        case("int_unknown_state_format", true, |b| {
            let at = layer_word(b, 0, 15);
            set_u32(b, at, 7)
        }),
        // SWA takes int8 KV, not int16.
        case("int_state_on_a_mixer_without_one", true, |b| {
            let at = layer_word(b, 1, 15);
            set_u32(b, at, 1)
        }),
        case("int_unknown_model_flag", true, |b| {
            let at = model_flags(b);
            let f = u32_at(b, at);
            set_u32(b, at, f | 8)
        }),
        // The q_proj of the integer GDN layer relabelled row-major.
        case("int_matrix_not_tiled", true, |b| {
            let at = entry(b, Q_PROJ, 5);
            b[at] = 0
        }),
    ]
}

/// The valid image the `int_gsa_*` cases start from: the integer token
/// path, int8 tiled, hidden 16; layer 0 GSA with an int16 state and a short
/// convolution.
fn int_gsa_base_image() -> Vec<u8> {
    int_image(
        serde_json::json!([
            {"mixer": "gsa", "num_heads": 2, "num_kv_heads": 1, "num_slots": 4, "use_short_conv": true}
        ]),
        12,
    )
}

/// An int8 tiled image on the integer token path (int16 states where the
/// mixers have them), hidden 16, of random weights (`seed`) for `layers`.
fn int_image(layers: serde_json::Value, seed: u64) -> Vec<u8> {
    let json = serde_json::json!({
        "vocab_size": 256, "hidden_size": 16, "intermediate_size": 32,
        "tie_word_embeddings": true, "tokenizer": "bytes", "layers": layers,
    });
    let config = ferrite_tools::config_json::parse(&json).expect("valid config");
    let dir = random_model(config, seed);
    let opts = WriteOptions {
        dtype: DType::I8,
        token_path: ferrite::TokenPath::Int,
        state: ferrite::StateFormat::Int16,
        ..Default::default()
    };
    build_image(&dir, &opts, |_, _| {})
        .expect("image builds")
        .bytes
}

/// Sets layer 0's state format word (record word 15) to `code`.
fn set_layer0_state(b: &mut [u8], code: u32) {
    let at = layer_word(b, 0, 15);
    set_u32(b, at, code)
}

/// Clears the model's integer-token-path flag (bit 1), leaving its states.
fn clear_int_path(b: &mut [u8]) {
    let at = model_flags(b);
    let f = u32_at(b, at);
    set_u32(b, at, f & !2)
}

/// Damage to the GSA integer base image's state word.
fn int_gsa_cases() -> Vec<Case> {
    vec![
        // GSA takes int16, not int8 KV.
        case("int_gsa_int8_kv_state", true, |b| set_layer0_state(b, 2)),
        case("int_gsa_unknown_state_format", true, |b| {
            set_layer0_state(b, 9)
        }),
        // int16 on the f32 path.
        case("int_gsa_state_on_the_f32_path", true, |b| clear_int_path(b)),
    ]
}

/// The valid image the `int_bla_*` cases start from: the integer token
/// path, int8 tiled, hidden 16; layer 0 BLA with an int16 state, a short
/// convolution and the computed phi.
fn int_bla_base_image() -> Vec<u8> {
    int_image(
        serde_json::json!([
            {"mixer": "bla", "num_heads": 1, "head_dim": 16, "period": 8, "modes": 2,
             "use_short_conv": true}
        ]),
        13,
    )
}

/// Damage to the BLA integer base image's state word.
fn int_bla_cases() -> Vec<Case> {
    vec![
        // BLA takes int16, not int8 KV.
        case("int_bla_int8_kv_state", true, |b| set_layer0_state(b, 2)),
        case("int_bla_unknown_state_format", true, |b| {
            set_layer0_state(b, 9)
        }),
        // int16 on the f32 path.
        case("int_bla_state_on_the_f32_path", true, |b| clear_int_path(b)),
        // int16 in a format 5 image (the computed phi's version).
        case("int_bla_state_in_a_v5_image", true, |b| {
            set_u32(b, VERSION, 5)
        }),
    ]
}

/// The valid image the `int_mla_*` cases start from: the integer token
/// path, int8 tiled, hidden 16; layer 0 MLA with its int8 latent window.
fn int_mla_base_image() -> Vec<u8> {
    int_image(
        serde_json::json!([
            {"mixer": "mla", "num_heads": 2, "kv_lora_rank": 8, "rope_dim": 4, "window": 6}
        ]),
        14,
    )
}

/// Damage to the MLA integer base image's state word.
fn int_mla_cases() -> Vec<Case> {
    vec![
        // MLA takes int8 KV, not int16.
        case("int_mla_int16_state", true, |b| set_layer0_state(b, 1)),
        case("int_mla_unknown_state_format", true, |b| {
            set_layer0_state(b, 9)
        }),
        // The int8 latent window on the f32 path.
        case("int_mla_state_on_the_f32_path", true, |b| clear_int_path(b)),
        // The int8 latent window in a format 5 image.
        case("int_mla_state_in_a_v5_image", true, |b| {
            set_u32(b, VERSION, 5)
        }),
    ]
}

/// Byte offset of the flags word (record word 10) of layer 0, a BLA layer.
fn bla_flags(b: &[u8]) -> usize {
    u32_at(b, CONFIG_OFF) as usize + 4 * MODEL_RECORD_WORDS + 4 * 10
}

/// Damage to the BLA base image whose phi the runtime computes (format 5;
/// tensors: 0 embeddings, 1 final norm, 2 attn_norm, 3-5 q/k/v_proj,
/// 6 o_proj: no attn.phi).
fn bla_computed_cases() -> Vec<Case> {
    vec![
        case("bla_phi_computed_in_a_v4_image", true, |b| {
            set_u32(b, VERSION, 4)
        }),
        // The record asks for the table the image does not store.
        case("bla_phi_flag_cleared", true, |b| {
            let at = bla_flags(b);
            let flags = u32_at(b, at);
            set_u32(b, at, flags & !2)
        }),
        case("bla_unknown_flags", true, |b| {
            let at = bla_flags(b);
            let flags = u32_at(b, at);
            set_u32(b, at, flags | 4)
        }),
        // Shared key/value heads (record word 12, issue 28): 2 kv heads for
        // the base image's one query head, and more than a record allows.
        case("bla_kv_heads_not_dividing", true, |b| {
            let at = bla_flags(b) + 8;
            set_u32(b, at, 2)
        }),
        case("bla_kv_heads_out_of_range", true, |b| {
            let at = bla_flags(b) + 8;
            set_u32(b, at, (1 << 20) + 1)
        }),
    ]
}

/// Damage to the BLA base image that stores phi (format 1; tensor 6 is
/// attn.phi).
fn bla_table_cases() -> Vec<Case> {
    vec![
        // A format-5 record that says phi is computed, and a stored table.
        case("bla_phi_stored_and_computed", true, |b| {
            set_u32(b, VERSION, 5);
            let at = bla_flags(b);
            let flags = u32_at(b, at);
            set_u32(b, at, flags | 2)
        }),
    ]
}

/// The base image signed by the test key (`tests/keys/test-signer.pem`),
/// security counter 1 (format 7).
fn signed_base_image() -> Vec<u8> {
    ferrite_tools::sign::sign(&base_image(), &test_signer(), 1).unwrap()
}

fn test_signer() -> ed25519_dalek::SigningKey {
    let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("keys/test-signer.pem");
    ferrite_tools::sign::read_secret_key(&key).unwrap()
}

/// Header word 14 (flags, format 7).
const FLAGS: usize = 56;

/// The signature section's header checks, the CRC's end before the section,
/// and a hostile image under a valid signature by the trusted test key (the
/// loader still refuses it; the QEMU OTA check offers it to the boards).
fn signed_cases() -> Vec<Case> {
    vec![
        case("signed_unknown_flag", true, |b| set_u32(b, FLAGS, 3)),
        case("signed_counter_on_unsigned", true, |b| set_u32(b, FLAGS, 0)),
        case("signed_shorter_than_its_section", true, |b| {
            set_u32(b, FILE_LEN, 100)
        }),
        case("signed_data_into_the_section", true, |b| {
            let n = u32_at(b, DATA_LEN);
            set_u32(b, DATA_LEN, n + 32)
        }),
        case("signed_crc_flipped_weight", false, |b| {
            let i = b.len() - SIGNATURE_SECTION_LEN - 100;
            b[i] ^= 0x10
        }),
        case("signed_overflow_gdn_heads", false, |b| {
            set_layer(b, kind::GDN, &[1 << 20, 1 << 20, 4097, 4097, 2, 1]);
            ferrite_tools::sign::resign_unchecked(b, &test_signer()).unwrap();
        }),
    ]
}

/// An f32 image of random weights (`seed`), hidden 8, vocab 256, tied, for
/// `layers` with the model options `extra` (format 8 options).
fn f32_image(layers: serde_json::Value, extra: serde_json::Value, seed: u64) -> Vec<u8> {
    let mut json = serde_json::json!({
        "vocab_size": 256, "hidden_size": 8, "intermediate_size": 16,
        "tie_word_embeddings": true, "tokenizer": "bytes", "layers": layers,
    });
    json.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let config = ferrite_tools::config_json::parse(&json).expect("valid config");
    let dir = random_model(config, seed);
    build_image(&dir, &WriteOptions::default(), |_, _| {})
        .expect("image builds")
        .bytes
}

/// Record word of the block options (format 8).
const BLOCK_WORD: usize = 14;

/// The valid image the `block_*` cases start from (format 8): layer 0 a GDN
/// without an MLP, layer 1 a GDN with the format-1 block; RMSNorm.
fn block_base_image() -> Vec<u8> {
    let gdn = serde_json::json!({"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0,
                                 "conv_size": 2});
    let mut no_mlp = gdn.clone();
    no_mlp["mlp"] = "none".into();
    f32_image(serde_json::json!([no_mlp, gdn]), serde_json::json!({}), 15)
}

/// Damage to the block base image.
fn block_cases() -> Vec<Case> {
    vec![
        case("block_options_in_a_v6_image", true, |b| {
            set_u32(b, VERSION, 6)
        }),
        case("block_unknown_options", true, |b| {
            let at = layer_word(b, 0, BLOCK_WORD);
            let w = u32_at(b, at);
            set_u32(b, at, w | 1 << 5)
        }),
        case("block_unknown_mlp_kind", true, |b| {
            let at = layer_word(b, 0, BLOCK_WORD);
            set_u32(b, at, 3 << 2)
        }),
        case("block_unknown_norm_kind", true, |b| {
            let at = layer_word(b, 0, BLOCK_WORD);
            set_u32(b, at, 1 << 2 | 2)
        }),
        // Layer 0's record asks for the SwiGLU the image does not store.
        case("block_mlp_cleared", true, |b| {
            let at = layer_word(b, 0, BLOCK_WORD);
            set_u32(b, at, 0)
        }),
        // Layer 1 has an MLP: its width cannot be 0.
        case("block_mlp_of_width_zero", true, |b| {
            let at = u32_at(b, CONFIG_OFF) as usize + 8;
            set_u32(b, at, 0)
        }),
        // A LayerNorm final norm whose bias the image does not store.
        case("block_final_layer_norm_without_bias", true, |b| {
            let at = model_flags(b);
            let f = u32_at(b, at);
            set_u32(b, at, f | 4)
        }),
        case("block_final_layer_norm_in_a_v7_image", true, |b| {
            let at = model_flags(b);
            let f = u32_at(b, at);
            set_u32(b, at, f | 4);
            set_u32(b, VERSION, 7)
        }),
    ]
}

/// The valid image the `mamba2_*` cases start from (format 8): layer 0 a
/// Mamba-2 in the format-1 block (2 heads of 4, state 2, one group), layer
/// 1 a GDN.
fn mamba2_base_image() -> Vec<u8> {
    f32_image(
        serde_json::json!([
            {"mixer": "mamba2", "num_heads": 2, "head_dim": 4, "state_size": 2, "conv_size": 2},
            {"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0, "conv_size": 2}
        ]),
        serde_json::json!({}),
        16,
    )
}

/// Damage to the Mamba-2 base image (record words: 1 H, 2 P, 3 N, 4 G,
/// 5 W, 6 flags).
fn mamba2_cases() -> Vec<Case> {
    vec![
        case("mamba2_in_a_v6_image", true, |b| set_u32(b, VERSION, 6)),
        case("mamba2_unknown_flags", true, |b| {
            let at = layer_word(b, 0, 6);
            let f = u32_at(b, at);
            set_u32(b, at, f | 1 << 5)
        }),
        case("mamba2_groups_not_dividing_heads", true, |b| {
            let at = layer_word(b, 0, 4);
            set_u32(b, at, 3)
        }),
        case("mamba2_int16_state", true, |b| set_layer0_state(b, 1)),
        case("overflow_mamba2_heads", true, |b| {
            let (heads, head_dim) = (layer_word(b, 0, 1), layer_word(b, 0, 2));
            set_u32(b, heads, 1 << 20);
            set_u32(b, head_dim, 2)
        }),
    ]
}

/// The valid image the `rwkv7_*` cases start from (format 8): two RWKV-7
/// layers as fla builds them (2 heads of 4, LayerNorm blocks with channel
/// mixing, layer 0's pre-norm and its value passed to layer 1).
fn rwkv7_base_image() -> Vec<u8> {
    let layer = |pre_norm: bool| {
        serde_json::json!({"mixer": "rwkv7", "num_heads": 2, "decay_low_rank_dim": 2,
                           "a_low_rank_dim": 2, "v_low_rank_dim": 2, "gate_low_rank_dim": 4,
                           "mlp": "channel_mix", "pre_norm": pre_norm})
    };
    f32_image(
        serde_json::json!([layer(true), layer(false)]),
        serde_json::json!({"norm": "layernorm"}),
        17,
    )
}

/// Damage to the RWKV-7 base image (record words: 1 H, 2 K, 3 V, 4-7 the
/// ranks, 8 flags, 9 the group norm's epsilon).
fn rwkv7_cases() -> Vec<Case> {
    vec![
        case("rwkv7_key_width_not_hidden", true, |b| {
            let at = layer_word(b, 0, 2);
            set_u32(b, at, 2)
        }),
        case("rwkv7_unknown_flags", true, |b| {
            let at = layer_word(b, 0, 8);
            let f = u32_at(b, at);
            set_u32(b, at, f | 4)
        }),
        // Layer 0 no longer the first: it needs a value-residual rank.
        case("rwkv7_first_layer_flag_cleared", true, |b| {
            let at = layer_word(b, 0, 8);
            let f = u32_at(b, at);
            set_u32(b, at, f & !1)
        }),
        case("rwkv7_group_norm_eps_nan", true, |b| {
            let at = layer_word(b, 1, 9);
            set_u32(b, at, f32::NAN.to_bits())
        }),
        // LayerNorm blocks and channel mixing are not on the integer token path.
        case("rwkv7_on_the_integer_token_path", true, |b| {
            let at = model_flags(b);
            let f = u32_at(b, at);
            set_u32(b, at, f | 2)
        }),
    ]
}

/// The valid image the `gla_*` cases start from (format 8): layer 0 fla's
/// GLA (2 heads, K 4, V 4, rank 8, the output gate), layer 1 HGRN2.
fn gla_base_image() -> Vec<u8> {
    f32_image(
        serde_json::json!([
            {"mixer": "gla", "num_heads": 2, "head_k_dim": 4, "head_v_dim": 4, "gate_low_rank_dim": 8},
            {"mixer": "gla", "variant": "hgrn2", "num_heads": 2, "head_k_dim": 4, "head_v_dim": 4,
             "o_norm_eps": 1e-5}
        ]),
        serde_json::json!({}),
        18,
    )
}

/// Damage to the GLA base image (record words: 1 H, 2 K, 3 V, 4 R, 5 the
/// variant, 6 flags, 7 the normalizer, 8 rope_theta, 9 the output norm's
/// epsilon).
fn gla_cases() -> Vec<Case> {
    vec![
        case("gla_in_a_v7_image", true, |b| set_u32(b, VERSION, 7)),
        case("gla_unknown_variant", true, |b| {
            let at = layer_word(b, 0, 5);
            set_u32(b, at, 3)
        }),
        case("gla_unknown_flags", true, |b| {
            let at = layer_word(b, 0, 6);
            let f = u32_at(b, at);
            set_u32(b, at, f | 2)
        }),
        case("gla_hgrn2_with_an_output_gate", true, |b| {
            let at = layer_word(b, 1, 6);
            set_u32(b, at, 1)
        }),
        case("gla_normalizer_zero", true, |b| {
            let at = layer_word(b, 0, 7);
            set_u32(b, at, 0)
        }),
        case("gla_norm_eps_nan", true, |b| {
            let at = layer_word(b, 1, 9);
            set_u32(b, at, f32::NAN.to_bits())
        }),
        case("gla_int16_state", true, |b| set_layer0_state(b, 1)),
        case("overflow_gla_heads", true, |b| {
            let (heads, head_k) = (layer_word(b, 0, 1), layer_word(b, 0, 2));
            set_u32(b, heads, 1 << 20);
            set_u32(b, head_k, 2)
        }),
    ]
}

/// The valid image the `cross_*` cases start from (format 8): layer 0 a
/// cross layer (2 heads of 4 over one kv head, 2 memories of 3 slots, the
/// output gate), layer 1 a GDN.
fn cross_base_image() -> Vec<u8> {
    f32_image(
        serde_json::json!([
            {"mixer": "cross", "num_heads": 2, "num_kv_heads": 1, "head_dim": 4,
             "memory_slots": 3, "memories": 2, "output_gate": true},
            {"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0, "conv_size": 2}
        ]),
        serde_json::json!({}),
        19,
    )
}

/// Damage to the cross base image (record words: 1 H, 2 Hkv, 3 d, 4 m,
/// 5 N, 6 flags).
fn cross_cases() -> Vec<Case> {
    vec![
        case("cross_in_a_v7_image", true, |b| set_u32(b, VERSION, 7)),
        case("cross_unknown_flags", true, |b| {
            let at = layer_word(b, 0, 6);
            let f = u32_at(b, at);
            set_u32(b, at, f | 2)
        }),
        case("cross_kv_heads_not_dividing_heads", true, |b| {
            let at = layer_word(b, 0, 2);
            set_u32(b, at, 3)
        }),
        case("cross_nine_memories", true, |b| {
            let at = layer_word(b, 0, 5);
            set_u32(b, at, 9)
        }),
        case("cross_no_memory", true, |b| {
            let at = layer_word(b, 0, 5);
            set_u32(b, at, 0)
        }),
        // The record asks for 3 memories, the image stores 2.
        case("cross_memories_not_the_tensor_s", true, |b| {
            let at = layer_word(b, 0, 5);
            set_u32(b, at, 3)
        }),
        // The record asks for 4 slots, the image stores 3.
        case("cross_slots_not_the_tensor_s", true, |b| {
            let at = layer_word(b, 0, 4);
            set_u32(b, at, 4)
        }),
        // Without the gate's flag, g_proj is where memory_k should be.
        case("cross_gate_flag_cleared", true, |b| {
            let at = layer_word(b, 0, 6);
            set_u32(b, at, 0)
        }),
        case("cross_int16_state", true, |b| set_layer0_state(b, 1)),
        case("overflow_cross_memory", true, |b| {
            let at = layer_word(b, 0, 4);
            set_u32(b, at, 1 << 19)
        }),
    ]
}

/// `Variant` and the Display message of an error, as the MANIFEST stores them.
fn describe(e: &Error) -> (String, String) {
    let debug = format!("{e:?}");
    let variant = debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string();
    (variant, e.to_string())
}

fn generate() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    for (base, cases) in [
        (base_image(), cases()),
        (bpe_base_image(), bpe_cases()),
        (tiled_base_image(), tiled_cases()),
        (bla_base_image(BlaPhiSource::Computed), bla_computed_cases()),
        (bla_base_image(BlaPhiSource::Table), bla_table_cases()),
        (int_base_image(), int_cases()),
        (int_gsa_base_image(), int_gsa_cases()),
        (int_bla_base_image(), int_bla_cases()),
        (int_mla_base_image(), int_mla_cases()),
        (signed_base_image(), signed_cases()),
        (block_base_image(), block_cases()),
        (mamba2_base_image(), mamba2_cases()),
        (rwkv7_base_image(), rwkv7_cases()),
        (gla_base_image(), gla_cases()),
        (cross_base_image(), cross_cases()),
    ] {
        assert!(
            Model::load(AlignedImage::new(&base).bytes()).is_ok(),
            "the base image must load"
        );
        out.extend(cases.into_iter().map(|c| {
            let mut b = base.clone();
            (c.damage)(&mut b);
            if c.reseal {
                seal(&mut b);
            }
            (c.name, b)
        }));
    }
    out
}

fn read_manifest() -> Vec<(String, String, String)> {
    let text =
        std::fs::read_to_string(corpus_dir().join("MANIFEST")).expect("tests/corrupt/MANIFEST");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.splitn(3, '\t');
            let mut next = || {
                parts
                    .next()
                    .expect("file<TAB>Variant<TAB>message")
                    .to_string()
            };
            (next(), next(), next())
        })
        .collect()
}

#[test]
fn corpus_is_refused_with_the_manifest_errors() {
    let cases = generate();
    if std::env::var_os("FERRITE_OVERWRITE").is_some() {
        let dir = corpus_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let mut manifest = String::from(
            "# file\tError variant\tmessage (Display) — generated by tests/tests/corrupt.rs, FERRITE_OVERWRITE=1 to regenerate\n",
        );
        for (name, bytes) in &cases {
            let file = format!("{name}.fer");
            std::fs::write(dir.join(&file), bytes).unwrap();
            let err = Model::load(AlignedImage::new(bytes).bytes())
                .map(|_| ())
                .expect_err(name);
            let (variant, message) = describe(&err);
            manifest += &format!("{file}\t{variant}\t{message}\n");
        }
        std::fs::write(dir.join("MANIFEST"), manifest).unwrap();
    }
    let manifest = read_manifest();
    let names: Vec<String> = cases.iter().map(|(n, _)| format!("{n}.fer")).collect();
    let listed: Vec<String> = manifest.iter().map(|(f, _, _)| f.clone()).collect();
    assert_eq!(
        listed, names,
        "MANIFEST is out of date: FERRITE_OVERWRITE=1 cargo test -p ferrite-tests --test corrupt"
    );
    let mut failures = Vec::new();
    for (file, variant, message) in &manifest {
        let bytes = std::fs::read(corpus_dir().join(file)).expect(file);
        let image = AlignedImage::new(&bytes);
        let loaded = Model::load(image.bytes()).map(|_| ());
        let got = match loaded {
            Ok(()) => ("loads".to_string(), String::new()),
            Err(e) => describe(&e),
        };
        let message = match on_32_bit(file) {
            Some(m) if usize::BITS == 32 => m.to_string(),
            _ => message.clone(),
        };
        if (&got.0, &got.1) != (variant, &message) {
            failures.push(format!("{file}: want {variant} {message:?}, got {got:?}"));
        }
        // The const fn that sizes static buffers must refuse or answer, never
        // panic; the size overflows it refuses exactly as `load` does.
        let sized = ferrite::session_len(image.bytes(), 0);
        if file.starts_with("overflow_") && sized.map(|_| ()) != loaded {
            failures.push(format!(
                "{file}: session_len gives {sized:?}, load {loaded:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The refusals whose message depends on the width of `usize`: counts that
/// overflow a 32-bit target's address space, and fit a 64-bit host's as a
/// length that cannot match (the MANIFEST records the 64-bit message).
fn on_32_bit(file: &str) -> Option<&'static str> {
    match file {
        "overflow_bpe_byte_count.fer" => Some("bad tokenizer section: token counts overflow"),
        _ => None,
    }
}

#[test]
fn corpus_covers_every_load_error_class() {
    let variants: Vec<String> = read_manifest().into_iter().map(|(_, v, _)| v).collect();
    for want in [
        "BadMagic",
        "UnsupportedVersion",
        "CrcMismatch",
        "Truncated",
        "BadHeader",
        "BadConfig",
        "BadTensor",
        "UnknownDType",
        "MissingTensor",
        "ShapeMismatch",
        "BadTokenizer",
        "SizeOverflow",
    ] {
        assert!(
            variants.iter().any(|v| v == want),
            "no corrupt image gives {want}"
        );
    }
    let manifest = std::fs::read_to_string(corpus_dir().join("MANIFEST")).unwrap();
    for reason in [
        "payload overlaps another",
        "payload not 32-byte aligned",
        "payload outside the data section",
        "group size does not divide",
        "versions 1..=8",
        "unknown header flag",
        "a security counter on an unsigned image",
        "signed image shorter than its signature section",
        "the integer token path needs image format version 6",
        "this state format needs image format version 6",
        "an integer state format needs the integer token path",
        "unknown state format",
        "this mixer has no step for that state format",
        "the integer token path needs this matrix tiled",
        "this mixer option needs image format version 4",
        "this mixer option needs image format version 5",
        "attn.phi is stored where the config has none",
        "missing tensor model.layers.0.attn.phi",
        "unknown bla flags",
        "num_heads must be a multiple of num_kv_heads",
        "bla num_kv_heads out of range",
        "the tiled layout needs image format version 3",
        "unknown tensor layout",
        "only int8 and int4 tensors may be tiled",
        "tiled group size must be a multiple of 16",
        "merged token is not its pair's bytes",
        "merges not sorted",
        "gdn num_heads * head_k_dim exceeds 2^20",
        "gsa num_kv_heads * num_slots exceeds 2^20",
        "swa num_heads * head_dim exceeds 2^20",
        "bla num_heads * head_k_dim exceeds 2^20",
        "vocab_size out of range",
        "intermediate_size out of range",
        "these block options need image format version 8",
        "this mixer needs image format version 8",
        "unknown block options",
        "a LayerNorm final norm or an intermediate_size of 0 needs image format version 8",
        "the integer token path runs RMSNorm blocks only",
        "unknown mamba2 flags",
        "unknown rwkv7 flags",
        "rwkv7 needs hidden_size = num_heads * head_dim",
        "mamba2 num_heads * head_dim or the in-projection exceeds 2^20",
        "cross memories must be 1..=8",
        "cross num_kv_heads must divide num_heads",
        "cross memory_slots * num_kv_heads * head_dim exceeds 2^20",
    ] {
        assert!(
            manifest.contains(reason),
            "no corrupt image says {reason:?}"
        );
    }
}
