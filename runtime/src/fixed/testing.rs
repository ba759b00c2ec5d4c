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

/// xorshift64*, uniform in [-1, 1).
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (r >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// A normal block of the values `x` (rounded at 2^-24, then normalized).
pub fn block_of(x: &[f64]) -> (Vec<i32>, i32) {
    let mut m: Vec<i32> = x
        .iter()
        .map(|v| (v * 2f64.powi(24)).round() as i32)
        .collect();
    let e = normalize(&mut m, -24);
    (m, e)
}
