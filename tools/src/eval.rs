//! Model evaluation with the runtime: MQAR accuracy and bits per byte.

use anyhow::{bail, Result};
use ferrite::sampler::argmax;
use ferrite::{Model, Session};

use crate::mqar::MqarSequence;
use crate::run::session_buffer;

fn err(e: ferrite::Error) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Fraction of MQAR queries whose value is the argmax after the query key;
/// each sequence starts from a reset state. `progress(done)` after each sequence.
pub fn mqar_accuracy(
    model: Model<'_>,
    seqs: &[MqarSequence],
    progress: impl FnMut(usize),
) -> Result<f64> {
    let (correct, total) = mqar_counts(model, seqs, progress)?;
    Ok(correct as f64 / total as f64)
}

/// `(correct, total)` MQAR queries (see [`mqar_accuracy`]); the board's
/// `eval` firmware prints the same counts.
pub fn mqar_counts(
    model: Model<'_>,
    seqs: &[MqarSequence],
    mut progress: impl FnMut(usize),
) -> Result<(usize, usize)> {
    let mut buf = session_buffer(&model, 0)?;
    let mut session = Session::new(model, &mut buf).map_err(err)?;
    let (mut correct, mut total) = (0usize, 0usize);
    for (i, seq) in seqs.iter().enumerate() {
        session.reset();
        let mut targets = seq.targets.iter().peekable();
        for (pos, &token) in seq.tokens.iter().enumerate() {
            let logits = session.feed(token).map_err(err)?;
            if let Some(&&(at, value)) = targets.peek() {
                if at == pos {
                    correct += usize::from(argmax(logits) == value);
                    total += 1;
                    targets.next();
                }
            }
        }
        progress(i + 1);
    }
    if total == 0 {
        bail!("no MQAR queries to score");
    }
    Ok((correct, total))
}

/// Bits per byte of `text` under the model, with the image's tokenizer.
///
/// The text is encoded whole, then scored in chunks of `chunk` tokens with
/// the state reset before each chunk; each chunk predicts its tokens after
/// the first. Bits per byte = (sum over predicted tokens of `-ln p(token)`)
/// / (bytes those tokens decode to) / ln 2. With the byte tokenizer a token
/// is a byte, so this is the mean of `-log2 p(next byte)`; with BPE it is the
/// same quantity per byte of text, comparable across tokenizers.
/// `progress(tokens_done)` after each chunk.
pub fn bits_per_byte(
    model: Model<'_>,
    text: &[u8],
    chunk: usize,
    progress: impl FnMut(usize),
) -> Result<f64> {
    Ok(text_score(model, text, chunk, progress)?.bits_per_byte())
}

/// The sums behind [`bits_per_byte`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TextScore {
    /// Sum of `-ln p(token)` over the predicted tokens.
    pub nats: f64,
    /// Bytes the predicted tokens decode to.
    pub bytes: usize,
}

impl TextScore {
    /// `nats / bytes / ln 2`.
    pub fn bits_per_byte(&self) -> f64 {
        self.nats / self.bytes as f64 / std::f64::consts::LN_2
    }
}

/// Scores `text` as [`bits_per_byte`] does. The log-sum-exp uses `libm`'s
/// `exp` and `log` (not the platform's), so a board running the same
/// expression on the same f32 logits gets the same f64 bits of `nats`.
pub fn text_score(
    model: Model<'_>,
    text: &[u8],
    chunk: usize,
    mut progress: impl FnMut(usize),
) -> Result<TextScore> {
    if chunk < 2 {
        bail!("--chunk must be at least 2");
    }
    let tokens = encode(&model, text)?;
    if tokens.len() < 2 {
        bail!("the text needs at least 2 tokens");
    }
    let tokenizer = model.tokenizer();
    let mut buf = session_buffer(&model, 0)?;
    let mut session = Session::new(model, &mut buf).map_err(err)?;
    let (mut nats, mut bytes) = (0.0f64, 0usize);
    let mut done = 0;
    for piece in tokens.chunks(chunk) {
        session.reset();
        for pair in piece.windows(2) {
            let logits = session.feed(pair[0]).map_err(err)?;
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let log_z = max
                + libm::log(
                    logits
                        .iter()
                        .map(|&l| libm::exp(l as f64 - max))
                        .sum::<f64>(),
                );
            nats += log_z - logits[pair[1] as usize] as f64;
            bytes += tokenizer.decode(pair[1]).len();
        }
        done += piece.len();
        progress(done);
    }
    if bytes == 0 {
        bail!("no byte to predict (is --chunk larger than 1?)");
    }
    Ok(TextScore { nats, bytes })
}

/// `text` in the ids of the model's tokenizer.
pub fn encode(model: &Model<'_>, text: &[u8]) -> Result<Vec<u32>> {
    // Neither tokenizer makes more ids than bytes.
    let mut ids = vec![0u32; text.len()];
    let n = model.tokenizer().encode(text, &mut ids).map_err(err)?;
    ids.truncate(n);
    Ok(ids)
}
