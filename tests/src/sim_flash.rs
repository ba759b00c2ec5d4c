//! A simulated NOR flash behind the HALs' traits (`embedded-storage`), for
//! the tests of what the runtime writes to flash (snapshot slots, the
//! rollback counter): programming a unit that is not erased is an error,
//! and a power cut tears the unit or sector it lands in (half of it
//! programmed or erased).

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// The erase sector, bytes.
pub const SECTOR: usize = 256;

/// Why a simulated operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimError {
    /// The power was cut during the operation.
    PowerCut,
    /// A write unit was programmed without an erase first.
    ProgrammedTwice,
    /// Outside the flash.
    OutOfBounds,
}

impl NorFlashError for SimError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            SimError::OutOfBounds => NorFlashErrorKind::OutOfBounds,
            _ => NorFlashErrorKind::Other,
        }
    }
}

/// NOR flash of `W`-byte write units and 256-byte sectors whose power can be
/// cut before the `n`th operation (a write unit or a sector erase).
#[derive(Clone, Debug)]
pub struct SimFlash<const W: usize> {
    /// The flash's bytes.
    pub mem: Vec<u8>,
    /// Operations left before the cut; `None`: no cut.
    pub budget: Option<usize>,
    /// Operations done.
    pub ops: usize,
}

impl<const W: usize> SimFlash<W> {
    /// `len` erased bytes, no cut.
    pub fn new(len: usize) -> Self {
        SimFlash {
            mem: vec![0xFF; len],
            budget: None,
            ops: 0,
        }
    }

    /// `true` (and the budget spent) when this operation is the one cut.
    fn cut_now(&mut self) -> bool {
        self.ops += 1;
        match &mut self.budget {
            Some(0) => true,
            Some(n) => {
                *n -= 1;
                false
            }
            None => false,
        }
    }

    fn range(&self, offset: u32, len: usize) -> Result<std::ops::Range<usize>, SimError> {
        let start = offset as usize;
        let end = start.checked_add(len).ok_or(SimError::OutOfBounds)?;
        if end > self.mem.len() {
            return Err(SimError::OutOfBounds);
        }
        Ok(start..end)
    }
}

impl<const W: usize> ErrorType for SimFlash<W> {
    type Error = SimError;
}

impl<const W: usize> ReadNorFlash for SimFlash<W> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), SimError> {
        let r = self.range(offset, bytes.len())?;
        bytes.copy_from_slice(&self.mem[r]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.mem.len()
    }
}

impl<const W: usize> NorFlash for SimFlash<W> {
    const WRITE_SIZE: usize = W;
    const ERASE_SIZE: usize = SECTOR;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), SimError> {
        assert!(
            (from as usize).is_multiple_of(SECTOR) && (to as usize).is_multiple_of(SECTOR),
            "unaligned erase"
        );
        let r = self.range(from, (to - from) as usize)?;
        for sector in r.step_by(SECTOR) {
            if self.cut_now() {
                self.mem[sector..sector + SECTOR / 2].fill(0xFF);
                return Err(SimError::PowerCut);
            }
            self.mem[sector..sector + SECTOR].fill(0xFF);
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), SimError> {
        assert!(
            (offset as usize).is_multiple_of(W) && bytes.len().is_multiple_of(W),
            "unaligned write"
        );
        let r = self.range(offset, bytes.len())?;
        for (at, unit) in r.step_by(W).zip(bytes.chunks(W)) {
            if self.mem[at..at + W].iter().any(|&b| b != 0xFF) {
                return Err(SimError::ProgrammedTwice);
            }
            if self.cut_now() {
                // Torn: the first half of the unit programmed, the low bits of
                // its middle byte.
                for (i, (m, b)) in self.mem[at..at + W].iter_mut().zip(unit).enumerate() {
                    *m &= match i.cmp(&(W / 2)) {
                        std::cmp::Ordering::Less => *b,
                        std::cmp::Ordering::Equal => *b | 0xF0,
                        std::cmp::Ordering::Greater => 0xFF,
                    };
                }
                return Err(SimError::PowerCut);
            }
            for (m, b) in self.mem[at..at + W].iter_mut().zip(unit) {
                *m &= b;
            }
        }
        Ok(())
    }
}
