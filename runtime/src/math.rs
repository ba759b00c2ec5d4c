//! Scalar and small vector maths shared by the mixers (f32).
//!
//! By default `exp`, `log1p` and `sqrt` come from `libm`. With the
//! `fast-math` feature, [`exp`], [`sigmoid`] and [`silu`] (and so the
//! softmaxes, `softplus` and `logsigmoid`, which call [`exp`]) run one of
//! two faster implementations, chosen for the target at build time
//! (`runtime/build.rs`, cfg `ferrite_fast_math`) like the tile kernels:
//!
//! | `ferrite_fast_math` | targets | module |
//! |---|---|---|
//! | `int` | f32 in software (Cortex-M0/M3, RV32IMAC), or any target with the `fast-math-int` feature | [`fast_int`]: integer arithmetic on the f32 bits, within 0.55 ulp |
//! | `float` | f32 in hardware (Cortex-M4F/M7/M55, RV32IMAFC, the host) | [`fast_float`]: f32 polynomial, no library call |
//!
//! Both are exact functions of their input on every target (integer steps,
//! or IEEE-rounded f32 operations in a fixed order), so a host built with
//! the same module computes a board's bits: the host CLI's `fast-math`
//! feature gives the `float` module, `fast-math-int` the `int` one.
//! [`FAST_MATH`] names the build's choice. `log1p` and `sqrt` stay `libm`'s
//! in every build (docs/design.md, Numerics, says why).
//!
//! Sines and cosines never come from `libm` at run time: their angles are
//! exact integer fractions of a turn (RoPE's 64-bit phases, BLA's
//! `pi * num / den`, [`SinPi`]), reduced exactly in integers and finished
//! by two small f32 polynomials, in every build.

pub mod fast_float;
pub mod fast_int;
mod trig;

pub use trig::SinPi;
pub(crate) use trig::{cos_poly, sin_poly};

#[cfg(ferrite_fast_math = "float")]
use fast_float as fast;
#[cfg(ferrite_fast_math = "int")]
use fast_int as fast;

/// The `exp`/`sigmoid`/`silu` of this build: `"libm"` (the default),
/// `"int"` ([`fast_int`]) or `"float"` ([`fast_float`]).
pub const FAST_MATH: &str = if cfg!(ferrite_fast_math = "int") {
    "int"
} else if cfg!(ferrite_fast_math = "float") {
    "float"
} else {
    "libm"
};

/// `e^x`: `libm::expf`, or the `fast-math` module's.
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

/// The mean of `x` and `1 / sqrt(var(x) + eps)` (the biased variance, about
/// the mean): LayerNorm's and GroupNorm's statistics, in fla's order (the
/// mean, then the centred squares).
#[cfg_attr(not(ferrite_math_noinline), inline)]
#[cfg_attr(ferrite_math_noinline, inline(never))]
pub fn mean_rstd(x: &[f32], eps: f32) -> (f32, f32) {
    let n = x.len().max(1) as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    (mean, 1.0 / libm::sqrtf(var + eps))
}

/// Scales `x` in place to unit L2 norm: `x / sqrt(sum x^2 + eps)`.
#[cfg_attr(not(ferrite_math_noinline), inline)]
#[cfg_attr(ferrite_math_noinline, inline(never))]
pub fn l2norm_in_place(x: &mut [f32], eps: f32) {
    let inv = 1.0 / libm::sqrtf(dot(x, x) + eps);
    x.iter_mut().for_each(|v| *v *= inv);
}

/// Scales `x` in place to unit L1 norm: `x / max(sum |x|, 1e-6)` (PyTorch's
/// `F.normalize(x, p=1, eps=1e-6)`, fla DeltaNet's `qk_norm = "sum"`).
pub fn l1norm_in_place(x: &mut [f32]) {
    let n = x.iter().map(|v| v.abs()).sum::<f32>().max(1e-6);
    x.iter_mut().for_each(|v| *v /= n);
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
    fn the_build_runs_the_module_it_names() {
        let expected = if cfg!(feature = "fast-math-int") {
            "int"
        } else if cfg!(feature = "fast-math") {
            if cfg!(ferrite_hard_float) {
                "float"
            } else {
                "int"
            }
        } else {
            "libm"
        };
        assert_eq!(FAST_MATH, expected);
        type Fns = (fn(f32) -> f32, fn(f32) -> f32, fn(f32) -> f32);
        let (e, s, si): Fns = match FAST_MATH {
            "int" => (fast_int::exp, fast_int::sigmoid, fast_int::silu),
            "float" => (fast_float::exp, fast_float::sigmoid, fast_float::silu),
            _ => (
                libm::expf,
                |x| 1.0 / (1.0 + libm::expf(-x)),
                |x| x * (1.0 / (1.0 + libm::expf(-x))),
            ),
        };
        for x in [-90.0f32, -3.5, -0.1, 0.0, 1e-30, 0.7, 20.0] {
            assert_eq!(exp(x).to_bits(), e(x).to_bits());
            assert_eq!(sigmoid(x).to_bits(), s(x).to_bits());
            assert_eq!(silu(x).to_bits(), si(x).to_bits());
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
