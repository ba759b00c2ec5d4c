//! The cases of the `kernels` firmware: how many ran, how many failed, and
//! the exact sums they are checked against.

use core::fmt;

use ferrite::kernels::tiled::{i4_offset, i8_offset, TILE_ROWS};
use ferrite_boards::say;

/// Exact row sums of row block `b` of tiled weights `w` (int4 or int8,
/// `cols` columns) with the activations `q` (the definition, element by element).
pub fn block_sums(w: &[u8], q: &[i8], int4: bool, cols: usize, b: usize) -> [i32; TILE_ROWS] {
    let mut sums = [0i32; TILE_ROWS];
    for (r, sum) in sums.iter_mut().enumerate() {
        let row = b * TILE_ROWS + r;
        let mut acc = 0i64;
        for (c, &x) in q[..cols].iter().enumerate() {
            let v = if int4 {
                let (byte, high) = i4_offset(row, c, cols);
                let v = if high { w[byte] } else { w[byte] << 4 };
                i64::from((v as i8) >> 4)
            } else {
                i64::from(w[i8_offset(row, c, cols)] as i8)
            };
            acc += v * i64::from(x);
        }
        *sum = acc as i32;
    }
    sums
}

/// Counts cases and remembers whether any failed (printing the first).
pub struct Tally {
    pub cases: u32,
    pub failed: u32,
}

impl Tally {
    /// Counts one case; prints `what` if it is the first that failed.
    pub fn check(&mut self, ok: bool, what: fmt::Arguments<'_>) {
        self.cases += 1;
        if !ok {
            if self.failed == 0 {
                say!("kernels: FAIL case={} {}", self.cases, what);
            }
            self.failed += 1;
        }
    }
}
