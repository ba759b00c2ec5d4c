//! QEMU RISC-V boards (virt, machine mode): `minstret` as instruction
//! counter (`counter`), stack painted at start-up, the FPU switched on where the target
//! has one, traps reported through semihosting. riscv-rt 0.12, the version
//! rp235x-hal uses (one lock file holds one riscv-rt; boards/README.md).

pub use crate::qemu::exit;
pub use riscv_rt::entry;

use riscv::register::{mcause, mepc};

use crate::qemu::Qemu;
use crate::{console, counter, say};
use ferrite_common::status;

extern "C" {
    static _estack: u32;
    static _stack_start: u32;
}

const PAINT: u32 = 0xCCCC_CCCC;

/// riscv-rt 0.12 leaves the FPU off (`mstatus.FS`): on before anything runs.
#[cfg(target_feature = "f")]
#[riscv_rt::pre_init]
unsafe fn fpu_on() {
    // SAFETY: machine mode, before any floating-point instruction.
    unsafe { riscv::register::mstatus::set_fs(riscv::register::mstatus::FS::Initial) };
}

/// Paints the free stack (from its bottom to just below the caller's frame)
/// and starts the instruction counter. Call first thing in `main`.
#[inline(never)]
pub fn init() -> Qemu {
    let bottom = core::ptr::addr_of!(_estack) as usize;
    let sp: usize;
    // SAFETY: reads the stack pointer.
    unsafe { core::arch::asm!("mv {}, sp", out(reg) sp) };
    let mut p = bottom;
    while p < sp - 256 {
        // SAFETY: [_estack, sp - 256) is unused stack memory.
        unsafe { core::ptr::write_volatile(p as *mut u32, PAINT) };
        p += 4;
    }
    counter::start();
    Qemu
}

/// Peak stack use in bytes: the lowest painted word that changed.
pub fn stack_peak() -> usize {
    let top = core::ptr::addr_of!(_stack_start) as usize;
    let mut p = core::ptr::addr_of!(_estack) as usize;
    while p < top {
        // SAFETY: [_estack, _stack_start) is RAM reserved for the stack.
        if unsafe { core::ptr::read_volatile(p as *const u32) } != PAINT {
            break;
        }
        p += 4;
    }
    top - p
}

/// [`stack_peak`], ending the run with `stack overflow` when the stack
/// reached the statics ([`crate::qemu::checked_stack_peak`]).
pub fn stack_peak_checked() -> usize {
    crate::qemu::checked_stack_peak(stack_peak(), stack_room())
}

/// Bytes of RAM the statics leave the stack: `[_estack, _stack_start)`.
pub fn stack_room() -> usize {
    core::ptr::addr_of!(_stack_start) as usize - core::ptr::addr_of!(_estack) as usize
}

/// Reports a panic (location and message) and exits with [`status::PANIC`].
pub fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    console::panic_message(info);
    exit(status::PANIC)
}

#[export_name = "ExceptionHandler"]
fn exception_handler(frame: &riscv_rt::TrapFrame) -> ! {
    say!(
        "fault: trap mcause={:#x} mepc={:#010x} ra={:#010x}",
        mcause::read().bits(),
        mepc::read(),
        frame.ra
    );
    exit(status::FAULT)
}
