//! The memory encoder's writes (docs/cross-attention.md, "The memory
//! encoder"): while [`crate::Session::encode_memory`] runs a memory token
//! through the model's first layers, each `cross` layer whose encoder ends
//! at the current depth takes that token's key and value rows, projected
//! from the hidden state by its own pre-norm, `k_proj` and `v_proj`, into
//! the caller's memory ([`crate::Memory`]'s layout), f32 or f16. On the
//! f32 token path the rows are computed in f32; on the integer token path
//! (format 6) with the integer path's norm and products, then written as
//! the nearest f32 (or f16) of each value, so that an integer-path image
//! encodes on the device with the same code it runs its tokens with.

use half::f16;

use crate::config::LayerConfig;
use crate::error::{Error, Result};
use crate::image::Role;
use crate::model::Model;
use crate::tensor::ActBuf;

/// One memory token's place in [`crate::Session::encode_memory`]: its slot, the
/// memory's slots and the caller's output ([`Memory`]'s layout).
pub(crate) struct Encode<'o> {
    /// The token's slot.
    pub slot: usize,
    /// The memory's slots (its tokens).
    pub slots: usize,
    /// The caller's output.
    pub out: EncodeOut<'o>,
}

/// The encoder's output words: f32, or f16 (each row computed in f32 in
/// the session's scratch, then rounded to nearest even).
pub(crate) enum EncodeOut<'o> {
    /// f32 words ([`crate::Session::encode_memory`]).
    F32(&'o mut [f32]),
    /// f16 words ([`crate::Session::encode_memory_f16`]).
    F16(&'o mut [f16]),
}

impl EncodeOut<'_> {
    /// The same output, borrowed for one token.
    pub fn reborrow(&mut self) -> EncodeOut<'_> {
        match self {
            EncodeOut::F32(w) => EncodeOut::F32(w),
            EncodeOut::F16(w) => EncodeOut::F16(w),
        }
    }

    /// Words of the output.
    pub fn len(&self) -> usize {
        match self {
            EncodeOut::F32(w) => w.len(),
            EncodeOut::F16(w) => w.len(),
        }
    }
}

/// `t · x` into words `at..at + n` of `out` (f16 through `tmp`).
fn matvec_into(
    t: &crate::tensor::Tensor<'_>,
    x: &crate::tensor::Input<'_>,
    out: &mut EncodeOut<'_>,
    at: usize,
    n: usize,
    tmp: &mut [f32],
) -> Result<()> {
    let range = at..at.saturating_add(n);
    match out {
        EncodeOut::F32(w) => Ok(t.matvec(x, w.get_mut(range).ok_or(Error::Internal("slot"))?)?),
        EncodeOut::F16(w) => {
            let row = tmp.get_mut(..n).ok_or(Error::Internal("encoder scratch"))?;
            t.matvec(x, row)?;
            let dst = w.get_mut(range).ok_or(Error::Internal("slot"))?;
            dst.iter_mut()
                .zip(row.iter())
                .for_each(|(d, &v)| *d = f16::from_f32(v));
            Ok(())
        }
    }
}

impl Encode<'_> {
    /// Before layer `layer` runs on the memory token (hidden state `h`):
    /// writes this slot's key and value of every `cross` layer whose
    /// encoder is `layer` layers deep (its pre-norm of `h`, into `x`, then
    /// `k_proj` and `v_proj`; `out` is a copy of `h` the pre-norm may
    /// change). Returns whether every cross layer is done (no encoder runs
    /// deeper). `tmp` (the mixers' scratch, at least a layer's query width)
    /// holds an f16 output's rows before they are rounded.
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
        let mut at = 0usize;
        let mut deeper = false;
        for l in 0..model.config().num_layers as usize {
            let LayerConfig::Cross(c) = model.layer(l)? else {
                continue;
            };
            let kv = usize::try_from(c.kv_width()).unwrap_or(usize::MAX);
            let len = usize::try_from(c.memory_len(self.slots)).unwrap_or(usize::MAX);
            let depth = c.encoder_layers as usize;
            if depth == layer {
                let w = model.layer_weights(l);
                let block = model.block(l)?;
                out.iter_mut().zip(h).for_each(|(o, &v)| *o = v);
                block.pre_mixer(&w, model.config().norm_eps, out, x)?;
                if at.saturating_add(len) > self.out.len() {
                    return Err(Error::Internal("memory length"));
                }
                // This slot's key row, then its value row half the layer on.
                let row = at.saturating_add(self.slot.saturating_mul(kv));
                let xin = act.input(x)?;
                matvec_into(&w.get(Role::KProj)?, &xin, &mut self.out, row, kv, tmp)?;
                let v_row = row.saturating_add(len / 2);
                matvec_into(&w.get(Role::VProj)?, &xin, &mut self.out, v_row, kv, tmp)?;
            } else if depth > layer {
                deeper = true;
            }
            at = at.saturating_add(len);
        }
        Ok(!deeper)
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
    /// and each value is written as its nearest f32 (then f16 for an f16
    /// output). Returns whether every cross layer is done.
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
        let mut at = 0usize;
        let mut deeper = false;
        for l in 0..model.config().num_layers as usize {
            let LayerConfig::Cross(c) = model.layer(l)? else {
                continue;
            };
            let kv = usize::try_from(c.kv_width()).unwrap_or(usize::MAX);
            let len = usize::try_from(c.memory_len(self.slots)).unwrap_or(usize::MAX);
            let depth = c.encoder_layers as usize;
            if depth == layer {
                let w = model.layer_weights(l);
                let ex = crate::int_token::norm_into(h, &w.get(Role::AttnNorm)?, eps, x)?;
                if at.saturating_add(len) > self.out.len() {
                    return Err(Error::Internal("memory length"));
                }
                let row = at.saturating_add(self.slot.saturating_mul(kv));
                let rows = tmp
                    .get_mut(..kv)
                    .ok_or(Error::Internal("encoder scratch"))?;
                for (role, start) in [
                    (Role::KProj, row),
                    (Role::VProj, row.saturating_add(len / 2)),
                ] {
                    let xin = act.input_int(Block { m: x, e: ex })?;
                    let e = w.get(role)?.matvec_int(&xin, rows)?;
                    self.put_rows(start, rows, e)?;
                }
            } else if depth > layer {
                deeper = true;
            }
            at = at.saturating_add(len);
        }
        Ok(!deeper)
    }

    /// Writes the block `m × 2^e` as the words `start..start + m.len()` of
    /// the output: each value's nearest f32, or that f32's nearest f16.
    fn put_rows(&mut self, start: usize, m: &[i32], e: i32) -> Result<()> {
        let range = start..start.saturating_add(m.len());
        let value = |v: i32| f32::from_bits(to_f32_bits(v, e));
        match &mut self.out {
            EncodeOut::F32(w) => {
                let dst = w.get_mut(range).ok_or(Error::Internal("slot"))?;
                dst.iter_mut().zip(m).for_each(|(d, &v)| *d = value(v));
            }
            EncodeOut::F16(w) => {
                let dst = w.get_mut(range).ok_or(Error::Internal("slot"))?;
                dst.iter_mut()
                    .zip(m)
                    .for_each(|(d, &v)| *d = f16::from_f32(value(v)));
            }
        }
        Ok(())
    }
}
