//! The tile kernels of the integer path (see `src/kernels/mod.rs`),
//! `cfg(ferrite_kernels = "...")`: not decided here but read from
//! `ferrite-asm`'s build script, which makes the one decision
//! (`ferrite_asm::isa::choose`, and `FERRITE_KERNELS`) and hands its name
//! over as `links` metadata (`DEP_FERRITE_ASM_KERNELS`, the names as
//! `DEP_FERRITE_ASM_NAMES`). Also whether f32 is in hardware
//! (`cfg(ferrite_hard_float)`) and the `fast-math` feature's module
//! (`cfg(ferrite_fast_math = "int" | "float")`, see `src/math.rs`).

use std::env;

fn main() {
    // What ferrite-asm decided (set for this build script because
    // ferrite-asm declares `links = "ferrite-asm"`).
    let dep = |key: &str| {
        env::var(format!("DEP_FERRITE_ASM_{key}")).unwrap_or_else(|_| {
            panic!("DEP_FERRITE_ASM_{key} is not set: ferrite-asm's build script names the kernels")
        })
    };
    let names: Vec<String> = dep("NAMES")
        .split(',')
        .map(|n| format!("\"{n}\""))
        .collect();
    println!(
        "cargo::rustc-check-cfg=cfg(ferrite_kernels, values({}))",
        names.join(", ")
    );
    println!("cargo::rustc-cfg=ferrite_kernels=\"{}\"", dep("KERNELS"));

    let target = env::var("TARGET").unwrap_or_default();
    // f32 in hardware: Arm hard-float ABIs, RISC-V with F, and the hosts.
    // (The activation quantizer then multiplies in f32; see kernels::tiled.)
    println!("cargo::rustc-check-cfg=cfg(ferrite_hard_float)");
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let hard_float = target.ends_with("eabihf")
        || (arch == "riscv32" && target.starts_with("riscv32imaf"))
        || matches!(arch.as_str(), "x86_64" | "x86" | "aarch64");
    if hard_float {
        println!("cargo::rustc-cfg=ferrite_hard_float");
    }

    // The `fast-math` feature's exp/sigmoid/silu (see src/math.rs): integer
    // arithmetic where f32 is soft float or `fast-math-int` asks for it,
    // f32 polynomials where f32 is in hardware.
    println!("cargo::rustc-check-cfg=cfg(ferrite_fast_math, values(\"int\", \"float\"))");
    let fast = env::var_os("CARGO_FEATURE_FAST_MATH").is_some();
    let force_int = env::var_os("CARGO_FEATURE_FAST_MATH_INT").is_some();
    if force_int || (fast && !hard_float) {
        println!("cargo::rustc-cfg=ferrite_fast_math=\"int\"");
    } else if fast {
        println!("cargo::rustc-cfg=ferrite_fast_math=\"float\"");
    }

    // Measurement only: `FERRITE_MATH_NOINLINE=1` keeps the functions of
    // `math` out of line, so that a profile (`cargo xtask profile
    // --math-calls`) shows each as its own function with its calls. Same
    // arithmetic, a call more per use.
    println!("cargo::rustc-check-cfg=cfg(ferrite_math_noinline)");
    println!("cargo::rerun-if-env-changed=FERRITE_MATH_NOINLINE");
    if env::var("FERRITE_MATH_NOINLINE").is_ok_and(|v| v == "1") {
        println!("cargo::rustc-cfg=ferrite_math_noinline");
    }
}
