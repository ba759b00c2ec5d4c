//! The chip table: the real microcontroller boards ferrite builds for (no
//! emulator: they are built and size-checked, and flashed by the user).
//!
//! `chips/build.rs` reads it (memory map), `cargo xtask chip` reads it
//! (target, rustflags, firmware package, budget, flash command) and the docs'
//! chip table lists it (docs/chips.md). Adding a chip is a row here, its
//! memory map `chips/memory/<memory>` (or its HAL's), a feature and a
//! `chips/src/chip/<name>.rs` with its clocks and console.

/// One real chip (and the board it is usually found on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chip {
    /// Short name (`cargo xtask chip <name>`; the firmware's feature).
    pub name: &'static str,
    /// The board people own, for the docs.
    pub board: &'static str,
    /// The microcontroller.
    pub mcu: &'static str,
    /// The core the firmware runs on.
    pub core: &'static str,
    /// Rust target triple.
    pub target: &'static str,
    /// `-C target-cpu` (`None`: the target's default). runtime/build.rs
    /// reads it to pick the tile kernels.
    pub cpu: Option<&'static str>,
    /// The firmware package, relative to the repository root (`chips`, or
    /// `chips/esp32c3` for the chip whose HAL needs its own lock file).
    pub package: &'static str,
    /// HAL / PAC / runtime crates the firmware uses, for the docs.
    pub hal: &'static str,
    /// How text comes out, for the docs.
    pub console: &'static str,
    /// `chips/memory/<file>`, the linker's memory map (`None`: the HAL's
    /// own linker scripts place everything; the budget is then the chip's).
    pub memory: Option<&'static str>,
    /// Flash the application may use, bytes.
    pub flash: u64,
    /// RAM the application may use (static data and stack), bytes.
    pub ram: u64,
    /// The tile-kernel module its core gets (`ferrite::kernels::arch::NAME`).
    pub kernels: &'static str,
    /// The host command that flashes an ELF and shows its output (`{elf}`
    /// is replaced by the ELF's path): probe-rs, or espflash.
    pub flash_cmd: &'static str,
    /// Default model and dtype (a model directory relative to the repository
    /// root, or a fixture name under tests/fixtures).
    pub model: (&'static str, &'static str),
    /// Core clock the firmware sets up, Hz (for the docs and its time per token).
    pub clock_hz: u32,
}

/// Every chip, in the order of the docs and CI.
pub const CHIPS: &[Chip] = &[
    Chip {
        name: "rp2350",
        board: "Raspberry Pi Pico 2",
        mcu: "RP2350A",
        core: "Cortex-M33 (DSP, FPU)",
        target: "thumbv8m.main-none-eabihf",
        cpu: Some("cortex-m33"),
        package: "chips",
        hal: "rp235x-hal 0.4 (boot block, clocks), cortex-m-rt",
        console: "defmt over RTT (probe-rs)",
        memory: Some("rp2350.x"),
        flash: 4 << 20,
        ram: 512 << 10,
        kernels: "dsp",
        flash_cmd: "probe-rs run --chip RP235x {elf}",
        model: ("models/lm/small", "int8"),
        clock_hz: 150_000_000,
    },
    Chip {
        name: "rp2350-riscv",
        board: "Raspberry Pi Pico 2",
        mcu: "RP2350A",
        core: "Hazard3 (RV32IMAC + Zba/Zbb/Zbs/Zbkb, no P)",
        target: "riscv32imac-unknown-none-elf",
        cpu: None,
        package: "chips",
        hal: "rp235x-hal 0.4 (boot block, clocks), riscv-rt 0.12",
        console: "defmt over RTT (probe-rs)",
        memory: Some("rp2350-riscv.x"),
        flash: 4 << 20,
        ram: 512 << 10,
        kernels: "rv32",
        flash_cmd: "probe-rs run --chip RP235x {elf}",
        model: ("models/lm/small", "int8"),
        clock_hz: 150_000_000,
    },
    Chip {
        name: "nrf52840",
        board: "nRF52840 DK (PCA10056) / Adafruit Feather nRF52840",
        mcu: "nRF52840",
        core: "Cortex-M4F",
        target: "thumbv7em-none-eabihf",
        cpu: None,
        package: "chips",
        hal: "nrf52840-pac 0.12 (vector table, cache), cortex-m-rt",
        console: "defmt over RTT (probe-rs)",
        memory: Some("nrf52840.x"),
        flash: 1 << 20,
        ram: 256 << 10,
        kernels: "dsp",
        flash_cmd: "probe-rs run --chip nRF52840_xxAA {elf}",
        model: ("models/lm/small", "int8"),
        clock_hz: 64_000_000,
    },
    Chip {
        name: "stm32f411",
        board: "WeAct STM32F411CEU6 Black Pill",
        mcu: "STM32F411CE",
        core: "Cortex-M4F",
        target: "thumbv7em-none-eabihf",
        cpu: None,
        package: "chips",
        hal: "stm32f4 0.16 PAC (vector table, clocks), cortex-m-rt",
        console: "defmt over RTT (probe-rs)",
        memory: Some("stm32f411.x"),
        flash: 512 << 10,
        ram: 128 << 10,
        kernels: "dsp",
        flash_cmd: "probe-rs run --chip STM32F411CEUx {elf}",
        model: ("models/lm/small", "int8"),
        clock_hz: 100_000_000,
    },
    Chip {
        name: "esp32c3",
        board: "ESP32-C3-DevKitM-1 / ESP32-C3 SuperMini",
        mcu: "ESP32-C3",
        core: "RV32IMC (no F, no P)",
        target: "riscv32imc-unknown-none-elf",
        cpu: None,
        package: "chips/esp32c3",
        hal: "esp-hal 1.2, esp-bootloader-esp-idf 0.6, esp-println 0.18",
        console: "esp-println (USB-serial-JTAG or UART0; espflash monitor)",
        memory: None,
        // The factory app partition of ESP-IDF's single-app partition
        // table (1 MB), not the module's whole 4 MB: a larger partition
        // table allows more.
        flash: 1 << 20,
        // esp-hal's DRAM region (313 KB of SRAM after the ROM's and the
        // 16 KB instruction cache's share), which code in IRAM shares.
        ram: 313 << 10,
        kernels: "rv32",
        flash_cmd: "espflash flash --chip esp32c3 --monitor {elf}",
        model: ("models/lm/small", "int8"),
        clock_hz: 160_000_000,
    },
];

impl Chip {
    /// The chip called `name`.
    pub fn named(name: &str) -> Option<&'static Chip> {
        CHIPS.iter().find(|c| c.name == name)
    }
}

/// Every chip's name, in table order.
pub fn names() -> impl Iterator<Item = &'static str> {
    CHIPS.iter().map(|c| c.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for (i, c) in CHIPS.iter().enumerate() {
            assert!(CHIPS[..i].iter().all(|a| a.name != c.name), "{}", c.name);
            assert_eq!(Chip::named(c.name), Some(c));
        }
        assert_eq!(Chip::named("m4f"), None);
    }
}
