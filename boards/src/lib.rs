//! Board support shared by the firmware binaries: console, exit status,
//! instruction counter, stack measurement, panic and fault handlers.
//!
//! One crate serves every board: the ISA comes from the target
//! (`cortex_m` / `riscv`), the board from a `board-<name>` feature (memory map
//! and clock ratio, see `build.rs`). Everything reaches the host through
//! semihosting, which QEMU implements on both ISAs.
#![no_std]

#[cfg_attr(target_arch = "arm", path = "platform/cortex_m.rs")]
#[cfg_attr(target_arch = "riscv32", path = "platform/riscv.rs")]
pub mod platform;

pub mod console;

/// Build-time configuration: board, prompt, N (see `build.rs`).
pub mod config {
    include!(concat!(env!("OUT_DIR"), "/build_config.rs"));
}

/// Process exit statuses the host (xtask) tells apart.
pub mod status {
    /// Ran to the end.
    pub const OK: i32 = 0;
    /// The runtime returned an error (bad image, buffer too small, ...).
    pub const RUNTIME_ERROR: i32 = 2;
    /// A panic: a bug in the firmware or the runtime.
    pub const PANIC: i32 = 101;
    /// A CPU fault (HardFault, illegal instruction, bus error, ...).
    pub const FAULT: i32 = 3;
}

/// Ends the program: QEMU exits with `code` (semihosting SYS_EXIT_EXTENDED).
pub fn exit(code: i32) -> ! {
    console::flush();
    semihosting::process::exit(code)
}

/// Instructions retired since [`platform::init`] (exact on RISC-V; in steps
/// of one SysTick tick on Cortex-M). Only meaningful under QEMU's
/// `-icount shift=0,sleep=off`, where one instruction takes one nanosecond.
pub fn instructions() -> u64 {
    let (num, den) = config::INSTR_PER_TICK;
    platform::ticks() * num / den
}

/// FNV-1a over 32-bit words, the checksum the firmware prints for logits
/// (over their f32 bit patterns) and token ids; xtask computes the same.
#[derive(Clone, Copy)]
pub struct Fnv1a(pub u32);

impl Fnv1a {
    /// The FNV-1a offset basis.
    pub const fn new() -> Self {
        Fnv1a(0x811c_9dc5)
    }
    /// Mixes in the four little-endian bytes of `word`.
    pub fn word(&mut self, word: u32) {
        for b in word.to_le_bytes() {
            self.0 = (self.0 ^ b as u32).wrapping_mul(0x0100_0193);
        }
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Self::new()
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    console::panic_message(info);
    exit(status::PANIC)
}
