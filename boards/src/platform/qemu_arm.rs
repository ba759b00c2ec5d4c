//! QEMU Cortex-M boards: SysTick as instruction counter, stack painted by
//! cortex-m-rt (`paint-stack`), HardFault reported through semihosting.

use core::sync::atomic::{AtomicU32, Ordering};
use cortex_m::peripheral::SYST;
use cortex_m_rt::{exception, ExceptionFrame};

pub use crate::exit;
pub use cortex_m_rt::entry;

const RELOAD: u32 = 0x00FF_FFFF;
static WRAPS: AtomicU32 = AtomicU32::new(0);

/// Starts the instruction counter: SysTick on the core clock, full 24-bit
/// range, one interrupt per wrap.
pub fn init() -> crate::Qemu {
    // SAFETY: called once at start-up, before anything else uses SysTick.
    let mut p = unsafe { cortex_m::Peripherals::steal() };
    let syst = &mut p.SYST;
    syst.set_reload(RELOAD);
    syst.clear_current();
    WRAPS.store(0, Ordering::Relaxed);
    // One write of CLKSOURCE (core clock) | TICKINT | ENABLE: touching CSR
    // while CLKSOURCE still selects the reference clock makes QEMU's
    // lm3s6965evb (no reference clock) warn "Timer with period zero".
    // SAFETY: SysTick is ours alone.
    unsafe { syst.csr.write(0b111) };
    // The current value reads 0 until the first reload: wait for it, so the
    // first reading is not taken as a full period.
    while SYST::get_current() == 0 {}
    crate::Qemu
}

/// SysTick ticks since [`init`].
pub fn ticks() -> u64 {
    loop {
        let before = WRAPS.load(Ordering::Acquire);
        let current = SYST::get_current();
        if WRAPS.load(Ordering::Acquire) == before {
            return before as u64 * (RELOAD as u64 + 1) + (RELOAD - current) as u64;
        }
    }
}

#[exception]
fn SysTick() {
    WRAPS.store(WRAPS.load(Ordering::Relaxed) + 1, Ordering::Release);
}

extern "C" {
    static _stack_start: u32;
    static _stack_end: u32;
}

/// Peak stack use in bytes: cortex-m-rt filled the stack with 0xCCCCCCCC at
/// reset; the lowest word that changed marks the deepest point reached.
pub fn stack_peak() -> usize {
    let top = core::ptr::addr_of!(_stack_start) as usize;
    let mut p = core::ptr::addr_of!(_stack_end) as usize;
    while p < top {
        // SAFETY: [_stack_end, _stack_start) is RAM reserved for the stack.
        if unsafe { core::ptr::read_volatile(p as *const u32) } != 0xCCCC_CCCC {
            break;
        }
        p += 4;
    }
    top - p
}

/// Reports a panic (location and message) and exits with [`crate::status::PANIC`].
pub fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    crate::console::panic_message(info);
    crate::exit(crate::status::PANIC)
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    crate::say!("hardfault: pc={:#010x} lr={:#010x}", frame.pc(), frame.lr());
    crate::exit(crate::status::FAULT)
}

#[exception]
unsafe fn DefaultHandler(irqn: i16) {
    crate::say!("fault: unexpected exception {}", irqn);
    crate::exit(crate::status::FAULT)
}
