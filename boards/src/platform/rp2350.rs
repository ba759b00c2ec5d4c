//! Raspberry Pi Pico 2 (RP2350, Cortex-M33 cores): rp235x-hal's IMAGE_DEF
//! block (the Boot ROM refuses an image without one) and its clock setup,
//! 12 MHz crystal -> 150 MHz.

use crate::arm_chip::ArmChip;
pub use crate::arm_chip::{exit, panic};
pub use rp235x_hal::entry;

use rp235x_hal as hal;

/// Tells the Boot ROM this is a secure Arm executable.
#[link_section = ".start_block"]
#[used]
pub static IMAGE_DEF: hal::block::ImageDef = hal::block::ImageDef::secure_exe();

/// The Pico 2's crystal.
const XTAL_HZ: u32 = 12_000_000;

/// Clocks to 150 MHz (`config::CLOCK_HZ`), then the cycle counter and RTT.
pub fn init() -> ArmChip {
    let mut pac = hal::pac::Peripherals::take().unwrap();
    let mut watchdog = hal::Watchdog::new(pac.WATCHDOG);
    if hal::clocks::init_clocks_and_plls(
        XTAL_HZ,
        pac.XOSC,
        pac.CLOCKS,
        pac.PLL_SYS,
        pac.PLL_USB,
        &mut pac.RESETS,
        &mut watchdog,
    )
    .is_err()
    {
        panic!("clock setup failed");
    }
    ArmChip::new(cortex_m::Peripherals::take().unwrap())
}
