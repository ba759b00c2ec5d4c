//! Scalar and small vector maths shared by the mixers (f32).
//!
//! By default `exp`, `log1p` and `sqrt` come from `libm`. With the
//! `fast-math` feature, [`exp`], [`sigmoid`] and [`silu`] (and so the
//! softmaxes, `softplus` and `logsigmoid`, which call [`exp`]) run the
//! integer versions of [`fast`] instead: within one unit in the last place,
//! a tenth of the instructions on a core without an FPU. `log1p` and `sqrt`
//! stay `libm`'s in both builds (docs/design.md, Numerics, says why).

pub mod fast;

/// `e^x`: `libm::expf`, or [`fast::exp`] with the `fast-math` feature.
#[inline]
pub fn exp(x: f32) -> f32 {
    #[cfg(feature = "fast-math")]
    {
        fast::exp(x)
    }
    #[cfg(not(feature = "fast-math"))]
    {
        libm::expf(x)
    }
}

/// `1 / (1 + e^-x)`.
#[cfg_attr(not(ferrite_math_noinline), inline)]
#[cfg_attr(ferrite_math_noinline, inline(never))]
pub fn sigmoid(x: f32) -> f32 {
    #[cfg(feature = "fast-math")]
    {
        fast::sigmoid(x)
    }
    #[cfg(not(feature = "fast-math"))]
    {
        1.0 / (1.0 + libm::expf(-x))
    }
}

/// `x * sigmoid(x)` (SiLU / swish).
#[cfg_attr(not(ferrite_math_noinline), inline)]
#[cfg_attr(ferrite_math_noinline, inline(never))]
pub fn silu(x: f32) -> f32 {
    #[cfg(feature = "fast-math")]
    {
        fast::silu(x)
    }
    #[cfg(not(feature = "fast-math"))]
    {
        x * sigmoid(x)
    }
}

/// `ln(1 + e^x)`, linear above 20 (PyTorch's threshold).
#[cfg_attr(not(ferrite_math_noinline), inline)]
#[cfg_attr(ferrite_math_noinline, inline(never))]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        libm::log1pf(exp(x))
    }
}

/// `ln(sigmoid(x))`, stable for large |x|.
#[cfg_attr(not(ferrite_math_noinline), inline)]
#[cfg_attr(ferrite_math_noinline, inline(never))]
pub fn logsigmoid(x: f32) -> f32 {
    // log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))
    x.min(0.0) - libm::log1pf(exp(-x.abs()))
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
#[cfg_attr(not(ferrite_math_noinline), inline)]
#[cfg_attr(ferrite_math_noinline, inline(never))]
pub fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ms = dot(x, x) / x.len().max(1) as f32;
    1.0 / libm::sqrtf(ms + eps)
}

/// Scales `x` in place to unit L2 norm: `x / sqrt(sum x^2 + eps)`.
#[cfg_attr(not(ferrite_math_noinline), inline)]
#[cfg_attr(ferrite_math_noinline, inline(never))]
pub fn l2norm_in_place(x: &mut [f32], eps: f32) {
    let inv = 1.0 / libm::sqrtf(dot(x, x) + eps);
    x.iter_mut().for_each(|v| *v *= inv);
}

/// In-place softmax (subtracts the max first). Empty input is left alone.
#[cfg_attr(ferrite_math_noinline, inline(never))]
pub fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = exp(*v - max);
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
