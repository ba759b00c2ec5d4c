//! The cases of the `kernels` firmware: how many ran, how many failed.

use core::fmt;

use ferrite_boards::say;

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
