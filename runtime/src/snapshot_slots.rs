//! Two flash slots for snapshots, so that a power cut during a save leaves
//! the previous snapshot loadable (issue 25, item 3; docs/snapshot-format.md,
//! "Saving on a device").
//!
//! Each slot is a whole number of erase sectors of one flash, reached through
//! the [`embedded_storage`] NOR-flash traits that HALs implement. A slot holds
//! a 32-byte record header, padded to the flash's write size, then the
//! snapshot's bytes:
//!
//! ```text
//! 0   magic "FSLT"      4   version u16 = 1, reserved u16 = 0
//! 8   sequence u32      12  payload length u32
//! 16  payload CRC-32    20  reserved, 8 zero bytes
//! 28  header CRC-32 over bytes 0..28
//! ```
//!
//! A save writes to the slot that does not hold the newest valid record, in
//! this order: erase the slot, program the payload, read it back and check
//! its CRC, program the header with the next sequence number. Until the
//! header's last word is programmed the slot fails its header check, so a cut
//! at any point leaves the other slot's record the newest valid one; after it,
//! the new record is. A record is valid when its header passes (magic,
//! version, length, header CRC) and its payload's CRC in flash matches; a
//! load reads the newest valid record's payload into the caller's buffer and
//! checks its CRC once more there, falling back to the other record when it
//! fails. A torn header passes its CRC by chance with probability 2^-32. Sequence numbers compare with
//! wrap-around (serial-number arithmetic), so they never run out.
//!
//! Wear: each save erases one slot, so each sector is erased every other
//! save: a flash rated for `C` erase cycles takes `2 C` saves
//! ([`saves_per_lifetime`]). Nothing here allocates or panics; the only
//! buffers are on the stack (at most [`MAX_WRITE_SIZE`] + 256 bytes).

use core::fmt;

use embedded_storage::nor_flash::NorFlash;

use crate::image::CRC;

/// The record header's magic.
pub const MAGIC: [u8; 4] = *b"FSLT";
/// The record format's version.
pub const VERSION: u16 = 1;
/// Bytes of the record header before padding to the write size.
pub const HEADER_LEN: usize = 32;
/// The largest flash write size supported (the header and a payload's tail
/// are padded through a stack buffer of this many bytes).
pub const MAX_WRITE_SIZE: usize = 256;
/// Bytes read back at a time when a payload's CRC is checked in flash.
const READ_CHUNK: usize = 256;

/// Why the slots refused an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError<E> {
    /// The flash driver failed (a save cut by this leaves the previous record valid).
    Flash(E),
    /// The slots do not fit the flash's geometry.
    Layout(&'static str),
    /// The snapshot does not fit a slot.
    TooLarge {
        /// Bytes of the snapshot.
        len: usize,
        /// Payload bytes a slot holds.
        capacity: usize,
    },
    /// The caller's buffer is smaller than the newest record's payload.
    BufferTooSmall {
        /// Bytes the payload needs.
        needed: usize,
        /// Bytes of the buffer.
        got: usize,
    },
    /// The payload read back after programming differs from what was written.
    VerifyFailed,
}

impl<E: fmt::Debug> fmt::Display for SlotError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotError::Flash(e) => write!(f, "flash driver error: {e:?}"),
            SlotError::Layout(why) => write!(f, "snapshot slots: {why}"),
            SlotError::TooLarge { len, capacity } => {
                write!(f, "the snapshot is {len} bytes, a slot holds {capacity}")
            }
            SlotError::BufferTooSmall { needed, got } => write!(
                f,
                "the stored snapshot is {needed} bytes, the buffer holds {got}"
            ),
            SlotError::VerifyFailed => {
                write!(
                    f,
                    "the snapshot read back from flash differs from the one written"
                )
            }
        }
    }
}

/// A record found by [`SnapshotSlots::load`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// Which slot (0 or 1) it came from.
    pub slot: usize,
    /// Its sequence number.
    pub sequence: u32,
    /// Bytes of the snapshot now at the start of the caller's buffer.
    pub len: usize,
}

/// A record header that passed its own checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    slot: usize,
    sequence: u32,
    len: usize,
    payload_crc: u32,
}

/// Saves snapshots alternately to two slots of one flash (see the module docs).
#[derive(Debug)]
pub struct SnapshotSlots<F> {
    flash: F,
    starts: [u32; 2],
    slot_len: u32,
}

/// Saves a flash rated for `erase_cycles` erase cycles per sector takes before
/// its slots wear out: every save erases one of the two slots.
pub const fn saves_per_lifetime(erase_cycles: u64) -> u64 {
    2 * erase_cycles
}

/// `true` when sequence `a` is newer than `b` (serial-number arithmetic).
const fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `n` rounded up to a multiple of `to` (`to > 0`), `None` on overflow.
fn round_up(n: usize, to: usize) -> Option<usize> {
    n.checked_add(to - 1).map(|m| m / to * to)
}

impl<F: NorFlash> SnapshotSlots<F> {
    /// Slots of `slot_len` bytes at flash offsets `slot_a` and `slot_b`; both
    /// must be aligned to the flash's erase size, not overlap and lie inside it.
    pub fn new(
        flash: F,
        slot_a: u32,
        slot_b: u32,
        slot_len: u32,
    ) -> Result<Self, SlotError<F::Error>> {
        let (erase, write) = (F::ERASE_SIZE as u64, F::WRITE_SIZE as u64);
        if write == 0 || erase == 0 || F::WRITE_SIZE > MAX_WRITE_SIZE {
            return Err(SlotError::Layout(
                "the flash's write size must be 1..=256 bytes",
            ));
        }
        let (a, b, len) = (u64::from(slot_a), u64::from(slot_b), u64::from(slot_len));
        if a % erase != 0 || b % erase != 0 || len % erase != 0 || len == 0 {
            return Err(SlotError::Layout(
                "slot offsets and length must be non-zero multiples of the erase size",
            ));
        }
        if a < b + len && b < a + len {
            return Err(SlotError::Layout("the two slots overlap"));
        }
        if a.max(b) + len > flash.capacity() as u64 {
            return Err(SlotError::Layout("a slot ends past the flash's capacity"));
        }
        let slots = SnapshotSlots {
            flash,
            starts: [slot_a, slot_b],
            slot_len,
        };
        if slots.data_offset() >= slot_len as usize {
            return Err(SlotError::Layout(
                "a slot is too small for the record header",
            ));
        }
        Ok(slots)
    }

    /// Bytes of a snapshot a slot holds.
    pub fn capacity(&self) -> usize {
        self.slot_len as usize - self.data_offset()
    }

    /// The flash, back (for other uses of it).
    pub fn release(self) -> F {
        self.flash
    }

    /// Where a slot's payload starts: the header padded to the write size.
    fn data_offset(&self) -> usize {
        // WRITE_SIZE <= 256 (checked in `new`): no overflow.
        round_up(HEADER_LEN, F::WRITE_SIZE).unwrap_or(usize::MAX)
    }

    /// The header of `slot`, when it passes its checks.
    fn header(&mut self, slot: usize) -> Result<Option<Header>, SlotError<F::Error>> {
        let mut h = [0u8; HEADER_LEN];
        self.flash
            .read(self.starts[slot], &mut h)
            .map_err(SlotError::Flash)?;
        let word = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let version = u16::from_le_bytes([h[4], h[5]]);
        if h[..4] != MAGIC || version != VERSION || word(28) != CRC.checksum(&h[..28]) {
            return Ok(None);
        }
        let len = word(12) as usize;
        if len > self.capacity() {
            return Ok(None);
        }
        Ok(Some(Header {
            slot,
            sequence: word(8),
            len,
            payload_crc: word(16),
        }))
    }

    /// The slots' valid records (header checks and payload CRC in flash), newest first.
    fn records(&mut self) -> Result<[Option<Header>; 2], SlotError<F::Error>> {
        let mut found = [None, None];
        for (slot, record) in found.iter_mut().enumerate() {
            if let Some(h) = self.header(slot)? {
                let at = self.starts[slot] + self.data_offset() as u32;
                if self.flash_crc(at, h.len)? == h.payload_crc {
                    *record = Some(h);
                }
            }
        }
        Ok(match found {
            [Some(a), Some(b)] if newer(b.sequence, a.sequence) => [Some(b), Some(a)],
            [Some(a), b] => [Some(a), b],
            [None, b] => [b, None],
        })
    }

    /// Reads the newest valid snapshot into the start of `buf`; `None` when
    /// neither slot holds one.
    pub fn load(&mut self, buf: &mut [u8]) -> Result<Option<Loaded>, SlotError<F::Error>> {
        for h in self.records()?.into_iter().flatten() {
            let slot = h.slot;
            let got = buf.len();
            let dest = buf
                .get_mut(..h.len)
                .ok_or(SlotError::BufferTooSmall { needed: h.len, got })?;
            let at = self.starts[slot] + self.data_offset() as u32;
            self.flash.read(at, dest).map_err(SlotError::Flash)?;
            // Checked again in RAM: a read that differs from the flash falls back.
            if CRC.checksum(dest) == h.payload_crc {
                return Ok(Some(Loaded {
                    slot,
                    sequence: h.sequence,
                    len: h.len,
                }));
            }
        }
        Ok(None)
    }

    /// Saves `snapshot` as the newest record (see the module docs for the
    /// order of writes); returns its slot and sequence number.
    pub fn save(&mut self, snapshot: &[u8]) -> Result<Loaded, SlotError<F::Error>> {
        let capacity = self.capacity();
        if snapshot.len() > capacity {
            return Err(SlotError::TooLarge {
                len: snapshot.len(),
                capacity,
            });
        }
        // The target is the slot without the newest *loadable* record, so a
        // record whose header is intact but whose payload rotted is never the
        // reason to erase the only good one.
        let [newest, _] = self.records()?;
        let (slot, sequence) = match newest {
            Some(h) => (1 - h.slot, h.sequence.wrapping_add(1)),
            None => (0, 1),
        };
        let start = self.starts[slot];
        self.flash
            .erase(start, start + self.slot_len)
            .map_err(SlotError::Flash)?;
        let data_at = start + self.data_offset() as u32;
        self.program(data_at, snapshot)?;
        let crc = self.flash_crc(data_at, snapshot.len())?;
        if crc != CRC.checksum(snapshot) {
            return Err(SlotError::VerifyFailed);
        }
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(&MAGIC);
        h[4..6].copy_from_slice(&VERSION.to_le_bytes());
        h[8..12].copy_from_slice(&sequence.to_le_bytes());
        h[12..16].copy_from_slice(&(snapshot.len() as u32).to_le_bytes());
        h[16..20].copy_from_slice(&crc.to_le_bytes());
        let header_crc = CRC.checksum(&h[..28]);
        h[28..].copy_from_slice(&header_crc.to_le_bytes());
        self.program(start, &h)?;
        Ok(Loaded {
            slot,
            sequence,
            len: snapshot.len(),
        })
    }

    /// Programs `bytes` at `at` (aligned to the write size), the last partial
    /// write unit padded with erased bytes.
    fn program(&mut self, at: u32, bytes: &[u8]) -> Result<(), SlotError<F::Error>> {
        let whole = bytes.len() / F::WRITE_SIZE * F::WRITE_SIZE;
        let (body, tail) = bytes.split_at(whole);
        if !body.is_empty() {
            self.flash.write(at, body).map_err(SlotError::Flash)?;
        }
        if !tail.is_empty() {
            let mut pad = [0xFFu8; MAX_WRITE_SIZE];
            pad[..tail.len()].copy_from_slice(tail);
            self.flash
                .write(at + whole as u32, &pad[..F::WRITE_SIZE])
                .map_err(SlotError::Flash)?;
        }
        Ok(())
    }

    /// The CRC-32 of `len` bytes of flash at `at`, read in chunks.
    fn flash_crc(&mut self, at: u32, len: usize) -> Result<u32, SlotError<F::Error>> {
        let mut digest = CRC.digest();
        let mut chunk = [0u8; READ_CHUNK];
        let mut done = 0;
        while done < len {
            let n = READ_CHUNK.min(len - done);
            self.flash
                .read(at + done as u32, &mut chunk[..n])
                .map_err(SlotError::Flash)?;
            digest.update(&chunk[..n]);
            done += n;
        }
        Ok(digest.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_compare_across_wrap_around() {
        assert!(newer(2, 1));
        assert!(!newer(1, 2));
        assert!(!newer(7, 7));
        assert!(newer(0, u32::MAX));
        assert!(newer(3, u32::MAX - 3));
        assert!(!newer(u32::MAX, 0));
    }

    #[test]
    fn lifetime_is_two_saves_per_erase_cycle() {
        assert_eq!(saves_per_lifetime(10_000), 20_000);
        assert_eq!(saves_per_lifetime(100_000), 200_000);
    }
}
