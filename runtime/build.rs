//! Chooses the tile kernels of the integer path from the target (see
//! `src/kernels/mod.rs`): `cfg(ferrite_kernels = "dsp" | "helium" | "v7m" | "rv32" | "portable")`.
//! Stable Rust reports neither the DSP nor the MVE target feature to `cfg`,
//! so the choice reads the target triple and `-C target-cpu`. Also the
//! `fast-math` feature's module (`cfg(ferrite_fast_math = "int" | "float")`,
//! see `src/math.rs`).

use std::env;

fn main() {
    println!(
        "cargo::rustc-check-cfg=cfg(ferrite_kernels, values(\"dsp\", \"helium\", \"v7m\", \"rv32\", \"portable\"))"
    );
    println!("cargo::rerun-if-env-changed=FERRITE_KERNELS");
    let target = env::var("TARGET").unwrap_or_default();
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let cpu = flags
        .split('\x1f')
        .collect::<Vec<_>>()
        .windows(2)
        .find_map(|w| match (w[0], w[1]) {
            ("-C", opt) => opt.strip_prefix("target-cpu="),
            (opt, _) => opt.strip_prefix("-Ctarget-cpu="),
        })
        .unwrap_or("")
        .to_string();
    let chosen = if let Ok(forced) = env::var("FERRITE_KERNELS") {
        forced
    } else if target.starts_with("thumbv7em") {
        "dsp".into()
    } else if target.starts_with("thumbv8m.main") && cpu == "cortex-m55" {
        "helium".into()
    } else if target.starts_with("thumbv8m.main") && (cpu == "cortex-m33" || cpu == "cortex-m35p") {
        "dsp".into()
    } else if target.starts_with("thumbv7m") {
        "v7m".into()
    } else if target.starts_with("riscv32") {
        "rv32".into()
    } else {
        "portable".into()
    };
    assert!(
        matches!(
            chosen.as_str(),
            "dsp" | "helium" | "v7m" | "rv32" | "portable"
        ),
        "FERRITE_KERNELS={chosen}: use dsp, helium, v7m, rv32 or portable"
    );
    println!("cargo::rustc-cfg=ferrite_kernels=\"{chosen}\"");

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
