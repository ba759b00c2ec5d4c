//! Caller-owned memories of `cross` layers (docs/cross-attention.md,
//! "Caller-owned memories"): keys and values in a buffer the application
//! owns, sized by the `const fn` [`memory_len`], filled by
//! [`crate::Session::encode_memory`] (the model's own memory encoder, run
//! on the device) or computed elsewhere, and attended to instead of a baked
//! memory by [`crate::Session::feed_with_memory`] and
//! [`crate::Session::generate_with_memory`].
//!
//! Layout (f32, f16 or int8 words): each `cross` layer in stack order, its keys then its
//! values, `[m, Hkv*d]` each (one baked memory's layout):
//! ```text
//! [ K of the first cross layer: m x Hkv*d | V: m x Hkv*d | K of the next | ... ]
//! ```
//! int8 words come with one f32 scale a row (a slot's key or value in one
//! layer), [`memory_rows`] of them in the rows' order: a row's values are
//! `q[i] * scale`.

use half::f16;

use crate::config::LayerConfig as Layer;
use crate::error::{Error, Result};
pub use crate::mixers::MemoryWords;
use crate::mixers::{LayerMemory, MemoryAt};
use crate::model::Model;
use crate::sizes::checked_add;

/// f32 words of a caller-owned memory of `slots` slots for the model of
/// `image`: the sum over its `cross` layers of
/// [`crate::mixers::cross_memory_len`]. `const`, so a board sizes a
/// `static` memory buffer at compile time, as it sizes its session with
/// [`crate::session_len`]. Errors with [`Error::BadMemory`] for a model
/// without a `cross` layer or `slots` 0, and with what parsing the header
/// and records meets.
pub const fn memory_len(image: &[u8], slots: usize) -> Result<usize> {
    let (_, section, cfg) = match crate::sizes::parse_config(image) {
        Ok(parts) => parts,
        Err(e) => return Err(e),
    };
    if slots == 0 {
        return Err(Error::BadMemory("a memory needs at least one slot"));
    }
    let mut total = 0u64;
    let mut any = false;
    let mut layer = 0;
    while layer < cfg.num_layers {
        if let Ok(Layer::Cross(c)) = Layer::parse(section, layer as u16) {
            any = true;
            total = match checked_add(
                total,
                c.memory_len(slots),
                "the memory exceeds what this target can address",
            ) {
                Ok(t) => t,
                Err(e) => return Err(e),
            };
        } else if let Err(e) = Layer::parse(section, layer as u16) {
            return Err(e);
        }
        layer += 1;
    }
    if !any {
        return Err(Error::BadMemory("the model has no cross layer"));
    }
    Ok(total as usize)
}

/// Rows of a caller-owned memory of `slots` slots for the model of
/// `image` (a slot's key or value in one `cross` layer: `2 * slots` a
/// layer): the scales an int8 memory ([`Memory::new_i8`]) keeps, one a
/// row. `const`, like [`memory_len`], with its errors.
pub const fn memory_rows(image: &[u8], slots: usize) -> Result<usize> {
    if let Err(e) = memory_len(image, slots) {
        return Err(e);
    }
    let (_, section, cfg) = match crate::sizes::parse_config(image) {
        Ok(parts) => parts,
        Err(e) => return Err(e),
    };
    let mut layers = 0usize;
    let mut layer = 0;
    while layer < cfg.num_layers {
        if let Ok(Layer::Cross(_)) = Layer::parse(section, layer as u16) {
            layers += 1;
        }
        layer += 1;
    }
    // At most memory_len's words (a row holds at least one): no overflow.
    Ok(2 * slots * layers)
}

/// A caller-owned memory of `slots` slots for one model (its keys and
/// values in the [module layout](self), f32 or f16 words), borrowed for the
/// calls that attend to it; checked against the model when made and again
/// at each step (its length for the session's model).
#[derive(Clone, Copy, Debug)]
pub struct Memory<'m> {
    words: MemoryWords<'m>,
    slots: usize,
}

impl<'m> Memory<'m> {
    /// A memory of `slots` slots in `words`, which must hold exactly
    /// [`memory_len`]`(image, slots)` words for `model`'s image (else
    /// [`Error::BadMemory`]).
    pub fn new(model: &Model<'_>, slots: usize, words: &'m [f32]) -> Result<Memory<'m>> {
        Memory::of(model, slots, MemoryWords::F32(words))
    }

    /// [`Memory::new`] with f16 words: half the RAM, the same
    /// [`memory_len`] words (written by [`crate::Session::encode_memory_f16`]
    /// or computed elsewhere). Scores and weighted sums stay f32; the step
    /// widens each word as it reads it.
    pub fn new_f16(model: &Model<'_>, slots: usize, words: &'m [f16]) -> Result<Memory<'m>> {
        Memory::of(model, slots, MemoryWords::F16(words))
    }

    /// [`Memory::new`] with int8 words and one f32 scale a row (the
    /// [module layout](self)): a quarter of the RAM and 4 bytes a row,
    /// `q` of [`memory_len`] words and `scales` of [`memory_rows`] (written
    /// by [`crate::Session::encode_memory_i8`] or computed elsewhere). The
    /// step reads them in place with the loops of baked int8 memories.
    pub fn new_i8(
        model: &Model<'_>,
        slots: usize,
        q: &'m [i8],
        scales: &'m [f32],
    ) -> Result<Memory<'m>> {
        if scales.len() != memory_rows(model.image(), slots)? {
            return Err(Error::BadMemory(
                "the memory's scales are not memory_rows(image, slots)",
            ));
        }
        Memory::of(model, slots, MemoryWords::I8 { q, scales })
    }

    fn of(model: &Model<'_>, slots: usize, words: MemoryWords<'m>) -> Result<Memory<'m>> {
        let want = memory_len(model.image(), slots)?;
        if words.len() != want {
            return Err(Error::BadMemory(
                "the memory's length is not memory_len(image, slots)",
            ));
        }
        Ok(Memory { words, slots })
    }

    /// Slots `m`.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The keys and values, in the [module layout](self).
    pub fn words(&self) -> MemoryWords<'m> {
        self.words
    }

    /// What layer `layer` of a token's stack reads of `memory`: for a
    /// `cross` layer its part, from word `*at` (moved past it: the layers'
    /// parts follow in stack order); `None` for every other layer, without
    /// a memory, or without the `cross` feature.
    pub(crate) fn part_for(
        memory: Option<&Memory<'m>>,
        layer: &Layer,
        at: &mut MemoryAt,
    ) -> Result<Option<LayerMemory<'m>>> {
        let (true, Some(m), Layer::Cross(c)) = (cfg!(feature = "cross"), memory, layer) else {
            return Ok(None);
        };
        let len = usize::try_from(c.memory_len(m.slots())).unwrap_or(usize::MAX);
        let row = usize::try_from(c.kv_width()).unwrap_or(usize::MAX);
        let part = m
            .layer(*at, len, row)
            .ok_or(Error::Internal("memory checked against the model"))?;
        at.words = at.words.saturating_add(len);
        at.rows = at.rows.saturating_add(2 * m.slots);
        Ok(Some(part))
    }

    /// The part of the layer whose memory starts at `at` and takes `len`
    /// words of rows of `row` words (`None` past the end: a memory of
    /// another model).
    pub(crate) fn layer(&self, at: MemoryAt, len: usize, row: usize) -> Option<LayerMemory<'m>> {
        Some(LayerMemory {
            words: self.words.part(at, len, row)?,
            slots: self.slots,
        })
    }
}
