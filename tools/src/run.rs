//! Running images on the host with the very runtime the boards run.

use std::path::Path;

use anyhow::{Context, Result};
use ferrite::{Model, Session};

/// Image bytes in a buffer aligned for [`Model::load`] (16 bytes).
pub struct AlignedImage {
    words: Vec<u128>,
    len: usize,
}

impl AlignedImage {
    /// Copies `bytes` into an aligned buffer.
    pub fn new(bytes: &[u8]) -> AlignedImage {
        let mut words = vec![0u128; bytes.len().div_ceil(16)];
        let len = bytes.len();
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        dst[..len].copy_from_slice(bytes);
        AlignedImage { words, len }
    }

    /// Reads an image file.
    pub fn read(path: &Path) -> Result<AlignedImage> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Ok(AlignedImage::new(&bytes))
    }

    /// The image bytes.
    pub fn bytes(&self) -> &[u8] {
        let all: &[u8] = bytemuck::cast_slice(&self.words);
        &all[..self.len]
    }

    /// Validates and loads the model.
    pub fn model(&self) -> Result<Model<'_>> {
        Model::load(self.bytes()).map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// A session buffer sized for `model` (an error when the model's buffer
/// would exceed the address space).
pub fn session_buffer(model: &Model<'_>, pinned_max: usize) -> Result<Vec<f32>> {
    let words = model
        .session_len(pinned_max)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(vec![0.0; words])
}

/// Logits for every position of `tokens`, fed from a fresh state.
pub fn logits(model: Model<'_>, tokens: &[u32], pinned: usize) -> Result<Vec<Vec<f32>>> {
    let mut buf = session_buffer(&model, pinned)?;
    let mut session =
        Session::with_pinned_capacity(model, &mut buf, pinned).map_err(anyhow::Error::msg)?;
    session.reset_pinned(pinned).map_err(anyhow::Error::msg)?;
    tokens
        .iter()
        .map(|&t| {
            session
                .feed(t)
                .map(|l| l.to_vec())
                .map_err(anyhow::Error::msg)
        })
        .collect()
}
