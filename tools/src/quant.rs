//! Group-wise symmetric quantization along the input dimension, and the
//! error report of every stored dtype: row-major with f32 group scales
//! (formats 1-2, [`encode`]) and the integer path's tiled layout with
//! two-level scales ([`encode_tiled`]).

use ferrite::image::DType;
use ferrite::kernels::tiled::{i4_offset, i8_offset, padded_rows, TILE_COLS};
use half::f16;

/// A tensor encoded for the image.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// f32 scales as little-endian bytes (quantized dtypes), else empty.
    pub scales: Vec<u8>,
    /// Relative RMS error `||W - W_hat|| / ||W||` (0 when exact).
    pub rel_rms_error: f32,
}

/// Largest magnitude of the integer grid of a quantized dtype.
fn qmax(dtype: DType) -> f32 {
    match dtype {
        DType::I8 => 127.0,
        _ => 7.0,
    }
}

fn rel_rms(orig: &[f32], decoded: impl Iterator<Item = f32>) -> f32 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (&w, d) in orig.iter().zip(decoded) {
        err += (w as f64 - d as f64).powi(2);
        norm += (w as f64).powi(2);
    }
    if norm == 0.0 {
        0.0
    } else {
        (err / norm).sqrt() as f32
    }
}

/// Encodes `values` (row-major, rows of `cols`) as `dtype`; `group` must
/// divide `cols` for quantized dtypes (checked by the caller).
pub fn encode(values: &[f32], cols: usize, dtype: DType, group: usize) -> Encoded {
    match dtype {
        DType::F32 => Encoded {
            payload: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            scales: Vec::new(),
            rel_rms_error: 0.0,
        },
        DType::F16 => {
            let h: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            Encoded {
                payload: h.iter().flat_map(|v| v.to_le_bytes()).collect(),
                scales: Vec::new(),
                rel_rms_error: rel_rms(values, h.iter().map(|v| v.to_f32())),
            }
        }
        DType::I8 | DType::I4 => {
            debug_assert!(group > 0 && cols % group == 0);
            let q = qmax(dtype);
            let mut ints = Vec::with_capacity(values.len());
            let mut scales = Vec::with_capacity(values.len() / group);
            for chunk in values.chunks(group) {
                let amax = chunk.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let scale = amax / q;
                let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
                scales.push(scale);
                ints.extend(chunk.iter().map(|&v| (v * inv).round().clamp(-q, q) as i8));
            }
            let decoded = ints
                .iter()
                .enumerate()
                .map(|(i, &v)| v as f32 * scales[i / group]);
            let rel_rms_error = rel_rms(values, decoded);
            let payload = if dtype == DType::I8 {
                ints.iter().map(|&v| v as u8).collect()
            } else {
                ints.chunks(2)
                    .map(|p| (p[0] as u8 & 0x0F) | ((*p.get(1).unwrap_or(&0) as u8) << 4))
                    .collect()
            };
            Encoded {
                payload,
                scales: scales.iter().flat_map(|s| s.to_le_bytes()).collect(),
                rel_rms_error,
            }
        }
    }
}

/// Encodes a `[rows, cols]` int8/int4 matrix in the tiled layout
/// (`ferrite::image::Layout::Tiled`; `cols` and `group` multiples of 16,
/// `group` dividing `cols`, checked by the caller).
///
/// Scales: per row and group the ideal `s = max|w| / qmax`; per row
/// `d = max(s) / 255`; per group `m = ceil(s / d)` in 1..=255, so the
/// stored scale `d * m` is never below `s` (no value clips) and at most one
/// step of `d` above it; `q = round(w / (d * m))`.
pub fn encode_tiled(
    values: &[f32],
    rows: usize,
    cols: usize,
    dtype: DType,
    group: usize,
) -> Encoded {
    debug_assert!(dtype.is_quantized() && cols % TILE_COLS == 0 && cols % group == 0);
    let qm = qmax(dtype);
    let groups = cols / group;
    let prows = padded_rows(rows);
    let mut d = vec![0.0f32; prows];
    let mut m = vec![0u8; prows * groups];
    let mut q = vec![0i8; prows * cols];
    for (r, row) in values.chunks_exact(cols).enumerate().take(rows) {
        let s: Vec<f32> = row
            .chunks_exact(group)
            .map(|g| g.iter().fold(0.0f32, |a, v| a.max(v.abs())) / qm)
            .collect();
        let smax = s.iter().fold(0.0f32, |a, &v| a.max(v));
        if smax == 0.0 {
            continue;
        }
        d[r] = smax / 255.0;
        for (g, &sg) in s.iter().enumerate() {
            let mg = (sg / d[r]).ceil().clamp(1.0, 255.0);
            m[r * groups + g] = mg as u8;
            let inv = 1.0 / (d[r] * mg);
            for c in g * group..(g + 1) * group {
                q[r * cols + c] = (row[c] * inv).round().clamp(-qm, qm) as i8;
            }
        }
    }
    let decoded = (0..rows * cols).map(|i| {
        let (r, c) = (i / cols, i % cols);
        q[i] as f32 * (d[r] * m[r * groups + c / group] as f32)
    });
    let rel_rms_error = rel_rms(values, decoded);
    let payload = if dtype == DType::I8 {
        let mut p = vec![0u8; prows * cols];
        for r in 0..prows {
            for c in 0..cols {
                p[i8_offset(r, c, cols)] = q[r * cols + c] as u8;
            }
        }
        p
    } else {
        let mut p = vec![0u8; prows * cols / 2];
        for r in 0..prows {
            for c in 0..cols {
                let (byte, high) = i4_offset(r, c, cols);
                let nib = q[r * cols + c] as u8 & 0x0F;
                p[byte] |= if high { nib << 4 } else { nib };
            }
        }
        p
    };
    let mut scales: Vec<u8> = d.iter().flat_map(|v| v.to_le_bytes()).collect();
    scales.extend_from_slice(&m);
    scales.resize(scales.len().next_multiple_of(4), 0);
    Encoded {
        payload,
        scales,
        rel_rms_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_round_trip_error_is_small() {
        let values: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        let e = encode(&values, 64, DType::I8, 32);
        assert_eq!(e.payload.len(), 256);
        assert_eq!(e.scales.len(), 4 * 8);
        assert!(
            e.rel_rms_error > 0.0 && e.rel_rms_error < 0.01,
            "{}",
            e.rel_rms_error
        );
        let e4 = encode(&values, 64, DType::I4, 32);
        assert_eq!(e4.payload.len(), 128);
        assert!(e4.rel_rms_error < 0.15, "{}", e4.rel_rms_error);
        assert_eq!(encode(&values, 64, DType::F32, 0).rel_rms_error, 0.0);
    }
}
