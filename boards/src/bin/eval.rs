//! Evaluates the image embedded in flash on the board, as `ferrite eval` does
//! on the host (`tools/src/eval.rs`):
//!
//! - MQAR (no `FERRITE_TEXT`): `N` sequences of the docs/mqar.md generator
//!   (seed `FERRITE_MQAR_SEED`), drawn one at a time without allocation, each
//!   from a reset state; a query is correct when the argmax of the logits
//!   after its key is its value. Prints `eval: mqar ... correct=C total=T`
//!   and `accuracy=..`.
//! - Text (`FERRITE_TEXT`): the embedded text in the model's tokenizer,
//!   scored in chunks of `FERRITE_CHUNK` tokens with a reset before each; the
//!   negative log-likelihood in nats is summed in f64 by
//!   `ferrite_common::nll!`, the host's own expression, so the sum has the
//!   host's bits. Prints
//!   `eval: text ... predicted_bytes=B nats_bits=<f64 bits>` and
//!   `bits_per_byte=..`.
//!
//! Then a `run:` line with the measurements (instructions cover the whole
//! evaluation: generator, feeding and scoring), which xtask turns into `stats:`.
#![no_std]
#![no_main]

use ferrite::{sampler::argmax, Model, Session};
use ferrite_boards::{config, console, fail, mqar, platform, say, status, IMAGE, SESSION_LEN};

/// The text to score (empty for MQAR), from FERRITE_TEXT.
const TEXT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/text.bin"));

static mut SESSION_BUF: [f32; SESSION_LEN] = [0.0; SESSION_LEN];
/// The text's ids (no tokenizer makes more ids than bytes).
static mut IDS: [u32; TEXT.len()] = [0; TEXT.len()];

/// `num / den` to 4 decimals, rounded half up, without float formatting.
struct Fixed4(u64, u64);

impl core::fmt::Display for Fixed4 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let q = (self.0 * 20_000 + self.1) / (2 * self.1);
        write!(f, "{}.{:04}", q / 10_000, q % 10_000)
    }
}

/// One step of the model. Not inlined: the evaluation loops call it from
/// several places, and one copy of `Session::feed` keeps the firmware within
/// the M3's 256 KB with the small LM.
#[inline(never)]
fn feed<'s>(session: &'s mut Session<'_, '_>, token: u32) -> Result<&'s [f32], ferrite::StepError> {
    session.feed(token)
}

/// `-ln p(target)`: `ferrite_common::nll!`, the host's expression
/// (tools/src/eval.rs sums `ferrite_common::nll::nll`), expanded here so that
/// the firmware's code is what it was written in place.
#[inline(never)]
fn nll(logits: &[f32], target: u32) -> f64 {
    ferrite_common::nll!(logits, target)
}

/// What an evaluation fed, for the `run:` line.
struct Fed {
    tokens: u64,
    instructions: u64,
}

fn mqar(session: &mut Session<'_, '_>) -> ferrite::Result<Fed> {
    let (pairs, seq_len) = (config::MQAR_PAIRS, config::MQAR_SEQ_LEN);
    let mut rng = mqar::SplitMix64::new(config::MQAR_SEED);
    let (mut correct, mut total) = (0u64, 0u64);
    let start = ferrite_boards::instructions();
    for _ in 0..config::N {
        session.reset();
        let mut seq = mqar::Sequence::pairs(&mut rng, pairs);
        for i in 0..pairs {
            feed(session, seq.keys[i])?;
            feed(session, seq.values[i])?;
        }
        for _ in 0..seq_len - 4 * pairs {
            feed(session, rng.noise())?;
        }
        seq.draw_order(&mut rng);
        for &o in &seq.order[..pairs] {
            let (key, value) = (seq.keys[o as usize], seq.values[o as usize]);
            let logits = feed(session, key)?;
            correct += u64::from(argmax(logits) == value);
            total += 1;
            feed(session, value)?;
        }
    }
    let instructions = ferrite_boards::instructions() - start;
    console::line(ferrite_common::eval_mqar_line!(
        config::N,
        pairs,
        seq_len,
        config::MQAR_SEED,
        correct,
        total
    ));
    say!("accuracy={}", Fixed4(correct, total.max(1)));
    Ok(Fed {
        tokens: (config::N * seq_len) as u64,
        instructions,
    })
}

fn text(session: &mut Session<'_, '_>, ids: &mut [u32]) -> ferrite::Result<Fed> {
    let tokenizer = session.model().tokenizer();
    let k = tokenizer.encode(TEXT, ids)?;
    let (mut nats, mut bytes, mut fed) = (0.0f64, 0usize, 0u64);
    let start = ferrite_boards::instructions();
    for piece in ids[..k].chunks(config::CHUNK) {
        session.reset();
        for pair in piece.windows(2) {
            let logits = feed(session, pair[0])?;
            fed += 1;
            nats += nll(logits, pair[1]);
            bytes += tokenizer.decode(pair[1]).len();
        }
    }
    let instructions = ferrite_boards::instructions() - start;
    console::line(ferrite_common::eval_text_line!(
        TEXT.len(),
        k,
        config::CHUNK,
        bytes,
        nats.to_bits()
    ));
    // bits per byte = nats / bytes / ln 2, to 4 decimals (scaled to an integer
    // to keep float formatting out of flash).
    let scaled = nats / bytes.max(1) as f64 / core::f64::consts::LN_2 * 1e6;
    say!("bits_per_byte={}", Fixed4(scaled as u64, 1_000_000));
    Ok(Fed {
        tokens: fed,
        instructions,
    })
}

#[platform::entry]
fn main() -> ! {
    platform::init();

    let model = Model::load(&IMAGE.0).unwrap_or_else(|e| fail(e));
    let state_bytes = model.state_bytes(0).unwrap_or_else(|e| fail(e));
    // SAFETY: the only references to SESSION_BUF and IDS, taken once.
    let (buf, ids) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(SESSION_BUF),
            &mut *core::ptr::addr_of_mut!(IDS),
        )
    };
    let mut session = Session::new(model, buf).unwrap_or_else(|e| fail(e));
    let fed = if config::EVAL_TEXT {
        text(&mut session, ids)
    } else {
        mqar(&mut session)
    }
    .unwrap_or_else(|e| fail(e));
    console::line(ferrite_common::eval_run_line!(
        config::NAME,
        if config::EVAL_TEXT { "text" } else { "mqar" },
        fed.tokens,
        fed.instructions,
        fed.instructions / fed.tokens.max(1),
        platform::stack_peak_checked(),
        state_bytes,
        4 * SESSION_LEN
    ));
    ferrite_boards::exit(status::OK)
}
