//! Caller-owned memories of `cross` layers (docs/cross-attention.md,
//! "Caller-owned memories"): sized by [`ferrite_memory_len`], written by
//! the device encoder, attended to token by token. Each call comes in three
//! word types: f32 (`float`, 4 bytes a word), f16 (`uint16_t` holding
//! IEEE 754 binary16 bits, 2 bytes a word: half the RAM) and int8 with an
//! f32 scale a row ([`ferrite_memory_rows`]: a quarter of the RAM plus 4
//! bytes a row), as `ferrite::Memory::new`, `new_f16` and `new_i8`.

use core::ffi::c_void;

use ferrite::{f16, Memory, Model, Sampler, Session};

use crate::codes::{error_code, step_code, FERRITE_E_BAD_MEMORY, FERRITE_E_SIZE_OVERFLOW};
use crate::handles::session_mut;
use crate::pointers::{check_align, non_null};
use crate::{
    feed_and_point, ferrite_sampler, ferrite_session, ferrite_token_fn, generate_and_count,
    on_token, slice, slice_mut, status,
};

/// A word of a caller memory: what the Rust API takes for it.
trait Word: Sized + 'static {
    /// The memory over `words` for `model`, `slots` slots.
    fn memory<'a>(
        model: &Model<'_>,
        slots: usize,
        words: &'a [Self],
    ) -> ferrite::Result<Memory<'a>>;
    /// The device encoder into `out`.
    fn encode(s: &mut Session<'_, '_>, tokens: &[u32], out: &mut [Self]) -> ferrite::Result<()>;
}

impl Word for f32 {
    fn memory<'a>(
        model: &Model<'_>,
        slots: usize,
        words: &'a [f32],
    ) -> ferrite::Result<Memory<'a>> {
        Memory::new(model, slots, words)
    }

    fn encode(s: &mut Session<'_, '_>, tokens: &[u32], out: &mut [f32]) -> ferrite::Result<()> {
        s.encode_memory(tokens, out).map(|_| ())
    }
}

impl Word for f16 {
    fn memory<'a>(
        model: &Model<'_>,
        slots: usize,
        words: &'a [f16],
    ) -> ferrite::Result<Memory<'a>> {
        Memory::new_f16(model, slots, words)
    }

    fn encode(s: &mut Session<'_, '_>, tokens: &[u32], out: &mut [f16]) -> ferrite::Result<()> {
        s.encode_memory_f16(tokens, out).map(|_| ())
    }
}

/// Writes into `*out` the bytes of a caller-owned memory of `slots` slots
/// for `image` (`len` bytes): `ferrite::memory_len(image, slots)` words of
/// 4 bytes, the keys and values of every `cross` layer
/// (docs/cross-attention.md, "Caller-owned memories"); an f16 memory
/// (`ferrite_*_memory_f16`) takes half of it. As [`crate::ferrite_session_len`],
/// the image need not be aligned for this call.
///
/// Returns `FERRITE_E_BAD_MEMORY` for a model without a `cross` layer or
/// `slots` 0, an image error, or an argument error.
///
/// # Safety
/// `image` points to `len` readable bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_memory_len(
    image: *const u8,
    len: usize,
    slots: usize,
    out: *mut usize,
) -> i32 {
    status((|| {
        non_null(out)?;
        check_align(out)?;
        // SAFETY: `len` readable bytes at `image` (the contract).
        let image = unsafe { slice(image, len) }?;
        let words = ferrite::memory_len(image, slots).map_err(error_code)?;
        let bytes = words.checked_mul(4).ok_or(FERRITE_E_SIZE_OVERFLOW)?;
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe { out.write(bytes) };
        Ok(())
    })())
}

/// A caller memory as C passes it (its buffers and their bytes), read as a
/// [`Memory`] of `slots` slots for `model`: `FERRITE_E_BAD_MEMORY` when a
/// size is not what [`ferrite_memory_len`] (and [`ferrite_memory_rows`])
/// give for `slots`.
trait Source: Copy {
    /// # Safety
    /// Every buffer points to its bytes, readable for `'a`.
    unsafe fn memory<'a>(self, model: &Model<'_>, slots: usize) -> Result<Memory<'a>, i32>;
}

/// Where the device encoder writes a caller memory (its buffers and their
/// bytes).
trait Sink {
    /// Runs the encoder on `tokens` into the buffers.
    ///
    /// # Safety
    /// Every buffer points to its bytes, writable and apart from the
    /// session's buffer.
    unsafe fn encode(self, s: &mut Session<'_, '_>, tokens: &[u32]) -> Result<(), i32>;
}

/// Words of one type, `bytes` bytes at `ptr`.
#[derive(Clone, Copy)]
struct Words<P> {
    ptr: P,
    bytes: usize,
}

/// int8 words and a scale a row.
#[derive(Clone, Copy)]
struct Int8<Q, S> {
    q: Q,
    q_bytes: usize,
    scales: S,
    scale_bytes: usize,
}

/// `bytes` as a count of `T`s (`FERRITE_E_BAD_MEMORY` when it is not one).
fn count<T>(bytes: usize) -> Result<usize, i32> {
    if bytes.is_multiple_of(size_of::<T>()) {
        Ok(bytes / size_of::<T>())
    } else {
        Err(FERRITE_E_BAD_MEMORY)
    }
}

impl<W: Word> Source for Words<*const W> {
    unsafe fn memory<'a>(self, model: &Model<'_>, slots: usize) -> Result<Memory<'a>, i32> {
        // SAFETY: `bytes` readable bytes at `ptr` (the contract).
        let words = unsafe { slice(self.ptr, count::<W>(self.bytes)?) }?;
        W::memory(model, slots, words).map_err(error_code)
    }
}

impl<W: Word> Sink for Words<*mut W> {
    unsafe fn encode(self, s: &mut Session<'_, '_>, tokens: &[u32]) -> Result<(), i32> {
        // SAFETY: `bytes` writable bytes, not the session's (the contract).
        let out = unsafe { slice_mut(self.ptr, count::<W>(self.bytes)?) }?;
        W::encode(s, tokens, out).map_err(error_code)
    }
}

impl Source for Int8<*const i8, *const f32> {
    unsafe fn memory<'a>(self, model: &Model<'_>, slots: usize) -> Result<Memory<'a>, i32> {
        // SAFETY: each buffer's bytes are readable (the contract).
        let q = unsafe { slice(self.q, self.q_bytes) }?;
        // SAFETY: as above.
        let scales = unsafe { slice(self.scales, count::<f32>(self.scale_bytes)?) }?;
        Memory::new_i8(model, slots, q, scales).map_err(error_code)
    }
}

impl Sink for Int8<*mut i8, *mut f32> {
    unsafe fn encode(self, s: &mut Session<'_, '_>, tokens: &[u32]) -> Result<(), i32> {
        // SAFETY: each buffer's bytes are writable, apart from each other
        // and the session's (the contract).
        let q = unsafe { slice_mut(self.q, self.q_bytes) }?;
        // SAFETY: as above.
        let scales = unsafe { slice_mut(self.scales, count::<f32>(self.scale_bytes)?) }?;
        s.encode_memory_i8(tokens, q, scales)
            .map(|_| ())
            .map_err(error_code)
    }
}

/// [`ferrite_encode_memory`] into `sink`.
///
/// # Safety
/// As [`ferrite_encode_memory`].
unsafe fn encode(
    session: *mut ferrite_session,
    tokens: *const u32,
    n: usize,
    sink: impl Sink,
) -> i32 {
    status((|| {
        // SAFETY: the contract.
        let tokens = unsafe { slice(tokens, n) }?;
        // SAFETY: the contract.
        let s = unsafe { session_mut(session) }?;
        // SAFETY: the contract.
        unsafe { sink.encode(s, tokens) }
    })())
}

/// [`ferrite_feed_with_memory`] with the memory `source`.
///
/// # Safety
/// As [`ferrite_feed_with_memory`].
unsafe fn feed(
    session: *mut ferrite_session,
    token: u32,
    source: impl Source,
    slots: usize,
    logits: *mut *const f32,
    n: *mut usize,
) -> i32 {
    let step = |s: &mut Session<'static, 'static>| {
        // SAFETY: the buffers' bytes are readable (the contract).
        let memory = unsafe { source.memory(s.model(), slots) }?;
        let l = s.feed_with_memory(token, &memory).map_err(step_code)?;
        Ok((l.as_ptr(), l.len()))
    };
    // SAFETY: the contract.
    unsafe { feed_and_point(session, logits, n, step) }
}

/// [`ferrite_generate_with_memory`] with the memory `source`.
///
/// # Safety
/// As [`ferrite_generate_with_memory`].
#[allow(clippy::too_many_arguments)]
unsafe fn generate(
    session: *mut ferrite_session,
    prompt: *const u32,
    prompt_len: usize,
    n: usize,
    sampler: *mut ferrite_sampler,
    source: impl Source,
    slots: usize,
    callback: ferrite_token_fn,
    user_data: *mut c_void,
    generated: *mut usize,
) -> i32 {
    let run = |s: &mut Session<'static, 'static>, prompt: &[u32], sampler: &mut Sampler| {
        // SAFETY: the buffers' bytes are readable (the contract).
        let memory = unsafe { source.memory(s.model(), slots) }?;
        s.generate_with_memory(prompt, n, sampler, &memory, on_token(callback, user_data))
            .map_err(step_code)
    };
    // SAFETY: the contract.
    unsafe { generate_and_count(session, prompt, prompt_len, sampler, generated, run) }
}

/// Runs the model's memory encoder on the device (`ferrite::Session::encode_memory`,
/// docs/cross-attention.md, "The memory encoder"): the memory text's
/// `tokens` (`n` ids, one slot each) become the keys and values of every
/// `cross` layer, written into `memory` (`bytes` bytes, 4-byte aligned,
/// exactly [`ferrite_memory_len`] for `n` slots), ready for
/// [`ferrite_feed_with_memory`] with `slots` = `n`. The session is the
/// encoder's workspace: its stream is reset before and after (position 0,
/// baked memory 0 selected). On an image on the integer token path the
/// encoder is that path's integer code.
///
/// Returns `FERRITE_E_BAD_MEMORY` (no `cross` layer, no tokens, a buffer
/// of another size), `FERRITE_E_TOKEN_OUT_OF_RANGE`, or an argument or
/// handle error; `memory` may be partly written then.
///
/// # Safety
/// `session` was made by [`crate::ferrite_session_init`] and is not used
/// concurrently; `tokens` points to `n` readable ids; `memory` to `bytes`
/// writable bytes that do not overlap the session's buffer.
#[no_mangle]
pub unsafe extern "C" fn ferrite_encode_memory(
    session: *mut ferrite_session,
    tokens: *const u32,
    n: usize,
    memory: *mut f32,
    bytes: usize,
) -> i32 {
    // SAFETY: the contract.
    unsafe { encode(session, tokens, n, Words { ptr: memory, bytes }) }
}

/// [`crate::ferrite_feed`] attending to a caller-owned memory: `memory` (`bytes`
/// bytes, 4-byte aligned) holds `slots` slots of keys and values for every
/// `cross` layer, as [`ferrite_encode_memory`] writes them (or as computed
/// elsewhere, in the layout docs/cross-attention.md gives), in place of
/// the selected baked memory, for this token only. The memory is read,
/// never kept: pass it again with every token.
///
/// Returns `FERRITE_E_BAD_MEMORY` (a memory whose size is not
/// [`ferrite_memory_len`]'s for `slots`, or a model without a `cross`
/// layer; the state is unchanged) or what [`crate::ferrite_feed`] returns.
///
/// # Safety
/// As [`crate::ferrite_feed`]; `memory` points to `bytes` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ferrite_feed_with_memory(
    session: *mut ferrite_session,
    token: u32,
    memory: *const f32,
    bytes: usize,
    slots: usize,
    logits: *mut *const f32,
    n: *mut usize,
) -> i32 {
    // SAFETY: the contract.
    unsafe {
        feed(
            session,
            token,
            Words { ptr: memory, bytes },
            slots,
            logits,
            n,
        )
    }
}

/// [`crate::ferrite_generate`] attending to a caller-owned memory (as
/// [`ferrite_feed_with_memory`]'s) with every token, the prompt's and the
/// generated ones: `ferrite::Session::generate_with_memory`.
///
/// Returns `FERRITE_E_BAD_MEMORY` (nothing is fed then) or what
/// [`crate::ferrite_generate`] returns.
///
/// # Safety
/// As [`crate::ferrite_generate`]; `memory` points to `bytes` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ferrite_generate_with_memory(
    session: *mut ferrite_session,
    prompt: *const u32,
    prompt_len: usize,
    n: usize,
    sampler: *mut ferrite_sampler,
    memory: *const f32,
    bytes: usize,
    slots: usize,
    callback: ferrite_token_fn,
    user_data: *mut c_void,
    generated: *mut usize,
) -> i32 {
    // SAFETY: the contract.
    unsafe {
        let source = Words { ptr: memory, bytes };
        generate(
            session, prompt, prompt_len, n, sampler, source, slots, callback, user_data, generated,
        )
    }
}

/// [`ferrite_encode_memory`] into f16 words (`uint16_t`, IEEE 754 binary16
/// bits): `bytes` is half of [`ferrite_memory_len`]'s, 2-byte aligned.
/// Each key and value is computed as for [`ferrite_encode_memory`], then
/// rounded to the nearest f16 (`ferrite::Session::encode_memory_f16`).
///
/// # Safety
/// As [`ferrite_encode_memory`].
#[no_mangle]
pub unsafe extern "C" fn ferrite_encode_memory_f16(
    session: *mut ferrite_session,
    tokens: *const u32,
    n: usize,
    memory: *mut u16,
    bytes: usize,
) -> i32 {
    // SAFETY: the contract; `f16` is `u16`'s layout (`repr(transparent)`).
    unsafe {
        encode(
            session,
            tokens,
            n,
            Words {
                ptr: memory.cast::<f16>(),
                bytes,
            },
        )
    }
}

/// [`ferrite_feed_with_memory`] over f16 words (as
/// [`ferrite_encode_memory_f16`] writes them): half the RAM; the logits
/// are those of an f32 memory holding the same values.
///
/// # Safety
/// As [`ferrite_feed_with_memory`].
#[no_mangle]
pub unsafe extern "C" fn ferrite_feed_with_memory_f16(
    session: *mut ferrite_session,
    token: u32,
    memory: *const u16,
    bytes: usize,
    slots: usize,
    logits: *mut *const f32,
    n: *mut usize,
) -> i32 {
    // SAFETY: the contract; `f16` is `u16`'s layout (`repr(transparent)`).
    unsafe {
        feed(
            session,
            token,
            Words {
                ptr: memory.cast::<f16>(),
                bytes,
            },
            slots,
            logits,
            n,
        )
    }
}

/// [`ferrite_generate_with_memory`] over f16 words (as
/// [`ferrite_feed_with_memory_f16`]'s).
///
/// # Safety
/// As [`ferrite_generate_with_memory`].
#[no_mangle]
pub unsafe extern "C" fn ferrite_generate_with_memory_f16(
    session: *mut ferrite_session,
    prompt: *const u32,
    prompt_len: usize,
    n: usize,
    sampler: *mut ferrite_sampler,
    memory: *const u16,
    bytes: usize,
    slots: usize,
    callback: ferrite_token_fn,
    user_data: *mut c_void,
    generated: *mut usize,
) -> i32 {
    // SAFETY: the contract; `f16` is `u16`'s layout (`repr(transparent)`).
    unsafe {
        let source = Words {
            ptr: memory.cast::<f16>(),
            bytes,
        };
        generate(
            session, prompt, prompt_len, n, sampler, source, slots, callback, user_data, generated,
        )
    }
}

/// Writes into `*out` the rows of a caller-owned memory of `slots` slots
/// for `image` (`len` bytes): `ferrite::memory_rows(image, slots)`, a row
/// being one slot's key or value in one `cross` layer. An int8 memory
/// (`ferrite_*_memory_i8`) keeps one f32 scale a row: `4 * rows` bytes of
/// scales beside its `ferrite_memory_len / 4` bytes of words. Errors as
/// [`ferrite_memory_len`]'s.
///
/// # Safety
/// `image` points to `len` readable bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_memory_rows(
    image: *const u8,
    len: usize,
    slots: usize,
    out: *mut usize,
) -> i32 {
    status((|| {
        non_null(out)?;
        check_align(out)?;
        // SAFETY: `len` readable bytes at `image` (the contract).
        let image = unsafe { slice(image, len) }?;
        let rows = ferrite::memory_rows(image, slots).map_err(error_code)?;
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe { out.write(rows) };
        Ok(())
    })())
}

/// [`ferrite_encode_memory`] into int8 words (`q`, `q_bytes`: a quarter
/// of [`ferrite_memory_len`]'s bytes) and one f32 scale a row (`scales`,
/// `scale_bytes`: 4 x [`ferrite_memory_rows`], 4-byte aligned): each row
/// computed as for [`ferrite_encode_memory`], its scale its largest
/// magnitude / 127, each word rounded to nearest
/// (`ferrite::Session::encode_memory_i8`). A row's values are `q[i] *
/// scale`.
///
/// # Safety
/// As [`ferrite_encode_memory`], for both buffers (apart from each other).
#[no_mangle]
pub unsafe extern "C" fn ferrite_encode_memory_i8(
    session: *mut ferrite_session,
    tokens: *const u32,
    n: usize,
    q: *mut i8,
    q_bytes: usize,
    scales: *mut f32,
    scale_bytes: usize,
) -> i32 {
    let sink = Int8 {
        q,
        q_bytes,
        scales,
        scale_bytes,
    };
    // SAFETY: the contract.
    unsafe { encode(session, tokens, n, sink) }
}

/// [`ferrite_feed_with_memory`] over int8 words and their scales (as
/// [`ferrite_encode_memory_i8`] writes them): a quarter of the RAM and 4
/// bytes a row.
///
/// # Safety
/// As [`ferrite_feed_with_memory`], for both buffers.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ferrite_feed_with_memory_i8(
    session: *mut ferrite_session,
    token: u32,
    q: *const i8,
    q_bytes: usize,
    scales: *const f32,
    scale_bytes: usize,
    slots: usize,
    logits: *mut *const f32,
    n: *mut usize,
) -> i32 {
    let source = Int8 {
        q,
        q_bytes,
        scales,
        scale_bytes,
    };
    // SAFETY: the contract.
    unsafe { feed(session, token, source, slots, logits, n) }
}

/// [`ferrite_generate_with_memory`] over int8 words and their scales (as
/// [`ferrite_feed_with_memory_i8`]'s).
///
/// # Safety
/// As [`ferrite_generate_with_memory`], for both buffers.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ferrite_generate_with_memory_i8(
    session: *mut ferrite_session,
    prompt: *const u32,
    prompt_len: usize,
    n: usize,
    sampler: *mut ferrite_sampler,
    q: *const i8,
    q_bytes: usize,
    scales: *const f32,
    scale_bytes: usize,
    slots: usize,
    callback: ferrite_token_fn,
    user_data: *mut c_void,
    generated: *mut usize,
) -> i32 {
    let source = Int8 {
        q,
        q_bytes,
        scales,
        scale_bytes,
    };
    // SAFETY: the contract.
    unsafe {
        generate(
            session, prompt, prompt_len, n, sampler, source, slots, callback, user_data, generated,
        )
    }
}
