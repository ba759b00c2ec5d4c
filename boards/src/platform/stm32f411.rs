//! STM32F411CE (Black Pill): 100 MHz from the 16 MHz HSI through the PLL
//! (no dependence on the board's crystal), voltage scale 1, 3 flash wait
//! states with prefetch and both caches, APB1 at 50 MHz. The PAC provides the
//! chip's interrupt vector table and the registers.

use crate::arm_chip::ArmChip;
pub use crate::arm_chip::{exit, panic};
pub use cortex_m_rt::entry;

use stm32f4::stm32f411 as pac;

/// Clocks to 100 MHz (`config::CLOCK_HZ`), then the cycle counter and RTT.
pub fn init() -> ArmChip {
    let p = pac::Peripherals::take().unwrap();
    let (rcc, flash, pwr) = (&p.RCC, &p.FLASH, &p.PWR);
    // Scale 1: up to 100 MHz.
    rcc.apb1enr().modify(|_, w| w.pwren().set_bit());
    // Read back: the PWR clock is on before its register is written.
    let _ = rcc.apb1enr().read();
    pwr.cr().modify(|_, w| unsafe { w.vos().bits(0b11) });
    // HSI / 8 = 2 MHz (the VCO input ST recommends), x100 = 200 MHz VCO,
    // / 2 = 100 MHz (/ 4 = 50 MHz for Q, unused).
    rcc.pllcfgr().write(|w| unsafe {
        w.pllsrc().hsi();
        w.pllm().bits(8);
        w.plln().bits(100);
        w.pllp().div2();
        w.pllq().bits(4)
    });
    rcc.cr().modify(|_, w| w.pllon().set_bit());
    while rcc.cr().read().pllrdy().bit_is_clear() {}
    flash.acr().modify(|_, w| {
        w.latency().ws3();
        w.prften().set_bit();
        w.icen().set_bit();
        w.dcen().set_bit()
    });
    while !flash.acr().read().latency().is_ws3() {}
    rcc.cfgr().modify(|_, w| {
        w.hpre().div1();
        w.ppre1().div2();
        w.ppre2().div1();
        w.sw().pll()
    });
    while !rcc.cfgr().read().sws().is_pll() {}
    ArmChip::new(cortex_m::Peripherals::take().unwrap())
}
