//! The memory encoder's writes (docs/cross-attention.md, "The memory
//! encoder"): while [`crate::Session::encode_memory`] runs a memory token
//! through the model's first layers, each `cross` layer whose encoder ends
//! at the current depth takes that token's key and value rows, projected
//! from the hidden state by its own pre-norm, `k_proj` and `v_proj`, into
//! the caller's memory ([`crate::Memory`]'s layout), f32, f16 or int8 with
//! a scale a row. On the f32 token path the rows are computed in f32; on
//! the integer token path (format 6) with the integer path's norm and
//! products, each value taken as its nearest f32, so that an integer-path
//! image encodes on the device with the same code it runs its tokens with.
//! f16 words are those f32 values rounded to nearest; int8 words are
//! quantized a row at a time (the scale its largest magnitude / 127).

use half::f16;

use crate::config::LayerConfig;
use crate::error::{Error, Result};
use crate::image::Role;
use crate::model::Model;
use crate::tensor::ActBuf;

/// One memory token's place in [`crate::Session::encode_memory`]: its slot, the
/// memory's slots and the caller's output ([`crate::Memory`]'s layout).
pub(crate) struct Encode<'o> {
    /// The token's slot.
    pub slot: usize,
    /// The memory's slots (its tokens).
    pub slots: usize,
    /// The caller's output.
    pub out: EncodeOut<'o>,
}

/// The encoder's output words.
pub(crate) enum EncodeOut<'o> {
    /// f32 words ([`crate::Session::encode_memory`]).
    F32(&'o mut [f32]),
    /// f16 words ([`crate::Session::encode_memory_f16`]).
    F16(&'o mut [f16]),
    /// int8 words and a scale a row ([`crate::Session::encode_memory_i8`]).
    I8 {
        /// The words.
        q: &'o mut [i8],
        /// The rows' scales.
        scales: &'o mut [f32],
    },
}

/// Where one key or value row of the output goes: its first word, and its
/// row (the index of an int8 output's scale).
#[derive(Clone, Copy)]
struct Place {
    word: usize,
    row: usize,
}

impl EncodeOut<'_> {
    /// The same output, borrowed for one token.
    pub fn reborrow(&mut self) -> EncodeOut<'_> {
        match self {
            EncodeOut::F32(w) => EncodeOut::F32(w),
            EncodeOut::F16(w) => EncodeOut::F16(w),
            EncodeOut::I8 { q, scales } => EncodeOut::I8 { q, scales },
        }
    }

    /// Words of the output.
    pub fn len(&self) -> usize {
        match self {
            EncodeOut::F32(w) => w.len(),
            EncodeOut::F16(w) => w.len(),
            EncodeOut::I8 { q, .. } => q.len(),
        }
    }

    /// Writes the `n` values of one row at `place`: as they are, rounded to
    /// f16, or quantized with the row's scale (largest magnitude / 127,
    /// round to nearest; 0 for a row of zeros).
    fn put<I>(&mut self, place: Place, n: usize, values: I) -> Result<()>
    where
        I: Iterator<Item = f32> + Clone,
    {
        let range = place.word..place.word.saturating_add(n);
        let slot = || Error::Internal("slot");
        match self {
            EncodeOut::F32(w) => {
                let dst = w.get_mut(range).ok_or_else(slot)?;
                dst.iter_mut().zip(values).for_each(|(d, v)| *d = v);
            }
            EncodeOut::F16(w) => {
                let dst = w.get_mut(range).ok_or_else(slot)?;
                dst.iter_mut()
                    .zip(values)
                    .for_each(|(d, v)| *d = f16::from_f32(v));
            }
            EncodeOut::I8 { q, scales } => {
                let dst = q.get_mut(range).ok_or_else(slot)?;
                let top = values.clone().fold(0f32, |a, v| a.max(libm::fabsf(v)));
                let scale = top / 127.0;
                let inv = if top > 0.0 { 127.0 / top } else { 0.0 };
                dst.iter_mut()
                    .zip(values)
                    .for_each(|(d, v)| *d = libm::roundf(v * inv).clamp(-127.0, 127.0) as i8);
                *scales.get_mut(place.row).ok_or_else(slot)? = scale;
            }
        }
        Ok(())
    }
}

/// Calls `write(layer, width, key, value)` for each `cross` layer whose
/// encoder ends before layer `layer` (`width` its rows' words, `key` and
/// `value` where token `slot`'s rows go in an output of `out_len` words);
/// returns whether every cross layer is done (no encoder runs deeper).
fn each_row_pair(
    model: &Model<'_>,
    layer: usize,
    slot: usize,
    slots: usize,
    out_len: usize,
    mut write: impl FnMut(usize, usize, Place, Place) -> Result<()>,
) -> Result<bool> {
    let (mut at, mut rows, mut deeper) = (0usize, 0usize, false);
    for l in 0..model.config().num_layers as usize {
        let LayerConfig::Cross(c) = model.layer(l)? else {
            continue;
        };
        let width = usize::try_from(c.kv_width()).unwrap_or(usize::MAX);
        let len = usize::try_from(c.memory_len(slots)).unwrap_or(usize::MAX);
        let depth = c.encoder_layers as usize;
        if depth == layer {
            if at.saturating_add(len) > out_len {
                return Err(Error::Internal("memory length"));
            }
            // This slot's key row, then its value row half the layer on.
            let key = Place {
                word: at.saturating_add(slot.saturating_mul(width)),
                row: rows.saturating_add(slot),
            };
            let value = Place {
                word: key.word.saturating_add(len / 2),
                row: key.row.saturating_add(slots),
            };
            write(l, width, key, value)?;
        } else if depth > layer {
            deeper = true;
        }
        at = at.saturating_add(len);
        rows = rows.saturating_add(slots.saturating_mul(2));
    }
    Ok(!deeper)
}

impl Encode<'_> {
    /// Before layer `layer` runs on the memory token (hidden state `h`):
    /// writes this slot's key and value of every `cross` layer whose
    /// encoder is `layer` layers deep (its pre-norm of `h`, into `x`, then
    /// `k_proj` and `v_proj` into `tmp`, the mixers' scratch, at least a
    /// layer's query width; `out` is a copy of `h` the pre-norm may
    /// change). Returns whether every cross layer is done.
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &mut self,
        model: &Model<'_>,
        layer: usize,
        act: &mut ActBuf<'_>,
        h: &[f32],
        x: &mut [f32],
        out: &mut [f32],
        tmp: &mut [f32],
    ) -> Result<bool> {
        let dest = &mut self.out;
        each_row_pair(
            model,
            layer,
            self.slot,
            self.slots,
            dest.len(),
            |l, width, key, value| {
                let w = model.layer_weights(l);
                out.iter_mut().zip(h).for_each(|(o, &v)| *o = v);
                model
                    .block(l)?
                    .pre_mixer(&w, model.config().norm_eps, out, x)?;
                let row = tmp
                    .get_mut(..width)
                    .ok_or(Error::Internal("encoder scratch"))?;
                let xin = act.input(x)?;
                for (role, place) in [(Role::KProj, key), (Role::VProj, value)] {
                    w.get(role)?.matvec(&xin, row)?;
                    dest.put(place, width, row.iter().copied())?;
                }
                Ok(())
            },
        )
    }
}

#[cfg(feature = "int-path")]
use crate::fixed::{
    block::{to_f32_bits, Block},
    Fx,
};

#[cfg(feature = "int-path")]
impl Encode<'_> {
    /// [`Encode::write`] on the integer token path: the hidden state is the
    /// block `h`; each cross layer's pre-norm is the integer RMSNorm into
    /// `x`, its projections `matvec_int` into `tmp` (the mixers' scratch),
    /// and each value taken as its nearest f32. Returns whether every cross
    /// layer is done.
    #[allow(clippy::too_many_arguments)]
    pub fn write_int(
        &mut self,
        model: &Model<'_>,
        eps: Fx,
        layer: usize,
        act: &mut ActBuf<'_>,
        h: Block<'_>,
        x: &mut [i32],
        tmp: &mut [i32],
    ) -> Result<bool> {
        let dest = &mut self.out;
        each_row_pair(
            model,
            layer,
            self.slot,
            self.slots,
            dest.len(),
            |l, width, key, value| {
                let w = model.layer_weights(l);
                let ex = crate::int_token::norm_into(h, &w.get(Role::AttnNorm)?, eps, x)?;
                let row = tmp
                    .get_mut(..width)
                    .ok_or(Error::Internal("encoder scratch"))?;
                let xin = act.input_int(Block { m: x, e: ex })?;
                for (role, place) in [(Role::KProj, key), (Role::VProj, value)] {
                    let e = w.get(role)?.matvec_int(&xin, row)?;
                    let values = row.iter().map(|&v| f32::from_bits(to_f32_bits(v, e)));
                    dest.put(place, width, values)?;
                }
                Ok(())
            },
        )
    }
}
