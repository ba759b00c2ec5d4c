//! The Arm chips' [`Platform`](crate::Platform): defmt over RTT and the DWT
//! cycle counter at the core clock.

use core::fmt;

use crate::rtt::Rtt;

/// Console and counter of a Cortex-M chip.
pub struct Arm {
    rtt: Rtt,
}

impl Arm {
    /// Starts the DWT cycle counter (clocks must already be set up).
    pub fn new(mut core: cortex_m::Peripherals) -> Arm {
        core.DCB.enable_trace();
        core.DWT.enable_cycle_counter();
        Arm { rtt: Rtt::new() }
    }
}

impl crate::Platform for Arm {
    const TICK_HZ: u32 = crate::config::CLOCK_HZ;

    fn text(&mut self, bytes: &[u8]) {
        self.rtt.text(bytes)
    }

    fn line(&mut self, args: fmt::Arguments<'_>) {
        self.rtt.line(args)
    }

    fn ticks(&mut self) -> u32 {
        cortex_m::peripheral::DWT::cycle_count()
    }
}

/// Stops after the run: sleeps forever (`probe-rs run` keeps showing the
/// output until Ctrl-C).
pub fn idle() -> ! {
    loop {
        cortex_m::asm::wfi();
    }
}
