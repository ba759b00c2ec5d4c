//! What the tiled driver ([`super::tiled`]) and every architecture's tile
//! kernels share: the tile's shape and the quantized input vector they read.
//! Public as `ferrite::kernels::tiled::{QVec, TILE_ROWS, TILE_COLS}`.

/// Rows of a tile.
pub const TILE_ROWS: usize = 4;
/// Columns of a tile.
pub const TILE_COLS: usize = 16;

/// An input vector quantized to int8 with one scale, `x ≈ scale * q`.
#[derive(Clone, Copy, Debug)]
pub struct QVec<'a> {
    /// The int8 values, `|q| <= 127`.
    pub q: &'a [i8],
    /// The same values as i16 in the order an architecture's kernel reads
    /// them (empty where the kernel reads `q`); see `arch::prepare`.
    pub wide: &'a [i16],
    /// `max|x| / 127` (0 for a zero vector, NaN/inf when `x` has them, so
    /// that they reach the output as they would on the f32 path).
    pub scale: f32,
}

impl<'a> QVec<'a> {
    /// The `len` values from column `start` (empty past the end).
    #[inline]
    pub fn slice(&self, start: usize, len: usize) -> QVec<'a> {
        let q = self.q.get(start..start + len).unwrap_or(&[]);
        let wide = self.wide.get(start..start + len).unwrap_or(&[]);
        QVec {
            q,
            wide,
            scale: self.scale,
        }
    }
}
