//! The QEMU boards' instruction counter: SysTick on Cortex-M (24 bits,
//! widened by its wrap interrupt), `minstret` on RISC-V.

use crate::config;

/// Instructions retired since [`start`] (exact on RISC-V; in steps of one
/// SysTick tick on Cortex-M). Only meaningful under QEMU's
/// `-icount shift=0,sleep=off`, where one instruction takes one nanosecond.
pub fn instructions() -> u64 {
    let (num, den) = config::INSTR_PER_TICK;
    ticks() * num / den
}

pub use imp::{start, ticks};

#[cfg(target_arch = "arm")]
mod imp {
    use core::sync::atomic::{AtomicU32, Ordering};
    use cortex_m::peripheral::SYST;
    use cortex_m_rt::exception;

    const RELOAD: u32 = 0x00FF_FFFF;
    static WRAPS: AtomicU32 = AtomicU32::new(0);

    /// Starts the counter: SysTick on the core clock, full 24-bit range,
    /// one interrupt per wrap.
    pub fn start() {
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
        // The current value reads 0 until the first reload: wait for it, so
        // the first reading is not taken as a full period.
        while SYST::get_current() == 0 {}
    }

    /// SysTick ticks since [`start`].
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
}

#[cfg(target_arch = "riscv32")]
mod imp {
    use riscv::register::minstret;

    static mut START: u64 = 0;

    /// Starts the counter (remembers `minstret`).
    pub fn start() {
        // SAFETY: single hart, written before anything reads it.
        unsafe { START = minstret::read64() };
    }

    /// Instructions retired since [`start`] (one tick = one instruction).
    pub fn ticks() -> u64 {
        // SAFETY: written once in `start`.
        minstret::read64() - unsafe { START }
    }
}
