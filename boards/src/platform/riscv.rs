//! RISC-V (QEMU virt, machine mode): `instret` as instruction counter, stack
//! painted at start-up, traps reported through semihosting.

pub use riscv_rt::entry;

static mut START: u64 = 0;

fn instret() -> u64 {
    loop {
        let hi = riscv::register::minstreth::read();
        let lo = riscv::register::minstret::read();
        if riscv::register::minstreth::read() == hi {
            return ((hi as u64) << 32) | lo as u64;
        }
    }
}

extern "C" {
    static __estack: u32;
    static _stack_start: u32;
}

const PAINT: u32 = 0xCCCC_CCCC;

/// Paints the free stack (from its bottom to just below the caller's frame)
/// and starts the instruction counter. Call first thing in `main`.
#[inline(never)]
pub fn init() {
    let bottom = core::ptr::addr_of!(__estack) as usize;
    let sp: usize;
    // SAFETY: reads the stack pointer.
    unsafe { core::arch::asm!("mv {}, sp", out(reg) sp) };
    let mut p = bottom;
    while p < sp - 256 {
        // SAFETY: [__estack, sp - 256) is unused stack memory.
        unsafe { core::ptr::write_volatile(p as *mut u32, PAINT) };
        p += 4;
    }
    // SAFETY: single hart, written before anything reads it.
    unsafe { START = instret() };
}

/// Instructions retired since [`init`] (one tick = one instruction).
pub fn ticks() -> u64 {
    // SAFETY: written once in `init`.
    instret() - unsafe { START }
}

/// Peak stack use in bytes: the lowest painted word that changed.
pub fn stack_peak() -> usize {
    let top = core::ptr::addr_of!(_stack_start) as usize;
    let mut p = core::ptr::addr_of!(__estack) as usize;
    while p < top {
        // SAFETY: [__estack, _stack_start) is RAM reserved for the stack.
        if unsafe { core::ptr::read_volatile(p as *const u32) } != PAINT {
            break;
        }
        p += 4;
    }
    top - p
}

#[export_name = "ExceptionHandler"]
fn exception_handler(frame: &riscv_rt::TrapFrame) -> ! {
    let mcause = riscv::register::mcause::read().bits();
    let mepc = riscv::register::mepc::read();
    crate::say!(
        "fault: trap mcause={:#x} mepc={:#010x} ra={:#010x}",
        mcause,
        mepc,
        frame.ra
    );
    crate::exit(crate::status::FAULT)
}
