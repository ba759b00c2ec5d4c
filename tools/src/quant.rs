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

/// How the scales (and with a calibration, the values) of a tiled int4
/// matrix are chosen. int8 always takes [`Scales::Absmax`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scales {
    /// The ideal scale of each group, `max|w| / 7`, values in `-7..=7`
    /// (the scheme before `search`; no value clips).
    Absmax,
    /// Per group, the multiplier `m` (on the same row step `d` as absmax)
    /// that minimizes the squared error of the group, values in `-8..=7`:
    /// every `m` from absmax's down to 40% of it is tried, so the error of
    /// each group is never above absmax's (absmax's own `m` is a candidate
    /// and gives the same values).
    #[default]
    Search,
}

/// The mean input outer product of one matrix, what [`gptq_tiled`]
/// quantizes for (measured by `crate::calibrate::hessians`).
#[derive(Clone, Debug, PartialEq)]
pub struct Hessian {
    /// Input width.
    pub n: usize,
    /// `n x n`, row-major, symmetric: `sum x xᵀ / count`.
    pub h: Vec<f64>,
    /// Input vectors seen.
    pub count: usize,
}

/// Smallest multiplier tried by [`Scales::Search`], as a fraction of absmax's.
const SEARCH_LOW: f32 = 0.4;

/// Encodes a `[rows, cols]` int8/int4 matrix in the tiled layout
/// (`ferrite::image::Layout::Tiled`; `cols` and `group` multiples of 16,
/// `group` dividing `cols`, checked by the caller).
///
/// Scales: per row and group the ideal `s = max|w| / qmax`; per row
/// `d = max(s) / 255`; per group a multiplier `m` in 1..=255 and
/// `q = round(w / (d * m))`. int8 and [`Scales::Absmax`] take
/// `m = ceil(s / d)`, so the stored scale `d * m` is never below `s` (no
/// value clips) and at most one step of `d` above it; [`Scales::Search`]
/// searches `m` (int4). With a `hessian` of the inputs (int4, from
/// `--calibrate`), the values are chosen by [`gptq_tiled`] instead.
pub fn encode_tiled(
    values: &[f32],
    rows: usize,
    cols: usize,
    dtype: DType,
    group: usize,
    scales: Scales,
    hessian: Option<&[f64]>,
) -> Encoded {
    debug_assert!(dtype.is_quantized() && cols % TILE_COLS == 0 && cols % group == 0);
    let qm = qmax(dtype);
    let groups = cols / group;
    let prows = padded_rows(rows);
    let mut d = vec![0.0f32; prows];
    let mut m = vec![0u8; prows * groups];
    let mut q = vec![0i8; prows * cols];
    let int4_search = dtype == DType::I4 && scales == Scales::Search;
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
            let mceil = (sg / d[r]).ceil().clamp(1.0, 255.0);
            let cells = g * group..(g + 1) * group;
            let mg = if int4_search && hessian.is_none() {
                search_mult(&row[cells.clone()], d[r], mceil as u8)
            } else {
                mceil as u8
            };
            m[r * groups + g] = mg;
            let (lo, hi) = if int4_search { (-8.0, 7.0) } else { (-qm, qm) };
            let inv = 1.0 / (d[r] * mg as f32);
            for c in cells {
                q[r * cols + c] = (row[c] * inv).round().clamp(lo, hi) as i8;
            }
        }
    }
    if let (true, Some(h)) = (int4_search, hessian) {
        gptq_tiled(values, rows, cols, group, &d, &mut m, &mut q, h);
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

/// The stored scale `d * m` as the runtime forms it.
fn stored_scale(d: f32, m: u8) -> f32 {
    d * m as f32
}

/// Squared error of `vals` quantized to `-8..=7` on `scale`.
fn int4_error(vals: impl Iterator<Item = f64>, scale: f32) -> f64 {
    let (scale, inv) = (scale as f64, 1.0 / scale as f64);
    vals.map(|w| {
        let q = (w * inv).round().clamp(-8.0, 7.0);
        (q * scale - w).powi(2)
    })
    .sum()
}

/// [`Scales::Search`] for one group: the multiplier in
/// `ceil(SEARCH_LOW * mceil)..=mceil` with the least squared error on the
/// row step `d` (ties keep the larger; `mceil` is absmax's).
fn search_mult(vals: &[f32], d: f32, mceil: u8) -> u8 {
    let lo = ((SEARCH_LOW * mceil as f32).ceil() as u8).max(1);
    let mut best = (f64::INFINITY, mceil);
    for mg in (lo..=mceil).rev() {
        let e = int4_error(vals.iter().map(|&v| v as f64), stored_scale(d, mg));
        if e < best.0 {
            best = (e, mg);
        }
    }
    best.1
}

/// Lower Cholesky factor of the symmetric positive definite `a` (`n x n`),
/// or `None` when it is not numerically positive definite.
fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut sum = a[i * n + j];
            for k in 0..j {
                sum -= l[i * n + k] * l[j * n + k];
            }
            if i == j {
                if sum <= 0.0 || !sum.is_finite() {
                    return None;
                }
                l[i * n + i] = sum.sqrt();
            } else {
                l[i * n + j] = sum / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// The upper triangular `U` with `H⁻¹ = Uᵀ U` of a damped `H` (GPTQ's
/// form of the inverse): `damp` times the mean diagonal is added to the
/// diagonal, and an input never seen (zero diagonal) gets a diagonal of 1.
fn inverse_upper_cholesky(h: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut a = h.to_vec();
    for i in 0..n {
        if a[i * n + i] <= 0.0 {
            a[i * n + i] = 1.0;
        }
    }
    let mean = (0..n).map(|i| a[i * n + i]).sum::<f64>() / n as f64;
    let mut damp = 0.01 * mean;
    for _ in 0..6 {
        let mut b = a.clone();
        for i in 0..n {
            b[i * n + i] += damp;
        }
        if let Some(l) = cholesky(&b, n) {
            // L⁻¹ by forward substitution, then H⁻¹ = L⁻ᵀ L⁻¹.
            let mut li = vec![0.0; n * n];
            for c in 0..n {
                for i in c..n {
                    let mut sum = if i == c { 1.0 } else { 0.0 };
                    for k in c..i {
                        sum -= l[i * n + k] * li[k * n + c];
                    }
                    li[i * n + c] = sum / l[i * n + i];
                }
            }
            let mut inv = vec![0.0; n * n];
            for i in 0..n {
                for j in 0..=i {
                    let s: f64 = (i..n).map(|k| li[k * n + i] * li[k * n + j]).sum();
                    inv[i * n + j] = s;
                    inv[j * n + i] = s;
                }
            }
            if let Some(lo) = cholesky(&inv, n) {
                let mut u = vec![0.0; n * n];
                for i in 0..n {
                    for j in 0..=i {
                        u[j * n + i] = lo[i * n + j];
                    }
                }
                return Some(u);
            }
        }
        damp *= 10.0;
    }
    None
}

/// GPTQ (Frantar et al., 2022) on the tiled int4 grid: the columns are
/// quantized in order, and each one's rounding error, weighted by the
/// inverse of the inputs' `hessian` (`E[x xᵀ]`, `cols x cols`), is moved
/// onto the columns not yet quantized, so that the error of the products
/// `W x` (not of the weights) is small. The row steps `d` stay absmax's;
/// each group's multiplier is searched (`search_mult`) on the updated
/// weights when the group is reached. Fills `m` and `q` of the first `rows`
/// rows; falls back to [`Scales::Search`] values (already in `m`, `q`) when
/// the damped hessian is not positive definite.
#[allow(clippy::too_many_arguments)]
pub fn gptq_tiled(
    values: &[f32],
    rows: usize,
    cols: usize,
    group: usize,
    d: &[f32],
    m: &mut [u8],
    q: &mut [i8],
    hessian: &[f64],
) {
    debug_assert_eq!(hessian.len(), cols * cols);
    let Some(u) = inverse_upper_cholesky(hessian, cols) else {
        return;
    };
    let groups = cols / group;
    let mut w: Vec<f64> = values[..rows * cols].iter().map(|&v| v as f64).collect();
    let mut scale = vec![0.0f64; rows];
    for c in 0..cols {
        if c % group == 0 {
            let g = c / group;
            for r in 0..rows {
                if d[r] == 0.0 {
                    continue;
                }
                let vals: Vec<f32> = w[r * cols + c..r * cols + c + group]
                    .iter()
                    .map(|&v| v as f32)
                    .collect();
                let amax = vals.iter().fold(0.0f32, |a, v| a.max(v.abs())) / 7.0;
                let mceil = (amax / d[r]).ceil().clamp(1.0, 255.0) as u8;
                let mg = search_mult(&vals, d[r], mceil);
                m[r * groups + g] = mg;
                scale[r] = stored_scale(d[r], mg) as f64;
            }
        }
        let diag = u[c * cols + c];
        for r in 0..rows {
            if d[r] == 0.0 {
                continue;
            }
            let wv = w[r * cols + c];
            let qv = (wv / scale[r]).round().clamp(-8.0, 7.0);
            q[r * cols + c] = qv as i8;
            let err = (wv - qv * scale[r]) / diag;
            let row = &mut w[r * cols..(r + 1) * cols];
            for (j, x) in row.iter_mut().enumerate().skip(c + 1) {
                *x -= err * u[c * cols + j];
            }
        }
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

    /// Deterministic heavy-tailed values (a few outliers per group, as in
    /// trained weights), from a fixed LCG.
    fn weights(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        };
        (0..n)
            .map(|_| {
                let u = next();
                let v = next();
                u * 0.05 + if v.abs() > 0.97 { v * 0.4 } else { 0.0 }
            })
            .collect()
    }

    fn tiled(values: &[f32], rows: usize, cols: usize, group: usize, scales: Scales) -> Encoded {
        encode_tiled(values, rows, cols, DType::I4, group, scales, None)
    }

    #[test]
    fn scale_search_is_never_worse_than_absmax() {
        for (seed, rows, cols, group) in [
            (1, 8, 64, 16),
            (2, 13, 96, 32),
            (3, 4, 256, 64),
            (4, 32, 64, 32),
            (5, 3, 128, 128),
        ] {
            let w = weights(rows * cols, seed);
            let absmax = tiled(&w, rows, cols, group, Scales::Absmax);
            let search = tiled(&w, rows, cols, group, Scales::Search);
            assert!(
                search.rel_rms_error <= absmax.rel_rms_error,
                "seed {seed}: search {} > absmax {}",
                search.rel_rms_error,
                absmax.rel_rms_error
            );
            // ... and per group, where it is chosen.
            for r in 0..rows {
                let d = absmax.scales[4 * r..4 * r + 4].to_vec();
                let d = f32::from_le_bytes(d.try_into().unwrap());
                for g in 0..cols / group {
                    let vals = &w[r * cols + g * group..r * cols + (g + 1) * group];
                    let amax = vals.iter().fold(0.0f32, |a, v| a.max(v.abs())) / 7.0;
                    let mceil = (amax / d).ceil().clamp(1.0, 255.0) as u8;
                    let err = |m| int4_error(vals.iter().map(|&v| v as f64), stored_scale(d, m));
                    assert!(err(search_mult(vals, d, mceil)) <= err(mceil));
                }
            }
            // On heavy-tailed weights the search does better, not just as well.
            assert!(
                search.rel_rms_error < 0.95 * absmax.rel_rms_error,
                "seed {seed}"
            );
        }
        // Absmax keeps the scheme before the search: values in -7..=7.
        let w = weights(8 * 64, 9);
        let absmax = tiled(&w, 8, 64, 16, Scales::Absmax);
        assert!(absmax
            .payload
            .iter()
            .all(|&b| generic_nibbles(b).iter().all(|&v| v >= -7)));
    }

    fn generic_nibbles(b: u8) -> [i8; 2] {
        [((b << 4) as i8) >> 4, (b as i8) >> 4]
    }

    #[test]
    fn quantization_is_deterministic() {
        let (rows, cols, group) = (12, 64, 16);
        let w = weights(rows * cols, 7);
        let h = hessian_of(&inputs(cols, 200, 3), cols);
        for scales in [Scales::Absmax, Scales::Search] {
            assert_eq!(
                tiled(&w, rows, cols, group, scales),
                tiled(&w, rows, cols, group, scales)
            );
        }
        let a = encode_tiled(&w, rows, cols, DType::I4, group, Scales::Search, Some(&h));
        let b = encode_tiled(&w, rows, cols, DType::I4, group, Scales::Search, Some(&h));
        assert_eq!(a, b);
        assert_ne!(a, tiled(&w, rows, cols, group, Scales::Search));
    }

    /// `count` input vectors of width `n` with correlated channels and a
    /// few large ones (as activations have).
    fn inputs(n: usize, count: usize, seed: u64) -> Vec<Vec<f32>> {
        let base = weights(count * 4, seed);
        let mix = weights(4 * n, 100);
        let noise = weights(count * n, seed + 200);
        (0..count)
            .map(|t| {
                (0..n)
                    .map(|c| {
                        let shared: f32 = (0..4).map(|k| base[t * 4 + k] * mix[k * n + c]).sum();
                        let big = if c % 11 == 0 { 8.0 } else { 1.0 };
                        big * (shared * 40.0 + noise[t * n + c])
                    })
                    .collect()
            })
            .collect()
    }

    fn hessian_of(xs: &[Vec<f32>], n: usize) -> Vec<f64> {
        let mut h = vec![0.0; n * n];
        for x in xs {
            for i in 0..n {
                for j in 0..n {
                    h[i * n + j] += x[i] as f64 * x[j] as f64 / xs.len() as f64;
                }
            }
        }
        h
    }

    /// Decodes a tiled int4 encoding back to `[rows, cols]` f32.
    fn decode_i4(e: &Encoded, rows: usize, cols: usize, group: usize) -> Vec<f32> {
        let prows = padded_rows(rows);
        let d: Vec<f32> = (0..prows)
            .map(|r| f32::from_le_bytes(e.scales[4 * r..4 * r + 4].try_into().unwrap()))
            .collect();
        let m = &e.scales[4 * prows..];
        let mut out = vec![0.0; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                let (byte, high) = i4_offset(r, c, cols);
                let v = generic_nibbles(e.payload[byte])[high as usize];
                out[r * cols + c] = v as f32 * d[r] * m[r * (cols / group) + c / group] as f32;
            }
        }
        out
    }

    #[test]
    fn calibration_lowers_the_product_error() {
        let (rows, cols, group) = (16, 64, 16);
        let w = weights(rows * cols, 11);
        let calib = inputs(cols, 300, 5);
        let test = inputs(cols, 300, 6);
        let h = hessian_of(&calib, cols);
        let product_error = |e: &Encoded| {
            let wq = decode_i4(e, rows, cols, group);
            let (mut err, mut norm) = (0.0f64, 0.0f64);
            for x in &test {
                for r in 0..rows {
                    let y: f64 = (0..cols)
                        .map(|c| w[r * cols + c] as f64 * x[c] as f64)
                        .sum();
                    let yq: f64 = (0..cols)
                        .map(|c| wq[r * cols + c] as f64 * x[c] as f64)
                        .sum();
                    err += (y - yq).powi(2);
                    norm += y * y;
                }
            }
            (err / norm).sqrt()
        };
        let search = tiled(&w, rows, cols, group, Scales::Search);
        let gptq = encode_tiled(&w, rows, cols, DType::I4, group, Scales::Search, Some(&h));
        let (es, eg) = (product_error(&search), product_error(&gptq));
        println!("products: gptq {eg:.4} vs search {es:.4}");
        assert!(eg < 0.8 * es, "products: gptq {eg:.4} vs search {es:.4}");
        // It trades weight error for product error.
        assert!(gptq.rel_rms_error > search.rel_rms_error);
    }

    #[test]
    fn inverse_cholesky_inverts() {
        let n = 24;
        let h = hessian_of(&inputs(n, 100, 1), n);
        let u = inverse_upper_cholesky(&h, n).unwrap();
        // Uᵀ U = (H + damp I)⁻¹: check (Uᵀ U)(H + damp I) = I.
        let mean = (0..n).map(|i| h[i * n + i]).sum::<f64>() / n as f64;
        for i in 0..n {
            for j in 0..n {
                let v: f64 = (0..n)
                    .map(|k| {
                        let inv: f64 = (0..n).map(|l| u[l * n + i] * u[l * n + k]).sum();
                        let hk = h[k * n + j] + if k == j { 0.01 * mean } else { 0.0 };
                        inv * hk
                    })
                    .sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((v - want).abs() < 1e-8, "({i},{j}) {v}");
            }
        }
    }
}
