//! Build-time configuration of the firmware (`cargo xtask board` sets all of it):
//!
//! - feature `board-<name>`: exactly one; picks `memory/<name>.x` and the clock ratio;
//! - `FERRITE_IMAGE`: path of the `.fer` image that `generate` embeds in flash;
//! - `FERRITE_PROMPT` (default `"Once upon a time"`) and `FERRITE_N` (default 32):
//!   the prompt and the number of tokens `generate` produces.
//!
//! Writes `$OUT_DIR/model.fer` (the image, copied) and `$OUT_DIR/build_config.rs`.

use std::{env, fs, path::PathBuf};

/// (name, memory file, SysTick/instret instructions per tick as num/den,
/// heap of the OTA example in bytes).
/// Cortex-M SysTick on the core clock under `-icount shift=0` ticks once per
/// `1e9 / cpu_hz` instructions: mps2 25 MHz -> 40, mps3-an547 32 MHz -> 31.25,
/// lm3s6965evb 12.5 MHz (reset clock) -> 80 (measured with the `calibrate` binary). RISC-V reads `instret` directly.
const BOARDS: &[(&str, &str, u64, u64, usize)] = &[
    ("m4f", "m4f.x", 40, 1, 1 << 20),
    ("m7", "m7.x", 40, 1, 1 << 20),
    ("m55", "m55.x", 125, 4, 384 << 10),
    ("m3", "m3.x", 80, 1, 40 << 10),
    ("rv32imac", "rv32.x", 1, 1, 1 << 20),
    ("rv32imafc", "rv32.x", 1, 1, 1 << 20),
];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());

    let chosen: Vec<_> = BOARDS
        .iter()
        .filter(|(name, ..)| {
            env::var_os(format!("CARGO_FEATURE_BOARD_{}", name.to_uppercase())).is_some()
        })
        .collect();
    let &&(board, memory, num, den, heap) = match chosen.as_slice() {
        [one] => one,
        _ => panic!(
            "enable exactly one board-<name> feature (m4f, m7, m55, m3, rv32imac, rv32imafc)"
        ),
    };

    // Linker scripts: memory.x from the board, link.x from cortex-m-rt / riscv-rt.
    let mem = manifest.join("memory").join(memory);
    fs::copy(&mem, out.join("memory.x")).unwrap();
    println!("cargo:rerun-if-changed={}", mem.display());
    println!("cargo:rustc-link-search={}", out.display());
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    if arch == "riscv32" {
        println!("cargo:rustc-link-arg=-Tmemory.x");
    }
    println!("cargo:rustc-link-arg=-Tlink.x");
    if env::var_os("CARGO_FEATURE_DEFMT").is_some() {
        println!("cargo:rustc-link-arg=-Tdefmt.x");
    }

    // The image: copied so that include_bytes! has a fixed path.
    println!("cargo:rerun-if-env-changed=FERRITE_IMAGE");
    let image = match env::var_os("FERRITE_IMAGE") {
        Some(p) => {
            let p = PathBuf::from(p);
            println!("cargo:rerun-if-changed={}", p.display());
            fs::read(&p).unwrap_or_else(|e| panic!("FERRITE_IMAGE={}: {e}", p.display()))
        }
        None => Vec::new(), // `generate` then fails to build with "bad image"; `ota` needs none.
    };
    fs::write(out.join("model.fer"), &image).unwrap();

    println!("cargo:rerun-if-env-changed=FERRITE_PROMPT");
    println!("cargo:rerun-if-env-changed=FERRITE_N");
    let prompt = env::var("FERRITE_PROMPT").unwrap_or_else(|_| "Once upon a time".into());
    let n: usize = env::var("FERRITE_N")
        .map(|s| s.parse().expect("FERRITE_N must be a number"))
        .unwrap_or(32);
    assert!(!prompt.is_empty(), "FERRITE_PROMPT must not be empty");

    let config = format!(
        "/// Board name, as printed in the stats line.\n\
         pub const BOARD: &str = {board:?};\n\
         /// Prompt bytes (FERRITE_PROMPT).\n\
         pub const PROMPT: &[u8] = &{:?};\n\
         /// Tokens to generate (FERRITE_N).\n\
         pub const N: usize = {n};\n\
         /// Instructions per counter tick, as a fraction.\n\
         pub const INSTR_PER_TICK: (u64, u64) = ({num}, {den});\n\
         /// Heap of the OTA example, bytes.\n\
         pub const HEAP_BYTES: usize = {heap};\n",
        prompt.as_bytes()
    );
    fs::write(out.join("build_config.rs"), config).unwrap();
}
