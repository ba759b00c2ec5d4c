//! The RAM a model needs is a compile-time constant of its embedded image
//! (what `examples/static_buffer.rs` and the boards rely on), and it is
//! exactly what a loaded model and a session ask for.

use ferrite::{Aligned, Error, Model, Session};

const IMAGE_LEN: usize = include_bytes!("../../tests/images/tiny_int8.fer").len();
static IMAGE: Aligned<[u8; IMAGE_LEN]> =
    Aligned(*include_bytes!("../../tests/images/tiny_int8.fer"));
const WORDS: usize = match ferrite::session_len(&IMAGE.0, 0) {
    Ok(n) => n,
    Err(_) => panic!("bad image"),
};
static BUF: std::sync::Mutex<[f32; WORDS]> = std::sync::Mutex::new([0.0; WORDS]);

#[test]
fn compile_time_size_is_the_runtime_size() {
    let model = Model::load(&IMAGE.0).unwrap();
    assert_eq!(model.session_len(0), Ok(WORDS));
    let mut buf = BUF.lock().unwrap();
    let mut s = Session::new(model, &mut buf[..]).unwrap();
    for t in [72, 105, 33] {
        assert!(s.feed(t).unwrap().iter().all(|v| v.is_finite()));
    }
}

#[test]
fn a_buffer_one_word_short_is_refused_with_the_bytes_needed() {
    let model = Model::load(&IMAGE.0).unwrap();
    let mut buf = vec![0.0f32; WORDS - 1];
    match Session::new(model, &mut buf) {
        Err(e @ Error::BufferTooSmall { needed, got }) => {
            assert_eq!((needed, got), (4 * WORDS, 4 * (WORDS - 1)));
            let msg = e.to_string();
            assert!(msg.contains(&format!("needs {} bytes", 4 * WORDS)), "{msg}");
        }
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("a short buffer was accepted"),
    }
}

#[test]
fn the_image_is_used_in_place() {
    let model = Model::load(&IMAGE.0).unwrap();
    let range = IMAGE.0.as_ptr_range();
    for i in 0..model.tensor_count() {
        let t = model.tensor(i).unwrap();
        let ptr = match *t.data() {
            ferrite::tensor::TensorData::F32(w) => w.as_ptr().cast::<u8>(),
            ferrite::tensor::TensorData::F16(w) => w.as_ptr().cast::<u8>(),
            ferrite::tensor::TensorData::I8 { q, .. } => q.as_ptr().cast::<u8>(),
            ferrite::tensor::TensorData::I4 { q, .. } => q.as_ptr(),
            ferrite::tensor::TensorData::TiledI8(w) => w.q.as_ptr().cast::<u8>(),
            ferrite::tensor::TensorData::TiledI4(w) => w.q.as_ptr(),
        };
        assert!(
            range.contains(&ptr),
            "tensor {i} is not a view of the image"
        );
        assert_eq!((ptr as usize) % 16, 0, "tensor {i} is not 16-byte aligned");
    }
}

#[test]
fn a_misaligned_image_is_refused() {
    let mut copy = vec![0u128; IMAGE_LEN / 16 + 2];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut copy);
    bytes[1..1 + IMAGE_LEN].copy_from_slice(&IMAGE.0);
    assert_eq!(
        Model::load(&bytes[1..1 + IMAGE_LEN]).unwrap_err(),
        Error::ImageMisaligned
    );
}
