//! Anti-rollback: the lowest security counter (model version) the device
//! accepts, kept in flash (`docs/signing.md`, "Anti-rollback").
//!
//! The counter is a record of [`crate::snapshot_slots::SnapshotSlots`] (two
//! flash slots, a sequence number and CRCs): a power cut during an advance
//! leaves either the old value or the new one, never a torn one and never
//! nothing once a value was stored. It only moves up: [`RollbackCounter::advance`]
//! to a value at or below the stored one writes nothing.
//!
//! The order a firmware follows, and what a power cut at each step leaves:
//!
//! 1. receive the update into the second slot: the serving model and the
//!    counter are untouched;
//! 2. validate it with `update::validate_signed`, whose policy's
//!    `min_counter` is [`RollbackCounter::min_accepted`]: nothing is written;
//! 3. switch (the boot record names the new slot): cut before it, the old
//!    model serves; after it, the new one;
//! 4. [`RollbackCounter::advance`] to the new model's counter: cut before
//!    or during it, the old minimum stays, so the old model would still be
//!    accepted until step 4 completes. The firmware therefore advances at
//!    every boot too, to the counter of the model that serves (a no-op when
//!    it is already there), which finishes an advance a cut interrupted.
//!
//! Nothing here allocates or panics.

use embedded_storage::nor_flash::NorFlash;

use crate::snapshot_slots::{SlotError, SnapshotSlots};

/// The payload of a counter record: a tag, then the value.
const TAG: [u8; 4] = *b"FCTR";
/// Bytes of a counter record's payload.
const PAYLOAD_LEN: usize = 8;

/// The device's lowest accepted security counter, in two flash slots.
#[derive(Debug)]
pub struct RollbackCounter<F> {
    slots: SnapshotSlots<F>,
}

impl<F: NorFlash> RollbackCounter<F> {
    /// The counter in slots of `slot_len` bytes at flash offsets `slot_a`
    /// and `slot_b` (each a whole number of erase sectors, as
    /// [`SnapshotSlots::new`] requires; one sector each is enough).
    pub fn new(
        flash: F,
        slot_a: u32,
        slot_b: u32,
        slot_len: u32,
    ) -> Result<Self, SlotError<F::Error>> {
        Ok(RollbackCounter {
            slots: SnapshotSlots::new(flash, slot_a, slot_b, slot_len)?,
        })
    }

    /// The lowest security counter the device accepts: the stored value, or
    /// 0 when none was ever stored (a new device accepts every version).
    /// Slots that hold some other record are a layout error, never 0.
    pub fn min_accepted(&mut self) -> Result<u32, SlotError<F::Error>> {
        let mut buf = [0u8; PAYLOAD_LEN];
        match self.slots.load(&mut buf) {
            Ok(None) => Ok(0),
            Ok(Some(r)) if r.len == PAYLOAD_LEN && buf[..4] == TAG => {
                Ok(u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]))
            }
            Ok(Some(_)) | Err(SlotError::BufferTooSmall { .. }) => Err(SlotError::Layout(
                "the counter's slots hold a record that is not a security counter",
            )),
            Err(e) => Err(e),
        }
    }

    /// Raises the stored minimum to `counter` (call it after the model
    /// with that counter was validated and switched to, and at boot with
    /// the serving model's). Never lowers it: at or below the stored value
    /// nothing is written. Returns the minimum now stored.
    pub fn advance(&mut self, counter: u32) -> Result<u32, SlotError<F::Error>> {
        let now = self.min_accepted()?;
        if counter <= now {
            return Ok(now);
        }
        let mut payload = [0u8; PAYLOAD_LEN];
        payload[..4].copy_from_slice(&TAG);
        payload[4..].copy_from_slice(&counter.to_le_bytes());
        self.slots.save(&payload)?;
        Ok(counter)
    }

    /// The flash, back.
    pub fn release(self) -> F {
        self.slots.release()
    }
}
