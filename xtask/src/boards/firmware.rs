//! Building a firmware: `cargo build` in boards/ with the board's target,
//! rustflags and build-time settings (boards/build.rs reads them).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::{boards_dir, work_dir, Board, BoardExt, Math};

/// The firmware binaries of boards/.
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
    /// `src/bin/kernels.rs`: this build's tile kernels against the reference.
    Kernels,
    /// `src/bin/bench.rs`: times the matrix-vector products (`FERRITE_BENCH`).
    Bench,
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
        }
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

/// The build-time parameters beyond prompt and N: `generate`'s sampler and
/// `eval`'s task (see boards/build.rs).
#[derive(Clone, Debug, PartialEq)]
pub struct BuildOpts {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub seed: u64,
    /// `eval`: the text to score (its whole content); `None`: MQAR.
    pub text: Option<PathBuf>,
    pub chunk: usize,
    pub mqar_seed: u64,
    pub pairs: usize,
    pub seq_len: usize,
    /// `bench`: the cases to time (`FERRITE_BENCH`, `dtype:ROWSxCOLS,...`);
    /// `None`: the firmware's default.
    pub bench: Option<String>,
    /// Forces the runtime's kernel module (`FERRITE_KERNELS`, e.g.
    /// `portable`), built in its own target directory
    /// (`boards/target/kernels-<module>`) so that switching back and forth
    /// rebuilds nothing; `None`: the module the target gets.
    pub kernels: Option<&'static str>,
    /// Measurement only: the runtime's `math` functions out of line
    /// (`FERRITE_MATH_NOINLINE=1`, its own target directory
    /// `boards/target/math-noinline`), so that a profile shows each.
    pub math_noinline: bool,
    /// The runtime's `fast-math` feature on or off; `None`: the board's
    /// default ([`Board::fast_math`]).
    pub fast_math: Option<bool>,
}

impl Default for BuildOpts {
    fn default() -> Self {
        BuildOpts {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            text: None,
            chunk: 512,
            mqar_seed: 0,
            pairs: 8,
            seq_len: 64,
            bench: None,
            kernels: None,
            math_noinline: false,
            fast_math: None,
        }
    }
}

impl BuildOpts {
    /// Whether a firmware for `board` built with these options has the
    /// runtime's `fast-math` feature (and so which host CLI it must match).
    pub fn fast_math(&self, _board: &Board) -> bool {
        self.fast_math.unwrap_or(true)
    }

    /// The `exp`/`sigmoid`/`silu` of a firmware for `board` built with these
    /// options.
    pub fn math(&self, board: &Board) -> Math {
        board.math(self.fast_math(board))
    }

    /// `ferrite generate` arguments for the same sampler.
    pub fn sampler_args(&self) -> Vec<String> {
        vec![
            "--temperature".into(),
            self.temperature.to_string(),
            "--top-k".into(),
            self.top_k.to_string(),
            "--top-p".into(),
            self.top_p.to_string(),
            "--seed".into(),
            self.seed.to_string(),
        ]
    }
}

/// Builds a firmware; returns a copy of its ELF under [`work_dir`].
pub fn build(req: &RunRequest<'_>) -> Result<PathBuf> {
    let board = req.board;
    let (flash, ram) = board.budget()?;
    // The image is checked with the runtime's own loader before a firmware
    // embeds it (a bad one would otherwise fail inside rustc's const eval).
    let facts = if matches!(
        req.firmware,
        Firmware::Generate | Firmware::Eval | Firmware::Ota
    ) {
        let facts = crate::image_check::check(req.image)?;
        if facts.bytes > flash {
            bail!(
                "image {} ({} bytes) does not fit board {}: its flash budget is {} KiB (boards/memory/{}.x); {}",
                req.image.display(),
                facts.bytes,
                board.name,
                flash / 1024,
                board.name,
                facts.budget_hint(flash)
            );
        }
        Some(facts)
    } else {
        None
    };
    let mut features = vec![board.name];
    // The BPE tokenizer's code only where the image needs it (and for the
    // OTA example, which may receive any image at run time).
    if req.firmware == Firmware::Ota || facts.as_ref().is_some_and(|f| f.bpe) {
        features.push("bpe");
    }
    // Likewise the `mla` mixer (about 4 KB).
    if req.firmware == Firmware::Ota || facts.as_ref().is_some_and(|f| f.mla) {
        features.push("mla");
    }
    if req.defmt {
        features.push("defmt");
    }
    let fast_math = req.opts.fast_math(board);
    if fast_math {
        features.push("fast-math");
    }
    let bin = req.firmware.bin();
    let mut forced = req
        .opts
        .kernels
        .map(|k| format!(", FERRITE_KERNELS={k}"))
        .unwrap_or_default();
    if req.opts.math_noinline {
        forced.push_str(", FERRITE_MATH_NOINLINE=1");
    }
    if fast_math {
        forced.push_str(&format!(", fast-math ({})", board.math(true).name()));
    }
    eprintln!(
        "building the {bin} firmware for {} ({}{forced}; the first build of a target takes a minute) ...",
        board.name, board.triple
    );
    // Settings read from the environment by a build script force a rebuild
    // when they change: each combination builds in its own directory, and so
    // does each `-C target-cpu` of a target (m33 and m55 share theirs).
    let variant = variant_name(&req.opts);
    let mut target_dir = boards_dir().join("target");
    if let Some(cpu) = board.cpu {
        target_dir = target_dir.join(format!("cpu-{cpu}"));
    }
    if let Some(v) = &variant {
        target_dir = target_dir.join(v);
    }
    let mut cmd = Command::new(cargo());
    cmd.current_dir(boards_dir())
        .args([
            "build",
            "--release",
            "--quiet",
            "--target",
            board.triple,
            "--bin",
            bin,
        ])
        .args(["--features", &features.join(",")])
        // The board's `-C target-cpu`, the only rustflags a firmware gets
        // (the runtime's build script reads it to pick the kernels).
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags(board))
        // boards/ reaches the runtime through its `runtime` link, so every
        // path is relative to boards/: the firmware does not depend on where
        // the checkout lies (see boards/Cargo.toml).
        .env("FERRITE_PROMPT", req.prompt)
        .env("FERRITE_N", req.n.to_string())
        .env("FERRITE_TEMPERATURE", req.opts.temperature.to_string())
        .env("FERRITE_TOP_K", req.opts.top_k.to_string())
        .env("FERRITE_TOP_P", req.opts.top_p.to_string())
        .env("FERRITE_SEED", req.opts.seed.to_string())
        .env("FERRITE_CHUNK", req.opts.chunk.to_string())
        .env("FERRITE_MQAR_SEED", req.opts.mqar_seed.to_string())
        .env("FERRITE_MQAR_PAIRS", req.opts.pairs.to_string())
        .env("FERRITE_MQAR_SEQ_LEN", req.opts.seq_len.to_string())
        .env("DEFMT_LOG", "info")
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    match &req.opts.text {
        Some(t) => cmd.env("FERRITE_TEXT", t),
        None => cmd.env_remove("FERRITE_TEXT"),
    };
    match &req.opts.bench {
        Some(b) => cmd.env("FERRITE_BENCH", b),
        None => cmd.env_remove("FERRITE_BENCH"),
    };
    if let Some(k) = req.opts.kernels {
        cmd.env("FERRITE_KERNELS", k);
    }
    if req.opts.math_noinline {
        cmd.env("FERRITE_MATH_NOINLINE", "1");
    } else {
        cmd.env_remove("FERRITE_MATH_NOINLINE");
    }
    if target_dir != boards_dir().join("target") {
        cmd.env("CARGO_TARGET_DIR", &target_dir);
    }
    // Every firmware of a board gets the same variables, so that switching
    // between them does not rebuild; generate, eval and ota embed the image.
    if req.image.as_os_str().is_empty() {
        cmd.env_remove("FERRITE_IMAGE");
    } else {
        cmd.env("FERRITE_IMAGE", req.image);
    }
    let out = cmd.output().context("running cargo build in boards/")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if let Some(line) = stderr
            .lines()
            .find(|l| l.contains("will not fit in region") || l.contains("overflowed by"))
        {
            let over = crate::image_check::overflow_bytes(&stderr);
            let hint = match (&facts, over) {
                (Some(f), Some(over)) if line.contains("FLASH") => {
                    format!("; {}", f.fit_hint(over))
                }
                _ => String::new(),
            };
            let what = match &facts {
                Some(_) => format!("image {}", req.image.display()),
                None => format!("the {bin} firmware"),
            };
            bail!(
                "{what} does not fit board {} (flash {} KiB, RAM {} KiB in boards/memory/{}): {}{hint}",
                board.name,
                flash / 1024,
                ram / 1024,
                board.name,
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
    let math = if fast_math { "" } else { "-libm" };
    let elf = dir.join(match (req.defmt, &variant) {
        (true, _) => format!("{bin}-defmt{math}.elf"),
        (false, Some(v)) => format!("{bin}-{v}{math}.elf"),
        (false, None) => format!("{bin}{math}.elf"),
    });
    std::fs::copy(&built, &elf).with_context(|| format!("copying {}", built.display()))?;
    Ok(elf)
}

/// The build directory and ELF suffix of the environment settings of
/// `opts` (`kernels-portable`, `math-noinline`, both joined by `-`); `None`
/// for the default build.
fn variant_name(opts: &BuildOpts) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(k) = opts.kernels {
        parts.push(format!("kernels-{k}"));
    }
    if opts.math_noinline {
        parts.push("math-noinline".to_string());
    }
    (!parts.is_empty()).then(|| parts.join("-"))
}

/// `CARGO_ENCODED_RUSTFLAGS` for `board`: its `-C target-cpu`, or nothing.
pub fn rustflags(board: &Board) -> String {
    board
        .cpu
        .map(|cpu| format!("-C\x1ftarget-cpu={cpu}"))
        .unwrap_or_default()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_build_apart() {
        assert_eq!(variant_name(&BuildOpts::default()), None);
        let o = BuildOpts {
            kernels: Some("portable"),
            math_noinline: true,
            ..BuildOpts::default()
        };
        assert_eq!(
            variant_name(&o).as_deref(),
            Some("kernels-portable-math-noinline")
        );
    }
}
