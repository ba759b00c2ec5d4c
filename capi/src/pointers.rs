//! The checks every pointer from C passes before it is used: not null,
//! aligned for its type, and a length whose bytes fit `isize::MAX`.

use core::mem::size_of;

use crate::codes::{FERRITE_E_BAD_ARGUMENT, FERRITE_E_MISALIGNED, FERRITE_E_NULL_POINTER};

/// `Err(code)` on a null pointer.
pub(crate) fn non_null<T>(p: *const T) -> Result<(), i32> {
    if p.is_null() {
        Err(FERRITE_E_NULL_POINTER)
    } else {
        Ok(())
    }
}

/// `Err(FERRITE_E_MISALIGNED)` unless `p` is aligned for a `T`.
pub(crate) fn check_align<T>(p: *const T) -> Result<(), i32> {
    if (p as usize).is_multiple_of(core::mem::align_of::<T>()) {
        Ok(())
    } else {
        Err(FERRITE_E_MISALIGNED)
    }
}

/// `Err(FERRITE_E_BAD_ARGUMENT)` unless `len` `T`s fit `isize::MAX` bytes.
pub(crate) fn fits_isize<T>(len: usize) -> Result<(), i32> {
    match len.checked_mul(size_of::<T>()) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(()),
        _ => Err(FERRITE_E_BAD_ARGUMENT),
    }
}
