//! Zero-copy views of tensors that live in the image (flash), and the
//! matrix-vector product over them.

use half::f16;

use crate::error::{Error, Result, StepError, StepResult};
use crate::image::{DType, Layout, TensorEntry};
use crate::kernels::{
    self, arch,
    tiled::{self, padded_rows, QVec, TiledI4, TiledI8, MAX_TILED_GROUP, TILE_COLS},
};

/// Typed payload of a tensor, borrowed from the image.
#[derive(Clone, Copy, Debug)]
pub enum TensorData<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// f16 values.
    F16(&'a [f16]),
    /// Row-major int8 values with one f32 scale per `group` inputs.
    I8 {
        /// Quantized values, row-major.
        q: &'a [i8],
        /// Scales, `[rows, cols / group]`.
        scales: &'a [f32],
        /// Group size.
        group: usize,
    },
    /// Row-major int4 values (two per byte) with one f32 scale per `group` inputs.
    I4 {
        /// Packed values, row-major.
        q: &'a [u8],
        /// Scales, `[rows, cols / group]`.
        scales: &'a [f32],
        /// Group size.
        group: usize,
    },
    /// int8 in the tiled layout of the integer path.
    TiledI8(TiledI8<'a>),
    /// int4 in the tiled layout of the integer path.
    TiledI4(TiledI4<'a>),
}

/// A validated 2-D view `[rows, cols]` of a tensor (higher dims folded into
/// `cols`). Only [`Tensor::from_entry`] makes one, so its payload always
/// matches its shape.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    rows: usize,
    cols: usize,
    data: TensorData<'a>,
}

fn cast<T: bytemuck::AnyBitPattern>(bytes: &[u8], index: u32) -> Result<&[T]> {
    bytemuck::try_cast_slice(bytes).map_err(|_| Error::BadTensor {
        index,
        reason: "payload misaligned or of the wrong length",
    })
}

/// The input of a matrix-vector product: the f32 values and, when the model
/// has tensors on the integer path, their int8 quantization (made once and
/// shared by every product that reads the same vector).
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    f: &'a [f32],
    q: Option<QVec<'a>>,
}

impl<'a> Input<'a> {
    /// An input for products with f32, f16 and row-major tensors only.
    pub fn f32(x: &'a [f32]) -> Input<'a> {
        Input { f: x, q: None }
    }

    /// The f32 values.
    pub fn values(&self) -> &'a [f32] {
        self.f
    }

    /// The quantized values, when made.
    pub fn quantized(&self) -> Option<&QVec<'a>> {
        self.q.as_ref()
    }
}

/// Scratch for quantized activations (part of the session buffer): quantizes
/// an input vector for the integer path. Holds [`tiled::ACT_BYTES_PER_COL`]
/// bytes per column of the widest input it will see.
#[derive(Debug)]
pub struct ActBuf<'s> {
    pub(crate) words: &'s mut [f32],
    pub(crate) enabled: bool,
}

impl<'s> ActBuf<'s> {
    /// Words of scratch for inputs of up to `cols` values.
    pub const fn words_for(cols: usize) -> usize {
        (cols * tiled::ACT_BYTES_PER_COL).div_ceil(4)
    }

    /// Scratch over `words`; `enabled` is false when no tensor of the model
    /// is tiled (then inputs are not quantized at all).
    pub fn new(words: &'s mut [f32], enabled: bool) -> ActBuf<'s> {
        ActBuf { words, enabled }
    }

    /// Prepares `x` as the input of the next products. Errors when `x` is
    /// wider than the scratch was sized for (a bug in the session's sizing).
    pub fn input<'b>(&'b mut self, x: &'b [f32]) -> StepResult<Input<'b>> {
        if !self.enabled {
            return Ok(Input::f32(x));
        }
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut *self.words);
        let n = x.len();
        if bytes.len() < n * tiled::ACT_BYTES_PER_COL {
            return Err(StepError::Internal("activation scratch too small"));
        }
        // The widened copy first, so that it starts on a word boundary (the
        // buffer is f32 words) for kernels that load it a word at a time.
        let wide_len = if arch::WIDE { 2 * n } else { 0 };
        let (wide_bytes, rest) = bytes.split_at_mut(wide_len);
        let q: &mut [i8] = bytemuck::cast_slice_mut(&mut rest[..n]);
        let scale = tiled::quantize(x, q);
        let wide: &mut [i16] = bytemuck::try_cast_slice_mut(wide_bytes)
            .map_err(|_| StepError::Internal("activation scratch misaligned"))?;
        arch::prepare(q, wide);
        let (q, wide) = (&*q, &*wide);
        Ok(Input {
            f: x,
            q: Some(QVec { q, wide, scale }),
        })
    }
}

impl<'a> Tensor<'a> {
    /// Builds a view of table entry `index` over `image`, checking bounds,
    /// alignment, payload length, layout and group size.
    #[inline(always)]
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
        // refusing them keeps the byte counts below from overflowing a 32-bit usize.
        if numel > (u32::MAX / 8) as usize {
            return Err(bad("shape overflows"));
        }
        let slice = |off: u32, len: u32| {
            image
                .get(off as usize..(off as usize).saturating_add(len as usize))
                .ok_or(bad("payload out of bounds"))
        };
        let payload = slice(e.data_off, e.data_len)?;
        let group = e.group_size as usize;
        let data = match (e.layout, e.dtype) {
            (Layout::RowMajor, dtype) => {
                if payload.len() != dtype.payload_bytes(numel) {
                    return Err(bad("payload length does not match shape and dtype"));
                }
                match dtype {
                    DType::F32 => TensorData::F32(cast(payload, index)?),
                    DType::F16 => TensorData::F16(cast(payload, index)?),
                    DType::I8 | DType::I4 => {
                        if group == 0 || cols % group != 0 || (dtype == DType::I4 && group % 2 != 0)
                        {
                            return Err(bad("group size does not divide the input dimension"));
                        }
                        let scales: &[f32] = cast(slice(e.scale_off, e.scale_len)?, index)?;
                        if scales.len() != rows * (cols / group) {
                            return Err(bad("scale count does not match shape and group size"));
                        }
                        if dtype == DType::I8 {
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
                }
            }
            (Layout::Tiled, DType::F32 | DType::F16) => {
                return Err(bad("only int8 and int4 tensors may be tiled"))
            }
            (Layout::Tiled, dtype) => {
                if dims[2] != 0 || cols % TILE_COLS != 0 {
                    return Err(bad("a tiled tensor needs 2 dims, columns a multiple of 16"));
                }
                if group == 0
                    || group % TILE_COLS != 0
                    || cols % group != 0
                    || group > MAX_TILED_GROUP
                {
                    return Err(bad(
                        "tiled group size must be a multiple of 16 dividing the columns, at most 4096",
                    ));
                }
                let prows = padded_rows(rows);
                if payload.len() != dtype.payload_bytes(prows * cols) {
                    return Err(bad("payload length does not match shape and dtype"));
                }
                let scales = slice(e.scale_off, e.scale_len)?;
                let mults_len = prows * (cols / group);
                if scales.len() != (4 * prows + mults_len).next_multiple_of(4) {
                    return Err(bad("scale count does not match shape and group size"));
                }
                // The length check above leaves room for both.
                let (d, m) = scales
                    .split_at_checked(4 * prows)
                    .ok_or(bad("scale count does not match shape and group size"))?;
                let row_scales: &[f32] = cast(d, index)?;
                let mults = m
                    .get(..mults_len)
                    .ok_or(bad("scale count does not match shape and group size"))?;
                if dtype == DType::I8 {
                    TensorData::TiledI8(TiledI8 {
                        rows,
                        cols,
                        group,
                        q: cast(payload, index)?,
                        row_scales,
                        mults,
                    })
                } else {
                    TensorData::TiledI4(TiledI4 {
                        rows,
                        cols,
                        group,
                        q: payload,
                        row_scales,
                        mults,
                    })
                }
            }
        };
        // Every invariant `Tensor::new` checks was checked above from the
        // same numbers (`numel > 0`; each payload's length against the
        // shape and dtype, the group's divisibility, the tiled scales' and
        // multipliers' counts), so the view is made directly: the lookups
        // of each token (`LayerWeights::get`) skip the second check. Debug
        // builds (the tests, the fuzzers) still run it.
        debug_assert!(Tensor::new(rows, cols, data).is_ok());
        Ok(Tensor { rows, cols, data })
    }

    /// A view `[rows, cols]` of `data`, after checking that the payload
    /// matches the shape (lengths, group sizes, tiled invariants), so that
    /// no product or lookup on it can index out of bounds.
    #[inline(always)]
    pub fn new(rows: usize, cols: usize, data: TensorData<'a>) -> Result<Tensor<'a>> {
        let bad = Err(Error::Internal("tensor payload does not match its shape"));
        let Some(numel) = rows.checked_mul(cols).filter(|&n| n > 0) else {
            return bad;
        };
        let ok = match data {
            TensorData::F32(w) => w.len() == numel,
            TensorData::F16(w) => w.len() == numel,
            TensorData::I8 { q, scales, group } => {
                group > 0 && cols % group == 0 && q.len() == numel && scales.len() == numel / group
            }
            TensorData::I4 { q, scales, group } => {
                group > 0
                    && group % 2 == 0
                    && cols % group == 0
                    && q.len() == numel / 2
                    && scales.len() == numel / group
            }
            TensorData::TiledI8(w) => {
                tiled_ok(rows, cols, w.rows, w.cols, w.group, w.row_scales, w.mults)
                    && w.q.len() == padded_rows(rows) * cols
            }
            TensorData::TiledI4(w) => {
                tiled_ok(rows, cols, w.rows, w.cols, w.group, w.row_scales, w.mults)
                    && w.q.len() == padded_rows(rows) * cols / 2
            }
        };
        if ok {
            Ok(Tensor { rows, cols, data })
        } else {
            bad
        }
    }

    /// Outermost dimension (outputs of a product).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Product of the remaining dimensions (inputs of a product).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The payload.
    pub fn data(&self) -> &TensorData<'a> {
        &self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Whether the tensor has no elements (never true for a validated tensor).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether products with this tensor run the integer path (they then
    /// need an [`Input`] made by an enabled [`ActBuf`]).
    pub fn is_tiled(&self) -> bool {
        matches!(self.data, TensorData::TiledI8(_) | TensorData::TiledI4(_))
    }

    /// `y = W x` with `x` of `cols` values and `y` of `rows` (timed and
    /// counted with the `roofline` feature: module `roofline`).
    pub fn matvec(&self, x: &Input<'_>, y: &mut [f32]) -> StepResult<()> {
        if x.f.len() != self.cols || y.len() != self.rows {
            return Err(StepError::Internal(
                "matrix-vector product of mismatched lengths",
            ));
        }
        #[cfg(feature = "roofline")]
        let _timed = crate::roofline::Product::start(self.len());
        let xf = x.f;
        #[cfg(all(feature = "probe", not(target_os = "none")))]
        crate::probe::record(self.payload_addr(), xf);
        match self.data {
            TensorData::F32(w) => kernels::matvec_f32(w, self.cols, xf, y),
            TensorData::F16(w) => kernels::matvec_f16(w, self.cols, xf, y),
            TensorData::I8 { q, scales, group } => {
                kernels::matvec_i8(q, scales, self.cols, group, xf, y)
            }
            TensorData::I4 { q, scales, group } => {
                kernels::matvec_i4(q, scales, self.cols, group, xf, y)
            }
            TensorData::TiledI8(w) => tiled::matvec_i8(&w, Self::quantized(x)?, y),
            TensorData::TiledI4(w) => tiled::matvec_i4(&w, Self::quantized(x)?, y),
        }
        Ok(())
    }

    /// The address of the payload's first byte (identifies the tensor).
    #[cfg(all(feature = "probe", not(target_os = "none")))]
    fn payload_addr(&self) -> usize {
        match self.data {
            TensorData::F32(w) => w.as_ptr() as usize,
            TensorData::F16(w) => w.as_ptr() as usize,
            TensorData::I8 { q, .. } => q.as_ptr() as usize,
            TensorData::I4 { q, .. } => q.as_ptr() as usize,
            TensorData::TiledI8(w) => w.q.as_ptr() as usize,
            TensorData::TiledI4(w) => w.q.as_ptr() as usize,
        }
    }

    fn quantized<'x>(x: &'x Input<'_>) -> StepResult<&'x QVec<'x>> {
        x.q.as_ref().ok_or(StepError::Internal(
            "integer-path product without quantized input",
        ))
    }

    /// Decodes row `r` into `out` (embedding lookup). Out-of-range rows leave `out` untouched.
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        if r >= self.rows {
            return;
        }
        // Loading checked every payload's length against rows x cols and
        // the group size, so these views exist; `get` instead of indexing
        // keeps a panic out of the lookup.
        let range = r * self.cols..(r + 1) * self.cols;
        match self.data {
            TensorData::F32(w) => {
                for (o, v) in out.iter_mut().zip(w.get(range).unwrap_or_default()) {
                    *o = *v;
                }
            }
            TensorData::F16(w) => {
                for (o, v) in out.iter_mut().zip(w.get(range).unwrap_or_default()) {
                    *o = v.to_f32();
                }
            }
            TensorData::I8 { q, scales, group } => {
                let group = group.max(1);
                let row = q.get(range).unwrap_or_default();
                let row_scales = scales.get(r * (self.cols / group)..).unwrap_or_default();
                for ((o, v), s) in out.chunks_mut(group).zip(row.chunks(group)).zip(row_scales) {
                    for (o, v) in o.iter_mut().zip(v) {
                        *o = *v as f32 * s;
                    }
                }
            }
            TensorData::I4 { .. } | TensorData::TiledI8(_) | TensorData::TiledI4(_) => {
                for (c, o) in out.iter_mut().enumerate().take(self.cols) {
                    *o = self.at(r * self.cols + c);
                }
            }
        }
    }

    /// The values of an f32 tensor (the norms, gates and kernels that stay
    /// f32), for loops that read them all; `None` for other dtypes.
    pub fn f32_values(&self) -> Option<&'a [f32]> {
        match self.data {
            TensorData::F32(w) => Some(w),
            _ => None,
        }
    }

    /// Element `i` of the flattened tensor, decoded to f32 (0 when out of
    /// range). f32 tensors take an inlined path; the rest decode out of line.
    #[inline]
    pub fn at(&self, i: usize) -> f32 {
        match self.data {
            TensorData::F32(w) => w.get(i).copied().unwrap_or(0.0),
            _ => self.decode_at(i),
        }
    }

    /// [`Tensor::at`] for the dtypes that need decoding.
    #[inline(never)]
    fn decode_at(&self, i: usize) -> f32 {
        fn group_of(scales: &[f32], i: usize, group: usize) -> Option<&f32> {
            scales.get(i.checked_div(group)?)
        }
        match self.data {
            TensorData::F32(w) => w.get(i).copied().unwrap_or(0.0),
            TensorData::F16(w) => w.get(i).map_or(0.0, |v| v.to_f32()),
            // Groups and columns are nonzero (checked at load); checked
            // division keeps a divide-by-zero panic out all the same.
            TensorData::I8 { q, scales, group } => match (q.get(i), group_of(scales, i, group)) {
                (Some(&v), Some(&s)) => v as f32 * s,
                _ => 0.0,
            },
            TensorData::I4 { q, scales, group } => match (q.get(i / 2), group_of(scales, i, group))
            {
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
            TensorData::TiledI8(w) => {
                let (Some(r), Some(c)) = (i.checked_div(self.cols), i.checked_rem(self.cols))
                else {
                    return 0.0;
                };
                let q = kernels::generic::tiled_i8_at(&w, r, c);
                let per_row = w.cols.checked_div(w.group).unwrap_or(0);
                tiled_scale(w.row_scales, w.mults, per_row, w.group, r, c) * q as f32
            }
            TensorData::TiledI4(w) => {
                let (Some(r), Some(c)) = (i.checked_div(self.cols), i.checked_rem(self.cols))
                else {
                    return 0.0;
                };
                let q = kernels::generic::tiled_i4_at(&w, r, c);
                let per_row = w.cols.checked_div(w.group).unwrap_or(0);
                tiled_scale(w.row_scales, w.mults, per_row, w.group, r, c) * q as f32
            }
        }
    }
}

/// The invariants of a tiled view (see [`TiledI8`]).
fn tiled_ok(
    rows: usize,
    cols: usize,
    w_rows: usize,
    w_cols: usize,
    group: usize,
    d: &[f32],
    m: &[u8],
) -> bool {
    rows == w_rows
        && cols == w_cols
        && cols % TILE_COLS == 0
        && group > 0
        && group % TILE_COLS == 0
        && group <= MAX_TILED_GROUP
        && cols % group == 0
        && d.len() == padded_rows(rows)
        && m.len() == padded_rows(rows) * (cols / group)
}

/// The scale `d[r] * m[r][c / group]` of element `(r, c)` of a tiled tensor.
fn tiled_scale(d: &[f32], m: &[u8], groups: usize, group: usize, r: usize, c: usize) -> f32 {
    let dr = d.get(r).copied().unwrap_or(0.0);
    let mg = c
        .checked_div(group)
        .and_then(|g| m.get(r * groups + g))
        .copied()
        .unwrap_or(0);
    dr * mg as f32
}

#[cfg(test)]
mod entry_tests {
    extern crate std;
    use super::*;
    use crate::format::Role;

    /// `from_entry` makes its view without `Tensor::new`'s second check:
    /// every entry it accepts passes that check (its `debug_assert`, on in
    /// tests), over entries of every dtype and layout whose lengths are
    /// right, one off, or of another shape, group or offset.
    #[test]
    fn every_view_from_an_entry_passes_the_shape_check() {
        let image = std::vec![0u32; 1 << 14];
        let image: &[u8] = bytemuck::cast_slice(&image);
        let mut h = 0x1234_5678_9abc_def0u64;
        let mut next = |n: u64| {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            h % n
        };
        let (mut made, mut refused) = (0, 0);
        for case in 0..20_000u32 {
            let dtype = [DType::F32, DType::F16, DType::I8, DType::I4][case as usize % 4];
            let layout = if case % 3 == 0 {
                Layout::RowMajor
            } else {
                Layout::Tiled
            };
            let rows = 1 + next(40) as u32;
            let cols = [16u32, 32, 48, 64, 7, 8, 96][next(7) as usize];
            let group = [0u16, 2, 8, 16, 32, 48, 64][next(7) as usize];
            let numel = (rows * cols) as usize;
            let prows = padded_rows(rows as usize);
            let (data_len, scale_len) = match layout {
                Layout::RowMajor => (
                    dtype.payload_bytes(numel),
                    if group == 0 {
                        0
                    } else {
                        4 * numel / group as usize
                    },
                ),
                Layout::Tiled => {
                    let mults = if group == 0 {
                        0
                    } else {
                        prows * (cols as usize / group as usize)
                    };
                    (
                        dtype.payload_bytes(prows * cols as usize),
                        (4 * prows + mults).next_multiple_of(4),
                    )
                }
            };
            let jiggle = |v: usize, r: u64| match r {
                0 => v + 1,
                1 => v.saturating_sub(1),
                2 => v + 4,
                _ => v,
            };
            let e = TensorEntry {
                layer: 0,
                role: Role::Embeddings,
                dtype,
                layout,
                group_size: group,
                dims: [rows, cols, if next(20) == 0 { 2 } else { 0 }],
                data_off: 4 * next(64) as u32 + next(8).saturating_sub(6) as u32,
                data_len: jiggle(data_len, next(12)) as u32,
                scale_off: 32_768 + 4 * next(64) as u32,
                scale_len: jiggle(scale_len, next(12)) as u32,
                quant_error: 0.0,
            };
            match Tensor::from_entry(image, &e, case) {
                Ok(t) => {
                    assert!(Tensor::new(t.rows(), t.cols(), *t.data()).is_ok());
                    made += 1;
                }
                Err(_) => refused += 1,
            }
        }
        assert!(made > 2_000 && refused > 2_000, "{made} {refused}");
    }
}
