//! What every firmware shares, on every target: the embedded image, the
//! build-time configuration, the [`Platform`] a target supplies (console and
//! counter) and the one generation path, [`generate`] (feed the prompt,
//! sample N tokens, stream their text, print the ids, a checksum of the last
//! logits and a `run:` line).
//!
//! The target is the one target feature enabled (a row of the target table,
//! `ferrite_common::target`; see `build.rs`); it picks the [`platform`]
//! module by a `path` attribute, as embassy picks a chip. QEMU boards reach
//! the host through semihosting (console, exit status, files); real chips
//! print through defmt over RTT (or, on the ESP32-C3, esp-println).
#![cfg_attr(not(test), no_std)]

#[cfg_attr(
    all(feature = "_qemu", target_arch = "arm"),
    path = "platform/qemu_arm.rs"
)]
#[cfg_attr(
    all(feature = "_qemu", target_arch = "riscv32"),
    path = "platform/qemu_riscv.rs"
)]
#[cfg_attr(feature = "rp2350", path = "platform/rp2350.rs")]
#[cfg_attr(feature = "rp2350-riscv", path = "platform/rp2350_riscv.rs")]
#[cfg_attr(feature = "rp2040", path = "platform/rp2040.rs")]
#[cfg_attr(feature = "nrf52840", path = "platform/nrf52840.rs")]
#[cfg_attr(feature = "stm32f411", path = "platform/stm32f411.rs")]
#[cfg(not(any(feature = "host", feature = "esp32c3")))]
pub mod platform;

#[cfg(feature = "_chip-arm")]
pub mod arm_chip;
pub mod config;
#[cfg(feature = "_qemu")]
pub mod console;
#[cfg(feature = "_qemu")]
pub mod counter;
mod generate;
mod image;
mod io;
#[cfg(feature = "_qemu")]
mod qemu;
#[cfg(feature = "_qemu")]
pub mod ram_flash;
#[cfg(all(feature = "roofline", feature = "_qemu"))]
mod roofline;
#[cfg(feature = "_rtt")]
pub mod rtt;

#[cfg(feature = "_qemu")]
pub use counter::instructions;
pub use generate::{generate, Outcome};
pub use image::{IMAGE, IMAGE_BYTES, SESSION_LEN, SNAPSHOT, SNAPSHOT_BYTES, TOKEN_LOG};
pub use io::Platform;
#[cfg(feature = "_qemu")]
pub use qemu::{exit, fail, fail_with, Qemu};

/// The runtime, for the packages that build on this library (esp32c3/).
pub use ferrite;
/// The MQAR generator, shared with the host's `ferrite eval --mqar`.
pub use ferrite_common::mqar;
/// Process exit statuses the host (xtask) tells apart.
pub use ferrite_common::status;
/// FNV-1a over 32-bit words, the checksum the firmware prints for logits
/// (over their f32 bit patterns) and token ids; xtask computes the same.
pub use ferrite_common::Fnv1a;

#[cfg(not(any(test, feature = "host", feature = "esp32c3")))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    platform::panic(info)
}
