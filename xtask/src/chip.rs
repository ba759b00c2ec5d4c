//! `cargo xtask chip <name>` and `cargo xtask chips`: the firmware for a
//! real chip (the chip table, `ferrite_common::chip`), built with an
//! embedded image and sized against the chip's flash and RAM budget. There
//! is no emulator for these chips here: they are built and size-checked,
//! and flashed by the user (`probe-rs run`, `espflash flash --monitor`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context, Result};
use ferrite_common::target::{Memory, Target as Chip};

use crate::boards::{root_dir, DEFAULT_N, DEFAULT_PROMPT};
use crate::{cli, host, image_check};

/// The chip called `name`, or an error listing the chips.
pub fn named(name: &str) -> Result<&'static Chip> {
    Chip::named(name)
        .filter(|c| c.chip().is_some())
        .with_context(|| {
            format!(
                "unknown chip {name:?}; chips: {}",
                ferrite_common::target::chips()
                    .map(|c| c.name)
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        })
}

/// Flash and RAM of a chip firmware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChipSizes {
    /// Bytes stored in flash: code, read-only data (the image), the initial
    /// values of `.data`, boot blocks.
    pub flash: u64,
    /// Static RAM: `.data`, `.bss`, `.uninit` (and on the ESP32-C3 the
    /// SRAM its IRAM code takes, esp-hal's `.rwdata_dummy`); not the stack.
    pub ram: u64,
}

/// [`ChipSizes`] from `llvm-size -A`, by section name: cortex-m-rt's
/// sections with rp235x-hal's boot blocks, and esp-hal's (whose address
/// space padding `.rotext_dummy` and stack `.stack` are not counted).
pub fn parse_sizes(text: &str) -> ChipSizes {
    let (mut flash, mut ram) = (0, 0);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(name), Some(Ok(size))) = (f.next(), f.next().map(str::parse::<u64>)) else {
            continue;
        };
        let is = |prefix: &str| name == prefix || name.starts_with(&format!("{prefix}."));
        if is(".data") {
            flash += size;
            ram += size;
        } else if is(".bss") || name == ".uninit" || name == ".noinit" || name == ".rwdata_dummy" {
            ram += size;
        } else if [
            ".vector_table",
            ".start_block",
            ".end_block",
            ".bi_entries",
            ".text",
            ".rodata",
            ".trap",
            ".rwtext",
            ".flash.appdesc",
            ".rtc_fast.text",
        ]
        .iter()
        .any(|p| is(p))
        {
            flash += size;
        }
    }
    ChipSizes { flash, ram }
}

/// (flash, RAM) budget of a chip: its memory map's lengths, or its HAL's.
fn budget(chip: &Chip) -> (u64, u64) {
    match chip.memory {
        Memory::Hal { flash, ram } => (flash, ram),
        Memory::Map(file) => {
            let text = std::fs::read_to_string(root_dir().join("boards/memory").join(file))
                .unwrap_or_default();
            let len = |r| ferrite_common::target::region_length(&text, r).unwrap_or(0);
            (len("FLASH"), len("RAM"))
        }
    }
}

/// One built firmware.
pub struct Built {
    /// The ELF (a copy under `chips/target/xtask/<chip>/`).
    pub elf: PathBuf,
    /// Its sizes.
    pub sizes: ChipSizes,
    /// The embedded image's bytes.
    pub image_bytes: u64,
}

/// The image of `--image` (a file, or a model directory quantized to
/// `--dtype`, default int8), or the chip's default model.
fn image_of(opts: &cli::ImageOpts, chip: &Chip) -> Result<PathBuf> {
    let Some(p) = &opts.image else {
        return match chip.model {
            (dir, dtype) if dir.contains('/') => host::shipped_image(dir, dtype),
            (fixture, dtype) => host::fixture_image(fixture, dtype),
        };
    };
    let path = std::fs::canonicalize(p).with_context(|| format!("--image {p}"))?;
    if !path.is_dir() {
        return Ok(path);
    }
    let dtype = opts.dtype.as_deref().unwrap_or("int8");
    let rel = path.strip_prefix(root_dir()).unwrap_or(&path);
    let name = rel
        .to_string_lossy()
        .trim_start_matches("models/")
        .replace('/', "-");
    host::model_image(&path, &name, dtype)
}

/// Builds the `generate` firmware of `chip` with `image` embedded; fails
/// with one line when it does not fit the chip's budget.
pub fn build(chip: &'static Chip, image: &Path, opts: &cli::BoardOpts) -> Result<Built> {
    let facts = image_check::check(image)?;
    if facts.bytes > budget(chip).0 {
        bail!(
            "image {} ({} bytes) does not fit chip {}: its flash budget is {} KiB; {}",
            image.display(),
            facts.bytes,
            chip.name,
            budget(chip).0 / 1024,
            facts.budget_hint(budget(chip).0)
        );
    }
    let package = root_dir().join(chip.chip().unwrap().package);
    let mut features = Vec::new();
    if chip.chip().unwrap().package == "boards" {
        features.push(chip.name);
    }
    if opts.fast_math.unwrap_or(true) {
        features.push("fast-math");
    }
    if facts.bpe {
        features.push("bpe");
    }
    if facts.mla {
        features.push("mla");
    }
    eprintln!(
        "building the generate firmware for {} ({}, {}; the first build of a chip takes a few minutes) ...",
        chip.name, chip.chip().unwrap().mcu, chip.triple
    );
    let d = crate::boards::BuildOpts::default();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&package)
        .args(["build", "--release", "--quiet", "--target", chip.triple])
        .args(["--bin", "generate", "--features", &features.join(",")])
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            chip.cpu
                .map(|cpu| format!("-C\x1ftarget-cpu={cpu}"))
                .unwrap_or_default(),
        )
        .env("FERRITE_IMAGE", image)
        .env(
            "FERRITE_PROMPT",
            opts.prompt.as_deref().unwrap_or(DEFAULT_PROMPT),
        )
        .env("FERRITE_N", opts.n.unwrap_or(DEFAULT_N).to_string())
        .env(
            "FERRITE_TEMPERATURE",
            opts.temperature.unwrap_or(d.temperature).to_string(),
        )
        .env("FERRITE_TOP_K", opts.top_k.unwrap_or(d.top_k).to_string())
        .env("FERRITE_TOP_P", opts.top_p.unwrap_or(d.top_p).to_string())
        .env("FERRITE_SEED", opts.seed.unwrap_or(d.seed).to_string())
        .env("DEFMT_LOG", "info")
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
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
            let hint = match image_check::overflow_bytes(&stderr) {
                Some(over) if line.contains("FLASH") => format!("; {}", facts.fit_hint(over)),
                _ => String::new(),
            };
            bail!(
                "image {} does not fit chip {} (flash {} KiB, RAM {} KiB): {}{hint}",
                image.display(),
                chip.name,
                budget(chip).0 / 1024,
                budget(chip).1 / 1024,
                line.split_once("error: ").map_or(line, |(_, e)| e).trim()
            );
        }
        eprint!("{stderr}");
        bail!("building the firmware for chip {} failed", chip.name);
    }
    eprint!("{stderr}");
    let built = package
        .join("target")
        .join(chip.triple)
        .join("release")
        .join("generate");
    let dir = root_dir().join("boards/target/xtask").join(chip.name);
    std::fs::create_dir_all(&dir)?;
    let elf = dir.join("generate.elf");
    std::fs::copy(&built, &elf).with_context(|| format!("copying {}", built.display()))?;
    let size = Command::new(crate::setup::llvm_size()?)
        .arg("-A")
        .arg(&elf)
        .output()
        .context("running llvm-size")?;
    if !size.status.success() {
        bail!("llvm-size -A {}: failed", elf.display());
    }
    let sizes = parse_sizes(&String::from_utf8_lossy(&size.stdout));
    // The linker enforces the Arm chips' maps; the ESP32-C3's map is the
    // whole 4 MB of address space, so the app partition is checked here.
    if sizes.flash > budget(chip).0 || sizes.ram > budget(chip).1 {
        bail!(
            "the firmware for chip {} with image {} does not fit: flash {} of {} bytes, RAM {} of {} bytes",
            chip.name,
            image.display(),
            sizes.flash,
            budget(chip).0,
            sizes.ram,
            budget(chip).1
        );
    }
    Ok(Built {
        elf,
        sizes,
        image_bytes: facts.bytes,
    })
}

/// `cargo clippy -D warnings` on every chip's firmware, built as xtask
/// builds it (its feature, target, `-C target-cpu`, fast math, an image).
pub fn clippy() -> Result<bool> {
    let mut ok = true;
    for chip in ferrite_common::target::chips() {
        let image = image_of(&cli::ImageOpts::default(), chip)?;
        let mut features = vec!["fast-math"];
        if chip.chip().unwrap().package == "boards" {
            features.push(chip.name);
        }
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root_dir().join(chip.chip().unwrap().package))
            .args([
                "clippy",
                "--quiet",
                "--release",
                "--bins",
                "--target",
                chip.triple,
            ])
            .args(["--features", &features.join(",")])
            .args(["--", "-D", "warnings"])
            .env(
                "CARGO_ENCODED_RUSTFLAGS",
                chip.cpu
                    .map(|cpu| format!("-C\x1ftarget-cpu={cpu}"))
                    .unwrap_or_default(),
            )
            .env("FERRITE_IMAGE", &image)
            .env("DEFMT_LOG", "info")
            .status()
            .with_context(|| format!("running cargo clippy for chip {}", chip.name))?;
        ok &= status.success();
    }
    // The library with its tests, on the host.
    let image = image_of(
        &cli::ImageOpts::default(),
        ferrite_common::target::chips().next().unwrap(),
    )?;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root_dir().join("boards"))
        .args(["clippy", "--quiet", "--release", "--lib", "--tests"])
        .args(["--features", "host,fast-math", "--", "-D", "warnings"])
        .env("FERRITE_IMAGE", &image)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .context("running cargo clippy for the chips library")?;
    Ok(ok & status.success())
}

/// The chips' library tests on the host (`chips/src/lib.rs`: the
/// generation loop against the runtime's `Session::generate`, and its
/// report lines), with the default chip model embedded.
pub fn host_test() -> Result<bool> {
    let image = image_of(
        &cli::ImageOpts::default(),
        ferrite_common::target::chips().next().unwrap(),
    )?;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root_dir().join("boards"))
        .args(["test", "--quiet", "--release", "--lib"])
        .args(["--features", "host,fast-math"])
        .env("FERRITE_IMAGE", &image)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .context("running cargo test in chips/")?;
    Ok(status.success())
}

/// `part of whole` as a percentage with one decimal.
fn pct(part: u64, whole: u64) -> String {
    format!("{:.1}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// The `stats:` line of a built chip firmware.
fn stats_line(chip: &Chip, b: &Built) -> String {
    format!(
        "stats: chip={} target={} kernels={} image_bytes={} flash_bytes={} flash_budget={} ram_bytes={} ram_budget={}",
        chip.name,
        chip.triple,
        chip.kernels(),
        b.image_bytes,
        b.sizes.flash,
        budget(chip).0,
        b.sizes.ram,
        budget(chip).1
    )
}

/// `cargo xtask chip <name> [--image F|DIR [--dtype D]] [--prompt P] [-n N] [sampler] [--math fast|libm]`.
pub fn run(opts: &cli::BoardOpts) -> Result<ExitCode> {
    if opts.defmt {
        bail!("chip: --defmt is not an option: the Arm chips always print through defmt over RTT");
    }
    let name = opts.board.as_deref().with_context(|| {
        format!(
            "which chip? {}",
            ferrite_common::target::chips()
                .map(|c| c.name)
                .collect::<Vec<_>>()
                .join(" ")
        )
    })?;
    let chip = named(name)?;
    let image = image_of(&opts.image, chip)?;
    let b = build(chip, &image, opts)?;
    println!(
        "chip: {} ({}, {} on {}, {}; kernels {})",
        chip.name,
        chip.chip().unwrap().board,
        chip.chip().unwrap().mcu,
        chip.core,
        chip.triple,
        chip.kernels()
    );
    println!("image: {} ({} bytes)", image.display(), b.image_bytes);
    println!(
        "flash: {} of {} bytes ({})",
        b.sizes.flash,
        budget(chip).0,
        pct(b.sizes.flash, budget(chip).0)
    );
    println!(
        "RAM:   {} of {} bytes ({}; static data, the session buffer included; the rest is stack)",
        b.sizes.ram,
        budget(chip).1,
        pct(b.sizes.ram, budget(chip).1)
    );
    println!("elf: {}", b.elf.display());
    println!(
        "flash and run: {}",
        chip.chip()
            .unwrap()
            .flash_cmd
            .replace("{elf}", &b.elf.display().to_string())
    );
    println!("{}", stats_line(chip, &b));
    Ok(ExitCode::SUCCESS)
}

/// Every chip (or those whose name contains `only`) built with its default
/// model; one `stats:` line each. The check of `cargo xtask test`: each
/// builds, its kernels are the table's (a compile-time assertion in the
/// firmware) and it fits its budget; without `only`, the library's tests run
/// on the host first ([`host_test`]). `record` rewrites docs/chips.md's
/// measured table.
pub fn all(only: Option<&str>, record: bool) -> Result<bool> {
    let mut rows = Vec::new();
    let mut ok = true;
    if only.is_none() && !host_test()? {
        println!("FAIL the chips library's host tests (cargo test --features host in chips/)");
        ok = false;
    }
    for chip in ferrite_common::target::chips().filter(|c| only.is_none_or(|o| c.name.contains(o)))
    {
        let built = image_of(&cli::ImageOpts::default(), chip)
            .and_then(|image| build(chip, &image, &cli::BoardOpts::default()));
        match built {
            Ok(b) => {
                println!("{}", stats_line(chip, &b));
                rows.push(format!(
                    "| {} | `{}` {} | {} | {} of {} ({}) | {} of {} ({}) |",
                    chip.name,
                    chip.model.0,
                    chip.model.1,
                    b.image_bytes,
                    b.sizes.flash,
                    budget(chip).0,
                    pct(b.sizes.flash, budget(chip).0),
                    b.sizes.ram,
                    budget(chip).1,
                    pct(b.sizes.ram, budget(chip).1)
                ));
            }
            Err(e) => {
                println!("FAIL chip {}: {e:#}", chip.name);
                ok = false;
            }
        }
    }
    if record && ok && only.is_none() {
        record_table(&rows)?;
    }
    Ok(ok)
}

/// Writes `rows` between the `chips-measured` markers of docs/chips.md.
fn record_table(rows: &[String]) -> Result<()> {
    let path = root_dir().join("docs/chips.md");
    let text = std::fs::read_to_string(&path).context("reading docs/chips.md")?;
    let (start, end) = (
        "<!-- chips-measured:start -->",
        "<!-- chips-measured:end -->",
    );
    let (Some(a), Some(z)) = (text.find(start), text.find(end)) else {
        bail!("docs/chips.md has no {start} ... {end} markers");
    };
    let table = format!(
        "{start}\n| chip | image | image bytes | flash bytes (of budget) | RAM bytes (of budget) |\n|---|---|---|---|---|\n{}\n",
        rows.join("\n")
    );
    std::fs::write(&path, format!("{}{table}{}", &text[..a], &text[z..]))?;
    println!("wrote docs/chips.md");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_arm_and_esp_sections() {
        let rp = ".vector_table 272 0\n.start_block 20 0\n.text 85832 0\n.bi_entries 0 0\n\
                  .rodata 186140 0\n.data 56 0\n.gnu.sgstubs 0 0\n.bss 32424 0\n.uninit 1024 0\n\
                  .end_block 0 0\n.defmt 8 0\n.debug_info 900000 0\n";
        assert_eq!(
            parse_sizes(rp),
            ChipSizes {
                flash: 272 + 20 + 85832 + 186140 + 56,
                ram: 56 + 32424 + 1024
            }
        );
        let esp = ".trap 1540 0\n.rwtext 1832 0\n.rwtext.wifi 0 0\n.rwdata_dummy 3372 0\n\
                   .data 1492 0\n.bss 32852 0\n.noinit 0 0\n.flash.appdesc 256 0\n\
                   .rodata 193032 0\n.rotext_dummy 196608 0\n.text 87236 0\n\
                   .stack 282792 0\n.eh_frame 6916 0\n";
        assert_eq!(
            parse_sizes(esp),
            ChipSizes {
                flash: 1540 + 1832 + 1492 + 256 + 193032 + 87236,
                ram: 3372 + 1492 + 32852
            }
        );
    }
}
