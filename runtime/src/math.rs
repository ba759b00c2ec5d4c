//! Scalar and small vector maths shared by the mixers (f32, `libm` for accuracy).

/// `1 / (1 + e^-x)`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + libm::expf(-x))
}

/// `x * sigmoid(x)` (SiLU / swish).
#[inline]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// `ln(1 + e^x)`, linear above 20 (PyTorch's threshold).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        libm::log1pf(libm::expf(x))
    }
}

/// `ln(sigmoid(x))`, stable for large |x|.
#[inline]
pub fn logsigmoid(x: f32) -> f32 {
    // log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))
    x.min(0.0) - libm::log1pf(libm::expf(-x.abs()))
}

/// Dot product of two equally long slices (the shorter length wins).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `y += a * x`.
#[inline]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// `1 / sqrt(mean(x^2) + eps)`.
#[inline]
pub fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ms = dot(x, x) / x.len().max(1) as f32;
    1.0 / libm::sqrtf(ms + eps)
}

/// Scales `x` in place to unit L2 norm: `x / sqrt(sum x^2 + eps)`.
#[inline]
pub fn l2norm_in_place(x: &mut [f32], eps: f32) {
    let inv = 1.0 / libm::sqrtf(dot(x, x) + eps);
    x.iter_mut().for_each(|v| *v *= inv);
}

/// In-place softmax (subtracts the max first). Empty input is left alone.
pub fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = libm::expf(*v - max);
        sum += *v;
    }
    if sum > 0.0 {
        let inv = 1.0 / sum;
        x.iter_mut().for_each(|v| *v *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_match_definitions() {
        for &x in &[-30.0f32, -3.0, -0.5, 0.0, 0.5, 3.0, 30.0] {
            let s = 1.0 / (1.0 + (-x as f64).exp());
            assert!((sigmoid(x) as f64 - s).abs() < 1e-6);
            assert!((logsigmoid(x) as f64 - s.ln()).abs() < 1e-5 * (1.0 + s.ln().abs()));
            let sp = if x > 20.0 {
                x as f64
            } else {
                (x as f64).exp().ln_1p()
            };
            assert!((softplus(x) as f64 - sp).abs() < 1e-5 * (1.0 + sp));
        }
    }

    #[test]
    fn softmax_sums_to_one_and_survives_large_inputs() {
        let mut x = [1000.0f32, 999.0, -1000.0];
        softmax_in_place(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[0] > x[1] && x[2] == 0.0);
    }
}
