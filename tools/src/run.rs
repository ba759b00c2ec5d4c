//! Running images on the host with the very runtime the boards run.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use ferrite::{Model, Session};

/// The largest an image can be: its header's offsets and lengths are u32.
pub const MAX_IMAGE_LEN: u64 = u32::MAX as u64;

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

    /// Copies `bytes` into an aligned buffer, failing (rather than
    /// aborting) when there is no memory for it.
    pub fn try_new(bytes: &[u8]) -> Result<AlignedImage> {
        let mut words = Vec::new();
        words
            .try_reserve_exact(bytes.len().div_ceil(16))
            .map_err(|_| anyhow::anyhow!("not enough memory for a {}-byte image", bytes.len()))?;
        words.resize(bytes.len().div_ceil(16), 0u128);
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        dst[..bytes.len()].copy_from_slice(bytes);
        Ok(AlignedImage {
            words,
            len: bytes.len(),
        })
    }

    /// Reads an image file. A file larger than any image can be (4 GiB: the
    /// header's offsets are 32-bit) is refused before it is read.
    pub fn read(path: &Path) -> Result<AlignedImage> {
        let cannot = || format!("cannot read {}", path.display());
        let file = std::fs::File::open(path).with_context(cannot)?;
        let too_large = || {
            anyhow::anyhow!(
                "{} is larger than 4 GiB: not a ferrite image",
                path.display()
            )
        };
        if file.metadata().with_context(cannot)?.len() > MAX_IMAGE_LEN {
            return Err(too_large());
        }
        // Not a regular file (a pipe): read at most one byte past the limit.
        let mut bytes = Vec::new();
        file.take(MAX_IMAGE_LEN + 1)
            .read_to_end(&mut bytes)
            .with_context(cannot)?;
        if bytes.len() as u64 > MAX_IMAGE_LEN {
            return Err(too_large());
        }
        AlignedImage::try_new(&bytes)
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

/// A session buffer sized for `model`, or an error (never an abort) when it
/// cannot be sized or allocated.
pub fn session_buffer(model: &Model<'_>, pinned_max: usize) -> Result<Vec<f32>> {
    let words = model
        .session_len(pinned_max)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(words).map_err(|_| {
        anyhow::anyhow!(
            "not enough memory for the session buffer ({} bytes)",
            4 * words as u128
        )
    })?;
    buf.resize(words, 0.0f32);
    Ok(buf)
}

/// Logits for every position of `tokens`, fed from a fresh state.
pub fn logits(model: Model<'_>, tokens: &[u32], pinned: usize) -> Result<Vec<Vec<f32>>> {
    let mut all = Vec::with_capacity(tokens.len());
    for_each_logits(model, tokens, pinned, |l| {
        all.push(l.to_vec());
        Ok(())
    })?;
    Ok(all)
}

/// Calls `each` with the logits of every position of `tokens`, fed from a
/// fresh state with the first `pinned` tokens (after the sinks) pinned, as
/// they are computed.
pub fn for_each_logits(
    model: Model<'_>,
    tokens: &[u32],
    pinned: usize,
    each: impl FnMut(&[f32]) -> Result<()>,
) -> Result<()> {
    for_each_logits_with_memory(model, tokens, pinned, None, each)
}

/// [`for_each_logits`] with every `cross` layer attending to baked memory
/// `memory` (`Session::select_memory`; `None`: memory 0, what a new
/// session has).
pub fn for_each_logits_with_memory(
    model: Model<'_>,
    tokens: &[u32],
    pinned: usize,
    memory: Option<u32>,
    mut each: impl FnMut(&[f32]) -> Result<()>,
) -> Result<()> {
    let mut buf = session_buffer(&model, pinned)?;
    let mut session =
        Session::with_pinned_capacity(model, &mut buf, pinned).map_err(anyhow::Error::msg)?;
    session.reset_pinned(pinned).map_err(anyhow::Error::msg)?;
    if let Some(m) = memory {
        session.select_memory(m).map_err(anyhow::Error::msg)?;
    }
    for &t in tokens {
        each(session.feed(t).map_err(anyhow::Error::msg)?)?;
    }
    Ok(())
}
