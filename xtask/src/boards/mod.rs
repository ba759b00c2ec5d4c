//! The firmware of boards/ for any target of the table
//! (`ferrite_common::target`, common/src/target.rs), QEMU board or real
//! chip: one build path (its feature, triple, `-C target-cpu` and build-time
//! settings) and one size and fit check; QEMU runs in [`run`], the
//! firmware's report lines in [`report`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
pub use ferrite_common::fnv1a;
pub use ferrite_common::target::{Memory, Target as Board, BOARDS, CHIPS, DEFAULT_MODEL};

use crate::image_check;
pub use crate::options::BuildOpts;
pub use crate::paths::{boards_dir, root_dir, work_dir};

pub mod report;
pub mod run;

pub use report::Report;
pub use run::{
    build_and_run, run_ota, run_qemu, run_slots, timeout_for, verdict, verdicts, Delivery, OtaPlan,
    Run,
};

/// The prompt and the number of tokens a firmware runs unless told otherwise.
pub const DEFAULT_PROMPT: &str = "Once upon a time";
pub const DEFAULT_N: usize = 32;
/// Seconds a QEMU run may take before it counts as hung.
pub const DEFAULT_TIMEOUT_S: u64 = 120;

/// The QEMU board called `name`, or an error that lists the boards.
pub fn named(name: &str) -> Result<&'static Board> {
    BOARDS.iter().find(|t| t.name == name).with_context(|| {
        let names: Vec<_> = BOARDS.iter().map(|t| t.name).collect();
        format!("unknown board {name:?}; boards: {}", names.join(", "))
    })
}

/// `board` or `chip`, for messages.
fn kind(t: &Board) -> &'static str {
    if t.qemu().is_some() {
        "board"
    } else {
        "chip"
    }
}

/// (flash, RAM) budget in bytes: the lengths of the target's memory map,
/// or what the table gives a chip whose HAL places everything.
pub fn budget(t: &Board) -> Result<(u64, u64)> {
    let file = match t.memory {
        Memory::Map(file) => file,
        Memory::Hal { flash, ram } => return Ok((flash, ram)),
    };
    let path = boards_dir().join("memory").join(file);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let length = |region: &str| {
        ferrite_common::target::region_length(&text, region)
            .with_context(|| format!("{}: no {region} region with a LENGTH", path.display()))
    };
    Ok((length("FLASH")?, length("RAM")?))
}

/// The firmware binaries of boards/ (all but `generate` QEMU-only).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Firmware {
    /// `src/bin/generate.rs`: image in flash, static state.
    Generate,
    /// `src/bin/ota.rs`: serves the image, receives an update at run time (A/B).
    Ota,
    /// `src/bin/calibrate.rs`: counts a loop of exactly 2,000,000 instructions.
    Calibrate,
    /// `src/bin/eval.rs`: MQAR accuracy or bits per byte of an embedded text.
    Eval,
    /// `src/bin/kernels/`: this build's tile kernels against the reference.
    Kernels,
    /// `src/bin/bench.rs`: times the matrix-vector products (`FERRITE_BENCH`).
    Bench,
    /// `src/bin/slots.rs`: snapshots saved to two flash slots, a save cut at
    /// each of its operations, restored streams checked against the uninterrupted one.
    Slots,
    /// `src/bin/sigbench.rs`: one signature verification by the crate of its `sig-*` feature.
    SigBench,
}

impl Firmware {
    fn bin(self) -> &'static str {
        match self {
            Firmware::Generate => "generate",
            Firmware::Ota => "ota",
            Firmware::Calibrate => "calibrate",
            Firmware::Eval => "eval",
            Firmware::Kernels => "kernels",
            Firmware::Bench => "bench",
            Firmware::Slots => "slots",
            Firmware::SigBench => "sigbench",
        }
    }

    /// Whether it runs the embedded image (the others are built with the
    /// target's default image, which the library reads and the linker drops).
    fn embeds_image(self) -> bool {
        matches!(
            self,
            Firmware::Generate | Firmware::Eval | Firmware::Ota | Firmware::Slots
        )
    }
}

/// What to build and run.
pub struct RunRequest<'a> {
    pub board: &'static Board,
    pub firmware: Firmware,
    pub image: &'a Path,
    pub prompt: &'a str,
    pub n: usize,
    pub defmt: bool,
    /// Stream the firmware's output to our stdout as it runs.
    pub echo: bool,
    /// Sampler and evaluation parameters (build-time, like the prompt).
    pub opts: BuildOpts,
}

impl<'a> RunRequest<'a> {
    /// `firmware` for `board` with `image`, the default prompt, N and options.
    pub fn new(board: &'static Board, firmware: Firmware, image: &'a Path) -> Self {
        RunRequest {
            board,
            firmware,
            image,
            prompt: DEFAULT_PROMPT,
            n: DEFAULT_N,
            defmt: false,
            echo: false,
            opts: BuildOpts::default(),
        }
    }
}

/// Flash and RAM of an ELF.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Code, read-only data (the image), the initial values of `.data`, boot blocks.
    pub flash: u64,
    /// Static RAM: `.data`, `.bss`, `.uninit` (on the ESP32-C3 also the
    /// SRAM its IRAM code takes); not the stack.
    pub ram: u64,
}

/// [`Sizes`] of an ELF, by `llvm-size -A`.
pub fn sizes(elf: &Path) -> Result<Sizes> {
    let out = Command::new(crate::setup::llvm_size()?)
        .arg("-A")
        .arg(elf)
        .output()
        .context("running llvm-size")?;
    if !out.status.success() {
        bail!(
            "llvm-size -A {}: {}",
            elf.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(parse_sizes(&String::from_utf8_lossy(&out.stdout)))
}

/// [`Sizes`] from `llvm-size -A`, by section name (and `name.*`):
/// cortex-m-rt's and riscv-rt's sections, rp235x-hal's boot blocks and
/// esp-hal's. Not counted: the stack, esp-hal's address-space padding
/// `.rotext_dummy`, and what is not loaded (debug info; riscv-rt's INFO `.eh_frame`).
pub fn parse_sizes(text: &str) -> Sizes {
    const FLASH: &[&str] = &[
        ".vector_table",
        ".start_block",
        ".end_block",
        ".bi_entries",
        ".init",
        ".text",
        ".rodata",
        ".srodata",
        ".trap",
        ".rwtext",
        ".flash.appdesc",
        ".rtc_fast.text",
    ];
    const DATA: &[&str] = &[".data", ".sdata"];
    const RAM: &[&str] = &[
        ".bss",
        ".sbss",
        ".uninit",
        ".heap",
        ".noinit",
        ".rwdata_dummy",
    ];
    let (mut flash, mut ram) = (0, 0);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(name), Some(Ok(size))) = (f.next(), f.next().map(str::parse::<u64>)) else {
            continue;
        };
        let is = |set: &[&str]| {
            set.iter().any(|p| {
                name.strip_prefix(p)
                    .is_some_and(|r| r.is_empty() || r.starts_with('.'))
            })
        };
        if is(DATA) {
            flash += size;
            ram += size;
        } else if is(FLASH) {
            flash += size;
        } else if is(RAM) {
            ram += size;
        }
    }
    Sizes { flash, ram }
}

/// Builds a firmware (the one path for boards and chips); returns a copy of
/// its ELF under [`work_dir`]. Fails with one line when the image or the
/// firmware does not fit the target's budget.
pub fn build(req: &RunRequest<'_>) -> Result<PathBuf> {
    let (board, bin, opts) = (req.board, req.firmware.bin(), &req.opts);
    let (flash, ram) = budget(board)?;
    let what = kind(board);
    let map = match board.memory {
        Memory::Map(file) => format!(" in boards/memory/{file}"),
        Memory::Hal { .. } => String::new(),
    };
    let default_image;
    let image = if req.image.as_os_str().is_empty() || !req.firmware.embeds_image() {
        default_image = crate::host::default_image(board)?;
        &default_image
    } else {
        req.image
    };
    // The image is checked with the runtime's own loader before a firmware
    // embeds it (a bad one would otherwise fail inside rustc's const eval).
    let facts = if req.firmware.embeds_image() {
        let facts = image_check::check(image)?;
        if facts.bytes > flash {
            bail!(
                "image {} ({} bytes) does not fit {what} {}: its flash budget is {} KiB{map}; {}",
                image.display(),
                facts.bytes,
                board.name,
                flash / 1024,
                facts.budget_hint(flash)
            );
        }
        Some(facts)
    } else {
        None
    };
    let package = root_dir().join(board.chip().map_or("boards", |c| c.package));
    let own_package = package != boards_dir();
    let mut features = Vec::new();
    if !own_package {
        features.push(board.name);
    }
    // The BPE tokenizer's code, the mixer families, the integer token path and the format-8 block
    // options only where the image
    // needs them (and all of them for the OTA example, which may receive any image at run time, and
    // for firmware that embeds no image).
    let ota = req.firmware == Firmware::Ota;
    let every_family = ferrite::LayerConfig::KIND_NAMES.iter().copied();
    match (&facts, ota) {
        (Some(f), false) => features.extend(f.features()),
        (_, true) => {
            features.push("bpe");
            features.extend(every_family);
            features.extend(["int-path", "block-options"]);
        }
        (None, false) => features.extend(every_family),
    }
    if req.defmt {
        features.push("defmt");
    }
    features.extend(opts.features.iter().copied());
    if opts.roofline {
        features.push("roofline");
    }
    let fast_math = opts.fast_math.unwrap_or(true);
    if fast_math {
        features.push("fast-math");
    }
    let mut forced = opts
        .kernels
        .map(|k| format!(", FERRITE_KERNELS={k}"))
        .unwrap_or_default();
    if opts.math_noinline {
        forced.push_str(", FERRITE_MATH_NOINLINE=1");
    }
    if opts.roofline {
        forced.push_str(", roofline");
    }
    if fast_math {
        forced.push_str(&format!(", fast-math ({})", opts.math(board).name()));
    }
    eprintln!(
        "building the {bin} firmware for {} ({}{forced}; the first build of a target takes a minute or more) ...",
        board.name, board.triple
    );
    // Each `-C target-cpu` of a triple builds in a directory of its own (m33
    // and m55 share theirs), and so does each variant of the runtime.
    let variant = opts.variant();
    let mut target_dir = crate::paths::firmware_target_dir(&package);
    if let Some(cpu) = board.cpu {
        target_dir = target_dir.join(format!("cpu-{cpu}"));
    }
    if let Some(v) = &variant {
        target_dir = target_dir.join(v);
    }
    let mut cmd = cargo_firmware(board, "build", &features);
    cmd.current_dir(&package)
        .args(["--bin", bin])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("FERRITE_IMAGE", image)
        .env("FERRITE_PROMPT", req.prompt)
        .env("FERRITE_N", req.n.to_string())
        .env("FERRITE_TEMPERATURE", opts.temperature.to_string())
        .env("FERRITE_TOP_K", opts.top_k.to_string())
        .env("FERRITE_TOP_P", opts.top_p.to_string())
        .env("FERRITE_SEED", opts.seed.to_string())
        .env("FERRITE_CHUNK", opts.chunk.to_string())
        .env("FERRITE_MQAR_SEED", opts.mqar_seed.to_string())
        .env("FERRITE_MQAR_PAIRS", opts.pairs.to_string())
        .env("FERRITE_MQAR_SEQ_LEN", opts.seq_len.to_string())
        .env("FERRITE_SNAPSHOT_AT", opts.snapshot_at.to_string())
        .env("FERRITE_MEMORY", opts.memory.to_string())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    let vars = [
        (
            "FERRITE_TEXT",
            opts.text.as_ref().map(|t| t.as_os_str().to_owned()),
        ),
        ("FERRITE_BENCH", opts.bench.as_ref().map(Into::into)),
        (
            "FERRITE_SNAPSHOT",
            opts.snapshot.as_ref().map(|s| s.as_os_str().to_owned()),
        ),
        (
            "FERRITE_TRUSTED_KEYS",
            opts.trusted_keys.as_ref().map(Into::into),
        ),
        ("FERRITE_KERNELS", opts.kernels.map(Into::into)),
        (
            "FERRITE_MATH_NOINLINE",
            opts.math_noinline.then(|| "1".into()),
        ),
    ];
    for (name, value) in vars {
        match value {
            Some(v) => cmd.env(name, v),
            None => cmd.env_remove(name),
        };
    }
    let out = cmd
        .output()
        .with_context(|| format!("running cargo build in {}", package.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if let Some(line) = stderr
            .lines()
            .find(|l| l.contains("will not fit in region") || l.contains("overflowed by"))
        {
            // With the code's share known from the linker, the hint is exact.
            let hint = match (&facts, image_check::overflow_bytes(&stderr)) {
                (Some(f), Some(over)) if line.contains("FLASH") => {
                    format!("; {}", f.fit_hint(over))
                }
                _ => String::new(),
            };
            let subject = match &facts {
                Some(_) => format!("image {}", image.display()),
                None => format!("the {bin} firmware"),
            };
            bail!(
                "{subject} does not fit {what} {} (flash {} KiB, RAM {} KiB{map}): {}{hint}",
                board.name,
                flash / 1024,
                ram / 1024,
                line.split_once("error: ").map_or(line, |(_, e)| e).trim()
            );
        }
        eprint!("{stderr}");
        bail!("building {bin} for {} failed", board.name);
    }
    eprint!("{stderr}");
    let built = target_dir.join(board.triple).join("release").join(bin);
    let dir = work_dir().join(board.name);
    std::fs::create_dir_all(&dir)?;
    let tag = if req.defmt {
        Some("defmt".to_string())
    } else {
        variant
    };
    let tag = tag.map(|t| format!("-{t}")).unwrap_or_default();
    let libm = if fast_math { "" } else { "-libm" };
    let elf = dir.join(format!("{bin}{tag}{libm}.elf"));
    std::fs::copy(&built, &elf).with_context(|| format!("copying {}", built.display()))?;
    // The linker enforces the maps; a HAL's map may be larger than the budget.
    let s = sizes(&elf)?;
    if s.flash > flash || s.ram > ram {
        bail!(
            "the {bin} firmware for {what} {} with image {} does not fit: flash {} of {flash} bytes, RAM {} of {ram} bytes",
            board.name,
            image.display(),
            s.flash,
            s.ram
        );
    }
    Ok(elf)
}

/// `CARGO_ENCODED_RUSTFLAGS` for `t`: its `-C target-cpu`, or nothing.
pub fn rustflags(t: &Board) -> String {
    t.cpu
        .map(|c| format!("-C\x1ftarget-cpu={c}"))
        .unwrap_or_default()
}

/// `cargo <command> --release --quiet --target <triple> --features ..` for
/// `t`'s firmware, with its `-C target-cpu` (the only rustflags a firmware
/// gets: the runtime's build script reads it to pick the kernels).
pub fn cargo_firmware(t: &Board, command: &str, features: &[&str]) -> Command {
    let mut cmd = crate::setup::cargo(&format!("{command} --release --quiet --target"));
    cmd.arg(t.triple)
        .args(["--features", &features.join(",")])
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags(t))
        .env("DEFMT_LOG", "info");
    if size_optimised(t) {
        cmd.args(["--config", SIZE_PROFILE]);
    }
    cmd
}

/// Every mixer family's feature, comma-separated: for builds that lint or
/// test the firmware's code rather than run one image (the runtime's
/// table, [`ferrite::LayerConfig::KIND_NAMES`], names them).
pub fn all_mixers() -> String {
    ferrite::LayerConfig::KIND_NAMES.join(",")
}

/// Targets with at most this much flash build the firmware package for size.
pub const SIZE_OPTIMISED_FLASH: u64 = 256 << 10;
/// The profile setting they get (boards/Cargo.toml says why not everyone).
const SIZE_PROFILE: &str = r#"profile.release.package.ferrite-boards.opt-level="s""#;

/// `true` when `t`'s firmware is built at opt-level "s" (its flash is at
/// most [`SIZE_OPTIMISED_FLASH`]).
pub fn size_optimised(t: &Board) -> bool {
    budget(t).is_ok_and(|(flash, _)| flash <= SIZE_OPTIMISED_FLASH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_256_kib_boards_are_built_for_size() {
        let sized: Vec<_> = ferrite_common::target::TARGETS
            .iter()
            .filter(|t| size_optimised(t))
            .map(|t| t.name)
            .collect();
        assert_eq!(sized, ["m3", "m0"]);
    }

    #[test]
    fn counts_flash_and_ram_sections() {
        let arm = ".vector_table 1024 0\n.text 120000 1024\n.rodata 27000 0\n.data 16 0\n\
                   .bss 10264 0\n.uninit 0 0\n.ARM.attributes 58 0\n.debug_info 900000 0\n";
        assert_eq!(
            parse_sizes(arm),
            Sizes {
                flash: 1024 + 120000 + 27000 + 16,
                ram: 16 + 10264
            }
        );
        let rv = ".text.dummy 0 0\n.text 5000 0\n.srodata 8 0\n.sdata 4 0\n.sbss 12 0\n\
                  .stack 2048 0\n.eh_frame 5784 0\n";
        assert_eq!(
            parse_sizes(rv),
            Sizes {
                flash: 5012,
                ram: 16
            }
        );
        let rp = ".vector_table 272 0\n.start_block 20 0\n.text 85832 0\n.bi_entries 0 0\n\
                  .rodata 186140 0\n.data 56 0\n.gnu.sgstubs 0 0\n.bss 32424 0\n.uninit 1024 0\n\
                  .end_block 0 0\n.defmt 8 0\n";
        assert_eq!(
            parse_sizes(rp),
            Sizes {
                flash: 272 + 20 + 85832 + 186140 + 56,
                ram: 56 + 32424 + 1024
            }
        );
        let esp = ".trap 1540 0\n.rwtext 1832 0\n.rwtext.wifi 0 0\n.rwdata_dummy 3372 0\n\
                   .data 1492 0\n.bss 32852 0\n.noinit 0 0\n.flash.appdesc 256 0\n\
                   .rodata 193032 0\n.rotext_dummy 196608 0\n.text 87236 0\n.stack 282792 0\n";
        assert_eq!(
            parse_sizes(esp),
            Sizes {
                flash: 1540 + 1832 + 1492 + 256 + 193032 + 87236,
                ram: 3372 + 1492 + 32852
            }
        );
    }

    #[test]
    fn variants_build_apart() {
        assert_eq!(BuildOpts::default().variant(), None);
        let o = BuildOpts {
            kernels: Some("portable"),
            math_noinline: true,
            ..BuildOpts::default()
        };
        assert_eq!(
            o.variant().as_deref(),
            Some("kernels-portable-math-noinline")
        );
    }

    /// Every target has its feature in boards/Cargo.toml (chips with a
    /// package of their own have theirs there), and every map its budget.
    #[test]
    fn every_target_has_a_feature_and_a_budget() {
        let manifest = std::fs::read_to_string(boards_dir().join("Cargo.toml")).unwrap();
        for t in BOARDS.iter().chain(CHIPS) {
            assert!(
                manifest.contains(&format!("\n{} = [", t.name)),
                "{}: no feature",
                t.name
            );
            let (flash, ram) = budget(t).unwrap();
            assert!(flash > 0 && ram > 0, "{}", t.name);
        }
    }
}
