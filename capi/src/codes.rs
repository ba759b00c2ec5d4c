//! Status codes: `ferrite::Error`'s variants in declaration order (-1 ..
//! -23, never renumbered: docs/design.md, "Errors"), then the C API's own
//! (from -99), and their messages.

use core::ffi::CStr;

use ferrite::signature::SignatureError;
use ferrite::update::Refusal;
use ferrite::{Error, StepError};

/// Success.
pub const FERRITE_OK: i32 = 0;
/// Not a ferrite image (bad magic bytes) (`ferrite::Error::BadMagic`).
pub const FERRITE_E_BAD_MAGIC: i32 = -1;
/// Image format version not supported by this runtime (`ferrite::Error::UnsupportedVersion`).
pub const FERRITE_E_UNSUPPORTED_VERSION: i32 = -2;
/// Image truncated: shorter than its header or a section claims (`ferrite::Error::Truncated`).
pub const FERRITE_E_TRUNCATED: i32 = -3;
/// Image corrupted: CRC mismatch (`ferrite::Error::CrcMismatch`).
pub const FERRITE_E_CRC_MISMATCH: i32 = -4;
/// Image must start on a 16-byte boundary to be used in place (`ferrite::Error::ImageMisaligned`).
pub const FERRITE_E_IMAGE_MISALIGNED: i32 = -5;
/// Bad image header (`ferrite::Error::BadHeader`).
pub const FERRITE_E_BAD_HEADER: i32 = -6;
/// Bad model configuration (or a layer kind or option this build leaves out) (`ferrite::Error::BadConfig`).
pub const FERRITE_E_BAD_CONFIG: i32 = -7;
/// Bad tensor table entry (`ferrite::Error::BadTensor`).
pub const FERRITE_E_BAD_TENSOR: i32 = -8;
/// A tensor has an unknown dtype code (`ferrite::Error::UnknownDType`).
pub const FERRITE_E_UNKNOWN_DTYPE: i32 = -9;
/// A tensor the configuration requires is missing (`ferrite::Error::MissingTensor`).
pub const FERRITE_E_MISSING_TENSOR: i32 = -10;
/// A tensor shape contradicts the configuration (`ferrite::Error::ShapeMismatch`).
pub const FERRITE_E_SHAPE_MISMATCH: i32 = -11;
/// Session buffer too small (`ferrite::Error::BufferTooSmall`).
pub const FERRITE_E_BUFFER_TOO_SMALL: i32 = -12;
/// Token is outside the vocabulary (`ferrite::Error::TokenOutOfRange`).
pub const FERRITE_E_TOKEN_OUT_OF_RANGE: i32 = -13;
/// More pinned tokens than the session was sized for (`ferrite::Error::TooManyPinned`).
pub const FERRITE_E_TOO_MANY_PINNED: i32 = -14;
/// Bad sampler option (temperature >= 0 and finite, top_k <= 64, top_p in (0, 1]) (`ferrite::Error::BadSampler`).
pub const FERRITE_E_BAD_SAMPLER: i32 = -15;
/// Bad prompt: empty, longer than the token buffer, or nothing fed to go on from (`ferrite::Error::BadPrompt`).
pub const FERRITE_E_BAD_PROMPT: i32 = -16;
/// Bad tokenizer section (`ferrite::Error::BadTokenizer`).
pub const FERRITE_E_BAD_TOKENIZER: i32 = -17;
/// Internal error (a bug in ferrite: please report it with the image) (`ferrite::Error::Internal`).
pub const FERRITE_E_INTERNAL: i32 = -18;
/// A size derived from the image overflows what this target can hold (`ferrite::Error::SizeOverflow`).
pub const FERRITE_E_SIZE_OVERFLOW: i32 = -19;
/// The stream reached position 2^64 - 1: reset or seek the session (`ferrite::Error::PositionOverflow`).
pub const FERRITE_E_POSITION_OVERFLOW: i32 = -20;
/// Snapshot refused (other model, build or capacity, corrupted, truncated) or output too small (`ferrite::Error::BadSnapshot`).
pub const FERRITE_E_BAD_SNAPSHOT: i32 = -21;
/// No such baked memory: the model has no cross layer, or one has that many memories or fewer (`ferrite::Error::NoSuchMemory`).
pub const FERRITE_E_NO_SUCH_MEMORY: i32 = -22;
/// A caller-owned cross-attention memory does not fit the model or the call (`ferrite::Error::BadMemory`).
pub const FERRITE_E_BAD_MEMORY: i32 = -23;
/// An error this version of the C API has no code for.
pub const FERRITE_E_UNKNOWN: i32 = -99;
/// A required pointer is null.
pub const FERRITE_E_NULL_POINTER: i32 = -100;
/// A pointer is not aligned for its type (buffers: 4 bytes; handles: 8).
pub const FERRITE_E_MISALIGNED: i32 = -101;
/// The handle was not initialised by its ferrite_*_init or ferrite_model_load.
pub const FERRITE_E_BAD_HANDLE: i32 = -102;
/// An argument is out of range (a length too large for the address space, zero logits).
pub const FERRITE_E_BAD_ARGUMENT: i32 = -103;
/// This library was built without the feature the call needs.
pub const FERRITE_E_NOT_BUILT: i32 = -104;
/// Update refused: the transfer ended before the header.
pub const FERRITE_E_UPDATE_NO_HEADER: i32 = -110;
/// Update refused: the image claims more bytes than the slot holds.
pub const FERRITE_E_UPDATE_TOO_LARGE: i32 = -111;
/// Update refused: the transfer stopped part-way.
pub const FERRITE_E_UPDATE_INTERRUPTED: i32 = -112;
/// Update refused: the read callback failed.
pub const FERRITE_E_UPDATE_READ_ERROR: i32 = -113;
/// Update refused: its session needs more RAM than the firmware reserved.
pub const FERRITE_E_UPDATE_SESSION_TOO_LARGE: i32 = -114;
/// Update refused: the image is not signed.
pub const FERRITE_E_UNSIGNED: i32 = -120;
/// Update refused: signed by a key this firmware does not trust.
pub const FERRITE_E_UNTRUSTED_KEY: i32 = -121;
/// Update refused: the signature does not verify.
pub const FERRITE_E_BAD_SIGNATURE: i32 = -122;
/// Update refused: its security counter is older than the device accepts.
pub const FERRITE_E_ROLLBACK: i32 = -123;

/// Every code with its message, in the order above (the tests and
/// [`message`] read it).
pub(crate) const MESSAGES: &[(i32, &CStr)] = &[
    (FERRITE_OK, c"success"),
    (FERRITE_E_BAD_MAGIC, c"not a ferrite image (bad magic bytes)"),
    (FERRITE_E_UNSUPPORTED_VERSION, c"image format version not supported by this runtime"),
    (FERRITE_E_TRUNCATED, c"image truncated: shorter than its header or a section claims"),
    (FERRITE_E_CRC_MISMATCH, c"image corrupted: CRC mismatch"),
    (FERRITE_E_IMAGE_MISALIGNED, c"image must start on a 16-byte boundary to be used in place"),
    (FERRITE_E_BAD_HEADER, c"bad image header"),
    (FERRITE_E_BAD_CONFIG, c"bad model configuration (or a layer kind or option this build leaves out)"),
    (FERRITE_E_BAD_TENSOR, c"bad tensor table entry"),
    (FERRITE_E_UNKNOWN_DTYPE, c"a tensor has an unknown dtype code"),
    (FERRITE_E_MISSING_TENSOR, c"a tensor the configuration requires is missing"),
    (FERRITE_E_SHAPE_MISMATCH, c"a tensor shape contradicts the configuration"),
    (FERRITE_E_BUFFER_TOO_SMALL, c"session buffer too small"),
    (FERRITE_E_TOKEN_OUT_OF_RANGE, c"token is outside the vocabulary"),
    (FERRITE_E_TOO_MANY_PINNED, c"more pinned tokens than the session was sized for"),
    (FERRITE_E_BAD_SAMPLER, c"bad sampler option (temperature >= 0 and finite, top_k <= 64, top_p in (0, 1])"),
    (FERRITE_E_BAD_PROMPT, c"bad prompt: empty, longer than the token buffer, or nothing fed to go on from"),
    (FERRITE_E_BAD_TOKENIZER, c"bad tokenizer section"),
    (FERRITE_E_INTERNAL, c"internal error (a bug in ferrite: please report it with the image)"),
    (FERRITE_E_SIZE_OVERFLOW, c"a size derived from the image overflows what this target can hold"),
    (FERRITE_E_POSITION_OVERFLOW, c"the stream reached position 2^64 - 1: reset or seek the session"),
    (FERRITE_E_BAD_SNAPSHOT, c"snapshot refused (other model, build or capacity, corrupted, truncated) or output too small"),
    (FERRITE_E_NO_SUCH_MEMORY, c"no such baked memory: the model has no cross layer, or one has that many memories or fewer"),
    (FERRITE_E_BAD_MEMORY, c"a caller-owned cross-attention memory does not fit the model or the call"),
    (FERRITE_E_UNKNOWN, c"an error this version of the C API has no code for"),
    (FERRITE_E_NULL_POINTER, c"a required pointer is null"),
    (FERRITE_E_MISALIGNED, c"a pointer is not aligned for its type (buffers: 4 bytes; handles: 8)"),
    (FERRITE_E_BAD_HANDLE, c"the handle was not initialised by its ferrite_*_init or ferrite_model_load"),
    (FERRITE_E_BAD_ARGUMENT, c"an argument is out of range (a length too large for the address space, zero logits)"),
    (FERRITE_E_NOT_BUILT, c"this library was built without the feature the call needs"),
    (FERRITE_E_UPDATE_NO_HEADER, c"update refused: the transfer ended before the header"),
    (FERRITE_E_UPDATE_TOO_LARGE, c"update refused: the image claims more bytes than the slot holds"),
    (FERRITE_E_UPDATE_INTERRUPTED, c"update refused: the transfer stopped part-way"),
    (FERRITE_E_UPDATE_READ_ERROR, c"update refused: the read callback failed"),
    (FERRITE_E_UPDATE_SESSION_TOO_LARGE, c"update refused: its session needs more RAM than the firmware reserved"),
    (FERRITE_E_UNSIGNED, c"update refused: the image is not signed"),
    (FERRITE_E_UNTRUSTED_KEY, c"update refused: signed by a key this firmware does not trust"),
    (FERRITE_E_BAD_SIGNATURE, c"update refused: the signature does not verify"),
    (FERRITE_E_ROLLBACK, c"update refused: its security counter is older than the device accepts"),
];

/// The message of `code`.
pub(crate) fn message(code: i32) -> &'static CStr {
    let mut i = 0;
    while let Some(&(c, m)) = MESSAGES.get(i) {
        if c == code {
            return m;
        }
        i += 1;
    }
    c"unknown error code"
}

/// The code of a runtime error.
pub(crate) fn error_code(e: Error) -> i32 {
    match e {
        Error::BadMagic => FERRITE_E_BAD_MAGIC,
        Error::UnsupportedVersion { .. } => FERRITE_E_UNSUPPORTED_VERSION,
        Error::Truncated { .. } => FERRITE_E_TRUNCATED,
        Error::CrcMismatch { .. } => FERRITE_E_CRC_MISMATCH,
        Error::ImageMisaligned => FERRITE_E_IMAGE_MISALIGNED,
        Error::BadHeader(_) => FERRITE_E_BAD_HEADER,
        Error::BadConfig { .. } => FERRITE_E_BAD_CONFIG,
        Error::BadTensor { .. } => FERRITE_E_BAD_TENSOR,
        Error::UnknownDType { .. } => FERRITE_E_UNKNOWN_DTYPE,
        Error::MissingTensor { .. } => FERRITE_E_MISSING_TENSOR,
        Error::ShapeMismatch { .. } => FERRITE_E_SHAPE_MISMATCH,
        Error::BufferTooSmall { .. } => FERRITE_E_BUFFER_TOO_SMALL,
        Error::TokenOutOfRange { .. } => FERRITE_E_TOKEN_OUT_OF_RANGE,
        Error::TooManyPinned { .. } => FERRITE_E_TOO_MANY_PINNED,
        Error::BadSampler(_) => FERRITE_E_BAD_SAMPLER,
        Error::BadPrompt(_) => FERRITE_E_BAD_PROMPT,
        Error::BadTokenizer(_) => FERRITE_E_BAD_TOKENIZER,
        Error::Internal(_) => FERRITE_E_INTERNAL,
        Error::SizeOverflow { .. } => FERRITE_E_SIZE_OVERFLOW,
        Error::PositionOverflow => FERRITE_E_POSITION_OVERFLOW,
        Error::BadSnapshot(_) => FERRITE_E_BAD_SNAPSHOT,
        Error::NoSuchMemory { .. } => FERRITE_E_NO_SUCH_MEMORY,
        Error::BadMemory(_) => FERRITE_E_BAD_MEMORY,
        _ => FERRITE_E_UNKNOWN,
    }
}

/// The code of a step error: that of the `Error` it converts to
/// (docs/design.md, "Errors").
pub(crate) fn step_code(e: StepError) -> i32 {
    error_code(Error::from(e))
}

/// The code of a refused update.
pub(crate) fn refusal_code(r: Refusal) -> i32 {
    match r {
        Refusal::NoHeader { .. } => FERRITE_E_UPDATE_NO_HEADER,
        Refusal::TooLarge { .. } => FERRITE_E_UPDATE_TOO_LARGE,
        Refusal::Interrupted { .. } => FERRITE_E_UPDATE_INTERRUPTED,
        Refusal::ReadError { .. } => FERRITE_E_UPDATE_READ_ERROR,
        Refusal::Invalid(e) => error_code(e),
        Refusal::SessionTooLarge { .. } => FERRITE_E_UPDATE_SESSION_TOO_LARGE,
        Refusal::Signature(SignatureError::Unsigned) => FERRITE_E_UNSIGNED,
        Refusal::Signature(SignatureError::UntrustedKey { .. }) => FERRITE_E_UNTRUSTED_KEY,
        Refusal::Signature(SignatureError::BadSignature { .. }) => FERRITE_E_BAD_SIGNATURE,
        Refusal::Signature(SignatureError::Rollback { .. }) => FERRITE_E_ROLLBACK,
    }
}
