//! A runtime built without a mixer family's feature refuses an image with
//! one of its layers at load, with a message that names the feature (run by
//! `cargo xtask test` as `--no-default-features --features gdn`).

use ferrite::{Aligned, Error, LayerConfig, Model};

const IMAGE_LEN: usize = include_bytes!("../../tests/images/tiny_int8.fer").len();
static IMAGE: Aligned<[u8; IMAGE_LEN]> =
    Aligned(*include_bytes!("../../tests/images/tiny_int8.fer"));

/// The families this build has, as `cfg!` sees them.
const BUILT: [(&str, bool); 5] = [
    ("gdn", cfg!(feature = "gdn")),
    ("gsa", cfg!(feature = "gsa")),
    ("swa", cfg!(feature = "swa")),
    ("bla", cfg!(feature = "bla")),
    ("mla", cfg!(feature = "mla")),
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
