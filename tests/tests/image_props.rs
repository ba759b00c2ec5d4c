//! Any single byte flip or truncation of a valid image is refused with an
//! `Error` or (re-sealed flips only) loads and decodes without panicking.
//! Without re-sealing, every flip must be caught by the CRC (or the header
//! checks in front of it); re-sealed flips reach the config, the tensor table
//! and the session code. Well-formed layer records of extreme sizes (products
//! past a u32, a u64 or the address space) are refused without panicking, by
//! `ferrite::session_len` as by `Model::load`.

use std::sync::OnceLock;

use ferrite::config::{LayerConfig, LAYER_RECORD_WORDS, MODEL_RECORD_WORDS};
use ferrite::image::{DType, CRC_FIELD, FORMAT_VERSION, HEADER_LEN};

/// Byte offset of the header's `version` word (docs/image-format.md).
const VERSION_FIELD: usize = 8;
use ferrite::mixers::{
    BlaConfig, BlaDecay, BlaKernel, BlaPhiSource, CrossConfig, FeatureMap, GdnConfig, GdnDecay,
    GsaConfig, QkActivation, QkNorm, SwaConfig,
};
use ferrite::{Error, Model, Session};
use ferrite_tests::random_model;
use ferrite_tools::run::AlignedImage;
use ferrite_tools::writer::{build_image, seal, WriteOptions};
use proptest::prelude::*;

/// How many images [`images`] makes.
const IMAGE_COUNT: usize = 5;

/// Small valid images, one per dtype, then f32 again with BLA's phi stored
/// as a table (format 1; the others compute it, format 5): one of each
/// mixer family, hidden 8.
fn images() -> &'static [Vec<u8>] {
    static IMAGES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let json = serde_json::json!({
            "vocab_size": 256, "hidden_size": 8, "intermediate_size": 16,
            "tie_word_embeddings": false, "tokenizer": "bytes",
            "layers": [
                {"mixer": "gdn", "num_heads": 1, "head_dim": 8, "expand_v": 1.0, "conv_size": 2},
                {"mixer": "gsa", "num_heads": 2, "num_kv_heads": 1, "num_slots": 2},
                {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1, "head_dim": 4, "window": 3, "sinks": 1},
                {"mixer": "bla", "num_heads": 1, "head_dim": 8, "period": 4, "modes": 1}
            ]
        });
        let config = ferrite_tools::config_json::parse(&json).expect("valid config");
        let dir = random_model(config, 11);
        let computed = BlaPhiSource::Computed;
        let images: Vec<Vec<u8>> = [
            (DType::F32, computed),
            (DType::F16, computed),
            (DType::I8, computed),
            (DType::I4, computed),
            (DType::F32, BlaPhiSource::Table),
        ]
        .into_iter()
        .map(|(dtype, bla_phi)| {
            let opts = WriteOptions {
                dtype,
                group_size: Some(8),
                rules: Vec::new(),
                bla_phi,
                ..Default::default()
            };
            build_image(&dir, &opts, |_, _| {}).unwrap().bytes
        })
        .collect();
        assert_eq!(images.len(), IMAGE_COUNT);
        images
    })
}

/// Loads `bytes`; when it loads, runs a few tokens (and an out-of-range one).
fn load_and_run(bytes: &[u8]) -> Result<(), Error> {
    let image = AlignedImage::new(bytes);
    let model = Model::load(image.bytes())?;
    let words = ferrite::session_len(image.bytes(), 0)?;
    // Flipped config words may ask for absurd buffers: refuse those here.
    if words > 1 << 22 {
        return Ok(());
    }
    let mut buf = vec![0.0f32; words];
    let mut session = Session::new(model, &mut buf)?;
    for t in [1, 200, 3] {
        session.feed(t)?;
    }
    assert!(session.feed(model.config().vocab_size).is_err());
    Ok(())
}

/// Sizes at and around the limits: products of two of them overflow a u32,
/// of three a u64 (with `u32::MAX`).
fn size() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![
        1,
        2,
        3,
        4,
        4097,
        1 << 10,
        1 << 20,
        (1 << 20) + 1,
        1 << 31,
        u32::MAX,
    ])
}

/// A layer record with well-formed codes, flags and floats but extreme sizes
/// (kv heads mostly equal to the heads, so that the products are reached).
fn extreme_layer() -> impl Strategy<Value = LayerConfig> {
    let s = size;
    let kv = |h: u32, other: Option<u32>| other.unwrap_or(h);
    prop_oneof![
        (
            s(),
            prop::option::of(s()),
            s(),
            s(),
            1u32..=64,
            any::<bool>()
        )
            .prop_map(move |(h, hv, k, v, w, g)| {
                LayerConfig::Gdn(GdnConfig {
                    num_heads: h,
                    num_v_heads: kv(h, hv),
                    head_k_dim: k,
                    head_v_dim: v,
                    conv_size: w,
                    use_gate: g,
                    allow_neg_eigval: false,
                    decay: GdnDecay::Gated,
                    delta_rule: true,
                    use_beta: true,
                    qk_activation: QkActivation::Silu,
                    qk_norm: QkNorm::L2,
                    state: ferrite::StateFormat::F32,
                })
            }),
        (s(), prop::option::of(s()), s(), s(), s()).prop_map(move |(h, hkv, k, v, m)| {
            LayerConfig::Gsa(GsaConfig {
                num_heads: h,
                num_kv_heads: kv(h, hkv),
                head_k_dim: k,
                head_v_dim: v,
                num_slots: m,
                feature_map: FeatureMap::Swish,
                gate_logit_normalizer: 8.0,
                conv_size: 0,
                state: ferrite::StateFormat::F32,
            })
        }),
        (
            s(),
            prop::option::of(s()),
            s(),
            s(),
            s(),
            any::<bool>(),
            0u32..=64
        )
            .prop_map(move |(h, hkv, d, window, sinks, rope, conv)| {
                LayerConfig::Swa(SwaConfig {
                    num_heads: h,
                    num_kv_heads: kv(h, hkv),
                    head_dim: d,
                    window,
                    sinks,
                    rope_theta: 10000.0,
                    use_rope: rope,
                    cache_positions: false,
                    sink_logits: true,
                    conv_size: conv,
                    dilation: 1,
                    state: ferrite::StateFormat::F32,
                })
            }),
        (
            s(),
            prop::option::of(s()),
            s(),
            s(),
            s(),
            s(),
            0u32..=64,
            any::<bool>()
        )
            .prop_map(move |(h, hkv, k, v, period, slots, conv, computed)| {
                LayerConfig::Bla(BlaConfig {
                    num_heads: h,
                    num_kv_heads: kv(h, hkv),
                    head_k_dim: k,
                    head_v_dim: v,
                    period,
                    modes: period / 2,
                    slots,
                    kernel: BlaKernel::Dirichlet,
                    decay: BlaDecay::Gated,
                    gamma: 1.0,
                    conv_size: conv,
                    phi_source: if computed {
                        BlaPhiSource::Computed
                    } else {
                        BlaPhiSource::Table
                    },
                    state: ferrite::StateFormat::F32,
                })
            }),
        // A cross layer's memory `[N, m, Hkv*d]` (issue 32).
        (
            s(),
            prop::option::of(s()),
            s(),
            s(),
            1u32..=8,
            any::<bool>()
        )
            .prop_map(move |(h, hkv, d, m, n, g)| {
                LayerConfig::Cross(CrossConfig {
                    num_heads: h,
                    num_kv_heads: kv(h, hkv),
                    head_dim: d,
                    memory_slots: m,
                    memories: n,
                    output_gate: g,
                    encoder_layers: 0,
                    state: ferrite::StateFormat::F32,
                })
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Layer records whose sizes multiply past a u32, a u64 or the address
    /// space are refused, never a panic (`cargo xtask test` runs this with
    /// overflow checks on), and `session_len` refuses them as `load` does.
    #[test]
    fn extreme_layer_sizes_are_refused_without_panicking(
        which in 0..IMAGE_COUNT,
        layer in 0usize..4,
        record in extreme_layer(),
        pinned in prop::sample::select(vec![0usize, 3, 1 << (usize::BITS - 24), usize::MAX]),
    ) {
        let mut b = images()[which].clone();
        let config = u32::from_le_bytes(b[24..28].try_into().unwrap()) as usize;
        let at = config + 4 * (MODEL_RECORD_WORDS + layer * LAYER_RECORD_WORDS);
        for (i, w) in record.encode().iter().enumerate() {
            b[at + 4 * i..at + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        seal(&mut b);
        let image = AlignedImage::new(&b);
        let loaded = load_and_run(&b);
        let sized = ferrite::session_len(image.bytes(), pinned);
        if let (Err(e), 0) = (sized, pinned) {
            prop_assert_eq!(loaded, Err(e));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_flipped_byte_is_caught_by_the_crc(which in 0..IMAGE_COUNT, pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let original = &images()[which];
        let mut b = original.clone();
        let i = pos.index(b.len());
        b[i] ^= 1 << bit;
        if (VERSION_FIELD..VERSION_FIELD + 4).contains(&i) {
            // The version is outside the CRC by design (docs/image-format.md:
            // it is checked first, so a newer image is named as such), and an
            // image relabelled with a later version this runtime reads loads
            // as its older self (tests/format.rs compares the logits): only
            // those flips may load.
            let version = |b: &[u8]| u32::from_le_bytes(b[VERSION_FIELD..VERSION_FIELD + 4].try_into().unwrap());
            let (from, to) = (version(original), version(&b));
            if load_and_run(&b).is_ok() {
                prop_assert!(from < to && to <= FORMAT_VERSION, "version {from} flipped to {to} loaded");
            }
            return Ok(());
        }
        let err = load_and_run(&b).expect_err("a flipped image loaded");
        // Header words are checked by the header parser first (a flipped
        // offset may be out of bounds); the CRC field and every byte after
        // the header are caught by the CRC.
        if i >= HEADER_LEN || (CRC_FIELD..CRC_FIELD + 4).contains(&i) {
            prop_assert!(matches!(err, Error::CrcMismatch { .. }), "byte {i}: {err}");
        }
    }

    #[test]
    fn a_truncated_image_is_refused(which in 0..IMAGE_COUNT, keep in any::<prop::sample::Index>()) {
        let b = images()[which].clone();
        let n = keep.index(b.len());
        let err = load_and_run(&b[..n]).expect_err("a truncated image loaded");
        prop_assert!(
            matches!(err, Error::Truncated { .. } | Error::BadMagic),
            "{n} bytes: {err}"
        );
    }

    #[test]
    fn a_resealed_flip_is_refused_or_runs(
        which in 0..IMAGE_COUNT,
        pos in any::<prop::sample::Index>(),
        value in any::<u8>(),
        in_metadata in any::<bool>(),
    ) {
        let mut b = images()[which].clone();
        // Half the cases hit the header, config and tensor table (where a
        // flip matters most), half anywhere.
        let data_off = u32::from_le_bytes(b[48..52].try_into().unwrap()) as usize;
        let i = if in_metadata { pos.index(data_off) } else { pos.index(b.len()) };
        b[i] = value;
        seal(&mut b);
        // Either outcome is fine; panicking is not (proptest reports panics).
        let _ = load_and_run(&b);
    }

    #[test]
    fn resealed_word_writes_in_the_table_are_refused_or_run(
        which in 0..IMAGE_COUNT,
        pos in any::<prop::sample::Index>(),
        value in prop_oneof![any::<u32>(), Just(0u32), Just(u32::MAX), 0u32..64, Just(0x8000_0000)],
    ) {
        let mut b = images()[which].clone();
        let data_off = u32::from_le_bytes(b[48..52].try_into().unwrap()) as usize;
        let i = pos.index(data_off / 4) * 4;
        b[i..i + 4].copy_from_slice(&value.to_le_bytes());
        seal(&mut b);
        let _ = load_and_run(&b);
    }
}

#[test]
fn every_base_image_loads_and_runs() {
    for b in images() {
        load_and_run(b).unwrap();
    }
}

/// BLA's phi flag (bit 1 of the record's flags, format 5) set or cleared,
/// under every version label, on the image that computes phi and on the one
/// that stores the table: exactly the consistent combinations load and run
/// (flag as the image was written, a version that reads it); every other
/// one is refused with an error, none panics.
#[test]
fn bla_phi_flag_and_version_relabels_load_only_when_consistent() {
    // Layer 3 is the BLA layer; its flags are record word 10.
    let flags_at = |b: &[u8]| {
        let config = u32::from_le_bytes(b[24..28].try_into().unwrap()) as usize;
        config + 4 * (MODEL_RECORD_WORDS + 3 * LAYER_RECORD_WORDS + 10)
    };
    for (which, written_computed) in [(0, true), (4, false)] {
        for computed in [false, true] {
            for version in 0u32..=7 {
                let mut b = images()[which].clone();
                let at = flags_at(&b);
                let flags = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
                let flags = if computed { flags | 2 } else { flags & !2 };
                b[at..at + 4].copy_from_slice(&flags.to_le_bytes());
                b[8..12].copy_from_slice(&version.to_le_bytes());
                seal(&mut b);
                let consistent = computed == written_computed
                    && version <= ferrite::image::FORMAT_VERSION
                    && version >= if computed { 5 } else { 1 };
                let got = load_and_run(&b);
                assert_eq!(
                    got.is_ok(),
                    consistent,
                    "image {which}, flag {computed}, version {version}: {got:?}"
                );
            }
        }
    }
}
