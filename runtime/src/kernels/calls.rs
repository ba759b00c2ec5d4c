//! What the tile kernels of this build ran since start-up: whole-matrix
//! products the assembly took, and products its wrappers refused (run by
//! the portable code instead). The boards print both on the integer token
//! path, and `cargo xtask test-boards` requires assembly and no fallback on
//! every board with assembly (docs/testing.md).
//!
//! Plain counters (an atomic load and store, no read-modify-write: the
//! M0 has none), so sessions stepping on two cores at once may lose counts;
//! a single-core run counts exactly. Nothing is counted in the portable
//! module, nor where a module has no assembly for a dtype by design (int4
//! on the M3 and RV32).

use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

static ASSEMBLY: AtomicU32 = AtomicU32::new(0);
static FALLBACK: AtomicU32 = AtomicU32::new(0);

/// Whole-matrix products (`arch::rows_i8`: a matrix of one group per row)
/// that the assembly ran. Per-group products (`dot4_*`) are not counted:
/// a count per tile would cost a few percent of their instructions.
pub fn assembly() -> u32 {
    ASSEMBLY.load(Relaxed)
}

/// Products, whole-matrix or per group, that an assembly wrapper refused
/// (a shape or alignment it cannot take) and the portable code ran.
pub fn fallback() -> u32 {
    FALLBACK.load(Relaxed)
}

fn bump(c: &AtomicU32) {
    c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
}

/// Counts a whole-matrix call: `ran` is whether the assembly took it.
/// Returns `ran`.
#[allow(dead_code)] // only the modules with assembly call it
pub(crate) fn rows(ran: bool) -> bool {
    bump(if ran { &ASSEMBLY } else { &FALLBACK });
    ran
}

/// Counts a product the assembly refused.
#[allow(dead_code)] // only the modules with assembly call it
pub(crate) fn fell_back() {
    bump(&FALLBACK);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters move as the assembly modules report: one whole-matrix
    /// call taken, one refused, one per-group product refused. (On the host
    /// nothing else counts: the portable module has no assembly.)
    #[test]
    fn each_report_moves_its_counter() {
        let (assembly_before, fallback_before) = (assembly(), fallback());
        assert!(rows(true));
        assert!(!rows(false));
        fell_back();
        assert_eq!(assembly(), assembly_before + 1);
        assert_eq!(fallback(), fallback_before + 2);
    }
}
