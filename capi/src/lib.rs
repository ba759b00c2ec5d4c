//! # ferrite-capi
//!
//! The C API of the ferrite runtime (issue 26; `docs/c-api.md`): a `no_std`
//! static library, `libferrite_capi.a`, and its header `include/ferrite.h`
//! (generated from this crate by cbindgen). No allocation, no global state,
//! no unwinding.
//!
//! - Every function returns an `int32_t` status: [`FERRITE_OK`] (0) or a
//!   negative `FERRITE_E_*` code. The codes of `ferrite::Error` come first,
//!   one per variant in declaration order, never renumbered
//!   (`docs/design.md`, "Errors"); the API's own (null pointers, handles,
//!   alignment, update refusals) start at -100. [`ferrite_strerror`] names
//!   each.
//! - Handles are opaque structs of fixed size and alignment
//!   ([`ferrite_model`], [`ferrite_session`], [`ferrite_sampler`]), so C
//!   allocates them statically; compile-time asserts below check that the
//!   Rust types fit them on the target being built.
//! - Every pointer is checked for null and alignment at the boundary, every
//!   length for what the pointee may hold; what cannot be checked (that a
//!   pointer points to `len` readable bytes, that the image outlives the
//!   model) is each function's `# Safety` contract.
//! - No panic path in this crate: no indexing, slicing, unwrapping or
//!   unchecked arithmetic. The panic handler calls C's `abort()`; with the
//!   `panic-check` feature it calls a symbol defined nowhere, and
//!   `cargo xtask capi` links a program that calls every function to find
//!   the panic branches left in the code (`panic.rs`).
#![no_std]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// The C names of the handle types (`ferrite_model`, ...) are the header's.
#![allow(non_camel_case_types)]

#[cfg(test)]
extern crate std;

mod codes;
mod handles;
mod memory;
mod panic;
mod pointers;

use core::ffi::{c_char, c_void};

use ferrite::{Model, Sampler, SamplerConfig, Session};

pub use codes::*;
pub use handles::{
    ferrite_model, ferrite_sampler, ferrite_session, FERRITE_MODEL_WORDS, FERRITE_SAMPLER_WORDS,
    FERRITE_SESSION_WORDS,
};
use handles::{model_ref, sampler_mut, session_mut, session_ref};
pub use memory::*;
use pointers::{check_align, fits_isize, non_null};

/// The ABI version of this library and of `ferrite.h`: bumped whenever a
/// function, a struct or a code changes meaning (new functions and codes
/// added at the end do not bump it).
pub const FERRITE_ABI_VERSION: u32 = 1;

/// Bytes of an Ed25519 public key (`ferrite_update_validate_signed`).
pub const FERRITE_PUBLIC_KEY_LEN: usize = 32;

/// Sampling options ([`ferrite_sampler_init`]): `ferrite::SamplerConfig`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ferrite_sampler_config {
    /// Softmax temperature; 0 is greedy (the argmax).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: off; at most 64).
    pub top_k: u32,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1: off).
    pub top_p: f32,
    /// Seed of the PCG32 generator: the same seed draws the same tokens on every target.
    pub seed: u64,
}

/// What a loaded model is ([`ferrite_model_info`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ferrite_info {
    /// Vocabulary size: tokens are `0..vocab_size`, and a feed returns that many logits.
    pub vocab_size: u32,
    /// Hidden size.
    pub hidden_size: u32,
    /// Layers.
    pub num_layers: u32,
    /// Image format version.
    pub format_version: u32,
    /// Bytes of a session buffer (what [`ferrite_session_len`] says).
    pub session_bytes: usize,
    /// Bytes of that buffer that are recurrent state (the rest is scratch).
    pub state_bytes: usize,
    /// Bytes of a snapshot of a session ([`ferrite_snapshot`]).
    pub snapshot_bytes: usize,
    /// 1 when the image carries a BPE tokenizer, 0 for the byte tokenizer.
    pub bpe_tokenizer: u32,
    /// The image's security counter (signed images; 0 otherwise).
    pub security_counter: u32,
}

/// Called with each generated token; returns `true` to go on, `false` to stop.
pub type ferrite_token_fn =
    Option<unsafe extern "C" fn(token: u32, user_data: *mut c_void) -> bool>;

/// Fills `buf` (`len` bytes) with the next bytes of an update; returns how
/// many it wrote (0: the transfer ended), or a negative value on a failure.
pub type ferrite_read_fn =
    Option<unsafe extern "C" fn(buf: *mut u8, len: usize, user_data: *mut c_void) -> isize>;

/// Writes `value` through `out`, when `out` is not null (an optional output).
///
/// # Safety
/// `out` is null or valid for a write of a `T` and aligned.
unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: not null; valid and aligned by the caller's contract.
        unsafe { out.write(value) };
    }
}

/// `len` elements at `p` as a slice, after the checks that can be made:
/// null (allowed only for `len == 0`), alignment, and a byte size that fits
/// `isize`. An empty slice keeps its address (`Model::load` checks it).
///
/// # Safety
/// When `len > 0`, `p` points to `len` initialised `T`s, readable and not
/// written by anyone else while the slice is used, for `'a`.
pub(crate) unsafe fn slice<'a, T>(p: *const T, len: usize) -> Result<&'a [T], i32> {
    if len == 0 && p.is_null() {
        return Ok(&[]);
    }
    non_null(p)?;
    check_align(p)?;
    fits_isize::<T>(len)?;
    // SAFETY: non-null, aligned, `len * size_of::<T>() <= isize::MAX`; valid
    // for reads of `len` elements for `'a` by the caller's contract (no
    // read at all for `len == 0`).
    Ok(unsafe { core::slice::from_raw_parts(p, len) })
}

/// [`slice()`], mutable.
///
/// # Safety
/// When `len > 0`, `p` points to `len` `T`s, readable and writable and not
/// accessed by anyone else while the slice is used, for `'a`.
pub(crate) unsafe fn slice_mut<'a, T>(p: *mut T, len: usize) -> Result<&'a mut [T], i32> {
    if len == 0 {
        return Ok(&mut []);
    }
    non_null(p)?;
    check_align(p)?;
    fits_isize::<T>(len)?;
    // SAFETY: as in `slice`, and exclusive by the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(p, len) })
}

/// The status of a `Result<(), code>`.
pub(crate) fn status(r: Result<(), i32>) -> i32 {
    match r {
        Ok(()) => FERRITE_OK,
        Err(code) => code,
    }
}

/// The ABI version the library was built with: compare it with
/// `FERRITE_ABI_VERSION` of the header the caller was compiled with.
#[no_mangle]
pub extern "C" fn ferrite_abi_version() -> u32 {
    FERRITE_ABI_VERSION
}

/// Writes into `*out` the bytes of a session buffer for `image` (`len`
/// bytes): `ferrite::session_len(image, 0)` words of 4 bytes. Validates the
/// header, the config and the tokenizer's counts (not the CRC or the
/// tensors: [`ferrite_model_load`] does). The image need not be aligned for
/// this call. A build step can compute the same number with `ferrite
/// inspect` (docs/c-api.md, "Sizing the buffer at build time").
///
/// # Safety
/// `image` points to `len` readable bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_len(image: *const u8, len: usize, out: *mut usize) -> i32 {
    status((|| {
        non_null(out)?;
        check_align(out)?;
        // SAFETY: `len` readable bytes at `image` (the contract).
        let image = unsafe { slice(image, len) }?;
        let words = ferrite::session_len(image, 0).map_err(error_code)?;
        let bytes = words.checked_mul(4).ok_or(FERRITE_E_SIZE_OVERFLOW)?;
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe { out.write(bytes) };
        Ok(())
    })())
}

/// Validates `image` (`len` bytes) once and makes `*model` a view of it, in
/// place: nothing is copied. The image must start on a 16-byte boundary
/// (`FERRITE_E_IMAGE_MISALIGNED` otherwise; place it in flash as the header
/// shows). Checks the magic, version, CRC, config, tensor table and shapes.
///
/// # Safety
/// `image` points to `len` readable bytes that stay valid and unchanged for
/// as long as `*model` or any session made from it is used (normally flash
/// or a `static const` array); `model` points to writable storage for a
/// `ferrite_model`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_model_load(
    image: *const u8,
    len: usize,
    model: *mut ferrite_model,
) -> i32 {
    status((|| {
        non_null(model)?;
        check_align(model)?;
        // SAFETY: readable for `len` bytes and unchanged for as long as the
        // model is used, which the caller promises: `'static` stands for it.
        let image: &'static [u8] = unsafe { slice(image, len) }?;
        let loaded = Model::load(image).map_err(error_code)?;
        // SAFETY: `model` is non-null, aligned and writable (the contract).
        unsafe { handles::init_model(model, loaded) };
        Ok(())
    })())
}

/// Writes what the model is into `*info`.
///
/// # Safety
/// `model` was made by [`ferrite_model_load`] (its image still valid);
/// `info` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_model_info(
    model: *const ferrite_model,
    info: *mut ferrite_info,
) -> i32 {
    status((|| {
        non_null(info)?;
        check_align(info)?;
        // SAFETY: the contract.
        let m = unsafe { model_ref(model) }?;
        let c = m.config();
        let out = ferrite_info {
            vocab_size: c.vocab_size,
            hidden_size: c.hidden_size,
            num_layers: c.num_layers,
            format_version: m.header().version,
            session_bytes: m.session_bytes(0).map_err(error_code)?,
            state_bytes: m.state_bytes(0).map_err(error_code)?,
            snapshot_bytes: ferrite::snapshot_len(m.image(), 0).map_err(error_code)?,
            bpe_tokenizer: u32::from(m.tokenizer().kind_name() == "bpe"),
            security_counter: m.header().security_counter,
        };
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe { info.write(out) };
        Ok(())
    })())
}

/// Makes `*session` a new stream of `model` (position 0, zero state) whose
/// state and scratch live in `buf` (`buf_len` bytes, 4-byte aligned, at
/// least [`ferrite_session_len`]; more is fine). The session keeps a copy of
/// the model handle, which may then be reused; the image must stay valid.
///
/// # Safety
/// `model` was made by [`ferrite_model_load`]; `buf` points to `buf_len`
/// writable bytes that nothing else reads or writes for as long as
/// `*session` is used; `session` points to writable storage for a
/// `ferrite_session`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_session_init(
    model: *const ferrite_model,
    buf: *mut c_void,
    buf_len: usize,
    session: *mut ferrite_session,
) -> i32 {
    status((|| {
        non_null(session)?;
        check_align(session)?;
        // SAFETY: the contract.
        let m = *unsafe { model_ref(model) }?;
        non_null(buf)?;
        let words = buf_len / 4;
        // SAFETY: `buf_len` writable bytes, exclusively the session's for
        // as long as it is used (`'static` stands for that): `words` f32s.
        let buf: &'static mut [f32] = unsafe { slice_mut(buf.cast::<f32>(), words) }?;
        let s = Session::new(m, buf).map_err(error_code)?;
        // SAFETY: non-null, aligned, writable storage (the contract).
        unsafe { handles::init_session(session, s) };
        Ok(())
    })())
}

/// Feeds `token` and points `*logits` at the `*n` logits for the next one
/// (inside the session's buffer: valid until the next call that changes the
/// session). `logits` and `n` may be null when not wanted.
///
/// Returns `FERRITE_E_TOKEN_OUT_OF_RANGE` (the state is unchanged),
/// `FERRITE_E_POSITION_OVERFLOW`, `FERRITE_E_INTERNAL`, or a handle error.
///
/// # Safety
/// `session` was made by [`ferrite_session_init`] and is not used
/// concurrently; `logits` and `n` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_feed(
    session: *mut ferrite_session,
    token: u32,
    logits: *mut *const f32,
    n: *mut usize,
) -> i32 {
    // SAFETY: the contract.
    unsafe {
        feed_and_point(session, logits, n, |s| {
            let l = s.feed(token).map_err(step_code)?;
            Ok((l.as_ptr(), l.len()))
        })
    }
}

/// Runs `step` (one token fed, with or without a caller memory) on the
/// session and points `*logits` and `*n` at the logits it returns (each
/// null when not wanted): what [`ferrite_feed`] and
/// [`ferrite_feed_with_memory`] share.
///
/// # Safety
/// As [`ferrite_feed`].
pub(crate) unsafe fn feed_and_point(
    session: *mut ferrite_session,
    logits: *mut *const f32,
    n: *mut usize,
    step: impl FnOnce(&mut Session<'static, 'static>) -> Result<(*const f32, usize), i32>,
) -> i32 {
    status((|| {
        check_align(logits)?;
        check_align(n)?;
        // SAFETY: the contract.
        let s = unsafe { session_mut(session) }?;
        let (ptr, len) = step(s)?;
        // SAFETY: null or writable and aligned (checked above, the contract).
        unsafe {
            put(logits, ptr);
            put(n, len);
        }
        Ok(())
    })())
}

/// Points `*logits` at the logits of the last feed (or of a restored
/// snapshot) and writes their count into `*n`. `FERRITE_E_BAD_PROMPT` when
/// nothing was fed since the stream started.
///
/// # Safety
/// `session` was made by [`ferrite_session_init`]; `logits` and `n` are writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_logits(
    session: *const ferrite_session,
    logits: *mut *const f32,
    n: *mut usize,
) -> i32 {
    status((|| {
        non_null(logits)?;
        non_null(n)?;
        check_align(logits)?;
        check_align(n)?;
        // SAFETY: the contract.
        let s = unsafe { session_ref(session) }?;
        let l = s
            .last_logits()
            .ok_or(ferrite::StepError::NoLogits)
            .map_err(step_code)?;
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe {
            logits.write(l.as_ptr());
            n.write(l.len());
        }
        Ok(())
    })())
}

/// Writes into `*pos` the absolute position of the next token.
///
/// # Safety
/// `session` was made by [`ferrite_session_init`]; `pos` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_position(session: *const ferrite_session, pos: *mut u64) -> i32 {
    status((|| {
        non_null(pos)?;
        check_align(pos)?;
        // SAFETY: the contract.
        let s = unsafe { session_ref(session) }?;
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe { pos.write(s.position()) };
        Ok(())
    })())
}

/// Resets the session: zero state, position 0.
///
/// # Safety
/// `session` was made by [`ferrite_session_init`] and is not used concurrently.
#[no_mangle]
pub unsafe extern "C" fn ferrite_reset(session: *mut ferrite_session) -> i32 {
    // SAFETY: the contract.
    status(unsafe { session_mut(session) }.map(|s| s.reset()))
}

/// Selects baked memory `index` in every `cross` layer of the session's
/// model (docs/cross-attention.md): the next tokens attend to it. The
/// choice is part of the state: [`ferrite_reset`] and [`ferrite_seek`]
/// return to memory 0, snapshots keep it.
///
/// Returns `FERRITE_E_NO_SUCH_MEMORY` when the model has no cross layer or
/// one has `index` memories or fewer (the session is then unchanged), or a
/// handle error.
///
/// # Safety
/// `session` was made by [`ferrite_session_init`] and is not used concurrently.
#[no_mangle]
pub unsafe extern "C" fn ferrite_select_memory(session: *mut ferrite_session, index: u32) -> i32 {
    status((|| {
        // SAFETY: the contract.
        let s = unsafe { session_mut(session) }?;
        s.select_memory(index).map_err(error_code)
    })())
}

/// Resets the session and starts a new stream at absolute position `pos`
/// (RoPE angles see it; docs/design.md, "Runtime shape").
///
/// # Safety
/// `session` was made by [`ferrite_session_init`] and is not used concurrently.
#[no_mangle]
pub unsafe extern "C" fn ferrite_seek(session: *mut ferrite_session, pos: u64) -> i32 {
    // SAFETY: the contract.
    status(unsafe { session_mut(session) }.map(|s| s.seek(pos)))
}

/// Makes `*sampler` a sampler with the options `*config` (null: greedy).
/// `FERRITE_E_BAD_SAMPLER` for a negative or non-finite temperature, `top_k`
/// above 64 or `top_p` outside (0, 1].
///
/// # Safety
/// `config` is null or readable; `sampler` points to writable storage for a
/// `ferrite_sampler`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_sampler_init(
    sampler: *mut ferrite_sampler,
    config: *const ferrite_sampler_config,
) -> i32 {
    status((|| {
        non_null(sampler)?;
        check_align(sampler)?;
        check_align(config)?;
        let s = if config.is_null() {
            Sampler::greedy()
        } else {
            // SAFETY: non-null, aligned, readable (the contract).
            let c = unsafe { config.read() };
            Sampler::new(SamplerConfig {
                temperature: c.temperature,
                top_k: usize::try_from(c.top_k).map_err(|_| FERRITE_E_BAD_SAMPLER)?,
                top_p: c.top_p,
                seed: c.seed,
            })
            .map_err(error_code)?
        };
        // SAFETY: non-null, aligned, writable storage (the contract).
        unsafe { handles::init_sampler(sampler, s) };
        Ok(())
    })())
}

/// Draws the next token from `logits` (`n` values; NaN logits are never
/// picked unless all are) into `*token`, advancing the sampler's generator.
///
/// # Safety
/// `sampler` was made by [`ferrite_sampler_init`]; `logits` points to `n`
/// readable floats; `token` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_sample(
    sampler: *mut ferrite_sampler,
    logits: *const f32,
    n: usize,
    token: *mut u32,
) -> i32 {
    status((|| {
        non_null(token)?;
        check_align(token)?;
        if n == 0 {
            return Err(FERRITE_E_BAD_ARGUMENT);
        }
        // SAFETY: the contract.
        let logits = unsafe { slice(logits, n) }?;
        // SAFETY: the contract.
        let s = unsafe { sampler_mut(sampler) }?;
        let t = s.sample(logits);
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe { token.write(t) };
        Ok(())
    })())
}

/// A token callback as a Rust closure: `true` (go on) when there is none.
pub(crate) fn on_token(cb: ferrite_token_fn, user_data: *mut c_void) -> impl FnMut(u32) -> bool {
    move |t| match cb {
        // SAFETY: the caller of `ferrite_generate`/`ferrite_resume` gave a
        // function that may be called with its `user_data` (their contract).
        Some(f) => unsafe { f(t, user_data) },
        None => true,
    }
}

/// Feeds `prompt` (`prompt_len` tokens, at least one), then samples `n`
/// tokens with `sampler`, calling `callback(token, user_data)` with each as
/// soon as it exists (null: no callback); the callback returns `false` to
/// stop early. Writes the number generated into `*generated` (may be null).
/// Afterwards [`ferrite_logits`] gives the logits the last token was sampled
/// from. `ferrite::Session::generate`.
///
/// Returns `FERRITE_E_BAD_PROMPT` (empty prompt), `FERRITE_E_TOKEN_OUT_OF_RANGE`,
/// `FERRITE_E_POSITION_OVERFLOW`, `FERRITE_E_INTERNAL`, or an argument or
/// handle error; the tokens before an error were shown to the callback.
///
/// # Safety
/// `session` and `sampler` were made by their init functions and are not
/// used concurrently; `prompt` points to `prompt_len` readable tokens;
/// `callback` is null or a function that may be called with `user_data`
/// (it must not use `session` or `sampler`); `generated` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_generate(
    session: *mut ferrite_session,
    prompt: *const u32,
    prompt_len: usize,
    n: usize,
    sampler: *mut ferrite_sampler,
    callback: ferrite_token_fn,
    user_data: *mut c_void,
    generated: *mut usize,
) -> i32 {
    // SAFETY: the contract.
    unsafe {
        generate_and_count(
            session,
            prompt,
            prompt_len,
            sampler,
            generated,
            |s, prompt, sampler| {
                s.generate(prompt, n, sampler, on_token(callback, user_data))
                    .map_err(step_code)
            },
        )
    }
}

/// Runs `run` (a generation, with or without a caller memory) over the
/// prompt with the session and sampler, and writes the number of tokens it
/// generated into `*generated` (null when not wanted): what
/// [`ferrite_generate`] and [`ferrite_generate_with_memory`] share.
///
/// # Safety
/// As [`ferrite_generate`].
pub(crate) unsafe fn generate_and_count(
    session: *mut ferrite_session,
    prompt: *const u32,
    prompt_len: usize,
    sampler: *mut ferrite_sampler,
    generated: *mut usize,
    run: impl FnOnce(&mut Session<'static, 'static>, &[u32], &mut Sampler) -> Result<usize, i32>,
) -> i32 {
    status((|| {
        check_align(generated)?;
        // SAFETY: the contract.
        let prompt = unsafe { slice(prompt, prompt_len) }?;
        // SAFETY: the contract.
        let s = unsafe { session_mut(session) }?;
        // SAFETY: the contract.
        let sampler = unsafe { sampler_mut(sampler) }?;
        let count = run(s, prompt, sampler)?;
        // SAFETY: null or writable and aligned.
        unsafe { put(generated, count) };
        Ok(())
    })())
}

/// Generates `n` tokens from the last logits without feeding anything first
/// (after [`ferrite_restore`], the stream goes on exactly as the
/// snapshotted one would): `ferrite::Session::resume_with`. Callback and
/// results as [`ferrite_generate`]; `FERRITE_E_BAD_PROMPT` when nothing was
/// fed since the stream started.
///
/// # Safety
/// As [`ferrite_generate`].
#[no_mangle]
pub unsafe extern "C" fn ferrite_resume(
    session: *mut ferrite_session,
    n: usize,
    sampler: *mut ferrite_sampler,
    callback: ferrite_token_fn,
    user_data: *mut c_void,
    generated: *mut usize,
) -> i32 {
    status((|| {
        check_align(generated)?;
        // SAFETY: the contract.
        let s = unsafe { session_mut(session) }?;
        // SAFETY: the contract.
        let sampler = unsafe { sampler_mut(sampler) }?;
        let mut f = on_token(callback, user_data);
        let count = s
            .resume_with(n, sampler, |step| f(step.token))
            .map_err(step_code)?;
        // SAFETY: null or writable and aligned.
        unsafe { put(generated, count) };
        Ok(())
    })())
}

/// Encodes `text` (`text_len` bytes, any bytes) with the image's tokenizer
/// into `tokens` (room for `capacity` ids) and writes the count into `*n`.
/// No tokenizer makes more ids than bytes: `capacity >= text_len` always
/// suffices. `FERRITE_E_BAD_PROMPT` when they do not fit.
///
/// # Safety
/// `model` was made by [`ferrite_model_load`]; `text` points to `text_len`
/// readable bytes; `tokens` to `capacity` writable ids; `n` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_tokenize(
    model: *const ferrite_model,
    text: *const u8,
    text_len: usize,
    tokens: *mut u32,
    capacity: usize,
    n: *mut usize,
) -> i32 {
    status((|| {
        non_null(n)?;
        check_align(n)?;
        // SAFETY: the contract.
        let m = unsafe { model_ref(model) }?;
        // SAFETY: the contract.
        let text = unsafe { slice(text, text_len) }?;
        // SAFETY: the contract.
        let out = unsafe { slice_mut(tokens, capacity) }?;
        let count = m.tokenizer().encode(text, out).map_err(error_code)?;
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe { n.write(count) };
        Ok(())
    })())
}

/// Points `*bytes` at the text of `token` (`*len` bytes, inside the image,
/// not NUL-terminated; empty for ids the tokenizer does not know, such as
/// padding rows). A UTF-8 character may span tokens: stream the bytes.
/// `FERRITE_E_TOKEN_OUT_OF_RANGE` outside the vocabulary.
///
/// # Safety
/// `model` was made by [`ferrite_model_load`]; `bytes` and `len` are writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_detokenize(
    model: *const ferrite_model,
    token: u32,
    bytes: *mut *const u8,
    len: *mut usize,
) -> i32 {
    status((|| {
        non_null(bytes)?;
        non_null(len)?;
        check_align(bytes)?;
        check_align(len)?;
        // SAFETY: the contract.
        let m = unsafe { model_ref(model) }?;
        let vocab = m.config().vocab_size;
        if token >= vocab {
            return Err(FERRITE_E_TOKEN_OUT_OF_RANGE);
        }
        let text = m.tokenizer().decode(token);
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe {
            bytes.write(text.as_ptr());
            len.write(text.len());
        }
        Ok(())
    })())
}

/// Writes into `*len` the bytes of a snapshot of `session`.
///
/// # Safety
/// `session` was made by [`ferrite_session_init`]; `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_snapshot_len(
    session: *const ferrite_session,
    len: *mut usize,
) -> i32 {
    status((|| {
        non_null(len)?;
        check_align(len)?;
        // SAFETY: the contract.
        let s = unsafe { session_ref(session) }?;
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe { len.write(s.snapshot_len()) };
        Ok(())
    })())
}

/// Writes a snapshot of the stream (state, position, last logits; checked
/// against the model's hash on restore: docs/snapshot-format.md) into `out`
/// (`capacity` bytes, at least [`ferrite_snapshot_len`]) and its length into
/// `*written` (may be null). The session is unchanged.
/// `FERRITE_E_BAD_SNAPSHOT` when `out` is too small.
///
/// # Safety
/// `session` was made by [`ferrite_session_init`]; `out` points to
/// `capacity` writable bytes; `written` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_snapshot(
    session: *const ferrite_session,
    out: *mut u8,
    capacity: usize,
    written: *mut usize,
) -> i32 {
    status((|| {
        check_align(written)?;
        // SAFETY: the contract.
        let s = unsafe { session_ref(session) }?;
        if capacity == 0 {
            non_null(out)?;
        }
        // SAFETY: the contract.
        let out = unsafe { slice_mut(out, capacity) }?;
        let n = s.snapshot(out).map_err(error_code)?;
        // SAFETY: null or writable and aligned.
        unsafe { put(written, n) };
        Ok(())
    })())
}

/// Restores a snapshot (`len` bytes) made by [`ferrite_snapshot`] of a
/// session of the same model and build: everything is checked before
/// anything is written, so a refused snapshot (`FERRITE_E_BAD_SNAPSHOT`)
/// leaves the session as it was. Snapshots are not authenticated.
///
/// # Safety
/// `session` was made by [`ferrite_session_init`] and is not used
/// concurrently; `bytes` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ferrite_restore(
    session: *mut ferrite_session,
    bytes: *const u8,
    len: usize,
) -> i32 {
    status((|| {
        // SAFETY: the contract.
        let s = unsafe { session_mut(session) }?;
        if len == 0 {
            non_null(bytes)?;
        }
        // SAFETY: the contract.
        let bytes = unsafe { slice(bytes, len) }?;
        s.restore(bytes).map_err(error_code)
    })())
}

/// Receives an update into `slot` (`slot_len` bytes: the second flash slot
/// or a RAM buffer), `chunk` bytes at a time, from `read(buf, len,
/// user_data)`: reads the header's length first and refuses an image larger
/// than the slot before accepting more, then requires every byte it claims
/// (`ferrite::update::receive`). Writes the image's length into
/// `*image_len`. Refusals: `FERRITE_E_UPDATE_*`. The serving model is not
/// touched; validate with [`ferrite_update_validate`] before switching.
///
/// # Safety
/// `slot` points to `slot_len` writable bytes (not the serving image);
/// `read` may be called with `user_data` and writes at most `len` bytes
/// into `buf`; `image_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_update_receive(
    slot: *mut u8,
    slot_len: usize,
    chunk: usize,
    read: ferrite_read_fn,
    user_data: *mut c_void,
    image_len: *mut usize,
) -> i32 {
    status((|| {
        non_null(image_len)?;
        check_align(image_len)?;
        let read = read.ok_or(FERRITE_E_NULL_POINTER)?;
        non_null(slot)?;
        // SAFETY: the contract.
        let slot = unsafe { slice_mut(slot, slot_len) }?;
        let n = ferrite::update::receive(slot, chunk, |buf: &mut [u8]| {
            // SAFETY: `buf` is `buf.len()` writable bytes; `read` writes at
            // most that many (the contract).
            let got = unsafe { read(buf.as_mut_ptr(), buf.len(), user_data) };
            // A count beyond the buffer is the callback's failure.
            usize::try_from(got)
                .ok()
                .filter(|&g| g <= buf.len())
                .ok_or(())
        })
        .map_err(refusal_code)?;
        // SAFETY: checked non-null and aligned; writable by the contract.
        unsafe { image_len.write(n) };
        Ok(())
    })())
}

/// Validates a received image completely (`ferrite::update::validate`:
/// structure, CRC, every weight finite, its session within
/// `session_bytes`) and, when it passes, makes `*model` a view of it (`model`
/// may be null to validate only). Refusals: the image's own error code,
/// or `FERRITE_E_UPDATE_SESSION_TOO_LARGE`.
///
/// # Safety
/// As [`ferrite_model_load`] (`model` may be null).
#[no_mangle]
pub unsafe extern "C" fn ferrite_update_validate(
    image: *const u8,
    len: usize,
    session_bytes: usize,
    model: *mut ferrite_model,
) -> i32 {
    status((|| {
        check_align(model)?;
        non_null(image)?;
        // SAFETY: the contract (`'static`: as long as the model is used).
        let image: &'static [u8] = unsafe { slice(image, len) }?;
        let m = ferrite::update::validate(image, session_bytes / 4).map_err(refusal_code)?;
        if !model.is_null() {
            // SAFETY: non-null, aligned, writable storage (the contract).
            unsafe { handles::init_model(model, m) };
        }
        Ok(())
    })())
}

/// [`ferrite_update_validate`] for firmware that runs only signed models:
/// first the Ed25519 signature against the `n_keys` trusted public keys at
/// `keys` (32 bytes each) and the security counter against `min_counter`
/// (anti-rollback: docs/signing.md), then the image as
/// `ferrite_update_validate` checks it. On success, switch to the model and
/// then store its security counter ([`ferrite_model_info`]) as the new
/// minimum. Refusals add `FERRITE_E_UNSIGNED`, `FERRITE_E_UNTRUSTED_KEY`,
/// `FERRITE_E_BAD_SIGNATURE` and `FERRITE_E_ROLLBACK`. Without the library's
/// `verify` feature it returns `FERRITE_E_NOT_BUILT`.
///
/// # Safety
/// As [`ferrite_update_validate`]; `keys` points to `n_keys` readable keys.
#[no_mangle]
pub unsafe extern "C" fn ferrite_update_validate_signed(
    image: *const u8,
    len: usize,
    session_bytes: usize,
    keys: *const [u8; FERRITE_PUBLIC_KEY_LEN],
    n_keys: usize,
    min_counter: u32,
    model: *mut ferrite_model,
) -> i32 {
    status((|| {
        check_align(model)?;
        non_null(image)?;
        // SAFETY: the contract.
        let image: &'static [u8] = unsafe { slice(image, len) }?;
        // SAFETY: the contract.
        let keys = unsafe { slice(keys, n_keys) }?;
        let m = validate_signed(image, session_bytes / 4, keys, min_counter)?;
        if !model.is_null() {
            // SAFETY: non-null, aligned, writable storage (the contract).
            unsafe { handles::init_model(model, m) };
        }
        Ok(())
    })())
}

#[cfg(feature = "verify")]
fn validate_signed(
    image: &'static [u8],
    words: usize,
    keys: &[[u8; 32]],
    min_counter: u32,
) -> Result<Model<'static>, i32> {
    let policy = ferrite::signature::TrustPolicy { keys, min_counter };
    ferrite::update::validate_signed(image, words, &policy).map_err(refusal_code)
}

#[cfg(not(feature = "verify"))]
fn validate_signed(
    _image: &'static [u8],
    _words: usize,
    _keys: &[[u8; 32]],
    _min_counter: u32,
) -> Result<Model<'static>, i32> {
    Err(FERRITE_E_NOT_BUILT)
}

/// A static, NUL-terminated English sentence for a status code (`"unknown
/// error code"` for codes this library never returns). Never null.
#[no_mangle]
pub extern "C" fn ferrite_strerror(code: i32) -> *const c_char {
    codes::message(code).as_ptr()
}

#[cfg(test)]
mod tests;
