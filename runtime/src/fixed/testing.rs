//! Helpers the integer steps' unit tests share (test builds only).

extern crate std;

use std::vec::Vec;

use super::block::normalize;
use super::Fx;

/// The f64 value of an [`Fx`].
pub fn fx64(x: Fx) -> f64 {
    let v = x.mantissa() as f64 * 2f64.powi(x.exponent());
    if x.is_negative() {
        -v
    } else {
        v
    }
}

pub use super::test_rng::Rng;

/// A normal block of the values `x` (rounded at 2^-24, then normalized).
pub fn block_of(x: &[f64]) -> (Vec<i32>, i32) {
    let mut m: Vec<i32> = x
        .iter()
        .map(|v| (v * 2f64.powi(24)).round() as i32)
        .collect();
    let e = normalize(&mut m, -24);
    (m, e)
}
