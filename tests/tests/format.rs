//! Format versioning (docs/image-format.md): the committed v1 image keeps
//! loading and computing the same logits (the back-compat test every later
//! runtime must pass), and an image of a version this runtime does not read is
//! refused with a message naming the versions it does read (1..=8: v2 adds
//! the byte-level BPE tokenizer section, `tests/tests/tokenizer.rs`; v3 the
//! tiled weight layout of the integer path; v4 the mixer options of the GDN
//! family, GSA's short convolution and dilated SWA; v5 BLA layers whose phi
//! the runtime computes, with no stored table; v6 the integer token path and
//! per-layer state formats; v7 the signature section, `tests/tests/signed.rs`;
//! v8 the generalized block, `mamba2` and `rwkv7`).

use std::path::Path;

use ferrite::image::{FORMAT_VERSION, MIN_FORMAT_VERSION};
use ferrite::mixers::BlaPhiSource;
use ferrite::{Error, Model};
use ferrite_tools::run::{logits, AlignedImage};
use ferrite_tools::writer::seal;

fn v1_image() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("images/tiny_int8.fer");
    std::fs::read(path).expect("tests/images/tiny_int8.fer")
}

#[test]
fn the_committed_v1_image_loads_and_computes_the_same_logits() {
    let bytes = v1_image();
    let image = AlignedImage::new(&bytes);
    let model = Model::load(image.bytes()).expect("a v1 image must keep loading");
    assert_eq!(model.header().version, 1);
    assert_eq!(model.config().num_layers, 4);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let want: Vec<Vec<f32>> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tiny_int8.logits.json")).unwrap())
            .unwrap();
    let got = logits(model, &[72, 105, 33, 0, 255, 10, 32, 101], 0).unwrap();
    assert_eq!(got.len(), want.len());
    for (t, (g, w)) in got.iter().zip(&want).enumerate() {
        for (a, b) in g.iter().zip(w) {
            // Summation order may change with new kernels; the decoding may not.
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "token {t}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn other_versions_are_refused_naming_the_supported_ones() {
    const { assert!(MIN_FORMAT_VERSION <= FORMAT_VERSION) };
    for version in [
        0,
        MIN_FORMAT_VERSION.wrapping_sub(1),
        FORMAT_VERSION + 1,
        0xFFFF_FFFF,
    ] {
        if (MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            continue;
        }
        let mut bytes = v1_image();
        bytes[8..12].copy_from_slice(&version.to_le_bytes());
        seal(&mut bytes);
        let err = Model::load(AlignedImage::new(&bytes).bytes()).unwrap_err();
        assert_eq!(
            err,
            Error::UnsupportedVersion {
                found: version,
                min: MIN_FORMAT_VERSION,
                max: FORMAT_VERSION
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("version {version} "))
                && msg.contains(&format!("versions {MIN_FORMAT_VERSION}..={FORMAT_VERSION}")),
            "{msg}"
        );
        // The const fn that sizes static buffers refuses it the same way.
        assert_eq!(
            ferrite::session_len(AlignedImage::new(&bytes).bytes(), 0),
            Err(err)
        );
    }
}

#[test]
fn this_runtime_reads_versions_1_to_8_and_refuses_0_9_and_max() {
    assert_eq!((MIN_FORMAT_VERSION, FORMAT_VERSION), (1, 8));
    for version in [0, 9, u32::MAX] {
        let mut bytes = v1_image();
        bytes[8..12].copy_from_slice(&version.to_le_bytes());
        seal(&mut bytes);
        let msg = Model::load(AlignedImage::new(&bytes).bytes())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("versions 1..=8"), "{msg}");
    }
    // v2 only adds the BPE tokenizer section, v3 the tiled layout, v4 mixer
    // options, v5 the computed BLA phi, v6 the integer token path, v7 the
    // signature section (absent: flags 0) and v8 the generalized block: a byte-tokenizer, row-major image without them
    // labelled v2 .. v8 reads exactly as its v1 self (the tools still write
    // it as v1).
    let v1 = AlignedImage::new(&v1_image());
    let tokens = [72, 105, 33, 0, 255];
    let want = logits(Model::load(v1.bytes()).unwrap(), &tokens, 0).unwrap();
    for version in [2u32, 3, 4, 5, 6, 7, 8] {
        let mut bytes = v1_image();
        bytes[8..12].copy_from_slice(&version.to_le_bytes());
        seal(&mut bytes);
        let relabelled = AlignedImage::new(&bytes);
        assert_eq!(
            logits(Model::load(relabelled.bytes()).unwrap(), &tokens, 0).unwrap(),
            want
        );
    }
}

#[test]
fn tiled_images_are_version_3_and_an_older_label_is_refused() {
    use ferrite::image::{DType, Layout};
    use ferrite_tools::writer::WriteOptions;
    let dir = ferrite_tests::fixtures_dir().join("hybrid_all4_untied");
    // Its BLA layer keeps the stored phi table (else the image is v5).
    let opts = WriteOptions {
        dtype: DType::I8,
        bla_phi: BlaPhiSource::Table,
        ..Default::default()
    };
    let image = ferrite_tests::image_of(&dir, &opts);
    let model = image.model().unwrap();
    assert_eq!(model.header().version, 3);
    let tiled = (0..model.tensor_count())
        .filter(|&i| model.entry(i).unwrap().layout == Layout::Tiled)
        .count();
    assert!(tiled > 0, "no tensor was tiled");
    // The lowest version that can represent it: row-major stays v1.
    let rows = WriteOptions {
        layout: Layout::RowMajor,
        ..opts
    };
    let v1 = ferrite_tests::image_of(&dir, &rows);
    assert_eq!(v1.model().unwrap().header().version, 1);
    // A tiled entry in an image labelled v2 is refused.
    let mut bytes = image.bytes().to_vec();
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    seal(&mut bytes);
    let err = Model::load(AlignedImage::new(&bytes).bytes()).unwrap_err();
    assert!(
        err.to_string()
            .contains("tiled layout needs image format version 3"),
        "{err}"
    );
}

#[test]
fn new_mixer_options_are_version_4_and_an_older_label_is_refused() {
    use ferrite_tools::writer::WriteOptions;
    // Each of these fixtures has a layer with an option that format 4 added
    // (GDN family, GSA short convolution, dilated SWA, the mla kind); the
    // others have none.
    let new = [
        "gdn_delta_net",
        "gdn_delta_net_noconv_elu",
        "gdn_linear_attention",
        "gdn_retention",
        "gsa_short_conv",
        "swa_dilated",
        "mla_latent_window",
    ];
    // BLA layers keep their stored phi table here (the next test is about
    // the computed one, format 5).
    let table = WriteOptions {
        bla_phi: BlaPhiSource::Table,
        ..Default::default()
    };
    for dir in ferrite_tests::fixture_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if FORMAT_8_FIXTURES.contains(&name.as_str()) {
            continue; // the generalized block: the test below
        }
        let image = ferrite_tests::image_of(&dir, &table);
        let version = image.model().unwrap().header().version;
        if !new.contains(&name.as_str()) {
            assert_eq!(version, 1, "{name}: no new option, still written as v1");
            continue;
        }
        assert_eq!(version, 4, "{name}");
        let mut bytes = image.bytes().to_vec();
        bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
        seal(&mut bytes);
        let err = Model::load(AlignedImage::new(&bytes).bytes()).unwrap_err();
        assert!(
            err.to_string().contains("needs image format version 4"),
            "{name}: {err}"
        );
    }
}

/// The fixtures whose images need format 8: Mamba-2, RWKV-7, the
/// generalized block's options, the `gla` family and the `cross` kind
/// (kinds added within version 8: docs/image-format.md, "Version plan").
const FORMAT_8_FIXTURES: [&str; 10] = [
    "mamba2_groups",
    "mamba2_options",
    "rwkv7_lm",
    "rwkv7_hybrid",
    "gla_gla",
    "gla_hgrn2",
    "gla_retention",
    "cross_memories",
    "hybrid_gdn_cross",
    "cross_encoder",
];

/// Format 8 (the generalized block, `mamba2`, `rwkv7`): exactly the images
/// that use it are written as version 8, and labelled 7 or 6 they are
/// refused naming what needs 8 (a LayerNorm final norm or a width of 0,
/// block options, the mixer), before anything else is read.
#[test]
fn the_generalized_block_is_version_8_and_an_older_label_is_refused() {
    use ferrite::image::BLOCK_FORMAT_VERSION;
    use ferrite_tools::writer::WriteOptions;
    assert_eq!(BLOCK_FORMAT_VERSION, 8);
    for dir in ferrite_tests::fixture_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let image = ferrite_tests::image_of(&dir, &WriteOptions::default());
        let version = image.model().unwrap().header().version;
        if !FORMAT_8_FIXTURES.contains(&name.as_str()) {
            assert!(version < 8, "{name}: v{version}");
            continue;
        }
        assert_eq!(version, 8, "{name}");
        for older in [7u32, 6] {
            let mut bytes = image.bytes().to_vec();
            bytes[8..12].copy_from_slice(&older.to_le_bytes());
            seal(&mut bytes);
            let err = Model::load(AlignedImage::new(&bytes).bytes()).unwrap_err();
            assert!(
                err.to_string().contains("needs image format version 8"),
                "{name} as v{older}: {err}"
            );
        }
    }
}

#[test]
fn a_computed_bla_phi_is_version_5_and_an_older_label_is_refused() {
    use ferrite::config::LayerConfig;
    use ferrite::image::{Role, COMPUTED_PHI_FORMAT_VERSION};
    use ferrite_tools::model_dir::ModelDir;
    use ferrite_tools::writer::WriteOptions;
    assert_eq!(COMPUTED_PHI_FORMAT_VERSION, 5);
    let mut bla_fixtures = 0;
    for dir in ferrite_tests::fixture_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let config = ModelDir::open(&dir).unwrap().config;
        let bla = config
            .layers
            .iter()
            .any(|l| matches!(l, LayerConfig::Bla(_)));
        // The default: computed, so version 5 exactly where there is a BLA
        // layer, and no phi tensor; with the table, the version it had.
        let computed = ferrite_tests::image_of(&dir, &WriteOptions::default());
        let table = ferrite_tests::image_of(
            &dir,
            &WriteOptions {
                bla_phi: BlaPhiSource::Table,
                ..Default::default()
            },
        );
        let (c, t) = (computed.model().unwrap(), table.model().unwrap());
        let phis = |m: &ferrite::Model| {
            (0..m.tensor_count())
                .filter(|&i| m.entry(i).unwrap().role == Role::BlaPhi)
                .count()
        };
        assert_eq!(phis(&c), 0, "{name}");
        if !bla {
            assert_eq!(computed.bytes(), table.bytes(), "{name}");
            continue;
        }
        bla_fixtures += 1;
        assert_eq!(c.header().version, 5, "{name}");
        assert!(t.header().version < 5 && phis(&t) > 0, "{name}");
        assert!(computed.bytes().len() < table.bytes().len(), "{name}");
        let mut bytes = computed.bytes().to_vec();
        bytes[8..12].copy_from_slice(&4u32.to_le_bytes());
        seal(&mut bytes);
        let err = Model::load(AlignedImage::new(&bytes).bytes()).unwrap_err();
        assert!(
            err.to_string().contains("needs image format version 5"),
            "{name}: {err}"
        );
    }
    assert!(bla_fixtures >= 7, "{bla_fixtures} BLA fixtures");
}
