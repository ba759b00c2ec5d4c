//! Why a snapshot was refused: [`SnapshotError`], below the crate's
//! [`crate::error::Error`] (which wraps it) and the snapshot code that
//! returns it, so that neither imports the other.

use core::fmt;

/// Why a snapshot was refused ([`crate::Session::restore`]) or could not be
/// written ([`crate::Session::snapshot`]); inside [`crate::error::Error::BadSnapshot`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SnapshotError {
    /// The bytes do not start with the snapshot magic.
    BadMagic,
    /// A snapshot format version this runtime does not read.
    UnsupportedVersion {
        /// Version in the snapshot.
        found: u32,
        /// The newest version this runtime reads (it reads every version
        /// from 1, `crate::snapshot::MIN_VERSION`, to this one).
        supported: u32,
    },
    /// Fewer bytes than the header or its length field claims.
    Truncated {
        /// Bytes the snapshot needs.
        needed: usize,
        /// Bytes that are there.
        len: usize,
    },
    /// The CRC over the snapshot does not match (corrupted).
    CrcMismatch {
        /// CRC stored in the snapshot.
        stored: u32,
        /// CRC computed over the bytes.
        computed: u32,
    },
    /// The snapshot was made with another model (its content hash differs).
    OtherModel {
        /// Model hash in the snapshot.
        snapshot: u64,
        /// Hash of this session's model.
        model: u64,
    },
    /// The snapshot was computed with another numeric path (math module)
    /// than this build's, so its bits would not continue this build's.
    OtherNumericPath {
        /// Math module code in the snapshot ([`crate::snapshot::math_code`]).
        snapshot: u32,
        /// This build's code.
        build: u32,
    },
    /// The snapshot's session was sized for another pinned capacity.
    OtherPinnedCapacity {
        /// Pinned capacity in the snapshot.
        snapshot: u64,
        /// This session's pinned capacity.
        session: u64,
    },
    /// The stream in the snapshot is at position `u64::MAX`, where no
    /// token can be fed.
    PositionExhausted,
    /// A field contradicts the model or another field (see the reason).
    BadField(&'static str),
    /// The sampler section of a version 2 snapshot is not a sampler's
    /// state (see the reason: the options [`crate::Sampler::new`] refuses,
    /// or draws by a sampler that never draws).
    BadSampler(&'static str),
    /// The output buffer of [`crate::Session::snapshot`] is too small.
    OutTooSmall {
        /// Bytes the snapshot needs ([`crate::Session::snapshot_len`]).
        needed: usize,
        /// Bytes given.
        got: usize,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SnapshotError::BadMagic => write!(f, "not a ferrite snapshot (bad magic bytes)"),
            SnapshotError::UnsupportedVersion { found, supported } => write!(
                f,
                "snapshot format version {found} is not supported (this runtime reads versions 1..={supported})"
            ),
            SnapshotError::Truncated { needed, len } => {
                write!(f, "snapshot truncated: needs {needed} bytes, has {len}")
            }
            SnapshotError::CrcMismatch { stored, computed } => write!(
                f,
                "snapshot corrupted: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            SnapshotError::OtherModel { snapshot, model } => write!(
                f,
                "snapshot belongs to another model (model hash {snapshot:#018x}, this model {model:#018x})"
            ),
            SnapshotError::OtherNumericPath { snapshot, build } => write!(
                f,
                "snapshot was computed with math module {} but this build uses {}",
                math_name(snapshot),
                math_name(build)
            ),
            SnapshotError::OtherPinnedCapacity { snapshot, session } => write!(
                f,
                "snapshot is of a session with pinned capacity {snapshot}, this session has {session}"
            ),
            SnapshotError::PositionExhausted => write!(
                f,
                "snapshot stream is at position 2^64 - 1: no token can follow"
            ),
            SnapshotError::BadField(reason) => write!(f, "bad snapshot: {reason}"),
            SnapshotError::BadSampler(reason) => {
                write!(f, "bad snapshot: sampler section: {reason}")
            }
            SnapshotError::OutTooSmall { needed, got } => write!(
                f,
                "snapshot buffer too small: needs {needed} bytes, got {got}"
            ),
        }
    }
}

/// The name of math module code `code` ([`crate::snapshot::math_code`]), `"unknown"` for
/// another number.
pub const fn math_name(code: u32) -> &'static str {
    match code {
        0 => "libm",
        1 => "int",
        2 => "float",
        _ => "unknown",
    }
}
