//! NOR flash that RAM stands in for under QEMU (4 KiB sectors, 8-byte
//! write units), whose power can be cut before any operation: what the
//! `slots` firmware saves snapshots to and the `ota` firmware keeps its
//! rollback counter in.

use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// The flash's erase sector.
pub const SECTOR: usize = 4096;
/// The flash's write unit.
pub const WRITE: usize = 8;

/// The power was cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut;

impl NorFlashError for Cut {
    fn kind(&self) -> NorFlashErrorKind {
        NorFlashErrorKind::Other
    }
}

/// NOR flash in RAM whose power is cut before operation `budget`.
pub struct RamFlash<'a> {
    /// The flash's bytes.
    pub mem: &'a mut [u8],
    /// Operations before the cut; `None`: none.
    pub budget: Option<usize>,
    /// Operations done.
    pub ops: usize,
}

impl RamFlash<'_> {
    /// `true` when this operation is the one the power is cut before.
    fn cut_now(&mut self) -> bool {
        self.ops += 1;
        self.budget.is_some_and(|b| self.ops > b)
    }
}

impl ErrorType for RamFlash<'_> {
    type Error = Cut;
}

impl ReadNorFlash for RamFlash<'_> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Cut> {
        let at = offset as usize;
        bytes.copy_from_slice(&self.mem[at..at + bytes.len()]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.mem.len()
    }
}

impl NorFlash for RamFlash<'_> {
    const WRITE_SIZE: usize = WRITE;
    const ERASE_SIZE: usize = SECTOR;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Cut> {
        for sector in (from as usize..to as usize).step_by(SECTOR) {
            if self.cut_now() {
                self.mem[sector..sector + SECTOR / 2].fill(0xFF);
                return Err(Cut);
            }
            self.mem[sector..sector + SECTOR].fill(0xFF);
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Cut> {
        let at = offset as usize;
        for (i, unit) in bytes.chunks(WRITE).enumerate() {
            let torn = self.cut_now();
            let dest = &mut self.mem[at + i * WRITE..at + (i + 1) * WRITE];
            let done = if torn { WRITE / 2 } else { WRITE };
            for (m, b) in dest[..done].iter_mut().zip(unit) {
                *m &= b;
            }
            if torn {
                return Err(Cut);
            }
        }
        Ok(())
    }
}
