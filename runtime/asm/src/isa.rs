// Which tile kernels a target gets: the one place that decides it.
//
// This file is a module of the crate (`ferrite_asm::isa`, documented where
// lib.rs declares it) and is also `include!`d by this crate's build.rs, so
// it has no `//!` docs, no `use` of the crate and no dependencies.

/// A set of tile kernels: which assembly of this crate a target builds, and
/// which module runs the runtime's integer path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernels {
    /// `SMLAD`/`SXTB16` assembly, the DSP extension: Cortex-M4, M7, M33,
    /// M35P ([`crate::dsp`]).
    Dsp,
    /// `VMLAVA.S8` assembly, Helium (MVE): Cortex-M55 ([`crate::helium`]).
    Helium,
    /// `LDRSB`/`MLA` assembly: Cortex-M3, ARMv7-M without DSP ([`crate::v7m`]).
    V7m,
    /// `LDRSB`/`MULS`/`ADD` assembly: Cortex-M0 and M0+, ARMv6-M
    /// ([`crate::v6m`]).
    V6m,
    /// `LB`/`MUL`/`ADD` assembly: RV32 with the M extension ([`crate::rv32`]).
    Rv32,
    /// No assembly: the runtime's portable Rust.
    Portable,
}

impl Kernels {
    /// Every set.
    pub const ALL: [Kernels; 6] = [
        Kernels::Dsp,
        Kernels::Helium,
        Kernels::V7m,
        Kernels::V6m,
        Kernels::Rv32,
        Kernels::Portable,
    ];

    /// The set's one name: the value of `cfg(ferrite_kernels)` in this
    /// crate and the runtime, of `FERRITE_KERNELS`, and of
    /// `ferrite::kernels::arch::NAME`.
    pub const fn name(self) -> &'static str {
        match self {
            Kernels::Dsp => "dsp",
            Kernels::Helium => "helium",
            Kernels::V7m => "v7m",
            Kernels::V6m => "v6m",
            Kernels::Rv32 => "rv32",
            Kernels::Portable => "portable",
        }
    }

    /// The set called `name` (see [`Kernels::name`]).
    pub fn from_name(name: &str) -> Option<Kernels> {
        Kernels::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the set has assembly in this crate.
    pub const fn has_asm(self) -> bool {
        !matches!(self, Kernels::Portable)
    }
}

/// The kernels a build for `target` gets: `target` is the target triple
/// (cargo's `TARGET`), `cpu` the `-C target-cpu` given (`None`: the
/// target's default), `features` the target features as cargo hands them to
/// build scripts (`CARGO_CFG_TARGET_FEATURE`, comma-separated).
///
/// Stable Rust reports neither Arm's DSP nor its MVE extension as a target
/// feature, so Arm cores are told apart by triple and CPU: `thumbv7em`
/// (M4, M7) and `thumbv8m.main` with `cortex-m33` or `cortex-m35p` get
/// [`Kernels::Dsp`], `thumbv8m.main` with `cortex-m55` [`Kernels::Helium`],
/// `thumbv7m` (M3) [`Kernels::V7m`], `thumbv6m` (M0, M0+) [`Kernels::V6m`]. RISC-V reports its extensions: an RV32I
/// target with `m` gets [`Kernels::Rv32`] (not RV32E, whose 16 registers
/// the assembly does not fit in). Everything else, [`Kernels::Portable`].
pub fn choose(target: &str, cpu: Option<&str>, features: &str) -> Kernels {
    let has_m = features.split(',').any(|f| f == "m");
    decide(target, cpu, has_m)
}

/// [`choose`] for a target with its default features, from its triple
/// alone: what a table of targets (xtask, `ferrite-common`) derives its
/// kernel column with. A RISC-V triple names its base extensions
/// (`riscv32imac`: I, M, A, C; `g`: IMAFD), which are the features the
/// target reports; the tests check that against `rustc --print cfg`.
pub fn for_target(target: &str, cpu: Option<&str>) -> Kernels {
    decide(target, cpu, riscv_base_has_m(target))
}

/// The decision, with the M extension already known.
fn decide(target: &str, cpu: Option<&str>, has_m: bool) -> Kernels {
    let cpu = cpu.unwrap_or("");
    if target.starts_with("thumbv7em") {
        Kernels::Dsp
    } else if target.starts_with("thumbv8m.main") {
        match cpu {
            "cortex-m55" => Kernels::Helium,
            "cortex-m33" | "cortex-m35p" => Kernels::Dsp,
            _ => Kernels::Portable,
        }
    } else if target.starts_with("thumbv7m") {
        Kernels::V7m
    } else if target.starts_with("thumbv6m") {
        Kernels::V6m
    } else if target.starts_with("riscv32") && !target.starts_with("riscv32e") && has_m {
        Kernels::Rv32
    } else {
        Kernels::Portable
    }
}

/// Whether a RISC-V triple's base ISA string (`riscv32imac` in
/// `riscv32imac-unknown-none-elf`) includes M.
fn riscv_base_has_m(target: &str) -> bool {
    let arch = target.split('-').next().unwrap_or("");
    let base = arch
        .strip_prefix("riscv32")
        .or_else(|| arch.strip_prefix("riscv64"))
        .unwrap_or("");
    let letters = base.split('_').next().unwrap_or("");
    letters.contains('m') || letters.contains('g')
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::string::String;
    use std::vec::Vec;

    /// Every target and CPU of the board and chip tables
    /// (common/src/board.rs, common/src/chip.rs), a bare RV32I, and a host,
    /// with what `rustc --print cfg` reports as their features and the
    /// kernels they get.
    const TARGETS: &[(&str, &str, Option<&str>, &str, Kernels)] = &[
        ("m4f", "thumbv7em-none-eabihf", None, "", Kernels::Dsp),
        ("m7", "thumbv7em-none-eabihf", None, "", Kernels::Dsp),
        (
            "m55",
            "thumbv8m.main-none-eabihf",
            Some("cortex-m55"),
            "",
            Kernels::Helium,
        ),
        ("m3", "thumbv7m-none-eabi", None, "", Kernels::V7m),
        (
            "rv32imac",
            "riscv32imac-unknown-none-elf",
            None,
            "a,c,m,zaamo,zalrsc,zca",
            Kernels::Rv32,
        ),
        (
            "rv32imafc",
            "riscv32imafc-unknown-none-elf",
            None,
            "a,c,m,zaamo,zalrsc,zca,zicsr",
            Kernels::Rv32,
        ),
        (
            "m33",
            "thumbv8m.main-none-eabihf",
            Some("cortex-m33"),
            "",
            Kernels::Dsp,
        ),
        ("m0", "thumbv6m-none-eabi", None, "", Kernels::V6m),
        ("m3-mps2", "thumbv7m-none-eabi", None, "", Kernels::V7m),
        (
            "rp2350",
            "thumbv8m.main-none-eabihf",
            Some("cortex-m33"),
            "",
            Kernels::Dsp,
        ),
        (
            "rp2350-riscv",
            "riscv32imac-unknown-none-elf",
            None,
            "a,c,m,zaamo,zalrsc,zca",
            Kernels::Rv32,
        ),
        ("nrf52840", "thumbv7em-none-eabihf", None, "", Kernels::Dsp),
        ("stm32f411", "thumbv7em-none-eabihf", None, "", Kernels::Dsp),
        (
            "esp32c3",
            "riscv32imc-unknown-none-elf",
            None,
            "c,m,zca",
            Kernels::Rv32,
        ),
        (
            "riscv32i",
            "riscv32i-unknown-none-elf",
            None,
            "",
            Kernels::Portable,
        ),
        (
            "host",
            "x86_64-unknown-linux-gnu",
            None,
            "fxsr,sse,sse2",
            Kernels::Portable,
        ),
    ];

    #[test]
    fn every_table_target_gets_its_kernels() {
        for &(name, target, cpu, features, want) in TARGETS {
            assert_eq!(choose(target, cpu, features), want, "{name}");
            assert_eq!(for_target(target, cpu), want, "{name} from the triple");
        }
    }

    #[test]
    fn the_m_extension_decides_rv32_not_the_triple() {
        // riscv32i with `-C target-feature=+m`.
        let (t, none) = ("riscv32i-unknown-none-elf", None);
        assert_eq!(choose(t, none, "m"), Kernels::Rv32);
        assert_eq!(choose(t, none, ""), Kernels::Portable);
        // `-C target-feature=-m` on a target that has it.
        assert_eq!(
            choose("riscv32imac-unknown-none-elf", none, "a,c"),
            Kernels::Portable
        );
        // RV32E: 16 registers, fewer than the assembly uses.
        assert_eq!(
            choose("riscv32emc-unknown-none-elf", none, "c,e,m"),
            Kernels::Portable
        );
        assert_eq!(
            for_target("riscv32emc-unknown-none-elf", none),
            Kernels::Portable
        );
        // `g` is IMAFD; RV64 has no kernels of its own.
        assert!(riscv_base_has_m("riscv32gc-unknown-linux-gnu"));
        assert_eq!(
            for_target("riscv64gc-unknown-none-elf", none),
            Kernels::Portable
        );
    }

    #[test]
    fn armv8m_needs_a_cpu_to_get_assembly() {
        let v8 = "thumbv8m.main-none-eabihf";
        assert_eq!(choose(v8, None, ""), Kernels::Portable);
        assert_eq!(choose(v8, Some("cortex-m35p"), ""), Kernels::Dsp);
        assert_eq!(
            choose("thumbv8m.base-none-eabi", Some("cortex-m23"), ""),
            Kernels::Portable
        );
    }

    #[test]
    fn names_are_unique_and_read_back() {
        for k in Kernels::ALL {
            assert_eq!(Kernels::from_name(k.name()), Some(k));
            assert_eq!(k.has_asm(), k != Kernels::Portable);
        }
        let mut names: Vec<&str> = Kernels::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Kernels::ALL.len());
        assert_eq!(Kernels::from_name("mve"), None);
    }

    /// With the features rustc really reports for each target, `choose`
    /// gives what `for_target` reads from the triple (so a table derived
    /// with `for_target` says what a build gets).
    #[test]
    fn choose_with_what_rustc_reports_agrees_with_the_triple() {
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| String::from("rustc"));
        for &(name, target, cpu, _, want) in TARGETS {
            let mut cmd = std::process::Command::new(&rustc);
            cmd.args(["--print", "cfg", "--target", target]);
            if let Some(cpu) = cpu {
                cmd.arg(std::format!("-Ctarget-cpu={cpu}"));
            }
            let out = cmd.output().expect("rustc runs");
            assert!(out.status.success(), "rustc --print cfg --target {target}");
            let text = String::from_utf8(out.stdout).unwrap();
            let reported: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("target_feature=\""))
                .filter_map(|f| f.strip_suffix('"'))
                .collect();
            let reported = reported.join(",");
            assert_eq!(
                choose(target, cpu, &reported),
                want,
                "{name} ({target}): rustc reports `{reported}`"
            );
        }
    }
}
