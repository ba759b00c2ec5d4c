//! `cargo xtask chip <name>` and `cargo xtask chips`: the `generate`
//! firmware for a real chip (a chip of the target table), built with an
//! embedded image by the boards' build path and sized against the chip's
//! budget. There is no emulator for these chips here: they are built and
//! size-checked, and flashed by the user (`probe-rs run`, `espflash flash --monitor`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::args::GenerateArgs;
use crate::boards::{self, root_dir, Board, Firmware, RunRequest, Sizes, CHIPS};
use crate::host;

/// One built firmware.
struct Built {
    /// The ELF (a copy under `boards/target/xtask/<chip>/`).
    elf: PathBuf,
    sizes: Sizes,
    /// The embedded image's bytes.
    image_bytes: u64,
    /// The chip's (flash, RAM) budget.
    budget: (u64, u64),
}

/// Builds the `generate` firmware of `chip` with `image` embedded.
fn build(chip: &'static Board, image: &Path, g: &GenerateArgs) -> Result<Built> {
    let req = RunRequest {
        prompt: g.prompt(),
        n: g.n(),
        opts: g.build_opts(),
        ..RunRequest::new(chip, Firmware::Generate, image)
    };
    let elf = boards::build(&req)?;
    Ok(Built {
        sizes: boards::sizes(&elf)?,
        image_bytes: std::fs::metadata(image)?.len(),
        budget: boards::budget(chip)?,
        elf,
    })
}

/// `part of whole` as a percentage with one decimal.
fn pct(part: u64, whole: u64) -> String {
    format!("{:.1}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// The `stats:` line of a built chip firmware.
fn stats_line(chip: &Board, b: &Built) -> String {
    format!(
        "stats: chip={} target={} kernels={} image_bytes={} flash_bytes={} flash_budget={} ram_bytes={} ram_budget={}",
        chip.name,
        chip.triple,
        chip.kernels(),
        b.image_bytes,
        b.sizes.flash,
        b.budget.0,
        b.sizes.ram,
        b.budget.1
    )
}

/// `cargo xtask chip <name> [--image F|DIR [--dtype D]] [--prompt P] [-n N] [sampler] [--math fast|libm]`.
pub fn run(chip: &'static Board, g: &GenerateArgs) -> Result<ExitCode> {
    let c = chip.chip().context("not a chip")?;
    let image = g.image.resolve(|| host::default_image(chip))?;
    let b = build(chip, &image, g)?;
    let ((flash, ram), elf) = (b.budget, b.elf.display().to_string());
    println!(
        "chip: {} ({}, {} on {}, {}; kernels {})",
        chip.name,
        c.board,
        c.mcu,
        chip.core,
        chip.triple,
        chip.kernels()
    );
    println!("image: {} ({} bytes)", image.display(), b.image_bytes);
    println!(
        "flash: {} of {flash} bytes ({})",
        b.sizes.flash,
        pct(b.sizes.flash, flash)
    );
    println!(
        "RAM:   {} of {ram} bytes ({}; static data, the session buffer included; the rest is stack)",
        b.sizes.ram,
        pct(b.sizes.ram, ram)
    );
    println!("elf: {elf}");
    println!("flash and run: {}", c.flash_cmd.replace("{elf}", &elf));
    println!("{}", stats_line(chip, &b));
    Ok(ExitCode::SUCCESS)
}

/// docs/chips.md's measured table, the one source of the chips' sizes
/// in the docs (README's rp2350 example quotes it).
const CHIPS_DOC: &str = "docs/chips.md";

/// A chip's row of the measured table of `doc`: (image bytes, flash bytes,
/// RAM bytes), or `None` when the table has no row for it.
fn recorded(doc: &str, chip: &str) -> Option<(u64, u64, u64)> {
    let row = crate::section::get(doc, "chips-measured")
        .ok()?
        .lines()
        .find(|l| l.starts_with(&format!("| {chip} |")))?;
    let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
    let first = |c: &str| c.split_whitespace().next()?.parse().ok();
    Some((
        cells.get(2)?.parse().ok()?,
        first(cells.get(3)?)?,
        first(cells.get(4)?)?,
    ))
}

/// Where a build differs from its recorded row: the image's bytes exactly,
/// flash and RAM beyond [`crate::expected::COST_REL_TOL`] (the board
/// suite's rule for costs). `None` when it agrees.
fn differs_from_record(doc: &str, chip: &str, b: &Built) -> Option<String> {
    let Some((image, flash, ram)) = recorded(doc, chip) else {
        return Some(format!("{CHIPS_DOC} has no measured row for {chip}"));
    };
    let off = |want: u64, got: u64| {
        (got as f64 - want as f64).abs() > crate::expected::COST_REL_TOL * want as f64
    };
    let (fl, rm) = (b.sizes.flash, b.sizes.ram);
    (b.image_bytes != image || off(flash, fl) || off(ram, rm)).then(|| {
        format!(
            "{chip}: built image {} / flash {fl} / RAM {rm} bytes, {CHIPS_DOC} records \
             {image} / {flash} / {ram} (flash and RAM within {}%): `cargo xtask chips --record`",
            b.image_bytes,
            crate::expected::COST_REL_TOL * 100.0
        )
    })
}

/// Every chip (or those whose name contains `only`) built with its default
/// model; one `stats:` line each. The check of `cargo xtask test`: each
/// builds and fits its budget, and has the sizes docs/chips.md records
/// ([`differs_from_record`]); without `only`, the library's tests run on
/// the host first ([`host_test`]). `record` rewrites docs/chips.md's
/// measured table instead of comparing with it.
pub fn all(only: Option<&str>, record: bool) -> Result<bool> {
    let mut rows = Vec::new();
    let mut ok = true;
    let doc = std::fs::read_to_string(root_dir().join(CHIPS_DOC)).context(CHIPS_DOC)?;
    if only.is_none() && !host_test()? {
        println!("FAIL the firmware library's host tests (cargo test --features host in boards/)");
        ok = false;
    }
    for chip in CHIPS
        .iter()
        .filter(|c| only.is_none_or(|o| c.name.contains(o)))
    {
        let built = host::default_image(chip)
            .and_then(|image| build(chip, &image, &GenerateArgs::default()));
        match built {
            Ok(b) => {
                println!("{}", stats_line(chip, &b));
                if let Some(why) = (!record)
                    .then(|| differs_from_record(&doc, chip.name, &b))
                    .flatten()
                {
                    println!("FAIL {why}");
                    ok = false;
                }
                let ((flash, ram), (dir, dtype)) = (b.budget, chip.model);
                rows.push(format!(
                    "| {} | `{dir}` {dtype} | {} | {} of {flash} ({}) | {} of {ram} ({}) |",
                    chip.name,
                    b.image_bytes,
                    b.sizes.flash,
                    pct(b.sizes.flash, flash),
                    b.sizes.ram,
                    pct(b.sizes.ram, ram)
                ));
            }
            Err(e) => {
                println!("FAIL chip {}: {e:#}", chip.name);
                ok = false;
            }
        }
    }
    if record && ok && only.is_none() {
        let table = format!(
            "| chip | image | image bytes | flash bytes (of budget) | RAM bytes (of budget) |\n|---|---|---|---|---|\n{}\n",
            rows.join("\n")
        );
        let doc = root_dir().join(CHIPS_DOC);
        crate::section::write(&doc, "chips-measured", &table)?;
        println!("wrote {} (chips-measured)", doc.display());
    }
    Ok(ok)
}

/// `cargo clippy -D warnings` on every chip's firmware, built as xtask
/// builds it (its feature, target, `-C target-cpu`, fast math, an image),
/// and on the library with its tests on the host.
pub fn clippy() -> Result<bool> {
    let mut ok = true;
    for chip in CHIPS {
        let package = chip.chip().map_or("boards", |c| c.package);
        let own = package != "boards";
        let mixers = boards::all_mixers();
        let mut features = if own {
            vec!["fast-math"]
        } else {
            vec![chip.name, "fast-math"]
        };
        features.extend(mixers.split(','));
        let status = boards::cargo_firmware(chip, "clippy", &features)
            .current_dir(root_dir().join(package))
            .args(["--bins", "--", "-D", "warnings"])
            .env("FERRITE_IMAGE", host::default_image(chip)?)
            .status()
            .with_context(|| format!("running cargo clippy for chip {}", chip.name))?;
        ok &= status.success();
    }
    Ok(ok & host_cargo("clippy", "--tests -- -D warnings")?)
}

/// The firmware library's tests on the host (`boards/src/lib.rs`: the
/// generation path against the runtime's `Session::generate`, and its
/// report lines), with the chips' default model embedded.
pub fn host_test() -> Result<bool> {
    host_cargo("test", "")
}

/// `cargo <command> --quiet --release --lib --features host,fast-math,<every mixer> <rest>` in boards/.
fn host_cargo(command: &str, rest: &str) -> Result<bool> {
    let features = format!(
        "--quiet --release --lib --features host,fast-math,{}",
        boards::all_mixers()
    );
    let status = crate::setup::cargo(&format!("{command} {features} {rest}"))
        .current_dir(boards::boards_dir())
        .env("FERRITE_IMAGE", host::default_image(&CHIPS[0])?)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .with_context(|| format!("running cargo {command} in boards/"))?;
    Ok(status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "text\n<!-- chips-measured:start -->\n\
        | chip | image | image bytes | flash bytes (of budget) | RAM bytes (of budget) |\n\
        |---|---|---|---|---|\n\
        | rp2350 | `models/lm/small` int8 | 172960 | 275384 of 4194304 (6.6%) | 33504 of 524288 (6.4%) |\n\
        <!-- chips-measured:end -->\n| rp2350 | outside | 1 | 2 of 3 (1%) | 4 of 5 (1%) |\n";

    fn built(image_bytes: u64, flash: u64, ram: u64) -> Built {
        Built {
            elf: PathBuf::new(),
            sizes: Sizes { flash, ram },
            image_bytes,
            budget: (4194304, 524288),
        }
    }

    #[test]
    fn the_recorded_row_is_read_from_the_measured_block() {
        assert_eq!(recorded(DOC, "rp2350"), Some((172960, 275384, 33504)));
        assert_eq!(recorded(DOC, "esp32c3"), None);
    }

    /// The image exactly, flash and RAM within 2%; a chip without a row fails.
    #[test]
    fn a_build_that_moved_from_the_record_fails() {
        assert_eq!(
            differs_from_record(DOC, "rp2350", &built(172960, 275384, 33504)),
            None
        );
        assert_eq!(
            differs_from_record(DOC, "rp2350", &built(172960, 280000, 33000)),
            None
        );
        assert!(differs_from_record(DOC, "rp2350", &built(172961, 275384, 33504)).is_some());
        assert!(differs_from_record(DOC, "rp2350", &built(172960, 264016, 33504)).is_some());
        assert!(differs_from_record(DOC, "rp2350", &built(172960, 275384, 34300)).is_some());
        assert!(differs_from_record(DOC, "esp32c3", &built(172960, 275384, 33504)).is_some());
    }

    /// Every chip has a `cargo <chip>` alias (boards/.cargo/config.toml;
    /// the ESP32-C3's in boards/esp32c3/) that enables every mixer family:
    /// the chips' default image needs four of them, and without one the
    /// firmware does not compile.
    #[test]
    fn every_chip_alias_enables_every_mixer_family() {
        let read = |path: &str| std::fs::read_to_string(root_dir().join(path)).unwrap();
        let text = read("boards/.cargo/config.toml") + &read("boards/esp32c3/.cargo/config.toml");
        for chip in CHIPS {
            let alias = text
                .lines()
                .find(|l| l.starts_with(&format!("{} = ", chip.name)))
                .unwrap_or_else(|| panic!("no `cargo {}` alias", chip.name));
            let features = alias
                .split("\"--features\", \"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_else(|| panic!("alias {}: no --features", chip.name));
            let features: Vec<&str> = features.split(',').collect();
            for family in ferrite::LayerConfig::KIND_NAMES {
                assert!(
                    features.contains(family),
                    "`cargo {}` leaves out the {family} family",
                    chip.name
                );
            }
        }
    }
}
