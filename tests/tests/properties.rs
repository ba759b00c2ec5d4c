//! Properties that make the mixer definitions trustworthy (docs/spec.md §3.4):
//! full-resolution BLA is SWA, long streams stay finite in constant memory,
//! and `reset()` reproduces a run exactly. (BLA's slot form = mode form is a
//! unit test of the runtime's slot update in `runtime/src/mixers/bla.rs`.)

use ferrite::config::{LayerConfig, ModelConfig, TokenizerKind};
use ferrite::mixers::{BlaConfig, BlaDecay, BlaKernel, BlaPhiSource, SwaConfig};
use ferrite::Session;
use ferrite_tests::{expected, fixture_dirs, image_of, image_of_model, random_model, TestRng};
use ferrite_tools::config_json::Config;
use ferrite_tools::model_dir::ModelDir;
use ferrite_tools::run::{logits, session_buffer, AlignedImage};
use ferrite_tools::writer::{build_image, WriteOptions};

fn one_layer(layer: LayerConfig) -> Config {
    Config::with_plain_blocks(
        ModelConfig {
            vocab_size: 256,
            hidden_size: 32,
            intermediate_size: 64,
            norm_eps: 1e-6,
            tie_word_embeddings: true,
            num_layers: 1,
            tokenizer: TokenizerKind::Bytes,
            provenance: 0,
            token_path: ferrite::TokenPath::F32,
            final_norm: ferrite::block::NormKind::Rms,
        },
        vec![layer],
    )
}

/// The same weights under another layer config (tensor names and shapes agree).
fn with_layer(dir: &ModelDir, layer: LayerConfig) -> ModelDir {
    ModelDir {
        config: one_layer(layer),
        ..dir.clone()
    }
}

#[test]
fn full_resolution_bla_is_sliding_window_attention() {
    // With one key/value head per query head, and with both query heads
    // sharing one (`num_kv_heads` 1: BLA's option and SWA's alike).
    for (period, kv) in [(5u32, 2u32), (7, 2), (9, 2), (5, 1), (9, 1)] {
        let bla = LayerConfig::Bla(BlaConfig {
            num_heads: 2,
            num_kv_heads: kv,
            head_k_dim: 16,
            head_v_dim: 16,
            period,
            modes: (period - 1) / 2,
            slots: period,
            kernel: BlaKernel::Dirichlet,
            decay: BlaDecay::Gated,
            gamma: 1.0,
            conv_size: 0,
            phi_source: BlaPhiSource::Computed,
            state: ferrite::StateFormat::F32,
        });
        let swa = LayerConfig::Swa(SwaConfig {
            num_heads: 2,
            num_kv_heads: kv,
            head_dim: 16,
            window: period,
            sinks: 0,
            rope_theta: 10000.0,
            use_rope: false,
            cache_positions: false,
            sink_logits: false,
            conv_size: 0,
            dilation: 1,
            state: ferrite::StateFormat::F32,
        });
        let bla_dir = random_model(one_layer(bla), u64::from(period));
        let swa_dir = with_layer(&bla_dir, swa);
        let mut rng = TestRng::new(99);
        let tokens: Vec<u32> = (0..4 * period + 20).map(|_| rng.below(256)).collect();
        let lb = logits(image_of_model(&swa_dir).model().unwrap(), &tokens, 0).unwrap();
        // phi stored as the f64-rounded table (formats 1-4), and computed by
        // the runtime (format 5: exactly one-hot here).
        for bla_phi in [BlaPhiSource::Table, BlaPhiSource::Computed] {
            let opts = WriteOptions {
                bla_phi,
                ..Default::default()
            };
            let a = AlignedImage::new(&build_image(&bla_dir, &opts, |_, _| {}).unwrap().bytes);
            let la = logits(a.model().unwrap(), &tokens, 0).unwrap();
            let diff = ferrite_tests::max_abs_diff(&la, &lb);
            assert!(
                diff < 1e-4,
                "period {period}, kv heads {kv}, phi {bla_phi:?}: BLA vs SWA max|diff| = {diff:e}"
            );
        }
    }
}

#[test]
fn blurred_bla_is_not_a_sliding_window() {
    // The converse guard: with fewer modes than full resolution, outputs differ.
    let bla = |modes| {
        LayerConfig::Bla(BlaConfig {
            num_heads: 2,
            num_kv_heads: 2,
            head_k_dim: 16,
            head_v_dim: 16,
            period: 9,
            modes,
            slots: 9,
            kernel: BlaKernel::Dirichlet,
            decay: BlaDecay::Gated,
            gamma: 1.0,
            conv_size: 0,
            phi_source: BlaPhiSource::Computed,
            state: ferrite::StateFormat::F32,
        })
    };
    let full = random_model(one_layer(bla(4)), 5);
    let blurry = with_layer(&full, bla(2));
    let tokens: Vec<u32> = (0..40).map(|i| (i * 37 % 256) as u32).collect();
    let la = logits(image_of_model(&full).model().unwrap(), &tokens, 0).unwrap();
    let lb = logits(image_of_model(&blurry).model().unwrap(), &tokens, 0).unwrap();
    assert!(ferrite_tests::max_abs_diff(&la, &lb) > 1e-2);
}

#[test]
fn ten_thousand_tokens_stay_finite_in_constant_memory() {
    const TOKENS: usize = 10_000;
    for dir in fixture_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let image = image_of(&dir, &WriteOptions::default());
        let model = image.model().unwrap();
        let pinned = expected(&dir).pinned;
        let state_bytes = model.state_bytes(pinned).unwrap();
        let mut buf = session_buffer(&model, pinned).unwrap();
        let buf_len = buf.len();
        let mut session = Session::with_pinned_capacity(model, &mut buf, pinned).unwrap();
        session.reset_pinned(pinned).unwrap();
        let mut rng = TestRng::new(7);
        for t in 0..TOKENS {
            let logits = session.feed(rng.below(256)).unwrap();
            assert!(
                logits.iter().all(|v| v.is_finite()),
                "{name}: non-finite logit at token {t}"
            );
        }
        assert!(
            session.state_max_abs().unwrap().is_finite(),
            "{name}: non-finite state"
        );
        assert_eq!(
            session.state().len(),
            state_bytes,
            "{name}: state size changed"
        );
        assert_eq!(session.position(), TOKENS as u64);
        assert_eq!(model.state_bytes(pinned), Ok(state_bytes));
        assert_eq!(buf.len(), buf_len);
    }
}

#[test]
fn reset_reproduces_the_first_run_exactly() {
    for dir in fixture_dirs() {
        let exp = expected(&dir);
        let image = image_of(&dir, &WriteOptions::default());
        let model = image.model().unwrap();
        let mut buf = session_buffer(&model, exp.pinned).unwrap();
        let mut session = Session::with_pinned_capacity(model, &mut buf, exp.pinned).unwrap();
        let run = |session: &mut Session| -> Vec<Vec<f32>> {
            session.reset_pinned(exp.pinned).unwrap();
            exp.tokens
                .iter()
                .map(|&t| session.feed(t).unwrap().to_vec())
                .collect()
        };
        let first = run(&mut session);
        let state_after_first = session.state().to_vec();
        let second = run(&mut session);
        assert_eq!(
            first,
            second,
            "{}: reset did not reproduce the run",
            dir.display()
        );
        assert_eq!(state_after_first, session.state());
    }
}

#[test]
fn bad_tokens_and_buffers_are_typed_errors() {
    let dir = &fixture_dirs()[0];
    let image = image_of(dir, &WriteOptions::default());
    let model = image.model().unwrap();
    let needed = model.session_len(0).unwrap();
    let mut small = vec![0.0f32; needed - 1];
    match Session::new(model, &mut small) {
        Err(ferrite::Error::BufferTooSmall { needed: n, got }) => {
            assert_eq!((n, got), (4 * needed, 4 * (needed - 1)))
        }
        other => panic!("expected BufferTooSmall, got {:?}", other.err()),
    }
    let mut buf = session_buffer(&model, 0).unwrap();
    let mut session = Session::new(model, &mut buf).unwrap();
    assert_eq!(
        session.feed(256).err(),
        Some(ferrite::StepError::TokenOutOfRange {
            token: 256,
            vocab: 256
        })
    );
    assert!(matches!(
        session.reset_pinned(1),
        Err(ferrite::Error::TooManyPinned { .. })
    ));
    let mut sampler = ferrite::Sampler::greedy();
    assert!(matches!(
        session.generate(&[], 3, &mut sampler, |_| true),
        Err(ferrite::StepError::EmptyPrompt)
    ));
}
