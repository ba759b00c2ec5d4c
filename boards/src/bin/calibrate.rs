//! Checks the instruction counter: times a loop of exactly 2,000,000
//! instructions and prints what the counter says (`calibrate: counted=<n>`).
#![no_std]
#![no_main]

use ferrite_boards::{platform, say, status};

#[platform::entry]
fn main() -> ! {
    platform::init();
    let start = ferrite_boards::instructions();
    #[cfg(target_arch = "arm")]
    unsafe {
        // 1,000,000 iterations of 2 instructions.
        core::arch::asm!("2:", "subs {0}, {0}, #1", "bne 2b", inout(reg) 1_000_000u32 => _);
    }
    #[cfg(target_arch = "riscv32")]
    unsafe {
        core::arch::asm!("2:", "addi {0}, {0}, -1", "bnez {0}, 2b", inout(reg) 1_000_000u32 => _);
    }
    let counted = ferrite_boards::instructions() - start;
    say!("calibrate: expected=2000000 counted={}", counted);
    ferrite_boards::exit(status::OK)
}
