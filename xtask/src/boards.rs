//! Boards: build the firmware for one, run it under QEMU, read its output.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

pub const DEFAULT_PROMPT: &str = "Once upon a time";
pub const DEFAULT_N: usize = 32;
/// Seconds a QEMU run may take before it counts as hung.
pub const DEFAULT_TIMEOUT_S: u64 = 120;

/// One QEMU board: how to build for it and how to run it.
pub struct Board {
    pub name: &'static str,
    pub target: &'static str,
    pub qemu: &'static str,
    pub machine: &'static str,
    /// Extra QEMU arguments (e.g. the CPU's ISA extensions).
    pub qemu_args: &'static [&'static str],
    /// `boards/memory/<file>`: also the budget xtask checks against.
    pub memory: &'static str,
    /// Default model: fixture directory under tests/fixtures and dtype.
    pub model: (&'static str, &'static str),
    /// One line for docs.
    pub about: &'static str,
    /// The core and machine, for the README's compact table.
    pub core: &'static str,
    /// The tile-kernel module its target gets (`ferrite::kernels::arch::NAME`,
    /// chosen by runtime/build.rs): the `kernels` check expects it.
    pub kernels: &'static str,
    /// Whether its firmware is built with the runtime's `fast-math` feature
    /// by default (docs/benchmarks.md, "Fast math"): the integer module on a
    /// target without hardware f32, the f32 polynomial on the others (see
    /// [`Board::math`]). The QEMU suite then compares it with a host CLI
    /// built with the same module.
    pub fast_math: bool,
}

/// The `exp`/`sigmoid`/`silu` a build runs (`ferrite::math::FAST_MATH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Math {
    /// `libm` (the runtime without `fast-math`).
    Libm,
    /// `math::fast_int` (`fast-math` on a target without hardware f32, or
    /// `fast-math-int`).
    Int,
    /// `math::fast_float` (`fast-math` on a target with hardware f32).
    Float,
}

impl Math {
    pub fn name(self) -> &'static str {
        match self {
            Math::Libm => "libm",
            Math::Int => "int",
            Math::Float => "float",
        }
    }

    /// The host CLI's cargo feature that gives the same module on the host
    /// (which has hardware f32).
    pub fn host_feature(self) -> Option<&'static str> {
        match self {
            Math::Libm => None,
            Math::Int => Some("fast-math-int"),
            Math::Float => Some("fast-math"),
        }
    }
}

/// The model every board runs unless told otherwise (`--image`).
pub const DEFAULT_MODEL: &str = "hybrid_all4_untied";

pub const BOARDS: &[Board] = &[
    Board {
        name: "m4f",
        target: "thumbv7em-none-eabihf",
        qemu: "qemu-system-arm",
        machine: "mps2-an386",
        qemu_args: &[],
        memory: "m4f.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "Cortex-M4F, QEMU mps2-an386",
        core: "Cortex-M4F (mps2-an386)",
        kernels: "dsp",
        fast_math: true,
    },
    Board {
        name: "m7",
        target: "thumbv7em-none-eabihf",
        qemu: "qemu-system-arm",
        machine: "mps2-an500",
        qemu_args: &[],
        memory: "m7.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "Cortex-M7, QEMU mps2-an500",
        core: "Cortex-M7 (mps2-an500)",
        kernels: "dsp",
        fast_math: true,
    },
    Board {
        name: "m55",
        target: "thumbv8m.main-none-eabihf",
        qemu: "qemu-system-arm",
        machine: "mps3-an547",
        qemu_args: &[],
        memory: "m55.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "Cortex-M55 (Helium), QEMU mps3-an547",
        core: "Cortex-M55 (mps3-an547)",
        kernels: "helium",
        fast_math: true,
    },
    Board {
        name: "m3",
        target: "thumbv7m-none-eabi",
        qemu: "qemu-system-arm",
        machine: "lm3s6965evb",
        qemu_args: &[],
        memory: "m3.x",
        model: (DEFAULT_MODEL, "int8"),
        about: "Cortex-M3 (no FPU), QEMU lm3s6965evb, real budget 256 KB flash / 64 KB RAM",
        core: "Cortex-M3, 256 KB / 64 KB (lm3s6965evb)",
        kernels: "v7m",
        fast_math: true,
    },
    Board {
        name: "rv32imac",
        target: "riscv32imac-unknown-none-elf",
        qemu: "qemu-system-riscv32",
        machine: "virt",
        qemu_args: &["-bios", "none", "-cpu", "rv32,f=false,d=false"],
        memory: "rv32.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "RISC-V rv32imac (no FPU), QEMU virt",
        core: "RV32IMAC (virt)",
        kernels: "rv32",
        fast_math: true,
    },
    Board {
        name: "rv32imafc",
        target: "riscv32imafc-unknown-none-elf",
        qemu: "qemu-system-riscv32",
        machine: "virt",
        qemu_args: &["-bios", "none", "-cpu", "rv32,d=false"],
        memory: "rv32.x",
        model: (DEFAULT_MODEL, "f32"),
        about: "RISC-V rv32imafc, QEMU virt",
        core: "RV32IMAFC (virt)",
        kernels: "rv32",
        fast_math: true,
    },
];

impl Board {
    /// f32 in hardware: Arm hard-float ABIs and RISC-V with F (as
    /// runtime/build.rs decides `ferrite_hard_float`).
    pub fn hard_float(&self) -> bool {
        self.target.ends_with("eabihf") || self.target.starts_with("riscv32imaf")
    }

    /// What a firmware for this board runs with (`fast_math`) or without
    /// the runtime's `fast-math` feature.
    pub fn math(&self, fast_math: bool) -> Math {
        match (fast_math, self.hard_float()) {
            (false, _) => Math::Libm,
            (true, false) => Math::Int,
            (true, true) => Math::Float,
        }
    }

    pub fn named(name: &str) -> Result<&'static Board> {
        BOARDS.iter().find(|b| b.name == name).with_context(|| {
            let names: Vec<_> = BOARDS.iter().map(|b| b.name).collect();
            format!("unknown board {name:?}; boards: {}", names.join(", "))
        })
    }

    /// (flash, RAM) budget in bytes, read from the board's memory.x.
    pub fn budget(&self) -> Result<(u64, u64)> {
        let path = boards_dir().join("memory").join(self.memory);
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let length = |region: &str| -> Result<u64> {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(region) && l.contains("LENGTH"))
                .with_context(|| format!("{}: no {region} region", path.display()))?;
            let v = line
                .split("LENGTH")
                .nth(1)
                .unwrap()
                .trim_start_matches([' ', '='])
                .trim();
            parse_size(v).with_context(|| format!("{}: bad LENGTH {v:?}", path.display()))
        };
        Ok((length("FLASH")?, length("RAM")?))
    }
}

fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mul) = match v.chars().last()? {
        'K' => (&v[..v.len() - 1], 1024),
        'M' => (&v[..v.len() - 1], 1024 * 1024),
        _ => (v, 1),
    };
    let n = if let Some(h) = num.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()?
    } else {
        num.parse().ok()?
    };
    Some(n * mul)
}

pub fn root_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn boards_dir() -> PathBuf {
    root_dir().join("boards")
}

/// Where xtask keeps ELF copies and run directories.
pub fn work_dir() -> PathBuf {
    boards_dir().join("target").join("xtask")
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Firmware {
    /// `src/bin/generate.rs`: image in flash, static state.
    Generate,
    /// `src/bin/ota.rs`: image read at run time into a heap buffer.
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
    pub fn fast_math(&self, board: &Board) -> bool {
        self.fast_math.unwrap_or(board.fast_math)
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
    let facts = if matches!(req.firmware, Firmware::Generate | Firmware::Eval) {
        let facts = crate::image_check::check(req.image)?;
        if facts.bytes > flash {
            bail!(
                "image {} ({} bytes) does not fit board {}: its flash budget is {} KiB (boards/memory/{}); {}",
                req.image.display(),
                facts.bytes,
                board.name,
                flash / 1024,
                board.memory,
                facts.fit_hint(facts.bytes - flash)
            );
        }
        Some(facts)
    } else {
        None
    };
    let mut features = format!("board-{}", board.name);
    // The BPE tokenizer's code only where the image needs it (and for the
    // OTA example, which reads any image at run time).
    if facts
        .as_ref()
        .map_or(req.firmware == Firmware::Ota, |f| f.bpe)
    {
        features.push_str(",bpe");
    }
    if req.defmt {
        features.push_str(",defmt");
    }
    let fast_math = req.opts.fast_math(board);
    if fast_math {
        features.push_str(",fast-math");
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
        board.name, board.target
    );
    // Settings read from the environment by a build script force a rebuild
    // when they change: each combination builds in its own directory.
    let variant = variant_name(&req.opts);
    let target_dir = match &variant {
        Some(v) => boards_dir().join("target").join(v),
        None => boards_dir().join("target"),
    };
    let mut cmd = Command::new(cargo());
    cmd.current_dir(boards_dir())
        .args([
            "build",
            "--release",
            "--quiet",
            "--target",
            board.target,
            "--features",
            &features,
            "--bin",
            bin,
        ])
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
    if variant.is_some() {
        cmd.env("CARGO_TARGET_DIR", &target_dir);
    }
    // Every firmware of a board gets the same variables, so that switching
    // between them does not rebuild; only `generate` embeds the image.
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
            let over = overflow_bytes(&stderr);
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
                board.memory,
                line.split_once("error: ").map_or(line, |(_, e)| e).trim()
            );
        }
        eprint!("{stderr}");
        bail!("building {bin} for {} failed", board.name);
    }
    eprint!("{stderr}");
    let built = target_dir.join(board.target).join("release").join(bin);
    let dir = work_dir().join(board.name);
    std::fs::create_dir_all(&dir)?;
    let math = if fast_math == board.fast_math {
        ""
    } else if fast_math {
        "-fast-math"
    } else {
        "-libm"
    };
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

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// The largest "overflowed by N bytes" of a linker's message.
fn overflow_bytes(stderr: &str) -> Option<u64> {
    stderr
        .split("overflowed by ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .max()
}

/// Flash and RAM of an ELF, from `llvm-size -A`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// .vector_table + .text + .rodata + .data (the initial values live in flash).
    pub flash: u64,
    /// .data + .bss + .uninit (+ .heap): static RAM, without the stack.
    pub ram: u64,
}

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
    let (mut flash, mut ram) = (0, 0);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut f = line.split_whitespace();
        let (Some(name), Some(size)) = (f.next(), f.next()) else {
            continue;
        };
        let Ok(size) = size.parse::<u64>() else {
            continue;
        };
        let base = name.trim_start_matches(".s"); // .sdata/.sbss on RISC-V
        match name {
            ".vector_table" | ".text" | ".rodata" | ".init" | ".trap" | ".srodata"
            | ".eh_frame" => flash += size,
            ".data" | ".sdata" => {
                flash += size;
                ram += size;
            }
            ".bss" | ".sbss" | ".uninit" | ".heap" => ram += size,
            _ if base == name => {}
            _ => {}
        }
    }
    Ok(Sizes { flash, ram })
}

/// One finished QEMU run.
pub struct Run {
    pub board: &'static Board,
    pub status: i32,
    /// Everything the firmware wrote (decoded, for defmt).
    pub output: Vec<u8>,
    pub sizes: Sizes,
}

/// Runs an ELF under QEMU with `-icount shift=0,sleep=off`, inside `timeout`,
/// with `cwd` as the semihosting working directory.
pub fn run_qemu(
    board: &'static Board,
    elf: &Path,
    cwd: &Path,
    echo: bool,
    defmt: bool,
    timeout_s: u64,
) -> Result<Run> {
    let sizes = sizes(elf)?;
    if echo {
        eprintln!(
            "running it under QEMU ({} -machine {}, instructions counted) ...",
            board.qemu, board.machine
        );
    }
    let mut cmd = Command::new("timeout");
    cmd.arg(timeout_s.to_string())
        .arg(board.qemu)
        .args(["-machine", board.machine])
        .args(board.qemu_args)
        .args(["-nographic", "-monitor", "none", "-serial", "none"])
        .args(["-semihosting-config", "enable=on,target=native"])
        .args(["-icount", "shift=0,sleep=off"])
        .arg("-kernel")
        .arg(elf)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut qemu = cmd
        .spawn()
        .with_context(|| format!("starting {}", board.qemu))?;
    let mut source: Box<dyn Read + Send> = Box::new(qemu.stdout.take().unwrap());
    let mut decoder = None;
    if defmt {
        let mut d = Command::new("defmt-print")
            .arg("-e")
            .arg(elf)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting defmt-print (install it with `cargo install defmt-print`)")?;
        let mut to_decoder = d.stdin.take().unwrap();
        let mut raw = source;
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut raw, &mut to_decoder);
        });
        source = Box::new(d.stdout.take().unwrap());
        decoder = Some(d);
    }
    let mut output = Vec::new();
    let mut chunk = [0u8; 4096];
    let stdout = std::io::stdout();
    loop {
        let n = source.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        output.extend_from_slice(&chunk[..n]);
        if echo {
            let mut o = stdout.lock();
            o.write_all(&chunk[..n])?;
            o.flush()?;
        }
    }
    let status = qemu.wait()?.code().unwrap_or(-1);
    if let Some(mut d) = decoder {
        let _ = d.wait();
    }
    Ok(Run {
        board,
        status,
        output,
        sizes,
    })
}

pub fn build_and_run(req: &RunRequest<'_>) -> Result<Run> {
    let elf = build(req)?;
    let cwd = work_dir().join(req.board.name);
    let tokens = match (req.firmware, &req.opts.text) {
        (Firmware::Eval, Some(t)) => std::fs::metadata(t).map_or(0, |m| m.len() as usize),
        (Firmware::Eval, None) => req.n * req.opts.seq_len,
        _ => req.n,
    };
    run_qemu(
        req.board,
        &elf,
        &cwd,
        req.echo,
        req.defmt,
        timeout_for(tokens),
    )
}

/// A generous timeout: ~100M instructions take 0.15 s, the slowest board
/// (soft float) needs a few M instructions per token (27M for the small
/// trained LM on the M3: 0.05 s).
pub fn timeout_for(n: usize) -> u64 {
    DEFAULT_TIMEOUT_S + (n as u64) / 5
}

/// How the OTA example's download reaches the board.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Download {
    Intact,
    /// One byte in the middle of the image flipped (a corrupted transfer).
    FlipByte,
    /// Only the first half arrives.
    Truncated,
}

/// Builds the OTA example, puts the image (possibly damaged) where the
/// board reads it (`ota.fer` in the semihosting working directory), runs it.
pub fn run_ota(
    board: &'static Board,
    image: &Path,
    download: Download,
    prompt: &str,
    n: usize,
    echo: bool,
) -> Result<Run> {
    let req = RunRequest {
        board,
        firmware: Firmware::Ota,
        image,
        prompt,
        n,
        defmt: false,
        echo,
        opts: BuildOpts::default(),
    };
    let elf = build(&req)?;
    let cwd = work_dir().join(board.name).join("ota");
    std::fs::create_dir_all(&cwd)?;
    let mut bytes = std::fs::read(image).with_context(|| image.display().to_string())?;
    match download {
        Download::Intact => {}
        Download::FlipByte => {
            let i = bytes.len() / 2;
            bytes[i] ^= 0x40;
        }
        Download::Truncated => bytes.truncate(bytes.len() / 2),
    }
    std::fs::write(cwd.join("ota.fer"), &bytes)?;
    run_qemu(board, &elf, &cwd, echo, false, timeout_for(n))
}

/// The `generate` firmware's report, parsed from its output.
#[derive(Debug, Clone)]
pub struct Report {
    pub board: &'static str,
    /// Ids on the `tokens:` line (the first 256 for longer runs).
    pub tokens: Vec<u32>,
    pub tokens_truncated: bool,
    pub tokens_fnv: u32,
    pub count: usize,
    pub logits_fnv: u32,
    pub logits_sum: f32,
    /// key=value pairs of the `run:` line.
    pub run: BTreeMap<String, String>,
    pub sizes: Sizes,
}

impl Run {
    /// The firmware's last lines, for error messages.
    pub fn tail(&self) -> String {
        let text = String::from_utf8_lossy(&self.output);
        let lines: Vec<_> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// A non-zero exit is an error with the reason.
    fn check_status(&self) -> Result<()> {
        if self.status != 0 {
            let why = match self.status {
                124 => "timed out (hung?)".to_string(),
                2 => "runtime error".to_string(),
                3 => "CPU fault".to_string(),
                101 => "panic".to_string(),
                s => format!("exit status {s}"),
            };
            bail!(
                "{} firmware failed: {why}\n{}",
                self.board.name,
                self.tail()
            );
        }
        Ok(())
    }

    /// Parses a successful run; a non-zero exit is an error with the reason.
    pub fn report(&self) -> Result<Report> {
        self.check_status()?;
        let text = String::from_utf8_lossy(&self.output);
        let line = |prefix: &str| -> Result<&str> {
            text.lines()
                .rev()
                .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest.trim()))
                .with_context(|| {
                    format!(
                        "{}: no `{prefix}` line in the output:\n{}",
                        self.board.name,
                        self.tail()
                    )
                })
        };
        let tokens_line = line("tokens: ")?;
        let tokens_truncated = tokens_line.ends_with(",...");
        let tokens = tokens_line
            .trim_end_matches(",...")
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u32>()
                    .with_context(|| format!("bad token id {s:?}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let kv = |l: &str| -> BTreeMap<String, String> {
            l.split_whitespace()
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.into(), v.into()))
                .collect()
        };
        let hex = |m: &BTreeMap<String, String>, k: &str| -> Result<u32> {
            let v = m.get(k).with_context(|| format!("missing {k}"))?;
            u32::from_str_radix(v.trim_start_matches("0x"), 16)
                .with_context(|| format!("bad {k}={v}"))
        };
        let th = kv(line("tokens_hash: ")?);
        let ck = kv(line("checksum: ")?);
        let run = kv(line("run: ")?);
        Ok(Report {
            board: self.board.name,
            tokens,
            tokens_truncated,
            tokens_fnv: hex(&th, "fnv1a")?,
            count: th
                .get("count")
                .and_then(|c| c.parse().ok())
                .context("tokens_hash: bad count")?,
            logits_fnv: hex(&ck, "fnv1a")?,
            logits_sum: f32::from_bits(hex(&ck, "sum_bits")?),
            run,
            sizes: self.sizes,
        })
    }
}

/// The `eval` firmware's report.
#[derive(Debug, Clone)]
pub struct EvalReport {
    pub board: &'static str,
    /// key=value pairs of the `eval:` line (mqar: correct, total, ...;
    /// text: bytes, tokens, predicted_bytes, nats_bits, ...).
    pub eval: BTreeMap<String, String>,
    /// The value of the `accuracy=` or `bits_per_byte=` line, as printed.
    pub result: String,
    /// key=value pairs of the `run:` line.
    pub run: BTreeMap<String, String>,
    pub sizes: Sizes,
}

impl EvalReport {
    pub fn get(&self, key: &str) -> &str {
        self.eval
            .get(key)
            .or_else(|| self.run.get(key))
            .map(String::as_str)
            .unwrap_or("?")
    }

    pub fn number<T: std::str::FromStr>(&self, key: &str) -> Result<T> {
        let v = self.get(key);
        v.parse()
            .ok()
            .with_context(|| format!("{}: bad or missing {key}={v}", self.board))
    }

    /// The `stats:` line of `cargo xtask eval-board`.
    pub fn stats_line(&self) -> String {
        format!(
            "stats: board={} eval={} tokens={} instructions_per_token={} flash_bytes={} ram_bytes={} stack_bytes={} state_bytes={}",
            self.board,
            self.run_get("eval"),
            self.run_get("tokens"),
            self.run_get("instructions_per_token"),
            self.sizes.flash,
            self.sizes.ram,
            self.run_get("stack_bytes"),
            self.run_get("state_bytes"),
        )
    }

    /// A value of the `run:` line.
    pub fn run_get(&self, key: &str) -> &str {
        self.run.get(key).map(String::as_str).unwrap_or("?")
    }
}

impl Run {
    /// Parses a successful `eval` run.
    pub fn eval_report(&self) -> Result<EvalReport> {
        self.check_status()?;
        let text = String::from_utf8_lossy(&self.output);
        let kv = |l: &str| -> BTreeMap<String, String> {
            l.split_whitespace()
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.into(), v.into()))
                .collect()
        };
        let find = |prefix: &str| {
            text.lines()
                .rev()
                .find_map(|l| l.strip_prefix(prefix))
                .with_context(|| {
                    format!(
                        "{}: no `{prefix}` line in the output:\n{}",
                        self.board.name,
                        self.tail()
                    )
                })
        };
        let eval = kv(find("eval: ")?);
        let result = find("accuracy=")
            .or_else(|_| find("bits_per_byte="))?
            .trim()
            .to_string();
        Ok(EvalReport {
            board: self.board.name,
            eval,
            result,
            run: kv(find("run: ")?),
            sizes: self.sizes,
        })
    }
}

impl Report {
    pub fn get(&self, key: &str) -> &str {
        self.run.get(key).map(String::as_str).unwrap_or("?")
    }

    /// The `stats:` line of `cargo xtask board`.
    pub fn stats_line(&self) -> String {
        format!(
            "stats: board={} tokens={} instructions_per_token={} flash_bytes={} ram_bytes={} stack_bytes={} state_bytes={}",
            self.board,
            self.get("tokens"),
            self.get("instructions_per_token"),
            self.sizes.flash,
            self.sizes.ram,
            self.get("stack_bytes"),
            self.get("state_bytes"),
        )
    }
}

/// FNV-1a over the little-endian bytes of 32-bit words (as the firmware does).
pub fn fnv1a(words: impl IntoIterator<Item = u32>) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for w in words {
        for b in w.to_le_bytes() {
            h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        }
    }
    h
}
