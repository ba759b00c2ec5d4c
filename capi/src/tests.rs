//! Unit tests of the boundary (the C test, tests/c/test_capi.c, drives the
//! whole API from C).

use super::*;

#[test]
fn every_code_has_one_message_and_codes_are_distinct() {
    for (i, &(code, msg)) in codes::MESSAGES.iter().enumerate() {
        assert!(!msg.to_bytes().is_empty());
        assert_eq!(codes::message(code), msg);
        assert!(codes::MESSAGES[..i]
            .iter()
            .all(|&(c, m)| c != code && m != msg));
    }
    assert_eq!(codes::message(12345).to_bytes(), b"unknown error code");
}

/// The runtime's error variants map to -1, -2, ... in declaration order.
#[test]
fn runtime_errors_keep_their_declared_order() {
    use ferrite::Error;
    let in_order = [
        Error::BadMagic,
        Error::UnsupportedVersion {
            found: 0,
            min: 1,
            max: 1,
        },
        Error::Truncated { needed: 1, len: 0 },
        Error::CrcMismatch {
            stored: 0,
            computed: 1,
        },
        Error::ImageMisaligned,
        Error::BadHeader(""),
        Error::BadConfig {
            layer: None,
            reason: "",
        },
        Error::BadTensor {
            index: 0,
            reason: "",
        },
        Error::UnknownDType { index: 0, code: 0 },
        Error::MissingTensor {
            layer: None,
            role: ferrite::image::Role::Embeddings,
        },
        Error::ShapeMismatch {
            layer: None,
            role: ferrite::image::Role::Embeddings,
        },
        Error::BufferTooSmall { needed: 1, got: 0 },
        Error::TokenOutOfRange { token: 1, vocab: 1 },
        Error::TooManyPinned { asked: 1, max: 0 },
        Error::BadSampler(""),
        Error::BadPrompt(""),
        Error::BadTokenizer(""),
        Error::Internal(""),
        Error::SizeOverflow {
            layer: None,
            what: "",
        },
        Error::PositionOverflow,
        Error::BadSnapshot(ferrite::SnapshotError::BadMagic),
        Error::NoSuchMemory {
            layer: None,
            index: 1,
            count: 0,
        },
        Error::BadMemory(""),
    ];
    for (i, e) in in_order.into_iter().enumerate() {
        assert_eq!(codes::error_code(e), -(i as i32) - 1, "{e:?}");
    }
}

#[test]
fn handles_hold_their_values_with_room_to_spare() {
    for (name, used, size) in handles::USED {
        assert!(used <= size, "{name}: {used} > {size}");
        std::println!("{name}: {used} of {size} bytes");
    }
}

#[test]
fn null_and_misaligned_pointers_are_refused_not_dereferenced() {
    let mut out = 0usize;
    let words = [0u64; 4];
    let odd = (words.as_ptr() as *mut u8).wrapping_add(1) as *mut usize;
    let null = core::ptr::null::<u8>();
    // SAFETY: null pointers, a misaligned one that is never written, and
    // valid ones: what is tested.
    unsafe {
        // No bytes at all is an image too short for its header.
        assert_eq!(ferrite_session_len(null, 0, &mut out), FERRITE_E_TRUNCATED);
        assert_eq!(
            ferrite_session_len(null, 10, &mut out),
            FERRITE_E_NULL_POINTER
        );
        let four = [0u8; 4];
        let no_out = core::ptr::null_mut();
        assert_eq!(
            ferrite_session_len(four.as_ptr(), 4, no_out),
            FERRITE_E_NULL_POINTER
        );
        assert_eq!(
            ferrite_session_len(four.as_ptr(), 4, odd),
            FERRITE_E_MISALIGNED
        );
        let mut model = core::mem::MaybeUninit::<ferrite_model>::zeroed();
        let mut info = ferrite_info::default();
        assert_eq!(
            ferrite_model_info(model.as_ptr(), &mut info),
            FERRITE_E_BAD_HANDLE
        );
        assert_eq!(
            ferrite_model_load(null, 100, model.as_mut_ptr()),
            FERRITE_E_NULL_POINTER
        );
    }
    assert_eq!(words, [0; 4]);
}

#[test]
fn a_length_beyond_the_address_space_is_refused() {
    let mut out = 0usize;
    let one = [0u8; 1];
    // SAFETY: the length check refuses before any slice is made.
    let code = unsafe {
        ferrite_tokenize(
            core::ptr::null(),
            one.as_ptr(),
            1,
            core::ptr::dangling_mut::<u32>(),
            usize::MAX,
            &mut out,
        )
    };
    // The model handle is checked first: null.
    assert_eq!(code, FERRITE_E_NULL_POINTER);
    assert_eq!(
        fits_isize::<u32>(usize::MAX / 2),
        Err(FERRITE_E_BAD_ARGUMENT)
    );
    assert_eq!(fits_isize::<u8>(isize::MAX as usize), Ok(()));
}
