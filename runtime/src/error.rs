//! The runtime's errors, scoped to the operation (as heapless scopes its
//! errors): [`Error`] for loading and validating an image and setting up a
//! session, [`StepError`] for what runs per token ([`crate::Session::feed`],
//! [`crate::Session::generate`] and the products and mixer steps below them).
//!
//! Every input-dependent failure (a bad image, token, prompt, buffer or
//! option) is reported as one of them; nothing in the runtime panics on
//! input. A [`StepError`] converts into the [`Error`] with the same variant
//! and message (`From`), so `?` in a function that returns [`Result`] takes
//! both. The decision and the mapping to the codes of a C API are in
//! `docs/design.md` ("Errors").

use core::fmt;

use crate::format::Role;

/// Result alias used throughout the runtime.
pub type Result<T> = core::result::Result<T, Error>;

/// Result alias of what runs per token.
pub type StepResult<T> = core::result::Result<T, StepError>;

/// What can go wrong when loading an image and setting up a session (and a
/// [`StepError`] converted: see the module docs).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Error {
    /// The image does not start with the ferrite magic bytes.
    BadMagic,
    /// The image was written in a format version this runtime cannot read.
    UnsupportedVersion {
        /// Version found in the image header.
        found: u32,
        /// Oldest version this runtime reads.
        min: u32,
        /// Newest version this runtime reads.
        max: u32,
    },
    /// The image is shorter than its header or a section claims.
    Truncated {
        /// Bytes the image needs.
        needed: usize,
        /// Bytes that are there.
        len: usize,
    },
    /// The checksum over the image body does not match the header.
    CrcMismatch {
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed over the bytes.
        computed: u32,
    },
    /// The image does not start on a 16-byte boundary, so tensors cannot be used in place.
    ImageMisaligned,
    /// A header field or section is malformed.
    BadHeader(&'static str),
    /// The model configuration is invalid; `layer` is `None` for model-wide fields.
    BadConfig {
        /// Layer whose record is wrong, if any.
        layer: Option<u16>,
        /// What is wrong.
        reason: &'static str,
    },
    /// A tensor table entry is malformed (see `reason`).
    BadTensor {
        /// Index in the tensor table.
        index: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// A tensor has a dtype code this runtime does not know.
    UnknownDType {
        /// Index in the tensor table.
        index: u32,
        /// The dtype code found.
        code: u8,
    },
    /// A tensor the configuration requires is missing or out of order.
    MissingTensor {
        /// Layer (`None` for model-wide tensors).
        layer: Option<u16>,
        /// Role of the missing tensor.
        role: Role,
    },
    /// A tensor's shape contradicts the configuration.
    ShapeMismatch {
        /// Layer (`None` for model-wide tensors).
        layer: Option<u16>,
        /// Role of the tensor.
        role: Role,
    },
    /// The caller's buffer is too small for the session.
    BufferTooSmall {
        /// Bytes the session needs.
        needed: usize,
        /// Bytes the caller gave.
        got: usize,
    },
    /// A token id is not in the vocabulary (a [`StepError`] converted, or
    /// a tool's own check).
    TokenOutOfRange {
        /// The token.
        token: u32,
        /// Vocabulary size.
        vocab: u32,
    },
    /// More pinned tokens were asked for than the session was sized for.
    TooManyPinned {
        /// Pinned tokens asked for.
        asked: usize,
        /// Maximum the state was sized for.
        max: usize,
    },
    /// A sampler option is out of range.
    BadSampler(&'static str),
    /// The prompt is empty or does not fit the output buffer.
    BadPrompt(&'static str),
    /// The image's tokenizer section is malformed (see the reason).
    BadTokenizer(&'static str),
    /// An invariant of the runtime itself failed: a bug, reported rather
    /// than a panic (please report it with the image that caused it).
    Internal(&'static str),
    /// A size derived from the image (a tensor dimension such as heads times
    /// head size, a state, scratch or session length) overflows or exceeds
    /// what this runtime or target can hold; `layer` is `None` for model-wide
    /// sizes.
    SizeOverflow {
        /// Layer whose configuration asks for it, if any.
        layer: Option<u16>,
        /// Which size.
        what: &'static str,
    },
    /// The stream reached the last position a 64-bit counter holds
    /// (`u64::MAX`); reset or seek the session to go on (a [`StepError`]
    /// converted).
    PositionOverflow,
    /// A state snapshot was refused or could not be written (see
    /// [`crate::snapshot_error::SnapshotError`]); the session is unchanged.
    BadSnapshot(crate::snapshot_error::SnapshotError),
    /// A baked memory was asked for that a layer does not have
    /// ([`crate::Session::select_memory`]); the session is unchanged.
    NoSuchMemory {
        /// The layer asked (`None`: every `cross` layer, and the model has
        /// none when `count` is 0).
        layer: Option<u16>,
        /// The memory index asked for.
        index: u32,
        /// Memories the layer has (0: not a `cross` layer).
        count: u32,
    },
    /// A caller-owned memory ([`crate::Memory`], [`crate::memory_len`],
    /// [`crate::Session::encode_memory`]) does not fit the model or the
    /// call (see the reason); nothing was changed.
    BadMemory(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::BadMagic => write!(f, "not a ferrite image (bad magic bytes)"),
            Error::UnsupportedVersion { found, min, max } => write!(
                f,
                "image format version {found} is not supported (this runtime reads versions {min}..={max})"
            ),
            Error::Truncated { needed, len } => {
                write!(f, "image truncated: needs {needed} bytes, has {len}")
            }
            Error::CrcMismatch { stored, computed } => write!(
                f,
                "image corrupted: CRC mismatch (header {stored:#010x}, computed {computed:#010x})"
            ),
            Error::ImageMisaligned => {
                write!(f, "image must start on a 16-byte boundary to be used in place")
            }
            Error::BadHeader(reason) => write!(f, "bad image header: {reason}"),
            Error::Internal(reason) => write!(f, "internal error (a bug in ferrite): {reason}"),
            Error::BadConfig { layer: Some(l), reason } => {
                write!(f, "bad config in layer {l}: {reason}")
            }
            Error::BadConfig { layer: None, reason } => write!(f, "bad config: {reason}"),
            Error::BadTensor { index, reason } => write!(f, "bad tensor #{index}: {reason}"),
            Error::UnknownDType { index, code } => {
                write!(f, "tensor #{index} has unknown dtype code {code}")
            }
            Error::MissingTensor { layer, role } => {
                write!(f, "missing tensor ")?;
                write_tensor_name(f, layer, role)
            }
            Error::ShapeMismatch { layer, role } => {
                write!(f, "shape of ")?;
                write_tensor_name(f, layer, role)?;
                write!(f, " contradicts the config")
            }
            Error::BufferTooSmall { needed, got } => write!(
                f,
                "session buffer too small: needs {needed} bytes, got {got}"
            ),
            Error::TokenOutOfRange { token, vocab } => {
                write!(f, "token {token} is outside the vocabulary (size {vocab})")
            }
            Error::TooManyPinned { asked, max } => write!(
                f,
                "cannot pin {asked} tokens: the session was sized for at most {max}"
            ),
            Error::BadSampler(reason) => write!(f, "bad sampler option: {reason}"),
            Error::BadPrompt(reason) => write!(f, "bad prompt: {reason}"),
            Error::BadTokenizer(reason) => write!(f, "bad tokenizer section: {reason}"),
            Error::SizeOverflow {
                layer: Some(l),
                what,
            } => write!(f, "size overflow in layer {l}: {what}"),
            Error::SizeOverflow { layer: None, what } => write!(f, "size overflow: {what}"),
            Error::PositionOverflow => write!(
                f,
                "the stream reached position 2^64 - 1: reset or seek the session to go on"
            ),
            Error::BadSnapshot(e) => fmt::Display::fmt(&e, f),
            Error::BadMemory(reason) => write!(f, "bad memory: {reason}"),
            Error::NoSuchMemory {
                layer: Some(l),
                index,
                count: 0,
            } => write!(
                f,
                "no memory {index} in layer {l}: it is not a cross layer"
            ),
            Error::NoSuchMemory {
                layer: None,
                index,
                count: 0,
            } => write!(f, "no memory {index}: the model has no cross layer"),
            Error::NoSuchMemory {
                layer: Some(l),
                index,
                count,
            } => write!(
                f,
                "no memory {index} in layer {l}: it has {count} (0..={})",
                count - 1
            ),
            Error::NoSuchMemory {
                layer: None,
                index,
                count,
            } => write!(
                f,
                "no memory {index}: a cross layer has {count} (0..={})",
                count - 1
            ),
        }
    }
}

fn write_tensor_name(f: &mut fmt::Formatter<'_>, layer: Option<u16>, role: Role) -> fmt::Result {
    match layer {
        Some(l) => write!(f, "model.layers.{l}.{}", role.name()),
        None => write!(f, "{}", role.name()),
    }
}

impl core::error::Error for Error {}

/// What feeding a token can go wrong with: [`crate::Session::feed`] (and
/// [`crate::Session::generate`], which also refuses an empty prompt).
///
/// The image, its tensors and the session's buffer were validated when they
/// were loaded and made ([`Error`]), so a step can only meet a token or a
/// position it cannot take, or a failed invariant of the runtime itself.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StepError {
    /// A token id is not in the vocabulary; the state is unchanged.
    TokenOutOfRange {
        /// The token.
        token: u32,
        /// Vocabulary size.
        vocab: u32,
    },
    /// The stream reached the last position a 64-bit counter holds
    /// (`u64::MAX`); reset or seek the session to go on.
    PositionOverflow,
    /// [`crate::Session::generate`] was given an empty prompt (it needs a
    /// token to feed first); [`crate::Session::feed`] never returns it.
    EmptyPrompt,
    /// [`crate::Session::resume_with`] found no logits to sample from:
    /// nothing was fed since the stream started.
    NoLogits,
    /// A caller-owned memory ([`crate::Session::feed_with_memory`]) does
    /// not fit the session's model (its length for the model's `cross`
    /// layers); the state is unchanged.
    BadMemory(&'static str),
    /// An invariant of the runtime itself failed (data validated at load was
    /// not what the step found): a bug, reported rather than a panic (please
    /// report it with the image that caused it).
    Internal(&'static str),
}

impl From<StepError> for Error {
    // Cold and out of line: only error paths convert, and each `?` that
    // does is then a call rather than a copy of this match.
    #[cold]
    #[inline(never)]
    fn from(e: StepError) -> Error {
        match e {
            StepError::TokenOutOfRange { token, vocab } => Error::TokenOutOfRange { token, vocab },
            StepError::PositionOverflow => Error::PositionOverflow,
            StepError::EmptyPrompt => Error::BadPrompt("the prompt is empty"),
            StepError::NoLogits => Error::BadPrompt(
                "nothing was fed since the stream started: no logits to go on from",
            ),
            StepError::BadMemory(reason) => Error::BadMemory(reason),
            StepError::Internal(reason) => Error::Internal(reason),
        }
    }
}

impl fmt::Display for StepError {
    /// The message of the [`Error`] it converts to.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Error::from(*self), f)
    }
}

impl core::error::Error for StepError {}

impl Error {
    /// This error met in a step, in data that was validated at load (a
    /// layer record, a tensor entry): a failed invariant, as a
    /// [`StepError::Internal`] that keeps the reason where there is one.
    /// Cold: only a bug reaches it.
    #[cold]
    #[inline(never)]
    pub(crate) fn at_step(self) -> StepError {
        StepError::Internal(match self {
            Error::Internal(reason)
            | Error::BadHeader(reason)
            | Error::BadConfig { reason, .. }
            | Error::BadTensor { reason, .. }
            | Error::SizeOverflow { what: reason, .. } => reason,
            Error::MissingTensor { .. } => "a tensor checked at load is missing",
            Error::ShapeMismatch { .. } => "a tensor shape checked at load is wrong",
            _ => "an image check passed at load failed in a step",
        })
    }
}

/// Returns [`Error::BadConfig`] from a const fn when `cond` is false (the
/// config records' validation: `config` and each mixer's `from_words`).
macro_rules! ensure {
    ($cond:expr, $layer:expr, $reason:literal) => {
        if !$cond {
            return Err($crate::error::Error::BadConfig {
                layer: $layer,
                reason: $reason,
            });
        }
    };
}
pub(crate) use ensure;

/// Returns [`Error::SizeOverflow`] from a const fn when `cond` is false.
macro_rules! ensure_size {
    ($cond:expr, $layer:expr, $what:literal) => {
        if !$cond {
            return Err($crate::error::Error::SizeOverflow {
                layer: $layer,
                what: $what,
            });
        }
    };
}
pub(crate) use ensure_size;

impl From<crate::snapshot_error::SnapshotError> for Error {
    fn from(e: crate::snapshot_error::SnapshotError) -> Error {
        Error::BadSnapshot(e)
    }
}

/// `s[i]`, or [`Error::Internal`] with `what` where `i` is out of `s`: the
/// steps' slicing of their state and scratch, whose lengths the session's
/// sizing fixed, written so that no panic branch is left (the C API's link
/// check, docs/c-api.md "No panics"). The same compare as indexing.
#[inline(always)]
pub(crate) fn part<'s, T, I: core::slice::SliceIndex<[T]>>(
    s: &'s [T],
    i: I,
    what: &'static str,
) -> Result<&'s I::Output> {
    s.get(i).ok_or(Error::Internal(what))
}

/// [`part`] of a mutable slice.
#[inline(always)]
pub(crate) fn part_mut<'s, T, I: core::slice::SliceIndex<[T]>>(
    s: &'s mut [T],
    i: I,
    what: &'static str,
) -> Result<&'s mut I::Output> {
    s.get_mut(i).ok_or(Error::Internal(what))
}

/// `s.split_at_mut(at)`, or [`Error::Internal`] with `what` where `at` is
/// past the end (as [`part`]: lengths the session's sizing fixed).
#[inline(always)]
pub(crate) fn split_mut<'s, T>(
    s: &'s mut [T],
    at: usize,
    what: &'static str,
) -> Result<(&'s mut [T], &'s mut [T])> {
    s.split_at_mut_checked(at).ok_or(Error::Internal(what))
}

/// An iterator that `zip` walks one item at a time: `Rows(a.chunks_exact(n))
/// .zip(..)`. Zipping two random-access iterators (`chunks_exact` and
/// slices) starts with their lengths, `len / n` for a chunk iterator: a
/// division whose zero check stays a panic branch wherever the optimiser
/// keeps `Zip::new` out of line (the C API's link check, docs/c-api.md "No
/// panics"). This wrapper is not random-access, so the zip takes its plain
/// path: the same items in the same order, no division.
pub(crate) struct Rows<I>(pub(crate) I);

impl<I: Iterator> Iterator for Rows<I> {
    type Item = I::Item;

    #[inline(always)]
    fn next(&mut self) -> Option<I::Item> {
        self.0.next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_errors_met_in_a_step_are_internal_and_keep_their_reason() {
        let bad = Error::BadTensor {
            index: 3,
            reason: "payload out of bounds",
        };
        assert_eq!(bad.at_step(), StepError::Internal("payload out of bounds"));
        let missing = Error::MissingTensor {
            layer: Some(1),
            role: Role::MlpUp,
        };
        assert_eq!(
            missing.at_step(),
            StepError::Internal("a tensor checked at load is missing")
        );
        assert_eq!(
            Error::ShapeMismatch {
                layer: None,
                role: Role::MlpUp,
            }
            .at_step(),
            StepError::Internal("a tensor shape checked at load is wrong")
        );
        assert_eq!(
            Error::BadMagic.at_step(),
            StepError::Internal("an image check passed at load failed in a step")
        );
    }

    #[test]
    fn a_tensor_is_named_by_its_layer_and_role() {
        fn text(args: core::fmt::Arguments<'_>) -> heapless::String<128> {
            let mut s = heapless::String::new();
            core::fmt::write(&mut s, args).unwrap();
            s
        }
        let role = Role::MlpUp.name();
        let in_layer = Error::MissingTensor {
            layer: Some(1),
            role: Role::MlpUp,
        };
        assert_eq!(
            text(format_args!("{in_layer}")),
            text(format_args!("missing tensor model.layers.1.{role}"))
        );
        let model_wide = Error::ShapeMismatch {
            layer: None,
            role: Role::MlpUp,
        };
        assert_eq!(
            text(format_args!("{model_wide}")),
            text(format_args!("shape of {role} contradicts the config"))
        );
    }

    #[test]
    fn rows_walks_the_items_a_plain_zip_walks() {
        let a = [1, 2, 3, 4, 5, 6, 7];
        let b = [10, 20, 30];
        let plain: heapless::Vec<(&[i32], &i32), 8> = a.chunks_exact(2).zip(&b).collect();
        let rows: heapless::Vec<(&[i32], &i32), 8> = Rows(a.chunks_exact(2)).zip(&b).collect();
        assert_eq!(rows, plain);
        assert_eq!(rows.len(), 3);
    }

    #[test]
    fn every_step_error_keeps_its_variant_and_message_as_an_error() {
        let all = [
            StepError::TokenOutOfRange { token: 9, vocab: 4 },
            StepError::PositionOverflow,
            StepError::EmptyPrompt,
            StepError::NoLogits,
            StepError::Internal("act"),
        ];
        let want = [
            "token 9 is outside the vocabulary (size 4)",
            "the stream reached position 2^64 - 1: reset or seek the session to go on",
            "bad prompt: the prompt is empty",
            "bad prompt: nothing was fed since the stream started: no logits to go on from",
            "internal error (a bug in ferrite): act",
        ];
        for (e, msg) in all.into_iter().zip(want) {
            let mut s = heapless::String::<128>::new();
            core::fmt::write(&mut s, format_args!("{e}")).unwrap();
            assert_eq!(s, msg);
            let mut wide = heapless::String::<128>::new();
            core::fmt::write(&mut wide, format_args!("{}", Error::from(e))).unwrap();
            assert_eq!(wide, msg);
        }
    }
}
