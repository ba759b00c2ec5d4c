//! Generates text on a real chip from the image embedded in flash: the
//! QEMU boards' `generate` (see `ferrite_chips::generate`), with the chip's
//! clocks and console (defmt over RTT on the Arm chips). All memory is
//! static and sized at compile time: the session buffer is exactly
//! `ferrite::session_len(image, 0)` words.
#![no_std]
#![no_main]

#[cfg_attr(feature = "rp2350", path = "../chip/rp2350.rs")]
#[cfg_attr(feature = "rp2350-riscv", path = "../chip/rp2350_riscv.rs")]
#[cfg_attr(feature = "nrf52840", path = "../chip/nrf52840.rs")]
#[cfg_attr(feature = "stm32f411", path = "../chip/stm32f411.rs")]
mod chip;

use ferrite_chips::{Platform, SESSION_LEN, TOKEN_LOG};

#[cfg(feature = "rp2350-riscv")]
use chip::idle;
/// Sleeps forever after the run (or a panic).
#[cfg(feature = "arm")]
use ferrite_chips::arm::idle;

static mut SESSION_BUF: [f32; SESSION_LEN] = [0.0; SESSION_LEN];
static mut TOKENS: [u32; TOKEN_LOG] = [0; TOKEN_LOG];

#[cfg_attr(any(feature = "rp2350", feature = "rp2350-riscv"), rp235x_hal::entry)]
#[cfg_attr(any(feature = "nrf52840", feature = "stm32f411"), cortex_m_rt::entry)]
fn main() -> ! {
    let mut p = chip::init();
    // SAFETY: the only references to SESSION_BUF and TOKENS, taken once.
    let (buf, log) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(SESSION_BUF),
            &mut *core::ptr::addr_of_mut!(TOKENS),
        )
    };
    if let Err(e) = ferrite_chips::generate(&mut p, buf, log) {
        p.line(format_args!("error: {e}"));
    }
    idle()
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    ferrite_chips::rtt::panic(info);
    idle()
}
