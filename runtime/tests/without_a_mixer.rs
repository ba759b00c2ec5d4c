//! A runtime built without a mixer family's feature refuses an image with
//! one of its layers at load, with a message that names the feature (run by
//! `cargo xtask test` as `--no-default-features --features gdn`).

use ferrite::{Aligned, Error, LayerConfig, Model};

const IMAGE_LEN: usize = include_bytes!("../../tests/images/tiny_int8.fer").len();
static IMAGE: Aligned<[u8; IMAGE_LEN]> =
    Aligned(*include_bytes!("../../tests/images/tiny_int8.fer"));

/// The families this build has, as `cfg!` sees them.
const BUILT: [(&str, bool); 9] = [
    ("gdn", cfg!(feature = "gdn")),
    ("gsa", cfg!(feature = "gsa")),
    ("swa", cfg!(feature = "swa")),
    ("bla", cfg!(feature = "bla")),
    ("mla", cfg!(feature = "mla")),
    ("mamba2", cfg!(feature = "mamba2")),
    ("rwkv7", cfg!(feature = "rwkv7")),
    ("gla", cfg!(feature = "gla")),
    ("cross", cfg!(feature = "cross")),
];

#[test]
fn not_built_names_exactly_the_missing_families() {
    for (code, (name, built)) in (1u32..).zip(BUILT) {
        assert_eq!(LayerConfig::KIND_NAMES[code as usize - 1], name);
        match LayerConfig::not_built(code) {
            None => assert!(built, "{name} is not built but not_built says it is"),
            Some(reason) => {
                assert!(!built, "{name} is built but not_built refuses it");
                assert!(
                    reason.starts_with(&format!("{name} layers need")),
                    "{reason}"
                );
                assert!(reason.contains(&format!("`{name}` feature")), "{reason}");
            }
        }
    }
    assert_eq!(LayerConfig::not_built(0), None);
    assert_eq!(LayerConfig::not_built(99), None);
}

#[test]
fn the_first_layer_of_a_family_not_built_is_refused() {
    // tiny_int8: layer 0 gdn, 1 gsa, 2 swa, 3 bla.
    let missing = BUILT[..4].iter().position(|&(_, built)| !built);
    match (Model::load(&IMAGE.0), missing) {
        (Ok(model), None) => assert_eq!(model.config().num_layers, 4),
        (Err(Error::BadConfig { layer, reason }), Some(i)) => {
            assert_eq!(layer, Some(i as u16));
            assert_eq!(Some(reason), LayerConfig::not_built(i as u32 + 1));
        }
        (other, _) => panic!("load gave {other:?} with missing family {missing:?}"),
    }
}

/// `fuzz/seeds/next_f32.fer` (format 8): an RWKV-7 layer in a LayerNorm
/// block with channel mixing and the pre-norm, a Mamba-2 layer without an
/// MLP, an RWKV-7 layer with a SwiGLU; a LayerNorm final norm.
const NEXT_LEN: usize = include_bytes!("../../fuzz/seeds/next_f32.fer").len();
static NEXT: Aligned<[u8; NEXT_LEN]> = Aligned(*include_bytes!("../../fuzz/seeds/next_f32.fer"));

/// Without `block-options` the image's LayerNorm final norm is refused
/// first, naming the feature; with it, a missing `rwkv7` refuses layer 0;
/// with both families and the feature it loads.
#[test]
fn format_8_blocks_need_the_block_options_feature() {
    let got = Model::load(&NEXT.0);
    if !cfg!(feature = "block-options") {
        match got {
            Err(Error::BadConfig {
                layer: None,
                reason,
            }) => {
                assert!(reason.contains("`block-options` feature"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    } else if !cfg!(feature = "rwkv7") {
        assert_eq!(
            got.map(|_| ()),
            Err(Error::BadConfig {
                layer: Some(0),
                reason: LayerConfig::not_built(7).unwrap()
            })
        );
    } else if !cfg!(feature = "mamba2") {
        assert_eq!(
            got.map(|_| ()),
            Err(Error::BadConfig {
                layer: Some(1),
                reason: LayerConfig::not_built(6).unwrap()
            })
        );
    } else {
        assert_eq!(got.unwrap().config().num_layers, 3);
    }
}
