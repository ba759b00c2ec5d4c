//! Decides which tile kernels this target gets, once for the whole build:
//! `src/isa.rs` (included here, and a module of the crate) from the target
//! triple, `-C target-cpu` and the target features. This crate then builds
//! that assembly (`cfg(ferrite_kernels = "dsp" | "helium" | "v7m" | "v6m" |
//! "rv32" |
//! "portable")`), and the runtime's build script reads the same name from
//! this one (`links` metadata: `DEP_FERRITE_ASM_KERNELS`, and the list of
//! names as `DEP_FERRITE_ASM_NAMES`).
//!
//! `FERRITE_KERNELS=portable` in the build environment forces the portable
//! kernels (for comparisons); naming the target's own set is allowed too,
//! any other set is an error (its assembly would not run on this target).

use std::env;

#[allow(dead_code)]
mod isa {
    include!("src/isa.rs");
}

use isa::Kernels;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/isa.rs");
    println!("cargo::rerun-if-env-changed=FERRITE_KERNELS");

    let names: Vec<&str> = Kernels::ALL.iter().map(|k| k.name()).collect();
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(ferrite_kernels, values({}))",
        quoted.join(", ")
    );

    let target = env::var("TARGET").unwrap_or_default();
    let features = env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let cpu = target_cpu(&flags);
    let own = isa::choose(&target, cpu, &features);
    let chosen = match env::var("FERRITE_KERNELS") {
        Err(_) => own,
        Ok(forced) => match Kernels::from_name(&forced) {
            Some(k) if k == own || k == Kernels::Portable => k,
            Some(_) => panic!(
                "FERRITE_KERNELS={forced}: {target} gets the {} kernels; only those or `portable` can be forced",
                own.name()
            ),
            None => panic!("FERRITE_KERNELS={forced}: use one of {}", names.join(", ")),
        },
    };
    println!("cargo::rustc-cfg=ferrite_kernels=\"{}\"", chosen.name());
    println!("cargo::metadata=kernels={}", chosen.name());
    println!("cargo::metadata=names={}", names.join(","));
}

/// The `-C target-cpu` of encoded rustflags (`-C\x1ftarget-cpu=X` or
/// `-Ctarget-cpu=X`; the last one counts, as for rustc).
fn target_cpu(flags: &str) -> Option<&str> {
    let mut args = flags.split('\x1f');
    let mut cpu = None;
    while let Some(arg) = args.next() {
        let opt = if arg == "-C" {
            args.next().unwrap_or("")
        } else {
            arg.strip_prefix("-C").unwrap_or("")
        };
        cpu = opt.strip_prefix("target-cpu=").or(cpu);
    }
    cpu
}
