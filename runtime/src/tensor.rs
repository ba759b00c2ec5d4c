//! Zero-copy views of tensors that live in the image (flash).

use half::f16;

use crate::error::{Error, Result};
use crate::image::{DType, TensorEntry};
use crate::kernels;

/// Typed payload of a tensor, borrowed from the image.
#[derive(Clone, Copy, Debug)]
pub enum TensorData<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// f16 values.
    F16(&'a [f16]),
    /// int8 values with one scale per `group` inputs.
    I8 {
        /// Quantized values, row-major.
        q: &'a [i8],
        /// Scales, `[rows, cols / group]`.
        scales: &'a [f32],
        /// Group size.
        group: usize,
    },
    /// int4 values (two per byte) with one scale per `group` inputs.
    I4 {
        /// Packed values, row-major.
        q: &'a [u8],
        /// Scales, `[rows, cols / group]`.
        scales: &'a [f32],
        /// Group size.
        group: usize,
    },
}

/// A 2-D view `[rows, cols]` of a tensor (higher dims folded into `cols`).
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    /// Outermost dimension.
    pub rows: usize,
    /// Product of the remaining dimensions.
    pub cols: usize,
    /// The payload.
    pub data: TensorData<'a>,
}

fn cast<T: bytemuck::AnyBitPattern>(bytes: &[u8], index: u32) -> Result<&[T]> {
    bytemuck::try_cast_slice(bytes).map_err(|_| Error::BadTensor {
        index,
        reason: "payload misaligned or of the wrong length",
    })
}

impl<'a> Tensor<'a> {
    /// Builds a view of table entry `index` over `image`, checking bounds,
    /// alignment, payload length and group size.
    pub fn from_entry(image: &'a [u8], e: &TensorEntry, index: u32) -> Result<Tensor<'a>> {
        let bad = |reason| Error::BadTensor { index, reason };
        let dims = e.dims;
        if dims[0] == 0 {
            return Err(bad("zero-sized dimension"));
        }
        let rows = dims[0] as usize;
        let mut cols = 1usize;
        for &d in &dims[1..] {
            if d != 0 {
                cols = cols.checked_mul(d as usize).ok_or(bad("shape overflows"))?;
            }
        }
        let numel = rows.checked_mul(cols).ok_or(bad("shape overflows"))?;
        // A payload length is a u32: larger shapes cannot be stored, and
        // refusing them keeps `payload_bytes` from overflowing a 32-bit usize.
        if numel > (u32::MAX / 4) as usize {
            return Err(bad("shape overflows"));
        }
        let slice = |off: u32, len: u32| {
            image
                .get(off as usize..(off as usize).saturating_add(len as usize))
                .ok_or(bad("payload out of bounds"))
        };
        let payload = slice(e.data_off, e.data_len)?;
        if payload.len() != e.dtype.payload_bytes(numel) {
            return Err(bad("payload length does not match shape and dtype"));
        }
        let data = match e.dtype {
            DType::F32 => TensorData::F32(cast(payload, index)?),
            DType::F16 => TensorData::F16(cast(payload, index)?),
            DType::I8 | DType::I4 => {
                let group = e.group_size as usize;
                if group == 0 || cols % group != 0 || (e.dtype == DType::I4 && group % 2 != 0) {
                    return Err(bad("group size does not divide the input dimension"));
                }
                let scales: &[f32] = cast(slice(e.scale_off, e.scale_len)?, index)?;
                if scales.len() != rows * (cols / group) {
                    return Err(bad("scale count does not match shape and group size"));
                }
                if e.dtype == DType::I8 {
                    TensorData::I8 {
                        q: cast(payload, index)?,
                        scales,
                        group,
                    }
                } else {
                    TensorData::I4 {
                        q: payload,
                        scales,
                        group,
                    }
                }
            }
        };
        Ok(Tensor { rows, cols, data })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Whether the tensor has no elements (never true for a validated tensor).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `y = W x` with `x.len() == cols`, `y.len() == rows` (shorter slices truncate).
    pub fn matvec(&self, x: &[f32], y: &mut [f32]) {
        debug_assert!(
            x.len() == self.cols && y.len() == self.rows,
            "matvec [{}, {}] with x {} y {}",
            self.rows,
            self.cols,
            x.len(),
            y.len()
        );
        match self.data {
            TensorData::F32(w) => kernels::matvec_f32(w, self.cols, x, y),
            TensorData::F16(w) => kernels::matvec_f16(w, self.cols, x, y),
            TensorData::I8 { q, scales, group } => {
                kernels::matvec_i8(q, scales, self.cols, group, x, y)
            }
            TensorData::I4 { q, scales, group } => {
                kernels::matvec_i4(q, scales, self.cols, group, x, y)
            }
        }
    }

    /// Decodes row `r` into `out` (embedding lookup). Out-of-range rows leave `out` untouched.
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        if r >= self.rows {
            return;
        }
        let range = r * self.cols..(r + 1) * self.cols;
        match self.data {
            TensorData::F32(w) => {
                for (o, v) in out.iter_mut().zip(&w[range]) {
                    *o = *v;
                }
            }
            TensorData::F16(w) => {
                for (o, v) in out.iter_mut().zip(&w[range]) {
                    *o = v.to_f32();
                }
            }
            TensorData::I8 { q, scales, group } => {
                let row_scales = &scales[r * (self.cols / group)..];
                for (i, (o, v)) in out.iter_mut().zip(&q[range]).enumerate() {
                    *o = *v as f32 * row_scales[i / group];
                }
            }
            TensorData::I4 { .. } => {
                for (c, o) in out.iter_mut().enumerate().take(self.cols) {
                    *o = self.at(r * self.cols + c);
                }
            }
        }
    }

    /// Element `i` of the flattened tensor, decoded to f32 (0 when out of range).
    pub fn at(&self, i: usize) -> f32 {
        match self.data {
            TensorData::F32(w) => w.get(i).copied().unwrap_or(0.0),
            TensorData::F16(w) => w.get(i).map_or(0.0, |v| v.to_f32()),
            TensorData::I8 { q, scales, group } => match (q.get(i), scales.get(i / group)) {
                (Some(&v), Some(&s)) => v as f32 * s,
                _ => 0.0,
            },
            TensorData::I4 { q, scales, group } => match (q.get(i / 2), scales.get(i / group)) {
                (Some(&b), Some(&s)) => {
                    let v = if i % 2 == 0 {
                        kernels::generic::i4_low(b)
                    } else {
                        kernels::generic::i4_high(b)
                    };
                    v as f32 * s
                }
                _ => 0.0,
            },
        }
    }
}
