//! The Arm chips' [`Platform`](crate::io::Platform): defmt over RTT and the DWT
//! cycle counter at the core clock.

use core::fmt;

use crate::rtt::Rtt;

/// Console and counter of a Cortex-M chip.
pub struct ArmChip {
    rtt: Rtt,
    /// The cycle counter widened to 64 bits: its last reading, and its wraps.
    last: u32,
    wraps: u64,
}

impl ArmChip {
    /// Starts the DWT cycle counter (clocks must already be set up).
    pub fn new(mut core: cortex_m::Peripherals) -> ArmChip {
        core.DCB.enable_trace();
        core.DWT.enable_cycle_counter();
        ArmChip {
            rtt: Rtt::new(),
            last: 0,
            wraps: 0,
        }
    }
}

impl crate::io::Platform for ArmChip {
    fn text(&mut self, bytes: &[u8]) {
        self.rtt.text(bytes)
    }

    fn line(&mut self, args: fmt::Arguments<'_>) {
        self.rtt.line(args)
    }

    /// Microseconds since [`ArmChip::new`] (read at least once per wrap of
    /// the 32-bit cycle counter: 28 s at 150 MHz).
    fn now(&mut self) -> u64 {
        let t = cortex_m::peripheral::DWT::cycle_count();
        self.wraps += u64::from(t < self.last);
        self.last = t;
        ((self.wraps << 32) | u64::from(t)) * 1_000_000 / u64::from(crate::config::CLOCK_HZ)
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
