//! State snapshots: a session's whole stream state as bytes, to restore
//! into another session of the same model (after a sleep, a reset, on
//! another device). The format (prose: `docs/snapshot-format.md`):
//!
//! ```text
//! offset 0   header   64 bytes: magic, version, length, CRC, model hash,
//!                     math module, flags, pinned capacity and count,
//!                     position, stream length
//! 64         state    the session's state bytes (Session::state), as stored
//! 64 + S     logits   vocab f32 words: what the last feed returned (zero
//!                     when nothing was fed since the stream started)
//! 64 + S + 4V sampler version 2 only: 32 bytes, a sampler's state
//!                     (crate::sampler::SamplerState)
//! ```
//!
//! [`crate::Session::snapshot`] writes version 1 (no sampler: the bytes of
//! every snapshot made before version 2 existed),
//! [`crate::Session::snapshot_with_sampler`] version 2 (flag bit 1 and the
//! sampler section). [`crate::Session::restore`] and
//! [`crate::Session::restore_with_sampler`] read both and check everything
//! (the sampler section too) before they write anything, so a refused
//! snapshot leaves the session, and the sampler, as they were
//! ([`SnapshotError`] says why). Snapshots are not authenticated: the CRC
//! finds accidents, not forgeries.

use crate::error::{Error, Result};
use crate::image;
use crate::model::Model;
use crate::sampler::{Sampler, SamplerState};
pub use crate::snapshot_error::{math_name, SnapshotError};

/// The first 8 bytes of every snapshot.
pub const MAGIC: [u8; 8] = *b"FERSNAP\0";
/// The newest snapshot format version this runtime reads and writes: 2,
/// a snapshot with a sampler section ([`FLAG_SAMPLER`]).
pub const VERSION: u32 = 2;
/// The oldest snapshot format version this runtime reads: 1, a snapshot
/// without a sampler section, which is still what
/// [`crate::Session::snapshot`] writes.
pub const MIN_VERSION: u32 = 1;
/// Bytes of the snapshot header.
pub const HEADER_LEN: usize = 64;
/// Offset of the CRC-32 field; the CRC covers `CRC_START..total_len`.
pub const CRC_FIELD: usize = 20;
/// First byte the CRC covers.
pub const CRC_START: usize = 24;
/// Flag bit 0: the logits section holds the last feed's logits.
pub const FLAG_LOGITS: u32 = 1;
/// Flag bit 1 (version 2, where it is always set): a sampler section of
/// [`SAMPLER_LEN`] bytes follows the logits.
pub const FLAG_SAMPLER: u32 = 2;
/// Bytes of the sampler section of a version 2 snapshot: temperature bits,
/// top-k, top-p bits, a reserved zero word (u32 each), seed and draw count
/// (u64 each), little-endian.
pub const SAMPLER_LEN: usize = 32;

/// The 64-bit hash of a model's content ([`model_hash`]): CRC-64/XZ.
pub const HASH: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_XZ);

/// Byte offset of the provenance word (model record word 7) in the config
/// section: informational, so left out of the model hash.
const PROVENANCE_OFF: usize = 28;

/// Byte offset of the header's flags and security counter words (format
/// 7), left out of the model hash with the signature section.
const SIGNING_WORDS: usize = 56;

/// The code of this build's math module ([`crate::math::FAST_MATH`]) in a
/// snapshot: 0 `libm`, 1 `int`, 2 `float`.
pub const fn math_code() -> u32 {
    match crate::math::FAST_MATH.as_bytes() {
        b"int" => 1,
        b"float" => 2,
        _ => 0,
    }
}

/// Bytes of a snapshot of a session over `image` with pinned capacity
/// `pinned_max`: `const`, like [`crate::session_len`], so a board sizes a
/// snapshot slot at compile time. Validates what `session_len` validates.
pub const fn snapshot_len(image: &[u8], pinned_max: usize) -> Result<usize> {
    let len = match crate::sizes::buffer_len(image, pinned_max) {
        Ok(l) => l,
        Err(e) => return Err(e),
    };
    let (_, _, cfg) = match crate::sizes::parse_config(image) {
        Ok(parts) => parts,
        Err(e) => return Err(e),
    };
    bytes_for(len.state, cfg.vocab_size as usize)
}

/// Bytes of a version 2 snapshot (one with a sampler,
/// [`crate::Session::snapshot_with_sampler`]) of a session over `image`
/// with pinned capacity `pinned_max`: [`snapshot_len`] plus
/// [`SAMPLER_LEN`]. `const`, like `snapshot_len`.
pub const fn snapshot_with_sampler_len(image: &[u8], pinned_max: usize) -> Result<usize> {
    match snapshot_len(image, pinned_max) {
        Ok(len) => with_sampler(len),
        Err(e) => Err(e),
    }
}

/// `len + SAMPLER_LEN`, checked against the address space.
pub(crate) const fn with_sampler(len: usize) -> Result<usize> {
    match len.checked_add(SAMPLER_LEN) {
        Some(n) if n <= isize::MAX as usize => Ok(n),
        _ => Err(Error::SizeOverflow {
            layer: None,
            what: "the snapshot exceeds what this target can address",
        }),
    }
}

/// `HEADER_LEN + 4 * (state_words + vocab)`, checked against the address space.
pub(crate) const fn bytes_for(state_words: usize, vocab: usize) -> Result<usize> {
    const TOO_LARGE: Error = Error::SizeOverflow {
        layer: None,
        what: "the snapshot exceeds what this target can address",
    };
    let words = state_words as u64 + vocab as u64;
    let bytes = HEADER_LEN as u64 + 4 * words;
    if bytes > isize::MAX as u64 {
        return Err(TOO_LARGE);
    }
    Ok(bytes as usize)
}

/// The hash of `model`'s content that a snapshot names: CRC-64/XZ over the
/// image's header words from byte 24 (section offsets and lengths) and
/// every byte from 64 to the end of the content (config, tensor table,
/// tokenizer, tensor data), with the config's provenance word (informational
/// only) read as 0. The format version, the length and the CRC field are
/// left out; so is what signing adds (format 7: the flags and security
/// counter words, read as 0, and the signature section), so a signed image
/// and its unsigned original have one hash. Reads the whole image once.
pub fn model_hash(model: &Model<'_>) -> Result<u64> {
    let img = model.image();
    let h = model.header();
    let end = h.signed_len() as usize;
    let prov = (h.config_off as usize)
        .checked_add(PROVENANCE_OFF)
        .ok_or(Error::Internal("model hash"))?;
    let body = img
        .get(image::CRC_START..end)
        .ok_or(Error::Internal("model hash"))?;
    let (before, rest) = body
        .split_at_checked(prov - image::CRC_START)
        .ok_or(Error::Internal("model hash"))?;
    let after = rest.get(4..).ok_or(Error::Internal("model hash"))?;
    let mut d = HASH.digest();
    if h.version >= image::SIGNED_FORMAT_VERSION {
        // Header words 14-15 (bytes 56..64), then the rest as before.
        let (words, tail) = before
            .split_at_checked(SIGNING_WORDS - image::CRC_START)
            .ok_or(Error::Internal("model hash"))?;
        d.update(words);
        d.update(&[0; 8]);
        d.update(tail.get(8..).ok_or(Error::Internal("model hash"))?);
    } else {
        d.update(before);
    }
    d.update(&[0; 4]);
    d.update(after);
    Ok(d.finalize())
}

/// The fixed header of a snapshot, as [`parse_header`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// Format version.
    pub version: u32,
    /// Bytes of the whole snapshot.
    pub total_len: u32,
    /// CRC-32/ISO-HDLC over `CRC_START..total_len`.
    pub crc32: u32,
    /// Hash of the model's content ([`model_hash`]).
    pub model_hash: u64,
    /// Math module ([`math_code`]).
    pub math: u32,
    /// Flags ([`FLAG_LOGITS`], [`FLAG_SAMPLER`]).
    pub flags: u32,
    /// Pinned capacity of the session.
    pub pinned_max: u32,
    /// Pinned tokens in use.
    pub pinned: u32,
    /// Absolute position of the next token.
    pub position: u64,
    /// Tokens fed since the stream started.
    pub stream_len: u64,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        w.copy_from_slice(s);
    }
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// Reads and checks a snapshot's header and CRC (not what it belongs to):
/// length, magic, version, header length, the length field, then the CRC.
/// Bytes after the length field's end are ignored (a flash slot may be
/// larger). What [`crate::Session::restore`] checks first, and what
/// `ferrite inspect` shows.
pub fn parse_header(bytes: &[u8]) -> core::result::Result<SnapshotHeader, SnapshotError> {
    if bytes.len() < HEADER_LEN {
        if bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        return Err(SnapshotError::Truncated {
            needed: HEADER_LEN,
            len: bytes.len(),
        });
    }
    if bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let version = u32_at(bytes, 8);
    if !(MIN_VERSION..=VERSION).contains(&version) {
        return Err(SnapshotError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    if u32_at(bytes, 12) as usize != HEADER_LEN {
        return Err(SnapshotError::BadField("header length is not 64"));
    }
    let total_len = u32_at(bytes, 16);
    if (total_len as usize) < HEADER_LEN {
        return Err(SnapshotError::BadField("length is below the header's"));
    }
    let body = bytes
        .get(CRC_START..total_len as usize)
        .ok_or(SnapshotError::Truncated {
            needed: total_len as usize,
            len: bytes.len(),
        })?;
    let stored = u32_at(bytes, CRC_FIELD);
    let computed = image::CRC.checksum(body);
    if stored != computed {
        return Err(SnapshotError::CrcMismatch { stored, computed });
    }
    Ok(SnapshotHeader {
        version,
        total_len,
        crc32: stored,
        model_hash: u64_at(bytes, 24),
        math: u32_at(bytes, 32),
        flags: u32_at(bytes, 36),
        pinned_max: u32_at(bytes, 40),
        pinned: u32_at(bytes, 44),
        position: u64_at(bytes, 48),
        stream_len: u64_at(bytes, 56),
    })
}

impl SnapshotHeader {
    /// Writes the header (with a zero CRC field) into `out[..HEADER_LEN]`.
    pub(crate) fn encode(&self, out: &mut [u8]) {
        let mut put = |at: usize, v: &[u8]| {
            if let Some(s) = out.get_mut(at..at + v.len()) {
                s.copy_from_slice(v);
            }
        };
        put(0, &MAGIC);
        put(8, &self.version.to_le_bytes());
        put(12, &(HEADER_LEN as u32).to_le_bytes());
        put(16, &self.total_len.to_le_bytes());
        put(20, &0u32.to_le_bytes());
        put(24, &self.model_hash.to_le_bytes());
        put(32, &self.math.to_le_bytes());
        put(36, &self.flags.to_le_bytes());
        put(40, &self.pinned_max.to_le_bytes());
        put(44, &self.pinned.to_le_bytes());
        put(48, &self.position.to_le_bytes());
        put(56, &self.stream_len.to_le_bytes());
    }
}

/// Seals a snapshot written into `out[..total]`: its CRC field.
pub(crate) fn seal(out: &mut [u8], total: usize) {
    let crc = out
        .get(CRC_START..total)
        .map(|b| image::CRC.checksum(b))
        .unwrap_or(0);
    if let Some(s) = out.get_mut(CRC_FIELD..CRC_FIELD + 4) {
        s.copy_from_slice(&crc.to_le_bytes());
    }
}

impl SamplerState {
    /// The sampler section's bytes ([`SAMPLER_LEN`], little-endian).
    pub fn to_bytes(&self) -> [u8; SAMPLER_LEN] {
        let mut b = [0u8; SAMPLER_LEN];
        b[0..4].copy_from_slice(&self.temperature_bits.to_le_bytes());
        b[4..8].copy_from_slice(&self.top_k.to_le_bytes());
        b[8..12].copy_from_slice(&self.top_p_bits.to_le_bytes());
        // 12..16: reserved, 0.
        b[16..24].copy_from_slice(&self.seed.to_le_bytes());
        b[24..32].copy_from_slice(&self.draws.to_le_bytes());
        b
    }
}

/// Reads a sampler section (its [`SAMPLER_LEN`] bytes, a shorter slice
/// reads as zeros past its end) and checks it: the reserved word is 0
/// ([`SnapshotError::BadField`]) and the options and draw count are a
/// sampler's ([`crate::Sampler::from_state`];
/// [`SnapshotError::BadSampler`] otherwise). What `ferrite inspect` shows
/// of a version 2 snapshot.
pub fn parse_sampler(section: &[u8]) -> core::result::Result<SamplerState, SnapshotError> {
    if u32_at(section, 12) != 0 {
        return Err(SnapshotError::BadField(
            "the sampler section's reserved word is not 0",
        ));
    }
    let state = SamplerState {
        temperature_bits: u32_at(section, 0),
        top_k: u32_at(section, 4),
        top_p_bits: u32_at(section, 8),
        seed: u64_at(section, 16),
        draws: u64_at(section, 24),
    };
    match Sampler::from_state(state) {
        Ok(_) => Ok(state),
        Err(Error::BadSampler(reason)) => Err(SnapshotError::BadSampler(reason)),
        Err(_) => Err(SnapshotError::BadSampler("not a sampler's state")),
    }
}

/// What a checked snapshot gives [`crate::Session::restore`] to write.
pub(crate) struct Checked<'s> {
    pub header: SnapshotHeader,
    pub state: &'s [u8],
    pub logits: Option<&'s [u8]>,
    /// The sampler of a version 2 snapshot, checked and rebuilt.
    pub sampler: Option<Sampler>,
}

/// Checks `bytes` against a session of `model` with pinned capacity
/// `pinned_max`, `state_words` of state: every check restore makes, in the
/// order docs/snapshot-format.md gives, before anything is written.
pub(crate) fn check<'s>(
    bytes: &'s [u8],
    model: &Model<'_>,
    pinned_max: usize,
    state_words: usize,
) -> Result<Checked<'s>> {
    let h = parse_header(bytes)?;
    let ours = model_hash(model)?;
    if h.model_hash != ours {
        return Err(SnapshotError::OtherModel {
            snapshot: h.model_hash,
            model: ours,
        }
        .into());
    }
    if h.math != math_code() {
        return Err(SnapshotError::OtherNumericPath {
            snapshot: h.math,
            build: math_code(),
        }
        .into());
    }
    if u64::from(h.pinned_max) != pinned_max as u64 {
        return Err(SnapshotError::OtherPinnedCapacity {
            snapshot: u64::from(h.pinned_max),
            session: pinned_max as u64,
        }
        .into());
    }
    let vocab = model.config().vocab_size as usize;
    let stream_total = bytes_for(state_words, vocab)?;
    // Version 2 is version 1 and a sampler section.
    let has_sampler = h.version == 2;
    let total = if has_sampler {
        with_sampler(stream_total)?
    } else {
        stream_total
    };
    if h.total_len as usize != total {
        return Err(SnapshotError::BadField("length does not match the model's state").into());
    }
    let known = if has_sampler {
        FLAG_LOGITS | FLAG_SAMPLER
    } else {
        FLAG_LOGITS
    };
    if h.flags & !known != 0 {
        return Err(SnapshotError::BadField("unknown flag bits").into());
    }
    if has_sampler && h.flags & FLAG_SAMPLER == 0 {
        return Err(SnapshotError::BadField("version 2 without the sampler flag").into());
    }
    if h.pinned > h.pinned_max {
        return Err(SnapshotError::BadField("more pinned tokens than the capacity").into());
    }
    if h.stream_len > h.position {
        return Err(SnapshotError::BadField("stream longer than its position").into());
    }
    if h.position == u64::MAX {
        return Err(SnapshotError::PositionExhausted.into());
    }
    if (h.flags & FLAG_LOGITS != 0) != (h.stream_len > 0) {
        return Err(SnapshotError::BadField("logits flag contradicts the stream length").into());
    }
    let state_end = HEADER_LEN + 4 * state_words;
    let state = bytes
        .get(HEADER_LEN..state_end)
        .ok_or(Error::Internal("snapshot state"))?;
    let logits = bytes
        .get(state_end..stream_total)
        .ok_or(Error::Internal("snapshot logits"))?;
    let sampler = if has_sampler {
        let section = bytes
            .get(stream_total..total)
            .ok_or(Error::Internal("snapshot sampler"))?;
        let state = parse_sampler(section)?;
        Some(Sampler::from_state(state)?)
    } else {
        None
    };
    Ok(Checked {
        header: h,
        state,
        logits: (h.flags & FLAG_LOGITS != 0).then_some(logits),
        sampler,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code a snapshot records is this build's math module: `libm` in
    /// the default build, `int` and `float` in the fast-math builds (the
    /// CI's fast-math step runs this test in both).
    #[test]
    fn the_math_code_names_this_builds_module() {
        assert_eq!(math_name(math_code()), crate::math::FAST_MATH);
        assert_eq!(
            [math_name(0), math_name(1), math_name(2)],
            ["libm", "int", "float"]
        );
    }

    /// A snapshot longer than the address space is refused, one just
    /// inside it is not (its length is a multiple of 4, `isize::MAX` odd).
    #[test]
    fn snapshot_lengths_stop_at_the_address_space() {
        let words = isize::MAX as usize / 4;
        assert!(bytes_for(words, 0).is_err());
        assert!(bytes_for(words - 16, 0).is_ok());
        assert!(bytes_for(words - 16, 16).is_err());
        assert_eq!(bytes_for(3, 5), Ok(HEADER_LEN + 32));
    }

    /// The shortest snapshot, a header alone (`total_len` 64: no state, no
    /// logits), parses; one byte less is truncated.
    #[test]
    fn a_header_alone_parses() {
        let h = SnapshotHeader {
            version: MIN_VERSION,
            total_len: HEADER_LEN as u32,
            crc32: 0,
            model_hash: 0x0123_4567_89ab_cdef,
            math: 0,
            flags: 0,
            pinned_max: 0,
            pinned: 0,
            position: 7,
            stream_len: 3,
        };
        let mut b = [0u8; HEADER_LEN];
        h.encode(&mut b);
        seal(&mut b, HEADER_LEN);
        let crc32 = image::CRC.checksum(&b[CRC_START..]);
        assert_eq!(parse_header(&b), Ok(SnapshotHeader { crc32, ..h }));
        assert_eq!(
            parse_header(&b[..HEADER_LEN - 1]),
            Err(SnapshotError::Truncated {
                needed: HEADER_LEN,
                len: HEADER_LEN - 1
            })
        );
    }
}
