//! The `roofline:` line of the QEMU boards' `generate` firmware (feature
//! `roofline`): the runtime times every matrix-vector product with the
//! instruction counter ([`ferrite::roofline`]), and the line splits a
//! token's instructions into the products', the rest and the timing's own
//! (`ferrite_common::roofline`, docs/benchmarks.md).

use ferrite::roofline::{self, Overhead};
use ferrite_common::roofline::Roofline;

use crate::counter;
use crate::io::Platform;

/// Gives the runtime the instruction counter, measures what timing a
/// product costs, and zeroes the totals: called just before the timed
/// region starts.
pub fn start() -> Overhead {
    roofline::set_clock(Some(counter::instructions));
    let overhead = roofline::overhead();
    roofline::reset();
    overhead
}

/// Prints the line of a timed region that fed `fed` tokens in `elapsed`
/// instructions, of a model of `macs_per_token`.
pub fn line<P: Platform>(
    p: &mut P,
    macs_per_token: u64,
    overhead: Overhead,
    fed: usize,
    elapsed: u64,
) {
    let t = roofline::totals();
    let r = Roofline::from_counts(
        macs_per_token,
        fed as u64,
        elapsed,
        t.products,
        t.macs,
        t.ticks,
        overhead.inside,
        overhead.whole,
    );
    p.line(format_args!("{r}"));
}
