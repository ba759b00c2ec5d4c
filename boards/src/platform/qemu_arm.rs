//! QEMU Cortex-M boards: SysTick as instruction counter (`counter`), stack painted by
//! cortex-m-rt (`paint-stack`), HardFault reported through semihosting.

use cortex_m_rt::{exception, ExceptionFrame};

pub use crate::qemu::exit;
pub use cortex_m_rt::entry;

use crate::qemu::Qemu;
use crate::{console, counter, say};
use ferrite_common::status;

/// Starts the instruction counter ([`counter::start`]); cortex-m-rt painted
/// the stack at reset.
pub fn init() -> Qemu {
    counter::start();
    Qemu
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

/// [`stack_peak`], ending the run with `stack overflow` when the stack
/// reached the statics ([`crate::qemu::checked_stack_peak`]).
pub fn stack_peak_checked() -> usize {
    crate::qemu::checked_stack_peak(stack_peak(), stack_room())
}

/// Bytes of RAM the statics leave the stack: `[_stack_end, _stack_start)`.
pub fn stack_room() -> usize {
    core::ptr::addr_of!(_stack_start) as usize - core::ptr::addr_of!(_stack_end) as usize
}

/// Reports a panic (location and message) and exits with [`status::PANIC`].
pub fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    console::panic_message(info);
    exit(status::PANIC)
}

/// Reports the fault; a stack that grew into the statics (the frame below
/// `_stack_end`, or the lowest stack word written) is named as such.
#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    let sp = frame as *const ExceptionFrame as usize;
    if sp < core::ptr::addr_of!(_stack_end) as usize || stack_peak() >= stack_room() {
        say!("hardfault: pc={:#010x} lr={:#010x}", frame.pc(), frame.lr());
        crate::qemu::stack_overflow(stack_room())
    }
    say!("hardfault: pc={:#010x} lr={:#010x}", frame.pc(), frame.lr());
    exit(status::FAULT)
}

#[exception]
unsafe fn DefaultHandler(irqn: i16) {
    say!("fault: unexpected exception {}", irqn);
    exit(status::FAULT)
}

extern "C" {
    fn DefaultHandler();
}

/// The interrupt vectors: one entry, where cortex-m-rt without its `device`
/// feature reserves all 240 (960 bytes of flash). The firmware enables no
/// interrupt, so the core never reads past the exceptions; the one entry
/// (cortex-m-rt's link.x wants at least one) sends any to `DefaultHandler`.
#[link_section = ".vector_table.interrupts"]
#[no_mangle]
#[used]
static __INTERRUPTS: [unsafe extern "C" fn(); 1] = [DefaultHandler];
