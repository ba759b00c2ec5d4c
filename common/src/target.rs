//! The target table: every machine the firmware (`boards/`) is built for,
//! QEMU boards and real chips alike, in one place.
//!
//! `boards/build.rs` reads it (the enabled feature names the row: memory
//! map, counter, update slot), `cargo xtask` reads it (triple, rustflags,
//! QEMU machine or flash command, default model, budget) and writes the
//! docs' tables from it. Adding a target is a row here, its memory map
//! `boards/memory/<file>`, a feature in boards/Cargo.toml and (for a chip)
//! its init module `boards/src/platform/<name>.rs` (boards/README.md).

/// One target: how to build the firmware for it, and where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Short name: the firmware's cargo feature, `cargo xtask board|chip <name>`.
    pub name: &'static str,
    /// Rust target triple.
    pub triple: &'static str,
    /// `-C target-cpu` (`None`: the triple's default), the firmware's only rustflags.
    pub cpu: Option<&'static str>,
    /// The core (and QEMU machine or board), for the docs' tables.
    pub core: &'static str,
    /// Where code and data go, and so the flash and RAM budget.
    pub memory: Memory,
    /// Default model and dtype: a fixture under tests/fixtures (a bare
    /// name) or a model directory relative to the repository root (a path).
    pub model: (&'static str, &'static str),
    /// What differs between an emulated board and a real chip.
    pub kind: Kind,
}

/// A target's memory: a map of ours, or its HAL's linker scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// `boards/memory/<file>`: the linker's map; its FLASH and RAM lengths
    /// are the budget, so the link fails when the firmware outgrows it.
    Map(&'static str),
    /// The HAL's own scripts place everything; xtask checks this budget.
    Hal {
        /// Flash the application may use, bytes.
        flash: u64,
        /// RAM the application may use (static data and stack), bytes.
        ram: u64,
    },
}

/// QEMU board or real chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Runs under QEMU: semihosting console and exit, instructions counted.
    Qemu(Qemu),
    /// A real chip: built and size-checked here, flashed by the user.
    Chip(Chip),
}

/// What a QEMU board adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qemu {
    /// QEMU `-machine`.
    pub machine: &'static str,
    /// Extra QEMU arguments (e.g. the CPU's ISA extensions).
    pub args: &'static [&'static str],
    /// One line for docs.
    pub about: &'static str,
    /// Instructions per tick of the counter, `(num, den)`: SysTick on the
    /// core clock under `-icount shift=0` ticks once per `1e9 / cpu_hz`
    /// instructions; RISC-V reads `instret` (1/1). Checked by the
    /// `calibrate` firmware (`cargo xtask test-boards`).
    pub instr_per_tick: (u64, u64),
    /// The `ota` firmware's update slot (slot B), bytes (RAM under QEMU).
    pub update_slot: usize,
    /// RAM the `ota` firmware reserves for an update's session, bytes.
    pub update_session: usize,
}

/// What a real chip adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chip {
    /// The board people own.
    pub board: &'static str,
    /// The microcontroller.
    pub mcu: &'static str,
    /// The firmware package, relative to the repository root: `boards`, or
    /// `boards/esp32c3` for the chip whose HAL needs its own lock file.
    pub package: &'static str,
    /// HAL / PAC / runtime crates, for the docs.
    pub hal: &'static str,
    /// How text comes out, for the docs.
    pub console: &'static str,
    /// The command that flashes an ELF and shows its output (`{elf}`: its path).
    pub flash_cmd: &'static str,
    /// Core clock the firmware sets up, Hz.
    pub clock_hz: u32,
}

/// The model every QEMU board runs unless told otherwise.
pub const DEFAULT_MODEL: &str = "hybrid_all4_untied";
/// The model every chip embeds unless told otherwise.
const CHIP_MODEL: (&str, &str) = ("models/lm/small", "int8");

/// What most QEMU boards share (a row names its machine, text and counter
/// ratio): no extra arguments, a 960 KB update slot, 64 KB for its session.
const QEMU: Qemu = Qemu {
    machine: "",
    args: &[],
    about: "",
    instr_per_tick: (1, 1),
    update_slot: 960 << 10,
    update_session: 64 << 10,
};

/// Every target, QEMU boards first ([`BOARDS`], then [`CHIPS`]); the order
/// of the suite and the docs' tables.
pub const TARGETS: &[Target] = &[
    Target {
        name: "m4f",
        triple: "thumbv7em-none-eabihf",
        cpu: None,
        core: "Cortex-M4F (mps2-an386)",
        memory: Memory::Map("m4f.x"),
        model: (DEFAULT_MODEL, "f32"),
        // mps2: 25 MHz.
        kind: Kind::Qemu(Qemu {
            machine: "mps2-an386",
            about: "Cortex-M4F, QEMU mps2-an386",
            instr_per_tick: (40, 1),
            ..QEMU
        }),
    },
    Target {
        name: "m7",
        triple: "thumbv7em-none-eabihf",
        cpu: None,
        core: "Cortex-M7 (mps2-an500)",
        memory: Memory::Map("m7.x"),
        model: (DEFAULT_MODEL, "f32"),
        kind: Kind::Qemu(Qemu {
            machine: "mps2-an500",
            about: "Cortex-M7, QEMU mps2-an500",
            instr_per_tick: (40, 1),
            ..QEMU
        }),
    },
    Target {
        name: "m55",
        // No thumbv8.1m target in this toolchain: v8-M mainline with
        // cortex-m55 enables Helium (MVE).
        triple: "thumbv8m.main-none-eabihf",
        cpu: Some("cortex-m55"),
        core: "Cortex-M55 (mps3-an547)",
        memory: Memory::Map("m55.x"),
        model: (DEFAULT_MODEL, "f32"),
        // mps3-an547: 32 MHz.
        kind: Kind::Qemu(Qemu {
            update_slot: 320 << 10,
            machine: "mps3-an547",
            about: "Cortex-M55 (Helium), QEMU mps3-an547",
            instr_per_tick: (125, 4),
            ..QEMU
        }),
    },
    Target {
        name: "m3",
        triple: "thumbv7m-none-eabi",
        cpu: None,
        core: "Cortex-M3, 256 KB / 64 KB (lm3s6965evb)",
        memory: Memory::Map("m3.x"),
        model: (DEFAULT_MODEL, "int8"),
        // lm3s6965evb: 12.5 MHz (the reset clock).
        kind: Kind::Qemu(Qemu {
            update_slot: 32 << 10,
            update_session: 8 << 10,
            machine: "lm3s6965evb",
            about: "Cortex-M3 (no FPU), QEMU lm3s6965evb, real budget 256 KB flash / 64 KB RAM",
            instr_per_tick: (80, 1),
            ..QEMU
        }),
    },
    Target {
        name: "rv32imac",
        triple: "riscv32imac-unknown-none-elf",
        cpu: None,
        core: "RV32IMAC (virt)",
        memory: Memory::Map("rv32.x"),
        model: (DEFAULT_MODEL, "f32"),
        kind: Kind::Qemu(Qemu {
            args: &["-bios", "none", "-cpu", "rv32,f=false,d=false"],
            machine: "virt",
            about: "RISC-V rv32imac (no FPU), QEMU virt",
            instr_per_tick: (1, 1),
            ..QEMU
        }),
    },
    Target {
        name: "rv32imafc",
        triple: "riscv32imafc-unknown-none-elf",
        cpu: None,
        core: "RV32IMAFC (virt)",
        memory: Memory::Map("rv32.x"),
        model: (DEFAULT_MODEL, "f32"),
        kind: Kind::Qemu(Qemu {
            args: &["-bios", "none", "-cpu", "rv32,d=false"],
            machine: "virt",
            about: "RISC-V rv32imafc, QEMU virt",
            instr_per_tick: (1, 1),
            ..QEMU
        }),
    },
    Target {
        name: "m33",
        triple: "thumbv8m.main-none-eabihf",
        cpu: Some("cortex-m33"),
        core: "Cortex-M33 (mps2-an505)",
        memory: Memory::Map("m33.x"),
        model: (DEFAULT_MODEL, "f32"),
        // mps2-an505: 20 MHz.
        kind: Kind::Qemu(Qemu {
            machine: "mps2-an505",
            about: "Cortex-M33 (DSP, FPU), QEMU mps2-an505, secure state",
            instr_per_tick: (50, 1),
            ..QEMU
        }),
    },
    Target {
        name: "m0",
        triple: "thumbv6m-none-eabi",
        cpu: None,
        core: "Cortex-M0, 256 KB / 16 KB (microbit)",
        memory: Memory::Map("m0.x"),
        // 2 gdn layers of 3.2 KB state: the MQAR model with the best recall
        // that fits 16 KB of RAM (docs/boards.md).
        model: ("models/mqar/gdn-2k-lr3e-3", "int8"),
        // nRF51: 16 MHz.
        kind: Kind::Qemu(Qemu {
            update_slot: 6 << 10,
            update_session: 2 << 10,
            machine: "microbit",
            about: "Cortex-M0 (no FPU, no DSP), QEMU microbit (nRF51), real budget 256 KB flash / 16 KB RAM",
            instr_per_tick: (125, 2),
            ..QEMU
        }),
    },
    Target {
        name: "m3-mps2",
        triple: "thumbv7m-none-eabi",
        cpu: None,
        core: "Cortex-M3, 4 MB / 4 MB (mps2-an385)",
        memory: Memory::Map("m3-mps2.x"),
        model: (DEFAULT_MODEL, "int8"),
        // The m3's core on a machine with room: mps2-an385 is the
        // mps2-an386 (m4f) with a Cortex-M3, the same map, 25 MHz. For the
        // images the lm3s6965's 256 KB cannot hold (the integer-path
        // `models/lm/small`, docs/integer-path.md); real M3 parts have up
        // to 1 MB (STM32F103xG, STM32F207).
        kind: Kind::Qemu(Qemu {
            machine: "mps2-an385",
            about: "Cortex-M3 (no FPU), QEMU mps2-an385: the m3's core with 4 MB of code memory",
            instr_per_tick: (40, 1),
            ..QEMU
        }),
    },
    Target {
        name: "rp2350",
        triple: "thumbv8m.main-none-eabihf",
        cpu: Some("cortex-m33"),
        core: "Cortex-M33 (DSP, FPU)",
        memory: Memory::Map("rp2350.x"),
        model: CHIP_MODEL,
        kind: Kind::Chip(Chip {
            board: "Raspberry Pi Pico 2",
            mcu: "RP2350A",
            package: "boards",
            hal: "rp235x-hal 0.4 (boot block, clocks), cortex-m-rt",
            console: "defmt over RTT (probe-rs)",
            flash_cmd: "probe-rs run --chip RP235x {elf}",
            clock_hz: 150_000_000,
        }),
    },
    Target {
        name: "rp2350-riscv",
        triple: "riscv32imac-unknown-none-elf",
        cpu: None,
        core: "Hazard3 (RV32IMAC + Zba/Zbb/Zbs/Zbkb, no P)",
        memory: Memory::Map("rp2350-riscv.x"),
        model: CHIP_MODEL,
        kind: Kind::Chip(Chip {
            board: "Raspberry Pi Pico 2",
            mcu: "RP2350A",
            package: "boards",
            hal: "rp235x-hal 0.4 (boot block, clocks), riscv-rt 0.12",
            console: "defmt over RTT (probe-rs)",
            flash_cmd: "probe-rs run --chip RP235x {elf}",
            clock_hz: 150_000_000,
        }),
    },
    Target {
        name: "rp2040",
        triple: "thumbv6m-none-eabi",
        cpu: None,
        core: "Cortex-M0+ (no FPU, no DSP)",
        memory: Memory::Map("rp2040.x"),
        model: CHIP_MODEL,
        kind: Kind::Chip(Chip {
            board: "Raspberry Pi Pico",
            mcu: "RP2040",
            package: "boards",
            hal: "rp2040-hal 0.12 (clocks, timer), rp2040-boot2 0.3 (BOOT2), cortex-m-rt",
            console: "defmt over RTT (probe-rs)",
            flash_cmd: "probe-rs run --chip RP2040 {elf}",
            clock_hz: 125_000_000,
        }),
    },
    Target {
        name: "nrf52840",
        triple: "thumbv7em-none-eabihf",
        cpu: None,
        core: "Cortex-M4F",
        memory: Memory::Map("nrf52840.x"),
        model: CHIP_MODEL,
        kind: Kind::Chip(Chip {
            board: "nRF52840 DK (PCA10056) / Adafruit Feather nRF52840",
            mcu: "nRF52840",
            package: "boards",
            hal: "nrf52840-pac 0.12 (vector table, cache), cortex-m-rt",
            console: "defmt over RTT (probe-rs)",
            flash_cmd: "probe-rs run --chip nRF52840_xxAA {elf}",
            clock_hz: 64_000_000,
        }),
    },
    Target {
        name: "stm32f411",
        triple: "thumbv7em-none-eabihf",
        cpu: None,
        core: "Cortex-M4F",
        memory: Memory::Map("stm32f411.x"),
        model: CHIP_MODEL,
        kind: Kind::Chip(Chip {
            board: "WeAct STM32F411CEU6 Black Pill",
            mcu: "STM32F411CE",
            package: "boards",
            hal: "stm32f4 0.16 PAC (vector table, clocks), cortex-m-rt",
            console: "defmt over RTT (probe-rs)",
            flash_cmd: "probe-rs run --chip STM32F411CEUx {elf}",
            clock_hz: 100_000_000,
        }),
    },
    Target {
        name: "esp32c3",
        triple: "riscv32imc-unknown-none-elf",
        cpu: None,
        core: "RV32IMC (no F, no P)",
        memory: Memory::Hal {
            // The factory app partition of ESP-IDF's single-app partition
            // table (1 MB), not the module's whole 4 MB.
            flash: 1 << 20,
            // esp-hal's DRAM region (313 KB of SRAM after the ROM's and the
            // 16 KB instruction cache's share), which code in IRAM shares.
            ram: 313 << 10,
        },
        model: CHIP_MODEL,
        kind: Kind::Chip(Chip {
            board: "ESP32-C3-DevKitM-1 / ESP32-C3 SuperMini",
            mcu: "ESP32-C3",
            package: "boards/esp32c3",
            hal: "esp-hal 1.2, esp-bootloader-esp-idf 0.6, esp-println 0.18",
            console: "esp-println (USB-serial-JTAG or UART0; espflash monitor)",
            flash_cmd: "espflash flash --chip esp32c3 --monitor {elf}",
            clock_hz: 160_000_000,
        }),
    },
];

impl Target {
    /// The target called `name`.
    pub fn named(name: &str) -> Option<&'static Target> {
        TARGETS.iter().find(|t| t.name == name)
    }

    /// Its QEMU machine, if it is a QEMU board.
    pub fn qemu(&self) -> Option<&Qemu> {
        match &self.kind {
            Kind::Qemu(q) => Some(q),
            Kind::Chip(_) => None,
        }
    }

    /// Its chip, if it is a real chip.
    pub fn chip(&self) -> Option<&Chip> {
        match &self.kind {
            Kind::Chip(c) => Some(c),
            Kind::Qemu(_) => None,
        }
    }

    /// The QEMU binary for its architecture.
    pub fn qemu_binary(&self) -> &'static str {
        if self.triple.starts_with("riscv") {
            "qemu-system-riscv32"
        } else {
            "qemu-system-arm"
        }
    }

    /// The tile-kernel module its build runs (`ferrite::kernels::arch::NAME`).
    pub fn kernels(&self) -> &'static str {
        kernels(self.triple, self.cpu)
    }

    /// f32 in hardware: Arm hard-float ABIs and RISC-V with F (as
    /// runtime/build.rs decides `ferrite_hard_float`).
    pub fn hard_float(&self) -> bool {
        self.triple.ends_with("eabihf") || self.triple.starts_with("riscv32imaf")
    }
}

/// The tile-kernel module a triple and `-C target-cpu` get: the runtime's
/// one ISA decision, `ferrite_asm::isa::for_target`.
pub fn kernels(triple: &str, cpu: Option<&str>) -> &'static str {
    ferrite_asm::isa::for_target(triple, cpu).name()
}

/// Every target's name, in table order.
pub fn names() -> impl Iterator<Item = &'static str> {
    TARGETS.iter().map(|t| t.name)
}

/// The QEMU boards: the table's first rows.
pub const BOARDS: &[Target] = TARGETS.split_at(board_rows()).0;

/// The real chips: the rows after the boards.
pub const CHIPS: &[Target] = TARGETS.split_at(board_rows()).1;

/// How many rows the QEMU boards take (a build error unless they come first).
const fn board_rows() -> usize {
    let mut i = 0;
    while i < TARGETS.len() && matches!(TARGETS[i].kind, Kind::Qemu(_)) {
        i += 1;
    }
    let mut j = i;
    while j < TARGETS.len() {
        assert!(
            matches!(TARGETS[j].kind, Kind::Chip(_)),
            "the QEMU boards come first in TARGETS"
        );
        j += 1;
    }
    i
}

/// The distinct triples of the table, in table order of first use.
pub fn triples() -> impl Iterator<Item = &'static str> {
    TARGETS
        .iter()
        .enumerate()
        .filter(|(i, t)| !TARGETS[..*i].iter().any(|a| a.triple == t.triple))
        .map(|(_, t)| t.triple)
}

/// The `LENGTH` of memory region `region` (`FLASH`, `RAM`) in the text of
/// a linker memory map (`boards/memory/*.x`), in bytes: a decimal or `0x`
/// number with an optional `K` or `M` suffix. Read by `boards/build.rs`
/// (the firmware sizes its buffers from the RAM) and by xtask (the budget).
pub fn region_length(memory_x: &str, region: &str) -> Option<u64> {
    let line = memory_x.lines().find(|l| {
        let l = l.trim_start();
        l.strip_prefix(region)
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
            && l.contains("LENGTH")
    })?;
    let v = line.split("LENGTH").nth(1)?.trim_start_matches([' ', '=']);
    let v = v.split([',', ' ', '}']).next()?.trim();
    let (num, mul) = match v.as_bytes().last()? {
        b'K' => (&v[..v.len() - 1], 1024),
        b'M' => (&v[..v.len() - 1], 1024 * 1024),
        _ => (v, 1),
    };
    let n = match num.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => num.parse().ok()?,
    };
    n.checked_mul(mul)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_region_lengths() {
        let x = "/* FLASH : comment */\nMEMORY\n{\n  FLASH : ORIGIN = 0x00000000, LENGTH = 256K\n  RAM   : ORIGIN = 0x20000000, LENGTH = 0x4000\n}\n";
        assert_eq!(region_length(x, "FLASH"), Some(256 * 1024));
        assert_eq!(region_length(x, "RAM"), Some(16 * 1024));
        assert_eq!(
            region_length("RAM : ORIGIN = 0, LENGTH = 4M", "RAM"),
            Some(4 << 20)
        );
        assert_eq!(region_length(x, "ROM"), None);
        assert_eq!(region_length("RAM : ORIGIN = 0, LENGTH = 4G", "RAM"), None);
    }

    #[test]
    fn names_are_unique_and_lookups_find_each() {
        for (i, t) in TARGETS.iter().enumerate() {
            assert!(TARGETS[..i].iter().all(|a| a.name != t.name), "{}", t.name);
            assert_eq!(Target::named(t.name), Some(t));
        }
        assert_eq!(Target::named("nope"), None);
        assert_eq!((BOARDS.len(), CHIPS.len()), (9, 6));
    }

    #[test]
    fn kernels_and_float_follow_triple_and_cpu() {
        let k: [&str; 15] = core::array::from_fn(|i| TARGETS[i].kernels());
        assert_eq!(
            k,
            [
                "dsp", "dsp", "helium", "v7m", "rv32", "rv32", "dsp", "v6m", "v7m", // QEMU
                "dsp", "rv32", "v6m", "dsp", "dsp", "rv32" // chips
            ]
        );
        assert_eq!(kernels("thumbv8m.main-none-eabihf", None), "portable");
        let hf: [bool; 9] = core::array::from_fn(|i| TARGETS[i].hard_float());
        // m4f m7 m55 m3 rv32imac rv32imafc m33 m0 m3-mps2
        assert_eq!(
            hf,
            [true, true, true, false, false, true, true, false, false]
        );
        // The M3 on mps2-an385 is the m3's core: its triple, CPU and kernels.
        let (m3, mps2) = (
            Target::named("m3").unwrap(),
            Target::named("m3-mps2").unwrap(),
        );
        assert_eq!((mps2.triple, mps2.cpu), (m3.triple, m3.cpu));
        assert_eq!(mps2.kernels(), m3.kernels());
    }
}
