//! nRF52840: 64 MHz from reset (HFINT); the flash instruction cache on.
//! The PAC provides the chip's interrupt vector table (cortex-m-rt's
//! `device` feature); nothing else here needs a HAL.

use crate::arm_chip::ArmChip;
pub use crate::arm_chip::{exit, panic};
pub use cortex_m_rt::entry;

use nrf52840_pac as pac;

/// Instruction cache on, then the cycle counter and RTT.
pub fn init() -> ArmChip {
    let p = pac::Peripherals::take().unwrap();
    p.NVMC.icachecnf.write(|w| w.cacheen().enabled());
    ArmChip::new(cortex_m::Peripherals::take().unwrap())
}
