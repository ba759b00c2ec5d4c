//! `Model::macs_per_token` against a count by hand of `tests/images/tiny`
//! (its config.json), and against what the products of a stream run (the
//! `roofline` feature's totals): `cargo test -p ferrite-lm --features
//! roofline --test roofline`.

use ferrite::{roofline, Aligned, Model, Session};

const IMAGE_LEN: usize = include_bytes!("../../tests/images/tiny_int8.fer").len();
static IMAGE: Aligned<[u8; IMAGE_LEN]> =
    Aligned(*include_bytes!("../../tests/images/tiny_int8.fer"));

/// tests/images/tiny: hidden 16, intermediate 32, vocab 256, tied
/// embeddings, four layers (gdn, gsa, swa, bla), each with a SwiGLU MLP.
const HAND_MACS: u64 = {
    let (d, i, vocab) = (16, 32, 256);
    // gate and up (i x d), down (d x i), in each of the 4 layers.
    let mlp = 4 * 3 * i * d;
    // GDN, 2 heads of 8: q, k, v, g and o (16 x 16), a and b (2 heads x d).
    let gdn = 5 * 16 * 16 + 2 * 2 * d;
    // GSA, 2 heads and 1 kv head of 8, 4 slots: q and o (16 x 16), k and v
    // (8 x 16), f (4 slots x 16).
    let gsa = 2 * 16 * 16 + 2 * 8 * 16 + 4 * 16;
    // SWA, 2 heads and 1 kv head of 8: q and o (16 x 16), k and v (8 x 16).
    let swa = 2 * 16 * 16 + 2 * 8 * 16;
    // BLA, 2 heads of 8: q, k, v and o (16 x 16).
    let bla = 4 * 16 * 16;
    // The head: the embedding table, tied.
    let head = vocab * d;
    mlp + gdn + gsa + swa + bla + head
};
/// Products per token: 3 per MLP, 7 + 5 + 4 + 4 in the mixers, the head.
const HAND_PRODUCTS: u64 = 4 * 3 + 7 + 5 + 4 + 4 + 1;

/// The count by hand, and every token of a stream runs exactly those
/// products (the totals of [`roofline`], no clock set: counted, not timed).
/// One test: the totals are global.
#[test]
fn macs_per_token_is_the_hand_count_and_what_a_token_runs() {
    let model = Model::load(&IMAGE.0).unwrap();
    assert_eq!(HAND_MACS, 14_208);
    assert_eq!(model.macs_per_token().unwrap(), HAND_MACS);

    let mut buf = vec![0f32; model.session_len(0).unwrap()];
    let mut session = Session::new(model, &mut buf).unwrap();
    roofline::set_clock(None);
    roofline::reset();
    let tokens = [72, 105, 33, 0, 255];
    for t in tokens {
        session.feed(t).unwrap();
    }
    let n = tokens.len() as u64;
    assert_eq!(
        roofline::totals(),
        roofline::Totals {
            products: n * HAND_PRODUCTS,
            macs: n * HAND_MACS,
            ticks: 0,
        }
    );
}
