//! Build-time configuration of the chip firmware (`cargo xtask chip` sets it):
//!
//! - the chip: the one chip feature enabled (`rp2350`, `nrf52840`, ...; a
//!   name of the chip table, `ferrite_common::chip`), which picks the memory
//!   map `memory/<chip>.x` and the linker scripts (or `host` alone: the
//!   library's tests on the host);
//! - `FERRITE_IMAGE`: the `.fer` image to embed in flash (copied to
//!   `$OUT_DIR/model.fer`);
//! - `FERRITE_PROMPT` (default `Once upon a time`), `FERRITE_N` (32), and
//!   the sampler `FERRITE_TEMPERATURE` (0 = greedy), `FERRITE_TOP_K`,
//!   `FERRITE_TOP_P`, `FERRITE_SEED`, as for the QEMU boards.
//!
//! Writes `$OUT_DIR/model.fer`, `$OUT_DIR/memory.x` and
//! `$OUT_DIR/build_config.rs`.

use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());

    // The chip: exactly one chip feature.
    let chips: Vec<_> = ferrite_common::chip::CHIPS
        .iter()
        .filter(|c| {
            let feature = format!("CARGO_FEATURE_{}", c.name.to_uppercase().replace('-', "_"));
            env::var_os(feature).is_some()
        })
        .collect();
    let names = || ferrite_common::chip::names().collect::<Vec<_>>().join(", ");
    let host = env::var_os("CARGO_FEATURE_HOST").is_some();
    let chip = match chips.as_slice() {
        [c] => Some(*c),
        // The library's own tests, on the host: no chip.
        [] if host => None,
        [] => panic!(
            "enable one chip feature ({}); `cargo xtask chip` does",
            names()
        ),
        _ => panic!("enable only one chip feature"),
    };

    // Linker scripts for the chips with a map here: memory.x +
    // cortex-m-rt's / riscv-rt's link.x + defmt's. (A chip whose HAL brings
    // its own scripts links them from its own package's build script.)
    if let Some(memory) = chip.and_then(|c| c.memory) {
        let mem = manifest.join("memory").join(memory);
        fs::copy(&mem, out.join("memory.x")).unwrap();
        println!("cargo:rerun-if-changed={}", mem.display());
        println!("cargo:rustc-link-search={}", out.display());
        // riscv-rt's link.x wants the map (with its REGION_ALIAS lines) first.
        if env::var("CARGO_CFG_TARGET_ARCH").unwrap() == "riscv32" {
            println!("cargo:rustc-link-arg=-Tmemory.x");
        }
        println!("cargo:rustc-link-arg=-Tlink.x");
        println!("cargo:rustc-link-arg=-Tdefmt.x");
    }

    // The image, copied so that include_bytes! has a fixed path.
    println!("cargo:rerun-if-env-changed=FERRITE_IMAGE");
    let image = match env::var_os("FERRITE_IMAGE") {
        Some(p) => {
            let p = PathBuf::from(p);
            println!("cargo:rerun-if-changed={}", p.display());
            fs::read(&p).unwrap_or_else(|e| panic!("FERRITE_IMAGE={}: {e}", p.display()))
        }
        None => Vec::new(), // the firmware then fails to build with "bad image".
    };
    fs::write(out.join("model.fer"), &image).unwrap();

    println!("cargo:rerun-if-env-changed=FERRITE_PROMPT");
    let prompt = env::var("FERRITE_PROMPT").unwrap_or_else(|_| "Once upon a time".into());
    assert!(!prompt.is_empty(), "FERRITE_PROMPT must not be empty");
    let n: usize = number("FERRITE_N", 32);
    assert!(n >= 1, "FERRITE_N must be at least 1");
    let temperature: f32 = number("FERRITE_TEMPERATURE", 0.0);
    let top_k: usize = number("FERRITE_TOP_K", 0);
    let top_p: f32 = number("FERRITE_TOP_P", 1.0);
    let seed: u64 = number("FERRITE_SEED", 0);

    let config = format!(
        "/// Chip name (the chip table's), as printed on the `run:` line.\n\
         pub const CHIP: &str = {name:?};\n\
         /// The tile kernels the chip table says its core gets.\n\
         pub const EXPECTED_KERNELS: &str = {kernels:?};\n\
         /// Core clock the firmware sets up, Hz.\n\
         pub const CLOCK_HZ: u32 = {clock};\n\
         /// Prompt bytes (FERRITE_PROMPT).\n\
         pub const PROMPT: &[u8] = &{prompt:?};\n\
         /// Tokens to generate (FERRITE_N).\n\
         pub const N: usize = {n};\n\
         /// The sampler (FERRITE_TEMPERATURE, _TOP_K, _TOP_P, _SEED).\n\
         pub const SAMPLER: ferrite::SamplerConfig = ferrite::SamplerConfig {{ temperature: {temperature:?}, top_k: {top_k}, top_p: {top_p:?}, seed: {seed} }};\n",
        // The host: the portable kernels, a 1 MHz counter.
        name = chip.map_or("host", |c| c.name),
        kernels = chip.map_or("portable", |c| c.kernels),
        clock = chip.map_or(1_000_000, |c| c.clock_hz),
        prompt = prompt.as_bytes(),
    );
    fs::write(out.join("build_config.rs"), config).unwrap();
}

/// A number from the environment variable `name` (rebuilding when it changes), or `default`.
fn number<T: std::str::FromStr>(name: &str, default: T) -> T {
    println!("cargo:rerun-if-env-changed={name}");
    match env::var(name) {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("{name}={s:?} is not a valid number")),
        Err(_) => default,
    }
}
