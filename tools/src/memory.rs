//! `ferrite quantize --memory`: memory texts encoded by the model's own
//! memory encoder and baked into its `cross` layers' `attn.memory_k` and
//! `attn.memory_v` (docs/cross-attention.md, "The memory encoder").
//!
//! The encoder is the runtime's ([`ferrite::Session::encode_memory`]), run
//! on an f32 image of the model: each text is tokenized with the image's
//! tokenizer, fed through the first `memory_encoder_layers` layers, and each
//! cross layer's pre-norm, `k_proj` and `v_proj` turn every token into one
//! key and one value slot. The keys and values are then stored like any
//! tensor at the dtype the options choose.

use anyhow::{bail, Context, Result};
use ferrite::image::{DType, Role};
use ferrite::{LayerConfig, Session};

use crate::model_dir::{ModelDir, SourceTensor};
use crate::run::{session_buffer, AlignedImage};
use crate::writer::{self, tensor_name, WriteOptions};

/// One memory: where it came from (for messages) and its text.
pub struct MemoryText {
    /// A name for messages (the file's path).
    pub name: String,
    /// The text's bytes.
    pub text: Vec<u8>,
}

/// Keys and values of the memories baked by [`bake`]: per memory, the
/// tokens it encoded and the runtime's [`ferrite::Memory`] words.
pub struct Baked {
    /// Slots per memory (tokens of every text).
    pub slots: usize,
    /// Per memory, its token ids.
    pub tokens: Vec<Vec<u32>>,
}

/// Encodes `memories` with `dir`'s memory encoder and puts the result in
/// `dir` as every cross layer's `memory_k`/`memory_v` `[N, m, Hkv*d]` (N
/// the number of texts, m their token count), setting each cross layer's
/// `memories` and `memory_slots` to match (any baked memory `dir` had is
/// replaced). Errors: no cross layer, no memory or more than 8, an empty
/// text, texts of different token counts.
pub fn bake(dir: &mut ModelDir, memories: &[MemoryText]) -> Result<Baked> {
    let cross: Vec<usize> = dir
        .config
        .layers
        .iter()
        .enumerate()
        .filter(|(_, l)| matches!(l, LayerConfig::Cross(_)))
        .map(|(i, _)| i)
        .collect();
    if cross.is_empty() {
        bail!("--memory needs a model with a cross layer; this one has none");
    }
    let max = ferrite::mixers::MAX_MEMORIES as usize;
    if memories.is_empty() || memories.len() > max {
        bail!(
            "--memory takes 1..={max} memories per image, got {}",
            memories.len()
        );
    }
    // An f32 image of the model with zero memories of one slot: the
    // encoder reads neither, and its tokenizer is the final image's.
    set_memories(dir, &cross, 1, 1, None)?;
    let f32_opts = WriteOptions {
        dtype: DType::F32,
        ..WriteOptions::default()
    };
    let probe = writer::build_image(dir, &f32_opts, |_, _| {})?;
    let aligned = AlignedImage::new(&probe.bytes);
    let model = aligned.model()?;
    let mut tokens = Vec::with_capacity(memories.len());
    for m in memories {
        let ids = crate::eval::encode(&model, &m.text)?;
        if ids.is_empty() {
            bail!("--memory {}: the memory is empty (no tokens)", m.name);
        }
        tokens.push(ids);
    }
    let slots = tokens[0].len();
    if let Some(i) = tokens.iter().position(|t| t.len() != slots) {
        bail!(
            "--memory {}: {} tokens, but {} has {slots}: every memory must have the same number of tokens (the slots m; pad the shorter texts)",
            memories[i].name,
            tokens[i].len(),
            memories[0].name
        );
    }
    if slots > ferrite::config::MAX_DIM as usize {
        bail!("--memory: {slots} tokens per memory is more than a cross layer holds");
    }
    // Rebuild at the real slot count (the encoder's f32 image must have
    // the final shapes: memory_len depends on m).
    set_memories(dir, &cross, memories.len(), slots, None)?;
    let image = writer::build_image(dir, &f32_opts, |_, _| {})?;
    let aligned = AlignedImage::new(&image.bytes);
    let model = aligned.model()?;
    let words = ferrite::memory_len(aligned.bytes(), slots).map_err(anyhow::Error::msg)?;
    let mut encoded = Vec::with_capacity(memories.len());
    {
        let mut buf = session_buffer(&model, 0)?;
        let mut session = Session::new(model, &mut buf).map_err(anyhow::Error::msg)?;
        for (m, ids) in memories.iter().zip(&tokens) {
            let mut out = vec![0f32; words];
            session
                .encode_memory(ids, &mut out)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("--memory {}: the encoder failed", m.name))?;
            encoded.push(out);
        }
    }
    set_memories(dir, &cross, memories.len(), slots, Some(&encoded))?;
    Ok(Baked { slots, tokens })
}

/// Sets every cross layer of `cross` to `n` memories of `slots` slots, its
/// `memory_k`/`memory_v` from `encoded` (per memory, [`ferrite::Memory`]'s
/// layout: the cross layers in order, keys then values) or zeros.
fn set_memories(
    dir: &mut ModelDir,
    cross: &[usize],
    n: usize,
    slots: usize,
    encoded: Option<&[Vec<f32>]>,
) -> Result<()> {
    let mut at = 0usize;
    for &l in cross {
        let LayerConfig::Cross(c) = &mut dir.config.layers[l] else {
            continue;
        };
        c.memories = n as u32;
        c.memory_slots = u32::try_from(slots).context("too many slots")?;
        let kv = c.kv_width() as usize;
        let len = slots * kv;
        let mut keys = vec![0f32; n * len];
        let mut values = vec![0f32; n * len];
        if let Some(enc) = encoded {
            for (i, words) in enc.iter().enumerate() {
                keys[i * len..(i + 1) * len].copy_from_slice(&words[at..at + len]);
                values[i * len..(i + 1) * len].copy_from_slice(&words[at + len..at + 2 * len]);
            }
        }
        at += 2 * len;
        let shape = vec![n, slots, kv];
        let layer = Some(l as u16);
        for (role, values) in [(Role::MemoryK, keys), (Role::MemoryV, values)] {
            dir.tensors.insert(
                tensor_name(layer, role),
                SourceTensor {
                    shape: shape.clone(),
                    values,
                },
            );
        }
    }
    Ok(())
}
