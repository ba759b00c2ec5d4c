//! Where a token's instructions go (feature `roofline`): with a clock the
//! firmware supplies ([`set_clock`]), every matrix-vector product
//! ([`crate::tensor::Tensor::matvec`], `matvec_int`) is timed from its
//! entry to its return, and the products, their multiply-accumulates and
//! the clock's ticks inside them add up in [`totals`]. The boards print
//! them as the `roofline:` line (`cargo xtask board --roofline`,
//! docs/benchmarks.md).
//!
//! The reads cost instructions of their own. [`overhead`] measures them
//! with the same clock: what one product's reads add inside its span (to
//! subtract from [`Totals::ticks`]) and what they cost in all (what a
//! build with the feature spends per product beyond one without).
//!
//! Off (the default) none of this is compiled and the products run as
//! before, so a default build's code and instruction counts do not
//! change. The totals are behind a `critical_section` (the clock itself is
//! called outside it, so that a counter widened by its wrap interrupt
//! keeps counting): a firmware links an implementation, as every board
//! does, and host tests take `critical-section`'s `std` one.

use core::cell::Cell;

use critical_section::Mutex;

/// A monotonic counter: instructions retired under QEMU, or any unit the
/// firmware reports in.
pub type Clock = fn() -> u64;

/// What the products ran since the last [`reset`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Matrix-vector products.
    pub products: u64,
    /// Their multiply-accumulates (`rows × cols` each).
    pub macs: u64,
    /// Clock ticks from each product's entry to its return, the reads'
    /// own share inside included ([`Overhead::inside`]); 0 without a clock.
    pub ticks: u64,
}

/// What timing one product costs, in clock ticks ([`overhead`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overhead {
    /// Ticks the reads add to [`Totals::ticks`] per product (the end of
    /// the first read and the start of the second).
    pub inside: u64,
    /// Ticks one timed product costs beyond the product itself: both
    /// reads and the bookkeeping.
    pub whole: u64,
}

#[derive(Clone, Copy)]
struct State {
    clock: Option<Clock>,
    totals: Totals,
}

static STATE: Mutex<Cell<State>> = Mutex::new(Cell::new(State {
    clock: None,
    totals: Totals {
        products: 0,
        macs: 0,
        ticks: 0,
    },
}));

/// Sets the clock products are timed with (`None`: products are counted,
/// not timed).
pub fn set_clock(clock: Option<Clock>) {
    critical_section::with(|cs| {
        let cell = STATE.borrow(cs);
        cell.set(State {
            clock,
            ..cell.get()
        })
    })
}

/// The totals since the last [`reset`].
pub fn totals() -> Totals {
    critical_section::with(|cs| STATE.borrow(cs).get().totals)
}

/// Sets the totals to zero.
pub fn reset() {
    restore(Totals::default());
}

fn restore(totals: Totals) {
    critical_section::with(|cs| {
        let cell = STATE.borrow(cs);
        cell.set(State {
            totals,
            ..cell.get()
        })
    })
}

/// The clock's reading (0 without one).
fn now() -> u64 {
    critical_section::with(|cs| STATE.borrow(cs).get().clock).map_or(0, |clock| clock())
}

/// Times one product from its creation to its drop, and counts it.
pub(crate) struct Product {
    start: u64,
    macs: u64,
}

impl Product {
    /// Starts timing a product of `macs` multiply-accumulates.
    #[inline(always)]
    pub(crate) fn start(macs: usize) -> Product {
        Product {
            macs: macs as u64,
            start: now(),
        }
    }
}

impl Drop for Product {
    #[inline(always)]
    fn drop(&mut self) {
        let ticks = now().wrapping_sub(self.start);
        critical_section::with(|cs| {
            let cell = STATE.borrow(cs);
            let mut s = cell.get();
            s.totals.products += 1;
            s.totals.macs += self.macs;
            s.totals.ticks += ticks;
            cell.set(s);
        })
    }
}

/// Empty products [`overhead`] times: enough that a counter of 40-125
/// instructions per tick (the QEMU Cortex-M boards' SysTick) resolves one
/// product's share to about one instruction.
const CALIBRATION: u64 = 256;

/// Measures what timing costs per product by timing 256 empty products;
/// the totals are left as they were. `whole` also holds a loop iteration
/// and 1/256 of a read: a few instructions.
pub fn overhead() -> Overhead {
    let saved = totals();
    reset();
    let begin = now();
    for _ in 0..CALIBRATION {
        let product = Product::start(0);
        core::hint::black_box(&product);
        drop(product);
    }
    let end = now();
    let inside = totals().ticks;
    restore(saved);
    let per = |ticks: u64| (ticks + CALIBRATION / 2) / CALIBRATION;
    Overhead {
        inside: per(inside),
        whole: per(end.wrapping_sub(begin)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

    static TICKS: AtomicU64 = AtomicU64::new(0);

    /// A clock that steps 10 per read.
    fn stepping() -> u64 {
        TICKS.fetch_add(10, Relaxed)
    }

    /// A product is counted with its MACs and the ticks between its two
    /// reads; [`overhead`] sees one step inside per empty product and two
    /// in all, and leaves the totals alone. (One test: the state is global.)
    #[test]
    fn products_are_counted_and_timed() {
        set_clock(Some(stepping));
        reset();
        drop(Product::start(12));
        drop(Product::start(30));
        assert_eq!(
            totals(),
            Totals {
                products: 2,
                macs: 42,
                ticks: 20
            }
        );
        let o = overhead();
        assert_eq!(
            o,
            Overhead {
                inside: 10,
                whole: 20
            }
        );
        assert_eq!(totals().products, 2);
        set_clock(None);
        reset();
        drop(Product::start(5));
        assert_eq!(
            totals(),
            Totals {
                products: 1,
                macs: 5,
                ticks: 0
            }
        );
    }
}
