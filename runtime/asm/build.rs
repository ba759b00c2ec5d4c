//! Which assembly this target gets (`cfg(ferrite_asm = "dsp" | "mve")`):
//! the DSP kernels for thumbv7em (Cortex-M4/M7) and thumbv8m.main with
//! `-C target-cpu=cortex-m33/m35p`, the Helium (MVE) kernels for
//! thumbv8m.main with `target-cpu=cortex-m55`, the plain Thumb-2 kernels
//! for thumbv7m (Cortex-M3), the RV32IM kernels for riscv32, none elsewhere. Stable Rust
//! reports neither extension to `cfg`, so this reads the triple and the CPU.

use std::env;

fn main() {
    println!(
        "cargo::rustc-check-cfg=cfg(ferrite_asm, values(\"dsp\", \"mve\", \"v7m\", \"rv32\"))"
    );
    let target = env::var("TARGET").unwrap_or_default();
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let args: Vec<&str> = flags.split('\x1f').collect();
    let cpu = args
        .windows(2)
        .find_map(|w| match (w[0], w[1]) {
            ("-C", opt) => opt.strip_prefix("target-cpu="),
            (opt, _) => opt.strip_prefix("-Ctarget-cpu="),
        })
        .unwrap_or("");
    let v8m = target.starts_with("thumbv8m.main");
    if v8m && cpu == "cortex-m55" {
        println!("cargo::rustc-cfg=ferrite_asm=\"mve\"");
    } else if target.starts_with("thumbv7em")
        || (v8m && matches!(cpu, "cortex-m33" | "cortex-m35p"))
    {
        println!("cargo::rustc-cfg=ferrite_asm=\"dsp\"");
    } else if target.starts_with("thumbv7m") {
        println!("cargo::rustc-cfg=ferrite_asm=\"v7m\"");
    } else if target.starts_with("riscv32") {
        println!("cargo::rustc-cfg=ferrite_asm=\"rv32\"");
    }
}
