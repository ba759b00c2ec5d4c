//! Raspberry Pi Pico (RP2040, Cortex-M0+ cores): rp2040-boot2's second-stage
//! bootloader for the Pico's W25Q080 flash (the Boot ROM runs it to set up
//! XIP), rp2040-hal's clock setup, 12 MHz crystal -> 125 MHz, and the time
//! per token from the chip's 64-bit 1 MHz timer (the M0+ has no DWT cycle
//! counter).

use core::fmt;

use crate::rtt::Rtt;
use rp2040_hal as hal;

pub use rp2040_hal::entry;

/// The second-stage bootloader: the first 256 bytes of flash
/// (`boards/memory/rp2040.x` places `.boot2` there).
#[link_section = ".boot2"]
#[used]
pub static BOOT2: [u8; 256] = rp2040_boot2::BOOT_LOADER_W25Q080;

/// The Pico's crystal.
const XTAL_HZ: u32 = 12_000_000;

/// Console and counter of the RP2040.
pub struct Rp2040 {
    rtt: Rtt,
    timer: hal::Timer,
}

impl crate::io::Platform for Rp2040 {
    fn text(&mut self, bytes: &[u8]) {
        self.rtt.text(bytes)
    }

    fn line(&mut self, args: fmt::Arguments<'_>) {
        self.rtt.line(args)
    }

    /// Microseconds since [`init`], from the 64-bit timer.
    fn now(&mut self) -> u64 {
        self.timer.get_counter().ticks()
    }
}

/// Clocks to 125 MHz (`config::CLOCK_HZ`; the watchdog's tick, 1 MHz from
/// the crystal, drives the timer), then the timer and RTT.
pub fn init() -> Rp2040 {
    let mut pac = hal::pac::Peripherals::take().unwrap();
    let mut watchdog = hal::Watchdog::new(pac.WATCHDOG);
    let Ok(clocks) = hal::clocks::init_clocks_and_plls(
        XTAL_HZ,
        pac.XOSC,
        pac.CLOCKS,
        pac.PLL_SYS,
        pac.PLL_USB,
        &mut pac.RESETS,
        &mut watchdog,
    ) else {
        panic!("clock setup failed");
    };
    Rp2040 {
        rtt: Rtt::new(),
        timer: hal::Timer::new(pac.TIMER, &mut pac.RESETS, &clocks),
    }
}

/// Stops after the run (`status` is for QEMU): sleeps forever (`probe-rs
/// run` keeps showing the output until Ctrl-C).
pub fn exit(_status: i32) -> ! {
    loop {
        cortex_m::asm::wfi();
    }
}

/// Reports a panic over RTT, then stops.
pub fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    crate::rtt::panic(info);
    exit(ferrite_common::status::PANIC)
}
