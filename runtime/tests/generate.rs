//! `Session::generate_with` shows each step exactly as `feed` and the
//! sampler made it, and `Session::generate` is the same loop.

use ferrite::{Aligned, Model, Sampler, SamplerConfig, Session, StepError};

const IMAGE_LEN: usize = include_bytes!("../../tests/images/tiny_int8.fer").len();
static IMAGE: Aligned<[u8; IMAGE_LEN]> =
    Aligned(*include_bytes!("../../tests/images/tiny_int8.fer"));

const PROMPT: &[u32] = &[72, 105, 44, 32, 116];

/// A sampler that draws (not greedy), so that the tokens depend on it.
fn sampler() -> Sampler {
    Sampler::new(SamplerConfig {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        seed: 7,
    })
    .unwrap()
}

fn buffer(model: &Model<'_>) -> Vec<f32> {
    vec![0.0; model.session_len(0).unwrap()]
}

/// One recorded step: index, token and the logits' bits.
type Recorded = (usize, u32, Vec<u32>);

/// The steps of the generation loop written out with `feed` and `sample`.
fn by_hand(prompt: &[u32], n: usize) -> Vec<Recorded> {
    let model = Model::load(&IMAGE.0).unwrap();
    let mut buf = buffer(&model);
    let mut s = Session::new(model, &mut buf).unwrap();
    let mut sampler = sampler();
    let (&last, head) = prompt.split_last().unwrap();
    for &t in head {
        s.feed(t).unwrap();
    }
    let mut token = last;
    let mut steps = Vec::new();
    for index in 0..n {
        let logits = s.feed(token).unwrap();
        let bits = logits.iter().map(|l| l.to_bits()).collect();
        token = sampler.sample(logits);
        steps.push((index, token, bits));
    }
    steps
}

#[test]
fn the_hook_sees_the_logits_feed_returned_for_each_step() {
    let n = 12;
    let model = Model::load(&IMAGE.0).unwrap();
    let vocab = model.config().vocab_size as usize;
    let mut buf = buffer(&model);
    let mut s = Session::new(model, &mut buf).unwrap();
    let mut seen = Vec::new();
    let produced = s
        .generate_with(PROMPT, n, &mut sampler(), |step| {
            assert_eq!(step.logits.len(), vocab);
            let bits = step.logits.iter().map(|l| l.to_bits()).collect();
            seen.push((step.index, step.token, bits));
            true
        })
        .unwrap();
    assert_eq!(produced, n);
    let want = by_hand(PROMPT, n);
    assert_eq!(seen.len(), n);
    for (got, want) in seen.iter().zip(&want) {
        assert_eq!(got, want, "step {}", want.0);
    }
    // The prompt but its last token, then one feed per step.
    assert_eq!(s.position(), (PROMPT.len() - 1 + n) as u64);
    // The draws really vary, so the comparison covers the sampler too.
    let distinct: std::collections::BTreeSet<u32> = seen.iter().map(|s| s.1).collect();
    assert!(distinct.len() > 1, "{distinct:?}");
}

#[test]
fn generate_gives_the_tokens_of_the_hook() {
    let n = 12;
    let model = Model::load(&IMAGE.0).unwrap();
    let mut buf = buffer(&model);
    let mut s = Session::new(model, &mut buf).unwrap();
    let mut tokens = Vec::new();
    let produced = s
        .generate(PROMPT, n, &mut sampler(), |t| {
            tokens.push(t);
            true
        })
        .unwrap();
    assert_eq!(produced, n);
    let want: Vec<u32> = by_hand(PROMPT, n).into_iter().map(|s| s.1).collect();
    assert_eq!(tokens, want);
}

#[test]
fn stopping_early_returns_the_tokens_produced() {
    let model = Model::load(&IMAGE.0).unwrap();
    let mut buf = buffer(&model);
    let mut s = Session::new(model, &mut buf).unwrap();
    let mut indices = Vec::new();
    let produced = s
        .generate_with(PROMPT, 10, &mut Sampler::greedy(), |step| {
            indices.push(step.index);
            step.index < 2
        })
        .unwrap();
    assert_eq!((produced, indices), (3, vec![0, 1, 2]));
    assert_eq!(s.position(), (PROMPT.len() - 1 + 3) as u64);

    s.reset();
    let mut calls = 0;
    let produced = s
        .generate(PROMPT, 10, &mut Sampler::greedy(), |_| {
            calls += 1;
            false
        })
        .unwrap();
    assert_eq!((produced, calls), (1, 1));
}

#[test]
fn zero_tokens_feed_the_prompt_head_only() {
    let model = Model::load(&IMAGE.0).unwrap();
    let mut buf = buffer(&model);
    let mut s = Session::new(model, &mut buf).unwrap();
    let produced = s
        .generate_with(PROMPT, 0, &mut Sampler::greedy(), |_| {
            panic!("no step to show")
        })
        .unwrap();
    assert_eq!(produced, 0);
    assert_eq!(s.position(), (PROMPT.len() - 1) as u64);
}

#[test]
fn an_empty_prompt_or_a_bad_token_is_an_error() {
    let model = Model::load(&IMAGE.0).unwrap();
    let vocab = model.config().vocab_size;
    let mut buf = buffer(&model);
    let mut s = Session::new(model, &mut buf).unwrap();
    let never = |_: ferrite::session::Step<'_>| -> bool { panic!("no step to show") };
    assert_eq!(
        s.generate_with(&[], 3, &mut Sampler::greedy(), never),
        Err(StepError::EmptyPrompt)
    );
    assert_eq!(
        s.generate_with(&[1, vocab, 2], 3, &mut Sampler::greedy(), never),
        Err(StepError::TokenOutOfRange {
            token: vocab,
            vocab
        })
    );
    // Refused before anything was fed past the first token.
    assert_eq!(s.position(), 1);
}

#[test]
fn step_errors_become_the_load_type_with_the_same_message() {
    let model = Model::load(&IMAGE.0).unwrap();
    let vocab = model.config().vocab_size;
    let mut buf = buffer(&model);
    let mut s = Session::new(model, &mut buf).unwrap();
    let e = s.feed(vocab).unwrap_err();
    let wide: ferrite::Error = e.into();
    assert_eq!(
        wide,
        ferrite::Error::TokenOutOfRange {
            token: vocab,
            vocab
        }
    );
    assert_eq!(e.to_string(), wide.to_string());
    // `?` into `ferrite::Result`, as the firmware writes it.
    fn generate(s: &mut Session<'_, '_>) -> ferrite::Result<usize> {
        Ok(s.generate(&[], 1, &mut Sampler::greedy(), |_| true)?)
    }
    assert_eq!(
        generate(&mut s),
        Err(ferrite::Error::BadPrompt("the prompt is empty"))
    );
    assert_eq!(
        StepError::EmptyPrompt.to_string(),
        "bad prompt: the prompt is empty"
    );
}
