//! Build-time configuration of the firmware (`cargo xtask board|chip` sets all of it):
//!
//! - the target: the one target feature enabled (`m4f`, `rp2350`, ...; a
//!   row of the target table, `ferrite_common::target`, in
//!   `common/src/target.rs`), which picks its memory map, counter and update
//!   slot (or `host` alone: the library's tests on the host);
//! - `FERRITE_IMAGE`: path of the `.fer` image the firmware embeds in flash;
//! - `FERRITE_PROMPT` (default `"Once upon a time"`) and `FERRITE_N` (default 32):
//!   the prompt and the number of tokens `generate` produces (for `eval --mqar`:
//!   the number of sequences);
//! - `FERRITE_SNAPSHOT`: path of a snapshot (`ferrite bake`) that `generate`
//!   restores and starts from instead of feeding the prompt (unset: none;
//!   docs/snapshot-format.md, "Baked prompts"), embedded as a second blob;
//!   `FERRITE_SNAPSHOT_AT` (default 0 = never): `generate` also writes a
//!   snapshot of its stream after this many generated tokens, in hex on a
//!   `snapshot:` line (for the host to go on from);
//! - `FERRITE_TEMPERATURE` (default 0 = greedy), `FERRITE_TOP_K` (0), `FERRITE_TOP_P` (1),
//!   `FERRITE_SEED` (0): `generate`'s sampler, as `ferrite generate` takes them;
//! - `FERRITE_MEMORY` (0): the baked memory `generate` selects in every
//!   `cross` layer before the prompt (`ferrite generate --memory`; 0 selects
//!   nothing, the session's memory 0; a baked snapshot keeps its own);
//! - `eval`: `FERRITE_TEXT` (a file: score its bits per byte; unset: MQAR),
//!   `FERRITE_CHUNK` (512, state reset every N tokens), `FERRITE_MQAR_SEED` (0),
//!   `FERRITE_MQAR_PAIRS` (8), `FERRITE_MQAR_SEQ_LEN` (64);
//! - `ota`: `FERRITE_TRUSTED_KEYS`, the Ed25519 public keys it trusts (64 hex
//!   digits each, comma-separated; with the `verify` feature it runs only
//!   models signed by one of them, docs/signing.md);
//! - `bench`: `FERRITE_BENCH`, the matrix-vector cases to time, as
//!   `dtype:ROWSxCOLS` separated by commas (dtype `int8`, `int4` or `f32`;
//!   default [`BENCH_DEFAULT`]). Their weights are generated here
//!   (splitmix64, fixed seed) and embedded in flash.
//!
//! Writes `$OUT_DIR/model.fer` (the image, copied), `$OUT_DIR/snapshot.bin`
//! (the snapshot, empty without one), `$OUT_DIR/text.bin` (the
//! text to score, empty for MQAR), the `bench` weights (`bench_*.bin`),
//! `$OUT_DIR/memory.x` and `$OUT_DIR/build_config.rs`.

use std::{env, fs, path::PathBuf};

use ferrite_common::target::{Kind, Memory, Target, TARGETS};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());

    // The target: exactly one target feature.
    let enabled: Vec<&Target> = TARGETS
        .iter()
        .filter(|t| {
            let feature = format!("CARGO_FEATURE_{}", t.name.to_uppercase().replace('-', "_"));
            env::var_os(feature).is_some()
        })
        .collect();
    let names = || {
        ferrite_common::target::names()
            .collect::<Vec<_>>()
            .join(", ")
    };
    let target = match enabled.as_slice() {
        [t] => Some(*t),
        // The library's own tests, on the host: no target.
        [] if env::var_os("CARGO_FEATURE_HOST").is_some() => None,
        [] => panic!(
            "enable one target feature ({}); `cargo xtask board|chip` does",
            names()
        ),
        _ => panic!("enable only one target feature ({})", names()),
    };

    // The table's `-C target-cpu` is the build's (the runtime picks its
    // kernels from it, and the table's kernels column is derived from it).
    if let Some(t) = target {
        let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
        let cpu = flags
            .split('\x1f')
            .find_map(|f| f.trim_start_matches("-C").strip_prefix("target-cpu="));
        assert!(
            cpu == t.cpu,
            "{} is built with -C target-cpu={} (the target table's); this build has {cpu:?} (`cargo xtask board|chip` passes it)",
            t.name,
            t.cpu.unwrap_or("<none>")
        );
    }

    // Linker scripts: memory.x from the target's map, link.x from
    // cortex-m-rt / riscv-rt, defmt.x for defmt. (A chip whose HAL brings
    // its own scripts links them from its own package's build script.)
    let mut ram_bytes = 0;
    match target.map(|t| t.memory) {
        Some(Memory::Map(file)) => {
            let mem = manifest.join("memory").join(file);
            fs::copy(&mem, out.join("memory.x")).unwrap();
            let text = fs::read_to_string(&mem).unwrap();
            ram_bytes = ferrite_common::target::region_length(&text, "RAM")
                .unwrap_or_else(|| panic!("{}: no RAM region LENGTH", mem.display()));
            println!("cargo:rerun-if-changed={}", mem.display());
            println!("cargo:rustc-link-search={}", out.display());
            // riscv-rt's link.x wants the map (with its REGION_ALIAS lines) first.
            if env::var("CARGO_CFG_TARGET_ARCH").unwrap() == "riscv32" {
                println!("cargo:rustc-link-arg=-Tmemory.x");
            }
            println!("cargo:rustc-link-arg=-Tlink.x");
            // cortex-m-rt's `device` feature (QEMU Arm boards: one interrupt
            // vector, platform/qemu_arm.rs) includes device.x: no handlers.
            if env::var_os("CARGO_FEATURE__QEMU_ARM").is_some() {
                fs::write(out.join("device.x"), "").unwrap();
            }
            if env::var_os("CARGO_FEATURE_DEFMT").is_some()
                || env::var_os("CARGO_FEATURE__RTT").is_some()
            {
                println!("cargo:rustc-link-arg=-Tdefmt.x");
            }
        }
        Some(Memory::Hal { ram, .. }) => ram_bytes = ram,
        None => {}
    }

    // The image and the text `eval` scores (empty: MQAR), copied so that
    // include_bytes! has a fixed path. Without an image the firmware fails
    // to build with "bad image".
    fs::write(out.join("model.fer"), file_var("FERRITE_IMAGE")).unwrap();
    fs::write(out.join("snapshot.bin"), file_var("FERRITE_SNAPSHOT")).unwrap();
    let text = file_var("FERRITE_TEXT");
    assert!(text.len() != 1, "FERRITE_TEXT needs at least 2 bytes");
    fs::write(out.join("text.bin"), &text).unwrap();

    println!("cargo:rerun-if-env-changed=FERRITE_PROMPT");
    let prompt = env::var("FERRITE_PROMPT").unwrap_or_else(|_| "Once upon a time".into());
    assert!(!prompt.is_empty(), "FERRITE_PROMPT must not be empty");
    let n: usize = number("FERRITE_N", 32);
    let snapshot_at: usize = number("FERRITE_SNAPSHOT_AT", 0);
    assert!(
        snapshot_at < n.max(1),
        "FERRITE_SNAPSHOT_AT must be below FERRITE_N (0: no snapshot)"
    );
    let temperature: f32 = number("FERRITE_TEMPERATURE", 0.0);
    let top_k: usize = number("FERRITE_TOP_K", 0);
    let top_p: f32 = number("FERRITE_TOP_P", 1.0);
    let seed: u64 = number("FERRITE_SEED", 0);
    let memory: u32 = number("FERRITE_MEMORY", 0);
    let chunk: usize = number("FERRITE_CHUNK", 512);
    assert!(chunk >= 2, "FERRITE_CHUNK must be at least 2");
    let mqar_seed: u64 = number("FERRITE_MQAR_SEED", 0);
    let pairs: usize = number("FERRITE_MQAR_PAIRS", 8);
    let seq_len: usize = number("FERRITE_MQAR_SEQ_LEN", 64);
    assert!(
        (1..=64).contains(&pairs) && seq_len >= 4 * pairs,
        "MQAR needs 1 <= pairs <= 64 and seq_len >= 4 * pairs"
    );

    let bench = bench_weights(&out);
    let trusted_keys = trusted_keys();

    let mut config = format!(
        "/// The target's name (the target table's), as printed on the `run:` line.\n\
         pub const NAME: &str = {name:?};\n\
         /// Prompt bytes (FERRITE_PROMPT).\n\
         pub const PROMPT: &[u8] = &{prompt:?};\n\
         /// Tokens to generate, or MQAR sequences to score (FERRITE_N).\n\
         pub const N: usize = {n};\n\
         /// `generate` writes a snapshot after this many tokens (FERRITE_SNAPSHOT_AT; 0: never).\n\
         pub const SNAPSHOT_AT: usize = {snapshot_at};\n\
         /// The sampler of `generate` (FERRITE_TEMPERATURE, _TOP_K, _TOP_P, _SEED).\n\
         pub const SAMPLER: ferrite::SamplerConfig = ferrite::SamplerConfig {{ temperature: {temperature:?}, top_k: {top_k}, top_p: {top_p:?}, seed: {seed} }};\n\
         /// The baked memory `generate` selects in every cross layer before the prompt (FERRITE_MEMORY; 0: none selected, memory 0).\n\
         pub const MEMORY: u32 = {memory};\n\
         /// Whether `eval` scores a text (FERRITE_TEXT) rather than MQAR.\n\
         pub const EVAL_TEXT: bool = {eval_text};\n\
         /// State reset every CHUNK tokens when scoring a text (FERRITE_CHUNK).\n\
         pub const CHUNK: usize = {chunk};\n\
         /// MQAR seed (FERRITE_MQAR_SEED).\n\
         pub const MQAR_SEED: u64 = {mqar_seed};\n\
         /// MQAR key-value pairs per sequence (FERRITE_MQAR_PAIRS).\n\
         pub const MQAR_PAIRS: usize = {pairs};\n\
         /// MQAR sequence length (FERRITE_MQAR_SEQ_LEN).\n\
         pub const MQAR_SEQ_LEN: usize = {seq_len};\n\
         /// RAM of the target's memory map, bytes.\n\
         pub const RAM_BYTES: usize = {ram_bytes};\n\
         /// The `bench` cases (FERRITE_BENCH): (dtype, rows, cols).\n\
         pub const BENCH: &[(&str, usize, usize)] = &{bench:?};\n\
         /// Columns of a group of the `bench` int4 weights (int8: one group per row).\n\
         pub const BENCH_INT4_GROUP: usize = {BENCH_INT4_GROUP};\n\
         /// The public keys the `ota` firmware trusts (FERRITE_TRUSTED_KEYS).\n\
         pub const TRUSTED_KEYS: &[[u8; 32]] = &{trusted_keys:?};\n",
        name = target.map_or("host", |t| t.name),
        prompt = prompt.as_bytes(),
        eval_text = !text.is_empty(),
    );
    let clock = |hz: u32| {
        format!("/// Core clock the firmware sets up, Hz.\npub const CLOCK_HZ: u32 = {hz};\n")
    };
    config += &match target.map(|t| t.kind) {
        Some(Kind::Qemu(q)) => format!(
            "/// Instructions per counter tick, as a fraction.\n\
             pub const INSTR_PER_TICK: (u64, u64) = {:?};\n\
             /// The `ota` firmware's update slot, bytes.\n\
             pub const UPDATE_SLOT_BYTES: usize = {};\n\
             /// RAM the `ota` firmware reserves for an update's session, bytes.\n\
             pub const UPDATE_SESSION_BYTES: usize = {};\n",
            q.instr_per_tick, q.update_slot, q.update_session
        ),
        Some(Kind::Chip(c)) => clock(c.clock_hz),
        // The host: a 1 MHz counter.
        None => clock(1_000_000),
    };
    fs::write(out.join("build_config.rs"), config).unwrap();
}

/// The content of the file that the environment variable `name` names
/// (empty when unset), rebuilding when either changes.
fn file_var(name: &str) -> Vec<u8> {
    println!("cargo:rerun-if-env-changed={name}");
    let Some(p) = env::var_os(name).map(PathBuf::from) else {
        return Vec::new();
    };
    println!("cargo:rerun-if-changed={}", p.display());
    fs::read(&p).unwrap_or_else(|e| panic!("{name}={}: {e}", p.display()))
}

/// `FERRITE_TRUSTED_KEYS`: Ed25519 public keys, 64 hex digits each,
/// separated by commas (none when unset).
fn trusted_keys() -> Vec<[u8; 32]> {
    println!("cargo:rerun-if-env-changed=FERRITE_TRUSTED_KEYS");
    let text = env::var("FERRITE_TRUSTED_KEYS").unwrap_or_default();
    text.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| {
            let bad = || -> ! { panic!("FERRITE_TRUSTED_KEYS: {k:?} is not 64 hex digits") };
            if k.len() != 64 || !k.is_ascii() {
                bad()
            }
            let mut key = [0u8; 32];
            for (i, b) in key.iter_mut().enumerate() {
                *b = u8::from_str_radix(&k[2 * i..2 * i + 2], 16).unwrap_or_else(|_| bad());
            }
            key
        })
        .collect()
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

/// The `bench` firmware's cases when `FERRITE_BENCH` is unset (what
/// `cargo xtask bench-kernels` runs where they fit).
const BENCH_DEFAULT: &str = "int8:256x256,int8:64x512,int8:1024x64,\
int4:256x256,int4:64x512,int4:1024x64,f32:256x256,f32:64x512,f32:1024x64";

/// Columns of an int4 group in the `bench` weights (int8: one group per row).
const BENCH_INT4_GROUP: usize = 32;

use ferrite_common::mqar::SplitMix64;

/// A float in `[lo, hi)` from the next draw of `rng`.
fn uniform(rng: &mut SplitMix64, lo: f32, hi: f32) -> f32 {
    lo + (hi - lo) * ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
}

/// Parses `FERRITE_BENCH` and writes the weights its cases read: one blob
/// per dtype, as large as its largest case (smaller cases read a prefix), in
/// the runtime's layouts: `bench_i8.bin` (tiled int8), `bench_i4.bin` (tiled
/// int4), `bench_f32.bin` (row-major f32 in [-0.25, 0.25)), `bench_d.bin`
/// (f32 row scales in [0.001, 0.01)) and `bench_m.bin` (u8 multipliers,
/// 1..=255). Random bytes are valid tiled weights, padding rows included.
fn bench_weights(out: &std::path::Path) -> Vec<(String, usize, usize)> {
    println!("cargo:rerun-if-env-changed=FERRITE_BENCH");
    let spec = env::var("FERRITE_BENCH").unwrap_or_else(|_| BENCH_DEFAULT.into());
    let mut cases = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bad = || -> ! {
            panic!(
                "FERRITE_BENCH: bad case {item:?} (want dtype:ROWSxCOLS, dtype int8, int4 or f32)"
            )
        };
        let (dtype, shape) = item.split_once(':').unwrap_or_else(|| bad());
        let (rows, cols) = shape.split_once('x').unwrap_or_else(|| bad());
        let (rows, cols): (usize, usize) = match (rows.parse(), cols.parse()) {
            (Ok(r), Ok(c)) if r > 0 && c > 0 => (r, c),
            _ => bad(),
        };
        match dtype {
            "int8" => assert!(
                cols % 16 == 0 && cols <= 4096,
                "FERRITE_BENCH {item}: int8 columns (one group per row) are a multiple of 16, at most 4096"
            ),
            "int4" => assert!(
                cols % BENCH_INT4_GROUP == 0,
                "FERRITE_BENCH {item}: int4 columns are a multiple of the group, {BENCH_INT4_GROUP}"
            ),
            "f32" => {}
            _ => bad(),
        }
        cases.push((dtype.to_string(), rows, cols));
    }
    let padded = |rows: usize| rows.div_ceil(4) * 4;
    let most = |dtype: &str, size: &dyn Fn(usize, usize) -> usize| {
        cases
            .iter()
            .filter(|(d, ..)| d == dtype)
            .map(|&(_, r, c)| size(r, c))
            .max()
            .unwrap_or(0)
    };
    let i8_bytes = most("int8", &|r, c| padded(r) * c);
    let i4_bytes = most("int4", &|r, c| padded(r) * c / 2);
    let f32_len = most("f32", &|r, c| r * c);
    let d_len = most("int8", &|r, _| padded(r)).max(most("int4", &|r, _| padded(r)));
    let m_len =
        most("int8", &|r, _| padded(r)).max(most("int4", &|r, c| padded(r) * c / BENCH_INT4_GROUP));

    let mut rng = SplitMix64::new(0xFE77_17E5);
    let bytes = |rng: &mut SplitMix64, n: usize| -> Vec<u8> {
        (0..n).map(|_| rng.next_u64() as u8).collect()
    };
    let floats = |rng: &mut SplitMix64, n: usize, lo: f32, hi: f32| -> Vec<u8> {
        (0..n)
            .flat_map(|_| uniform(rng, lo, hi).to_le_bytes())
            .collect()
    };
    fs::write(out.join("bench_i8.bin"), bytes(&mut rng, i8_bytes)).unwrap();
    fs::write(out.join("bench_i4.bin"), bytes(&mut rng, i4_bytes)).unwrap();
    fs::write(
        out.join("bench_f32.bin"),
        floats(&mut rng, f32_len, -0.25, 0.25),
    )
    .unwrap();
    fs::write(
        out.join("bench_d.bin"),
        floats(&mut rng, d_len, 0.001, 0.01),
    )
    .unwrap();
    let m: Vec<u8> = (0..m_len)
        .map(|_| 1 + (rng.next_u64() % 255) as u8)
        .collect();
    fs::write(out.join("bench_m.bin"), m).unwrap();
    cases
}
