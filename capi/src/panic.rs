//! The panic handler, and the check of where panics could come from.
//!
//! A panic cannot unwind into C, and a `no_std` library cannot catch one:
//! every input error must be a status code. This crate's own code has no
//! panic path (no indexing, slicing, unchecked arithmetic or unwrapping);
//! the runtime under it promises none on input, but its compiled code still
//! holds bounds and division checks the optimiser could not remove.
//!
//! - Default: the handler calls the C library's `abort()` (newlib, picolibc,
//!   Zephyr, ESP-IDF and hosted C all have it; define one to do what the
//!   firmware wants, such as a reset).
//! - Feature `panic-check`: the handler calls
//!   `ferrite_capi_panic_is_reachable`, defined nowhere, so a program
//!   linked with `--gc-sections` links only if no panic branch is left in
//!   the code of the functions it calls. `cargo xtask capi` links a program
//!   that calls every function with it and names, through the debug info,
//!   the source line of every panic branch that is left (docs/c-api.md,
//!   "No panics").

#[cfg(all(not(test), feature = "panic-check"))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    extern "C" {
        /// Defined nowhere: see the module docs.
        fn ferrite_capi_panic_is_reachable() -> !;
    }
    // SAFETY: a program that can call this does not link (the module docs).
    unsafe { ferrite_capi_panic_is_reachable() }
}

#[cfg(all(not(test), not(feature = "panic-check")))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    extern "C" {
        /// The C library's `abort` (C99 7.20.4.1).
        fn abort() -> !;
    }
    // SAFETY: `abort` takes no arguments and does not return.
    unsafe { abort() }
}
