//! Activation statistics for `ferrite quantize --calibrate`: the runtime
//! runs the f32 model over a calibration text (or MQAR sequences) and, for
//! every weight matrix, the mean outer product of its inputs
//! `H = E[x xᵀ]` is accumulated (through the runtime's `probe` hook, so the
//! vectors are exactly those the runtime multiplies). The quantizer then
//! minimizes the error of the products `W x` rather than of the weights
//! ([`crate::quant::gptq_tiled`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use anyhow::{bail, Context, Result};
use ferrite::image::DType;
use ferrite::Session;

use crate::model_dir::ModelDir;
use crate::mqar::{self, MqarParams};
use crate::quant::Hessian;
use crate::run::{session_buffer, AlignedImage};
use crate::writer::{self, tensor_name, WriteOptions};

/// Tokens per chunk of a calibration text; the state is reset before each,
/// as `ferrite eval --text` does.
pub const CHUNK: usize = 512;

/// Seed of the MQAR calibration sequences (`--calibrate-mqar`): not the
/// evaluation's seed 0 nor the training batches' (1,000,000 + i).
pub const MQAR_SEED: u64 = 1;

/// What to run the model over.
#[derive(Clone, Debug)]
pub enum Source {
    /// A text, tokenized with the model's tokenizer, in chunks of [`CHUNK`].
    Text(Vec<u8>),
    /// The first `n` MQAR sequences of seed [`MQAR_SEED`] with this shape.
    Mqar {
        /// Sequences.
        n: usize,
        /// Pairs, length and query layout (docs/mqar.md).
        params: MqarParams,
    },
}

#[derive(Default)]
struct Acc {
    /// payload address -> (n, upper-triangle sums, count)
    by_addr: HashMap<usize, (usize, Vec<f64>, usize)>,
}

/// Runs the f32 model of `dir` over `source` and returns, per weight matrix
/// name (as `ferrite inspect` prints it), its [`Hessian`]. A tied head's
/// inputs are recorded under `model.embeddings.weight`.
pub fn hessians(dir: &ModelDir, source: &Source) -> Result<HashMap<String, Hessian>> {
    let image = writer::build_image(
        dir,
        &WriteOptions {
            dtype: DType::F32,
            ..WriteOptions::default()
        },
        |_, _| {},
    )?;
    let aligned = AlignedImage::new(&image.bytes);
    let model = aligned.model()?;
    let base = aligned.bytes().as_ptr() as usize;
    let mut names = HashMap::new();
    for i in 0..model.tensor_count() {
        let e = model.entry(i).map_err(anyhow::Error::msg)?;
        names.insert(
            base + e.data_off as usize,
            tensor_name(e.layer_index(), e.role),
        );
    }
    let acc = Rc::new(RefCell::new(Acc::default()));
    let sink = Rc::clone(&acc);
    let previous = ferrite::probe::set(Some(Box::new(move |addr, x: &[f32]| {
        let mut a = sink.borrow_mut();
        let n = x.len();
        let (_, h, count) = a
            .by_addr
            .entry(addr)
            .or_insert_with(|| (n, vec![0.0; n * (n + 1) / 2], 0));
        *count += 1;
        let mut k = 0;
        for i in 0..n {
            let xi = x[i] as f64;
            for &xj in &x[i..] {
                h[k] += xi * xj as f64;
                k += 1;
            }
        }
    })));
    let run = || -> Result<()> {
        let mut buf = session_buffer(&model, 0)?;
        let mut session = Session::new(model, &mut buf).map_err(anyhow::Error::msg)?;
        let mut feed = |tokens: &[u32]| -> Result<()> {
            session.reset();
            for &t in tokens {
                session.feed(t).map_err(anyhow::Error::msg)?;
            }
            Ok(())
        };
        match source {
            Source::Text(text) => {
                let tokens = crate::eval::encode(&model, text)?;
                if tokens.is_empty() {
                    bail!("the calibration text is empty");
                }
                for piece in tokens.chunks(CHUNK) {
                    feed(piece)?;
                }
            }
            Source::Mqar { n, params } => {
                if *n == 0 {
                    bail!("--calibrate-mqar needs at least one sequence");
                }
                for seq in mqar::generate(MQAR_SEED, *n, *params)? {
                    feed(&seq.tokens)?;
                }
            }
        }
        Ok(())
    };
    let ran = run();
    ferrite::probe::set(previous);
    ran.context("running the calibration")?;
    let acc = Rc::try_unwrap(acc)
        .ok()
        .context("internal: calibration hook still held")?
        .into_inner();
    let mut out = HashMap::new();
    for (addr, (n, upper, count)) in acc.by_addr {
        let name = names
            .get(&addr)
            .with_context(|| format!("internal: a product with an unknown tensor at {addr:#x}"))?;
        let mut h = vec![0.0; n * n];
        let mut k = 0;
        for i in 0..n {
            for j in i..n {
                let v = upper[k] / count as f64;
                h[i * n + j] = v;
                h[j * n + i] = v;
                k += 1;
            }
        }
        out.insert(name.clone(), Hessian { n, h, count });
    }
    Ok(out)
}
