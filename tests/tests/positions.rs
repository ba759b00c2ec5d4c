//! Positions past every boundary (docs/spec.md, "Positions"): a stream that
//! starts at absolute position 2^24, 2^32, 2^53 or near 2^64 gives the logits
//! of a stream that starts at 0, within RoPE angle rounding, on every fixture
//! (all four mixer families, absolute and cache RoPE, sinks, pinned tokens)
//! and on `models/lm/small`; the last position is a typed error, not a panic.

use std::path::Path;

use ferrite::{Session, StepError};
use ferrite_tests::{expected, fixture_dirs, fixtures_dir, image_of};
use ferrite_tools::run::{session_buffer, AlignedImage};
use ferrite_tools::writer::WriteOptions;

/// Start positions where an f32 or a 32-bit counter would break.
const STARTS: [u64; 8] = [
    (1 << 24) - 7,
    (1 << 24) + 3,
    (1 << 32) - 5,
    (1 << 32) + 11,
    (1 << 40) + 1,
    (1 << 53) + 1,
    u64::MAX / 3,
    u64::MAX - 1000,
];

/// `max |a - b| / max |a|` allowed between a stream at 0 and one started
/// elsewhere (measured: at most 1e-6). Only the f32 rounding of the RoPE
/// tables differs (within 1.5e-7 each, docs/spec.md); models without RoPE
/// agree bit for bit.
const TOLERANCE: f32 = 1e-5;

/// Logits of every token of `tokens` fed from a stream starting at `start`.
fn stream(image: &AlignedImage, tokens: &[u32], pinned: usize, start: u64) -> Vec<Vec<f32>> {
    let model = image.model().unwrap();
    let mut buf = session_buffer(&model, pinned).unwrap();
    let mut session = Session::with_pinned_capacity(model, &mut buf, pinned).unwrap();
    session.reset_pinned(pinned).unwrap();
    session.seek(start);
    assert_eq!(session.position(), start);
    let out = tokens
        .iter()
        .map(|&t| session.feed(t).unwrap().to_vec())
        .collect();
    assert_eq!(session.stream_len(), tokens.len() as u64);
    assert_eq!(session.position(), start + tokens.len() as u64);
    out
}

/// Relative difference of two logit streams, NaN when any logit is not finite.
fn relative_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    let mut scale = 0f32;
    let mut diff = 0f32;
    for (ra, rb) in a.iter().zip(b) {
        for (&x, &y) in ra.iter().zip(rb) {
            if !x.is_finite() || !y.is_finite() {
                return f32::NAN;
            }
            scale = scale.max(x.abs());
            diff = diff.max((x - y).abs());
        }
    }
    diff / scale
}

/// Checks one model at every start position; returns the failures.
fn check(name: &str, image: &AlignedImage, tokens: &[u32], pinned: usize) -> Vec<String> {
    let model = image.model().unwrap();
    let uses_rope = (0..model.config().num_layers as usize).any(|i| match model.layer(i) {
        Ok(ferrite::LayerConfig::Swa(c)) => c.use_rope,
        Ok(ferrite::LayerConfig::Mla(c)) => c.rope_dim > 0,
        Ok(ferrite::LayerConfig::Gla(c)) => c.variant == ferrite::mixers::GlaVariant::Retention,
        _ => false,
    });
    let at_zero = stream(image, tokens, pinned, 0);
    let mut failures = Vec::new();
    for start in STARTS {
        let got = stream(image, tokens, pinned, start);
        let diff = relative_diff(&at_zero, &got);
        let bound = if uses_rope { TOLERANCE } else { 0.0 };
        println!("{name:<36} start {start:>20}: {diff:.2e}");
        if diff.is_nan() || diff > bound {
            failures.push(format!("{name} at {start}: {diff:e} > {bound:e}"));
        }
    }
    failures
}

#[test]
fn streams_started_past_every_boundary_match_a_stream_at_zero() {
    let mut failures = Vec::new();
    for dir in fixture_dirs() {
        let exp = expected(&dir);
        let image = image_of(&dir, &WriteOptions::default());
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        failures.extend(check(&name, &image, &exp.tokens, exp.pinned));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn the_small_lm_reads_the_same_text_at_every_start() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let image = image_of(&root.join("models/lm/small"), &WriteOptions::default());
    let text = std::fs::read(root.join("models/lm/heldout.txt")).unwrap();
    // 300 bytes: the 32-token window and the 64-token BLA period wrap.
    let tokens: Vec<u32> = text[..300].iter().map(|&b| b as u32).collect();
    let failures = check("models/lm/small", &image, &tokens, 0);
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn the_last_position_is_an_error_and_leaves_the_state_alone() {
    let dir = fixtures_dir().join("swa_sinks_absolute");
    let image = image_of(&dir, &WriteOptions::default());
    let model = image.model().unwrap();
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut session = Session::new(model, &mut buf).unwrap();
    session.seek(u64::MAX - 2);
    assert!(session.feed(1).unwrap().iter().all(|l| l.is_finite()));
    assert!(session.feed(2).unwrap().iter().all(|l| l.is_finite()));
    assert_eq!(session.position(), u64::MAX);
    let state = session.state().to_vec();
    assert_eq!(session.feed(3).unwrap_err(), StepError::PositionOverflow);
    assert_eq!(session.state(), &state[..]);
    assert_eq!(session.position(), u64::MAX);
    // A reset starts over at 0.
    session.reset();
    assert_eq!(session.position(), 0);
    assert!(session.feed(3).is_ok());
}
