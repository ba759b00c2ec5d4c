//! A/B model updates that cannot brick the device.
//!
//! The board serves model A from its slot while model B arrives in chunks
//! into a second slot. Nothing about A changes until B is received whole
//! and validated completely; only then does the serving model switch. So a
//! transfer cut at any chunk, a flipped bit, a hostile image with a valid
//! CRC, or a model whose session does not fit the RAM the board has, all
//! leave A serving, with a reason.
//!
//! Validation, in order: the header's length fits the slot (checked on the
//! first chunk, before more is accepted), every byte the header claims
//! arrived, then [`Model::load`] (magic, version, CRC, config records,
//! tensor table, shapes), [`Model::check_values`] (no NaN or infinite
//! weight or scale) and the session's size against the buffer the firmware
//! owns. On a real chip the slot is a flash partition written through the
//! HAL's flash driver, and the switch is one boot-record write after
//! validation; under QEMU (`boards/src/bin/ota.rs`) the slot is a RAM
//! buffer standing in for it. Nothing here allocates or panics.
//!
//! With the `verify` feature, `validate_signed` checks the image's
//! signature against the keys the firmware trusts and its security counter
//! against the device's minimum before anything else (docs/signing.md).

use core::fmt;

use crate::error::Error;
use crate::model::Model;
use crate::signature::SignatureError;
#[cfg(feature = "verify")]
use crate::signature::{LoadError, TrustPolicy};

/// Offset and size of the image's `file_len` header field.
const FILE_LEN_AT: usize = 16;
/// Bytes of the header needed to read `file_len`.
const LEN_PREFIX: usize = FILE_LEN_AT + 4;

/// Why an update was refused (model A keeps serving).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Refusal {
    /// The transfer ended before the header's length field.
    NoHeader {
        /// Bytes that arrived.
        got: usize,
    },
    /// The header claims more bytes than the slot holds.
    TooLarge {
        /// Bytes the header claims.
        claimed: usize,
        /// Bytes of the slot.
        capacity: usize,
    },
    /// The transfer stopped part-way.
    Interrupted {
        /// Bytes that arrived.
        got: usize,
        /// Bytes the header claims.
        claimed: usize,
    },
    /// The source failed to deliver a chunk.
    ReadError {
        /// Bytes that arrived before the failure.
        got: usize,
    },
    /// The image is invalid (structure, CRC or values).
    Invalid(Error),
    /// The model's session needs more RAM than the firmware reserved.
    SessionTooLarge {
        /// Bytes the session needs.
        needed: usize,
        /// Bytes the firmware has for it.
        available: usize,
    },
    /// The image's signature or security counter is refused
    /// (`validate_signed`, the `verify` feature).
    Signature(SignatureError),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Refusal::NoHeader { got } => {
                write!(f, "the transfer ended after {got} bytes, before the header")
            }
            Refusal::TooLarge { claimed, capacity } => write!(
                f,
                "the image claims {claimed} bytes, the update slot holds {capacity}"
            ),
            Refusal::Interrupted { got, claimed } => {
                write!(f, "the transfer stopped at {got} of {claimed} bytes")
            }
            Refusal::ReadError { got } => write!(f, "read error after {got} bytes"),
            Refusal::Invalid(e) => write!(f, "invalid image: {e}"),
            Refusal::SessionTooLarge { needed, available } => write!(
                f,
                "its session needs {needed} bytes of RAM, the board has {available}"
            ),
            Refusal::Signature(e) => write!(f, "{e}"),
        }
    }
}

/// Receives an image into `slot`, `chunk` bytes at a time, from `read`
/// (which fills a buffer and returns how many bytes it wrote: 0 at the end
/// of the transfer, `Err` on a failure). Reads the header's length first
/// and refuses an image larger than the slot before accepting more; then
/// requires every claimed byte. Returns the image's length.
pub fn receive(
    slot: &mut [u8],
    chunk: usize,
    mut read: impl FnMut(&mut [u8]) -> Result<usize, ()>,
) -> Result<usize, Refusal> {
    let chunk = chunk.max(1);
    if slot.len() < LEN_PREFIX {
        return Err(Refusal::TooLarge {
            claimed: LEN_PREFIX,
            capacity: slot.len(),
        });
    }
    let mut got = 0;
    let mut claimed = None;
    loop {
        let want = match claimed {
            // Only as far as the length field until it is known.
            None => LEN_PREFIX,
            Some(len) => len,
        };
        if got >= want {
            match claimed {
                Some(len) => return Ok(len),
                None => {
                    let len = file_len(&slot[..LEN_PREFIX]);
                    if len > slot.len() {
                        return Err(Refusal::TooLarge {
                            claimed: len,
                            capacity: slot.len(),
                        });
                    }
                    // Shorter than the prefix: Model::load refuses it later.
                    claimed = Some(len.max(LEN_PREFIX));
                    continue;
                }
            }
        }
        let end = want.min(got + chunk);
        // got < want <= slot.len() (the loop's condition and the checks
        // above); an empty piece would read nothing and end the loop.
        let piece = slot.get_mut(got..end).unwrap_or_default();
        let n = read(piece).map_err(|()| Refusal::ReadError { got })?;
        if n == 0 {
            return Err(match claimed {
                None => Refusal::NoHeader { got },
                Some(claimed) => Refusal::Interrupted { got, claimed },
            });
        }
        got += n.min(end - got);
    }
}

/// The little-endian `file_len` field of a header prefix.
fn file_len(prefix: &[u8]) -> usize {
    let b = &prefix[FILE_LEN_AT..FILE_LEN_AT + 4];
    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// Validates a received image completely; the model to serve when it passes.
/// `session_words` is the f32 buffer the firmware has for a session.
pub fn validate(image: &[u8], session_words: usize) -> Result<Model<'_>, Refusal> {
    let model = Model::load(image).map_err(Refusal::Invalid)?;
    model.check_values().map_err(Refusal::Invalid)?;
    let needed = model.session_len(0).map_err(Refusal::Invalid)?;
    if needed > session_words {
        return Err(Refusal::SessionTooLarge {
            needed: needed.saturating_mul(4),
            available: session_words.saturating_mul(4),
        });
    }
    Ok(model)
}

/// [`validate`] for a firmware that runs only signed models (the `verify`
/// feature): the signature and security counter are checked first against
/// `policy` (`signature::verify`: only the header is read before the
/// signature verifies), then the image as `validate` checks it. On
/// success, switch to the model and then advance the device's counter to
/// its `header().security_counter` (`rollback::RollbackCounter::advance`).
#[cfg(feature = "verify")]
pub fn validate_signed<'a>(
    image: &'a [u8],
    session_words: usize,
    policy: &TrustPolicy<'_>,
) -> Result<Model<'a>, Refusal> {
    crate::signature::verify(image, policy).map_err(|e| match e {
        LoadError::Invalid(e) => Refusal::Invalid(e),
        LoadError::Signature(e) => Refusal::Signature(e),
    })?;
    validate(image, session_words)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    /// A source that delivers `data` in pieces of at most `piece` bytes and
    /// then ends (or fails at byte `fail_at`).
    fn source(
        data: &[u8],
        piece: usize,
        fail_at: Option<usize>,
    ) -> impl FnMut(&mut [u8]) -> Result<usize, ()> + '_ {
        let mut at = 0;
        move |buf: &mut [u8]| {
            if fail_at.is_some_and(|f| at >= f) {
                return Err(());
            }
            let n = buf.len().min(piece).min(data.len() - at);
            buf[..n].copy_from_slice(&data[at..at + n]);
            at += n;
            Ok(n)
        }
    }

    /// A fake image of `len` bytes whose header claims `claimed`.
    fn image(len: usize, claimed: u32) -> Vec<u8> {
        let mut b: Vec<u8> = (0..len).map(|i| i as u8).collect();
        b[FILE_LEN_AT..FILE_LEN_AT + 4].copy_from_slice(&claimed.to_le_bytes());
        b
    }

    #[test]
    fn receives_a_whole_image_in_any_chunking() {
        let data = image(1000, 1000);
        for (chunk, piece) in [(1, 1), (7, 3), (64, 64), (4096, 5000)] {
            let mut slot = [0u8; 2048];
            let n = receive(&mut slot, chunk, source(&data, piece, None)).unwrap();
            assert_eq!(n, 1000);
            assert_eq!(&slot[..n], &data[..]);
        }
    }

    #[test]
    fn bytes_after_the_claimed_length_are_not_read() {
        let data = image(1000, 600);
        let mut slot = [0u8; 2048];
        assert_eq!(receive(&mut slot, 128, source(&data, 128, None)), Ok(600));
        assert!(slot[600..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_cut_at_any_chunk_is_refused() {
        let data = image(1000, 1000);
        for cut in 0..1000 {
            let mut slot = [0u8; 2048];
            let r = receive(&mut slot, 100, source(&data[..cut], 100, None));
            let expect = if cut < LEN_PREFIX {
                Refusal::NoHeader { got: cut }
            } else {
                Refusal::Interrupted {
                    got: cut,
                    claimed: 1000,
                }
            };
            assert_eq!(r, Err(expect), "cut at {cut}");
        }
    }

    #[test]
    fn an_image_larger_than_the_slot_is_refused_at_its_header() {
        let data = image(5000, 5000);
        let mut slot = [0u8; 2048];
        let mut calls = 0;
        let mut src = source(&data, 16, None);
        let r = receive(&mut slot, 16, |b| {
            calls += 1;
            src(b)
        });
        assert_eq!(
            r,
            Err(Refusal::TooLarge {
                claimed: 5000,
                capacity: 2048
            })
        );
        assert_eq!(calls, 2, "only the header prefix is read");
        let mut tiny = [0u8; 8];
        assert!(matches!(
            receive(&mut tiny, 4, source(&data, 4, None)),
            Err(Refusal::TooLarge { .. })
        ));
    }

    #[test]
    fn an_image_exactly_as_large_as_the_slot_is_received() {
        // The smallest slot (the length prefix alone) and a full one.
        for len in [LEN_PREFIX, 1000] {
            let data = image(len, len as u32);
            let mut slot = std::vec![0u8; len];
            assert_eq!(receive(&mut slot, 64, source(&data, 64, None)), Ok(len));
            assert_eq!(slot, data);
        }
    }

    #[test]
    fn a_source_that_claims_more_than_it_was_given_cannot_skip_bytes() {
        let data = image(1000, 1000);
        let mut slot = [0u8; 2048];
        let mut inner = source(&data, 50, None);
        // Reports 100 more bytes than it wrote: the receiver counts only
        // what fits the buffer it handed out.
        let lying = |b: &mut [u8]| inner(b).map(|n| if n == 0 { 0 } else { n + 100 });
        let r = receive(&mut slot, 50, lying);
        assert_eq!(r, Ok(1000));
        assert_eq!(&slot[..1000], &data[..]);
    }

    #[test]
    fn a_failing_source_is_refused() {
        let data = image(1000, 1000);
        let mut slot = [0u8; 2048];
        // Reads: the 20-byte length prefix, then 100 bytes at a time.
        let r = receive(&mut slot, 100, source(&data, 100, Some(320)));
        assert_eq!(r, Err(Refusal::ReadError { got: 320 }));
    }

    #[test]
    fn every_refusal_says_what_went_wrong_with_its_numbers() {
        use std::string::ToString;
        let cases = [
            (
                Refusal::NoHeader { got: 7 },
                "the transfer ended after 7 bytes, before the header",
            ),
            (
                Refusal::TooLarge {
                    claimed: 9,
                    capacity: 8,
                },
                "the image claims 9 bytes, the update slot holds 8",
            ),
            (
                Refusal::Interrupted { got: 3, claimed: 5 },
                "the transfer stopped at 3 of 5 bytes",
            ),
            (Refusal::ReadError { got: 4 }, "read error after 4 bytes"),
            (
                Refusal::Invalid(Error::BadMagic),
                "invalid image: not a ferrite image (bad magic bytes)",
            ),
            (
                Refusal::SessionTooLarge {
                    needed: 12,
                    available: 8,
                },
                "its session needs 12 bytes of RAM, the board has 8",
            ),
            (
                Refusal::Signature(SignatureError::Unsigned),
                "the image is not signed",
            ),
        ];
        for (refusal, text) in cases {
            assert_eq!(refusal.to_string(), text);
        }
    }

    #[test]
    fn garbage_is_invalid_not_a_panic() {
        #[repr(align(16))]
        struct Aligned([u8; 256]);
        let mut a = Aligned([0u8; 256]);
        a.0[..8].copy_from_slice(b"NOTMAGIC");
        assert!(matches!(
            validate(&a.0, 1 << 20),
            Err(Refusal::Invalid(Error::BadMagic))
        ));
    }
}
