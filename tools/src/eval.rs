//! Model evaluation with the runtime: MQAR accuracy and bits per byte.

use anyhow::{bail, Result};
use ferrite::sampler::argmax;
use ferrite::{Model, Session};

use crate::mqar::{MqarSequence, MqarStream, MqarToken};
use crate::run::session_buffer;

fn err(e: impl std::fmt::Display) -> anyhow::Error {
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
        let mut targets = seq.targets.iter().peekable();
        let tokens = seq.tokens.iter().enumerate().map(|(pos, &token)| {
            let expect = targets.next_if(|&&(at, _)| at == pos).map(|&(_, v)| v);
            MqarToken { token, expect }
        });
        let (c, t) = score_sequence(&mut session, tokens)?;
        correct += c as usize;
        total += t as usize;
        progress(i + 1);
    }
    if total == 0 {
        bail!("no MQAR queries to score");
    }
    Ok((correct, total))
}

/// `(correct, total)` MQAR queries of a stream of sequences, scored as they
/// are drawn (memory independent of their number and length), and per layer
/// the values the integer token path clamped ([`ferrite::Session::clamps`];
/// empty for an f32-path image).
pub fn mqar_stream_counts(
    model: Model<'_>,
    mut stream: MqarStream,
    mut progress: impl FnMut(u64),
) -> Result<(u64, u64, Vec<u32>)> {
    let mut buf = session_buffer(&model, 0)?;
    let mut session = Session::new(model, &mut buf).map_err(err)?;
    let (mut correct, mut total, mut done) = (0u64, 0u64, 0u64);
    while let Some(seq) = stream.next_sequence() {
        let (c, t) = score_sequence(&mut session, seq)?;
        correct += c;
        total += t;
        done += 1;
        progress(done);
    }
    if total == 0 {
        bail!("no MQAR queries to score");
    }
    Ok((correct, total, session.clamps().to_vec()))
}

/// Feeds one sequence from a reset state; `(correct, total)` of its queries.
fn score_sequence(
    session: &mut Session<'_, '_>,
    tokens: impl Iterator<Item = MqarToken>,
) -> Result<(u64, u64)> {
    session.reset();
    let (mut correct, mut total) = (0u64, 0u64);
    for MqarToken { token, expect } in tokens {
        let logits = session.feed(token).map_err(err)?;
        if let Some(value) = expect {
            correct += u64::from(argmax(logits) == value);
            total += 1;
        }
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
#[derive(Clone, Debug, PartialEq)]
pub struct TextScore {
    /// Sum of `-ln p(token)` over the predicted tokens.
    pub nats: f64,
    /// Bytes the predicted tokens decode to.
    pub bytes: usize,
    /// Per layer, the values the integer token path clamped
    /// ([`ferrite::Session::clamps`]; empty for an f32-path image).
    pub clamps: Vec<u32>,
}

impl TextScore {
    /// `nats / bytes / ln 2`.
    pub fn bits_per_byte(&self) -> f64 {
        ferrite_common::nll::bits_per_byte(self.nats, self.bytes)
    }
}

/// Scores `text` as [`bits_per_byte`] does. Each token's cost is
/// `ferrite_common::nll::nll` (libm's `exp` and `log`, not the platform's),
/// the function the board's `eval` firmware runs, so a board gets the same
/// f64 bits of `nats` from the same f32 logits.
pub fn text_score(
    model: Model<'_>,
    text: &[u8],
    chunk: usize,
    progress: impl FnMut(usize),
) -> Result<TextScore> {
    if chunk < 2 {
        bail!("--chunk must be at least 2");
    }
    let tokens = encode(&model, text)?;
    tokens_score(model, &tokens, chunk, progress)
}

/// [`text_score`] of a text already encoded with the model's tokenizer.
pub fn tokens_score(
    model: Model<'_>,
    tokens: &[u32],
    chunk: usize,
    mut progress: impl FnMut(usize),
) -> Result<TextScore> {
    if chunk < 2 {
        bail!("--chunk must be at least 2");
    }
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
            // The board's `eval` firmware adds up the same function.
            nats += ferrite_common::nll::nll(logits, pair[1]);
            bytes += tokenizer.decode(pair[1]).len();
        }
        done += piece.len();
        progress(done);
    }
    if bytes == 0 {
        bail!("no byte to predict (is --chunk larger than 1?)");
    }
    Ok(TextScore {
        nats,
        bytes,
        clamps: session.clamps().to_vec(),
    })
}

/// `text` in the ids of the model's tokenizer; fails (rather than aborting)
/// when the ids do not fit in memory.
pub fn encode(model: &Model<'_>, text: &[u8]) -> Result<Vec<u32>> {
    // Neither tokenizer makes more ids than bytes.
    let mut ids = Vec::new();
    ids.try_reserve_exact(text.len()).map_err(|_| {
        anyhow::anyhow!(
            "not enough memory to tokenize {} bytes ({} bytes of token ids)",
            text.len(),
            4 * text.len() as u128
        )
    })?;
    ids.resize(text.len(), 0u32);
    let n = model.tokenizer().encode(text, &mut ids).map_err(err)?;
    ids.truncate(n);
    Ok(ids)
}
