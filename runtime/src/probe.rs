//! Observing the inputs of matrix-vector products (feature `probe`, hosts
//! only): what `ferrite quantize --calibrate` measures its activation
//! statistics from. On a target without an operating system (every board)
//! the feature compiles to nothing, so `--all-features` builds still work
//! there.
//!
//! A hook is per thread: [`set`] installs one for the calling thread, and
//! every [`crate::tensor::Tensor::matvec`] on that thread then calls it with
//! the address of the tensor's payload (its offset in the image plus the
//! image's address) and the f32 input vector, before the product. Products
//! on other threads are not seen. Results are unchanged.

extern crate std;

use std::boxed::Box;
use std::cell::RefCell;

/// A hook: `(payload address, input vector)`.
pub type Hook = Box<dyn FnMut(usize, &[f32])>;

std::thread_local! {
    static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

/// Installs `hook` for the calling thread (`None` removes it); returns the
/// previous one.
pub fn set(hook: Option<Hook>) -> Option<Hook> {
    HOOK.with(|h| core::mem::replace(&mut *h.borrow_mut(), hook))
}

/// Calls the thread's hook, if any.
pub(crate) fn record(payload: usize, x: &[f32]) {
    HOOK.with(|h| {
        if let Ok(mut h) = h.try_borrow_mut() {
            if let Some(f) = h.as_mut() {
                f(payload, x);
            }
        }
    });
}
