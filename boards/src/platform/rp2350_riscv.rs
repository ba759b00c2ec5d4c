//! Raspberry Pi Pico 2 (RP2350) on its Hazard3 RISC-V cores: rp235x-hal's
//! IMAGE_DEF block (for a RISC-V executable: the HAL takes the architecture
//! from the target) and clock setup, 12 MHz crystal -> 150 MHz; the time per
//! token from the core's `mcycle` counter.

use core::fmt;

use crate::rtt::Rtt;
use rp235x_hal as hal;

pub use rp235x_hal::entry;

/// Tells the Boot ROM this is a secure RISC-V executable. In `.init.rust`,
/// which riscv-rt's link.x keeps right after the reset code at the start of
/// flash: inside the first 4 KB, where the Boot ROM looks.
#[link_section = ".init.rust"]
#[used]
pub static IMAGE_DEF: hal::block::ImageDef = hal::block::ImageDef::secure_exe();

/// The Pico 2's crystal.
const XTAL_HZ: u32 = 12_000_000;

/// Console and counter of the Hazard3 cores.
pub struct Hazard3 {
    rtt: Rtt,
}

impl crate::io::Platform for Hazard3 {
    fn text(&mut self, bytes: &[u8]) {
        self.rtt.text(bytes)
    }

    fn line(&mut self, args: fmt::Arguments<'_>) {
        self.rtt.line(args)
    }

    /// Microseconds since reset, from the 64-bit `mcycle`.
    fn now(&mut self) -> u64 {
        riscv::register::mcycle::read64() * 1_000_000 / u64::from(crate::config::CLOCK_HZ)
    }
}

/// Clocks to 150 MHz (`config::CLOCK_HZ`), then RTT.
pub fn init() -> Hazard3 {
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
    Hazard3 { rtt: Rtt::new() }
}

/// Stops after the run (`status` is for QEMU): waits for interrupts forever.
pub fn exit(_status: i32) -> ! {
    loop {
        riscv::asm::wfi();
    }
}

/// Reports a panic over RTT, then stops.
pub fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    crate::rtt::panic(info);
    exit(ferrite_common::status::PANIC)
}
