//! The opaque handles: fixed-size, 8-byte aligned storage that C allocates
//! (statically, on the stack, anywhere) and the library fills with a tag and
//! the Rust value. The sizes are the same on every target (what a 64-bit
//! host needs; a 32-bit target leaves some bytes unused), so `ferrite.h`
//! has one set of numbers; the asserts below fail the build on a target
//! where a Rust type would not fit.

use core::mem::{align_of, size_of};

use ferrite::{Model, Sampler, Session};

use crate::codes::FERRITE_E_BAD_HANDLE;
use crate::pointers::{check_align, non_null};

/// 8-byte words of a [`ferrite_model`].
pub const FERRITE_MODEL_WORDS: usize = 48;
/// 8-byte words of a [`ferrite_session`].
pub const FERRITE_SESSION_WORDS: usize = 64;
/// 8-byte words of a [`ferrite_sampler`].
pub const FERRITE_SAMPLER_WORDS: usize = 8;

/// A loaded model: a validated view of an image (`ferrite::Model`). Made by
/// `ferrite_model_load` or `ferrite_update_validate`; plain data, so it may
/// be copied; valid as long as its image is.
#[repr(C)]
pub struct ferrite_model {
    _opaque: [u64; FERRITE_MODEL_WORDS],
}

/// A token stream over a model whose state lives in a caller's buffer
/// (`ferrite::Session`). Made by `ferrite_session_init`; do not copy it
/// while it is in use (a copy would share its buffer).
#[repr(C)]
pub struct ferrite_session {
    _opaque: [u64; FERRITE_SESSION_WORDS],
}

/// A sampler with its random state (`ferrite::Sampler`). Made by
/// `ferrite_sampler_init`.
#[repr(C)]
pub struct ferrite_sampler {
    _opaque: [u64; FERRITE_SAMPLER_WORDS],
}

/// What a handle holds: a tag that says it was made by its init function,
/// then the value.
#[repr(C)]
struct Cell<T> {
    tag: u32,
    value: T,
}

const MODEL_TAG: u32 = u32::from_le_bytes(*b"FMdl");
const SESSION_TAG: u32 = u32::from_le_bytes(*b"FSes");
const SAMPLER_TAG: u32 = u32::from_le_bytes(*b"FSmp");

type ModelCell = Cell<Model<'static>>;
type SessionCell = Cell<Session<'static, 'static>>;
type SamplerCell = Cell<Sampler>;

/// Each Rust value fits its handle, and no handle needs more alignment than 8.
const _: () = {
    assert!(size_of::<ModelCell>() <= size_of::<ferrite_model>());
    assert!(size_of::<SessionCell>() <= size_of::<ferrite_session>());
    assert!(size_of::<SamplerCell>() <= size_of::<ferrite_sampler>());
    assert!(align_of::<ModelCell>() <= align_of::<ferrite_model>());
    assert!(align_of::<SessionCell>() <= align_of::<ferrite_session>());
    assert!(align_of::<SamplerCell>() <= align_of::<ferrite_sampler>());
    assert!(align_of::<ferrite_model>() == 8);
};

/// Stores `value` with `tag` in the handle at `p`.
///
/// # Safety
/// `p` is non-null, aligned for `H` and writable for `size_of::<H>()` bytes.
unsafe fn init<H, T>(p: *mut H, tag: u32, value: T) {
    // SAFETY: `Cell<T>` fits `H` and needs no more alignment (the asserts
    // above, for each pair this is called with); `p` is writable.
    unsafe { p.cast::<Cell<T>>().write(Cell { tag, value }) };
}

/// The value in the handle at `p`, after the null, alignment and tag checks.
///
/// # Safety
/// `p` is null, or readable for `size_of::<H>()` bytes: a handle made by its
/// init function (or, for the tag check to refuse it, zeroed or otherwise
/// written by C).
unsafe fn get<H, T>(p: *const H, tag: u32) -> Result<*mut T, i32> {
    non_null(p)?;
    check_align(p)?;
    let cell = p.cast::<Cell<T>>().cast_mut();
    // SAFETY: readable (the contract); `tag` is the first field, a u32 at
    // the start of an 8-aligned handle.
    let found = unsafe { core::ptr::addr_of!((*cell).tag).read() };
    if found != tag {
        return Err(FERRITE_E_BAD_HANDLE);
    }
    // SAFETY: in bounds of the handle (the tag says its init function
    // stored a `Cell<T>` here).
    Ok(unsafe { core::ptr::addr_of_mut!((*cell).value) })
}

/// Stores a model in `p`.
///
/// # Safety
/// As [`init`].
pub(crate) unsafe fn init_model(p: *mut ferrite_model, m: Model<'static>) {
    // SAFETY: the contract.
    unsafe { init(p, MODEL_TAG, m) }
}

/// Stores a session in `p`.
///
/// # Safety
/// As [`init`].
pub(crate) unsafe fn init_session(p: *mut ferrite_session, s: Session<'static, 'static>) {
    // SAFETY: the contract.
    unsafe { init(p, SESSION_TAG, s) }
}

/// Stores a sampler in `p`.
///
/// # Safety
/// As [`init`].
pub(crate) unsafe fn init_sampler(p: *mut ferrite_sampler, s: Sampler) {
    // SAFETY: the contract.
    unsafe { init(p, SAMPLER_TAG, s) }
}

/// The model in `p`.
///
/// # Safety
/// As [`get`]; the model's image is still valid, and nothing writes the
/// handle during `'a`.
pub(crate) unsafe fn model_ref<'a>(p: *const ferrite_model) -> Result<&'a Model<'static>, i32> {
    // SAFETY: a `Model` stored by `init_model` (the tag), not written during
    // `'a` (the contract).
    unsafe { get::<_, Model<'static>>(p, MODEL_TAG).map(|v| &*v) }
}

/// The session in `p`, shared.
///
/// # Safety
/// As [`get`]; nothing writes the handle during `'a`.
pub(crate) unsafe fn session_ref<'a>(
    p: *const ferrite_session,
) -> Result<&'a Session<'static, 'static>, i32> {
    // SAFETY: a `Session` stored by `init_session` (the tag), not written
    // during `'a` (the contract).
    unsafe { get::<_, Session<'static, 'static>>(p, SESSION_TAG).map(|v| &*v) }
}

/// The session in `p`, exclusive.
///
/// # Safety
/// As [`get`]; nothing else reads or writes the handle during `'a`.
pub(crate) unsafe fn session_mut<'a>(
    p: *mut ferrite_session,
) -> Result<&'a mut Session<'static, 'static>, i32> {
    // SAFETY: a `Session` stored by `init_session` (the tag), exclusive
    // during `'a` (the contract).
    unsafe { get::<_, Session<'static, 'static>>(p, SESSION_TAG).map(|v| &mut *v) }
}

/// The sampler in `p`.
///
/// # Safety
/// As [`get`]; nothing else reads or writes the handle during `'a`.
pub(crate) unsafe fn sampler_mut<'a>(p: *mut ferrite_sampler) -> Result<&'a mut Sampler, i32> {
    // SAFETY: a `Sampler` stored by `init_sampler` (the tag), exclusive
    // during `'a` (the contract).
    unsafe { get::<_, Sampler>(p, SAMPLER_TAG).map(|v| &mut *v) }
}

/// Bytes each Rust value takes in its handle on this target (for the tests
/// and `docs/c-api.md`).
#[cfg(test)]
pub(crate) const USED: [(&str, usize, usize); 3] = [
    ("model", size_of::<ModelCell>(), size_of::<ferrite_model>()),
    (
        "session",
        size_of::<SessionCell>(),
        size_of::<ferrite_session>(),
    ),
    (
        "sampler",
        size_of::<SamplerCell>(),
        size_of::<ferrite_sampler>(),
    ),
];
