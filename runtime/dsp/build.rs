//! Assembles the kernels only for cores with the DSP extension:
//! thumbv7em (Cortex-M4/M7) and thumbv8m.main with `-C target-cpu`
//! cortex-m33/m35p/m55. Stable Rust does not report the `dsp` target
//! feature to `cfg`, so this reads the target triple and the CPU.

use std::env;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ferrite_dsp_asm)");
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
    let dsp = target.starts_with("thumbv7em")
        || (target.starts_with("thumbv8m.main")
            && matches!(cpu, "cortex-m33" | "cortex-m35p" | "cortex-m55"));
    if dsp {
        println!("cargo::rustc-cfg=ferrite_dsp_asm");
    }
}
