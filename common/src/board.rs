//! The board table: every QEMU board the firmware runs on, in one place.
//!
//! `boards/build.rs` reads it (memory map, clock ratio, update slot), `cargo
//! xtask` reads it (target, rustflags, QEMU machine, default model, kernels,
//! fast math) and writes the docs' board lists from it. Adding a board is a
//! row here plus its memory map, `boards/memory/<memory>`.

/// One QEMU board: how to build the firmware for it and how to run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Board {
    /// Short name (`cargo xtask board <name>`, `FERRITE_BOARD`).
    pub name: &'static str,
    /// Rust target triple.
    pub target: &'static str,
    /// `-C target-cpu` for this board (`None`: the target's default). The
    /// runtime's build script reads it to pick the tile kernels.
    pub cpu: Option<&'static str>,
    /// QEMU binary.
    pub qemu: &'static str,
    /// QEMU `-machine`.
    pub machine: &'static str,
    /// Extra QEMU arguments (e.g. the CPU's ISA extensions).
    pub qemu_args: &'static [&'static str],
    /// `boards/memory/<file>`: the linker's memory map, also the flash and
    /// RAM budget xtask checks images against.
    pub memory: &'static str,
    /// Default model and dtype: a fixture directory under tests/fixtures
    /// (a bare name), or a model directory relative to the repository root
    /// (a path, e.g. `models/mqar/gdn-2k-lr3e-3`).
    pub model: (&'static str, &'static str),
    /// One line for docs.
    pub about: &'static str,
    /// The core and machine, for the README's compact table.
    pub core: &'static str,
    /// The tile-kernel module its target gets (`ferrite::kernels::arch::NAME`,
    /// chosen by runtime/build.rs from target and `cpu`).
    pub kernels: &'static str,
    /// Whether its firmware is built with the runtime's `fast-math` feature
    /// by default (docs/benchmarks.md, "Fast math").
    pub fast_math: bool,
    /// Instructions per tick of the instruction counter, as `(num, den)`.
    /// Cortex-M SysTick on the core clock under `-icount shift=0` ticks once
    /// per `1e9 / cpu_hz` instructions; RISC-V reads `instret` (1/1).
    /// Measured with the `calibrate` firmware (`cargo xtask test-boards`).
    pub instr_per_tick: (u64, u64),
    /// The `ota` firmware's update slot (slot B), bytes: where a new model
    /// lands before it is validated (a flash partition on a real chip; RAM
    /// under QEMU).
    pub update_slot: usize,
    /// RAM the `ota` firmware reserves for the session of an update, bytes
    /// (the serving model's buffer is the larger of this and A's session).
    pub update_session: usize,
}

/// The model every board runs unless told otherwise (`--image`).
pub const DEFAULT_MODEL: &str = "hybrid_all4_untied";

/// Every board. The order is the order of the suite and the docs' tables.
pub const BOARDS: &[Board] = &[
    Board {
        name: "m4f",
        target: "thumbv7em-none-eabihf",
        cpu: None,
        qemu: "qemu-system-arm",
        machine: "mps2-an386",
        qemu_args: &[],
        memory: "m4f.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "Cortex-M4F, QEMU mps2-an386",
        core: "Cortex-M4F (mps2-an386)",
        kernels: "dsp",
        fast_math: true,
        // mps2: 25 MHz.
        instr_per_tick: (40, 1),
        update_slot: 960 << 10,
        update_session: 64 << 10,
    },
    Board {
        name: "m7",
        target: "thumbv7em-none-eabihf",
        cpu: None,
        qemu: "qemu-system-arm",
        machine: "mps2-an500",
        qemu_args: &[],
        memory: "m7.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "Cortex-M7, QEMU mps2-an500",
        core: "Cortex-M7 (mps2-an500)",
        kernels: "dsp",
        fast_math: true,
        instr_per_tick: (40, 1),
        update_slot: 960 << 10,
        update_session: 64 << 10,
    },
    Board {
        name: "m55",
        target: "thumbv8m.main-none-eabihf",
        // No thumbv8.1m target in this toolchain: v8-M mainline with
        // cortex-m55 enables Helium (MVE).
        cpu: Some("cortex-m55"),
        qemu: "qemu-system-arm",
        machine: "mps3-an547",
        qemu_args: &[],
        memory: "m55.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "Cortex-M55 (Helium), QEMU mps3-an547",
        core: "Cortex-M55 (mps3-an547)",
        kernels: "helium",
        fast_math: true,
        // mps3-an547: 32 MHz.
        instr_per_tick: (125, 4),
        update_slot: 320 << 10,
        update_session: 64 << 10,
    },
    Board {
        name: "m3",
        target: "thumbv7m-none-eabi",
        cpu: None,
        qemu: "qemu-system-arm",
        machine: "lm3s6965evb",
        qemu_args: &[],
        memory: "m3.x",
        model: (DEFAULT_MODEL, "int8"),
        about: "Cortex-M3 (no FPU), QEMU lm3s6965evb, real budget 256 KB flash / 64 KB RAM",
        core: "Cortex-M3, 256 KB / 64 KB (lm3s6965evb)",
        kernels: "v7m",
        fast_math: true,
        // lm3s6965evb: 12.5 MHz (the reset clock).
        instr_per_tick: (80, 1),
        update_slot: 32 << 10,
        update_session: 8 << 10,
    },
    Board {
        name: "rv32imac",
        target: "riscv32imac-unknown-none-elf",
        cpu: None,
        qemu: "qemu-system-riscv32",
        machine: "virt",
        qemu_args: &["-bios", "none", "-cpu", "rv32,f=false,d=false"],
        memory: "rv32.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "RISC-V rv32imac (no FPU), QEMU virt",
        core: "RV32IMAC (virt)",
        kernels: "rv32",
        fast_math: true,
        instr_per_tick: (1, 1),
        update_slot: 960 << 10,
        update_session: 64 << 10,
    },
    Board {
        name: "rv32imafc",
        target: "riscv32imafc-unknown-none-elf",
        cpu: None,
        qemu: "qemu-system-riscv32",
        machine: "virt",
        qemu_args: &["-bios", "none", "-cpu", "rv32,d=false"],
        memory: "rv32.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "RISC-V rv32imafc, QEMU virt",
        core: "RV32IMAFC (virt)",
        kernels: "rv32",
        fast_math: true,
        instr_per_tick: (1, 1),
        update_slot: 960 << 10,
        update_session: 64 << 10,
    },
    Board {
        name: "m33",
        target: "thumbv8m.main-none-eabihf",
        cpu: Some("cortex-m33"),
        qemu: "qemu-system-arm",
        machine: "mps2-an505",
        qemu_args: &[],
        memory: "m33.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "Cortex-M33 (DSP, FPU), QEMU mps2-an505, secure state",
        core: "Cortex-M33 (mps2-an505)",
        kernels: "dsp",
        fast_math: true,
        // mps2-an505: 20 MHz.
        instr_per_tick: (50, 1),
        update_slot: 960 << 10,
        update_session: 64 << 10,
    },
    Board {
        name: "m0",
        target: "thumbv6m-none-eabi",
        cpu: None,
        qemu: "qemu-system-arm",
        machine: "microbit",
        qemu_args: &[],
        memory: "m0.x",
        // 2 gdn layers of 3.2 KB state: the MQAR model with the best recall
        // that fits 16 KB of RAM (docs/boards.md).
        model: ("models/mqar/gdn-2k-lr3e-3", "int8"),
        about: "Cortex-M0 (no FPU, no DSP), QEMU microbit (nRF51), real budget 256 KB flash / 16 KB RAM",
        core: "Cortex-M0, 256 KB / 16 KB (microbit)",
        kernels: "portable",
        fast_math: true,
        // nRF51: 16 MHz.
        instr_per_tick: (125, 2),
        update_slot: 6 << 10,
        update_session: 2 << 10,
    },
];

impl Board {
    /// The board called `name`.
    pub fn named(name: &str) -> Option<&'static Board> {
        BOARDS.iter().find(|b| b.name == name)
    }

    /// f32 in hardware: Arm hard-float ABIs and RISC-V with F (as
    /// runtime/build.rs decides `ferrite_hard_float`).
    pub fn hard_float(&self) -> bool {
        self.target.ends_with("eabihf") || self.target.starts_with("riscv32imaf")
    }
}

/// Every board's name, in table order.
pub fn names() -> impl Iterator<Item = &'static str> {
    BOARDS.iter().map(|b| b.name)
}

/// The distinct targets of the table, in table order of first use.
pub fn targets() -> impl Iterator<Item = &'static str> {
    BOARDS
        .iter()
        .enumerate()
        .filter(|(i, b)| !BOARDS[..*i].iter().any(|a| a.target == b.target))
        .map(|(_, b)| b.target)
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
        for (i, b) in BOARDS.iter().enumerate() {
            assert!(
                BOARDS[..i].iter().all(|a| a.name != b.name),
                "{} twice",
                b.name
            );
            assert_eq!(Board::named(b.name), Some(b));
        }
        assert_eq!(Board::named("nope"), None);
    }

    #[test]
    fn targets_are_listed_once() {
        let t: [&str; 8] = {
            let mut a = [""; 8];
            for (slot, t) in a.iter_mut().zip(targets()) {
                *slot = t;
            }
            a
        };
        assert_eq!(
            t,
            [
                "thumbv7em-none-eabihf",
                "thumbv8m.main-none-eabihf",
                "thumbv7m-none-eabi",
                "riscv32imac-unknown-none-elf",
                "riscv32imafc-unknown-none-elf",
                "thumbv6m-none-eabi",
                "",
                ""
            ]
        );
    }

    #[test]
    fn hard_float_follows_the_target() {
        let hf: [bool; 8] = core::array::from_fn(|i| BOARDS[i].hard_float());
        // m4f m7 m55 m3 rv32imac rv32imafc m33 m0
        assert_eq!(hf, [true, true, true, false, false, true, true, false]);
    }
}
