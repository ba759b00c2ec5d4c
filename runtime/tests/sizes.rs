//! Sizes asked for by an image or a caller are checked: an absurd one is a
//! typed error, never an overflow (`cargo xtask test` runs this with
//! overflow checks on, in the `checked` profile).

use ferrite::{Aligned, Error, Model, Session};

const IMAGE_LEN: usize = include_bytes!("../../tests/images/tiny_int8.fer").len();
static IMAGE: Aligned<[u8; IMAGE_LEN]> =
    Aligned(*include_bytes!("../../tests/images/tiny_int8.fer"));

fn model() -> Model<'static> {
    Model::load(&IMAGE.0).unwrap()
}

#[test]
fn the_accessors_agree_with_the_const_fn() {
    let model = model();
    let words = ferrite::session_len(&IMAGE.0, 3).unwrap();
    assert_eq!(model.session_len(3), Ok(words));
    assert_eq!(model.session_bytes(3), Ok(4 * words));
    let state = model.state_len(3).unwrap();
    assert!(state > 0 && state < words);
    assert_eq!(model.state_bytes(3), Ok(4 * state));
    let mut buf = vec![0.0f32; words];
    let session = Session::with_pinned_capacity(model, &mut buf, 3).unwrap();
    assert_eq!(session.state().len(), 4 * state);
}

#[test]
fn an_absurd_pinned_capacity_is_a_size_overflow() {
    let model = model();
    // The image's SWA layer keeps (sinks + pinned_max + window) rows of keys
    // and values: these overflow a u64 or the address space.
    for pinned in [
        usize::MAX,
        usize::MAX / 2,
        1 << (usize::BITS - 4),
        isize::MAX as usize / 4,
    ] {
        let err = ferrite::session_len(&IMAGE.0, pinned).unwrap_err();
        assert!(
            matches!(err, Error::SizeOverflow { layer: Some(2), .. }),
            "{pinned}: {err}"
        );
        assert_eq!(model.session_len(pinned), Err(err));
        assert_eq!(model.session_bytes(pinned), Err(err));
        assert_eq!(model.state_len(pinned), Err(err));
        assert_eq!(model.state_bytes(pinned), Err(err));
        let mut buf = [0.0f32; 4];
        assert_eq!(
            Session::with_pinned_capacity(model, &mut buf, pinned).err(),
            Some(err)
        );
    }
}

#[test]
fn tensor_indices_outside_the_table_are_errors() {
    let model = model();
    let count = model.tensor_count();
    for index in [count, count + 1, u32::MAX / 48 + 1, u32::MAX] {
        let want = Error::BadTensor {
            index,
            reason: "index outside the tensor table",
        };
        assert_eq!(model.entry(index), Err(want));
        assert_eq!(model.tensor(index).err(), Some(want));
    }
}
