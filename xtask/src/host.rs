//! The host side: the `ferrite` CLI (built from tools/) makes images and the
//! reference outputs the boards are checked against.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};

use crate::boards::{root_dir, Board, Math};

/// `target/release/ferrite`, built once per xtask run.
pub fn ferrite() -> Result<&'static Path> {
    ferrite_with(Math::Libm)
}

/// The host CLI that runs `math`, what a board built with it must match bit
/// for bit: plain (`target/release/ferrite`), or with the tools' `fast-math`
/// or `fast-math-int` feature, built in `target/fast-math` (so that neither
/// replaces the plain binary) and copied to `target/fast-math/release/
/// ferrite-<int|float>` right away (so that neither replaces the other).
/// Each is built once per xtask run.
pub fn ferrite_with(math: Math) -> Result<&'static Path> {
    static BIN: [OnceLock<PathBuf>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = &BIN[math as usize];
    if let Some(p) = slot.get() {
        return Ok(p);
    }
    let root = root_dir();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let feature = math.host_feature();
    let target = match feature {
        Some(_) => target.join("fast-math"),
        None => target,
    };
    eprintln!(
        "building the host CLI (cargo build --release -p ferrite-tools{}) ...",
        feature
            .map(|f| format!(" --features {f}"))
            .unwrap_or_default()
    );
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&root)
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "ferrite-tools",
            "--bin",
            "ferrite",
        ])
        .env("CARGO_TARGET_DIR", &target);
    if let Some(f) = feature {
        cmd.args(["--features", f]);
    }
    let status = cmd
        .status()
        .context("building the host CLI (cargo build -p ferrite-tools)")?;
    if !status.success() {
        bail!("building the host CLI failed");
    }
    let built = target.join("release").join("ferrite");
    let bin = match feature {
        Some(_) => {
            let copy = target
                .join("release")
                .join(format!("ferrite-{}", math.name()));
            // Copied beside it, then renamed over it: a copy still running
            // (another xtask) keeps its file.
            let tmp = copy.with_extension("tmp");
            std::fs::copy(&built, &tmp)
                .with_context(|| format!("copying {} to {}", built.display(), tmp.display()))?;
            std::fs::rename(&tmp, &copy)
                .with_context(|| format!("renaming {} to {}", tmp.display(), copy.display()))?;
            copy
        }
        None => built,
    };
    Ok(slot.get_or_init(|| bin))
}

pub fn images_dir() -> PathBuf {
    crate::boards::work_dir().join("images")
}

/// `ferrite quantize tests/fixtures/<model> --dtype <dtype>` into the xtask work dir.
pub fn fixture_image(model: &str, dtype: &str) -> Result<PathBuf> {
    let dir = root_dir().join("tests").join("fixtures").join(model);
    model_image(&dir, model, dtype)
}

/// The random-weight model with the committed byte-level BPE tokenizer
/// (`tests/tokenizer/model`, vocab 800), quantized to `dtype`.
pub fn bpe_image(dtype: &str) -> Result<PathBuf> {
    let dir = root_dir().join("tests").join("tokenizer").join("model");
    model_image(&dir, "bpe_model", dtype)
}

/// `ferrite quantize <dir> --dtype <dtype>` into the xtask work dir as `<name>.<dtype>.fer`.
pub fn model_image(dir: &Path, model: &str, dtype: &str) -> Result<PathBuf> {
    if !dir.is_dir() {
        bail!("model directory {} not found", dir.display());
    }
    std::fs::create_dir_all(images_dir())?;
    let out = images_dir().join(format!("{model}.{dtype}.fer"));
    let shown = dir.strip_prefix(root_dir()).unwrap_or(dir);
    eprintln!("quantizing {} to {dtype} ...", shown.display());
    let o = Command::new(ferrite()?)
        .arg("quantize")
        .arg(dir)
        .arg("-o")
        .arg(&out)
        .args(["--dtype", dtype])
        .output()
        .context("running ferrite quantize")?;
    if !o.status.success() {
        bail!(
            "ferrite quantize {} --dtype {dtype}: {}",
            dir.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(out)
}

/// The image a board runs by default.
pub fn default_image(board: &Board) -> Result<PathBuf> {
    match board.model {
        (dir, dtype) if dir.contains('/') => shipped_image(dir, dtype),
        (fixture, dtype) => fixture_image(fixture, dtype),
    }
}

/// `ferrite tokenize <image> --text T`: the prompt's ids in the image's tokenizer.
pub fn tokenize(image: &Path, text: &str) -> Result<Vec<u32>> {
    let o = Command::new(ferrite()?)
        .arg("tokenize")
        .arg(image)
        .args(["--text", text])
        .output()
        .context("running ferrite tokenize")?;
    if !o.status.success() {
        bail!(
            "ferrite tokenize: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    parse_ids(&String::from_utf8(o.stdout)?, "ferrite tokenize")
}

fn parse_ids(text: &str, what: &str) -> Result<Vec<u32>> {
    text.trim()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim()
                .parse::<u32>()
                .with_context(|| format!("{what}: bad id {s:?}"))
        })
        .collect()
}

/// A shipped model directory (`models/...`), quantized to `dtype`, named
/// after its path (`models/mqar/bla-m15` -> `mqar-bla-m15.<dtype>.fer`).
pub fn shipped_image(rel: &str, dtype: &str) -> Result<PathBuf> {
    let name = rel.trim_start_matches("models/").replace('/', "-");
    model_image(&root_dir().join(rel), &name, dtype)
}

/// `ferrite generate <image> --prompt P -n N --ids` (greedy), by the CLI
/// that runs `math`.
pub fn generate_ids(image: &Path, prompt: &str, n: usize, math: Math) -> Result<Vec<u32>> {
    generate_ids_with(image, prompt, n, &crate::boards::BuildOpts::default(), math)
}

/// `ferrite generate <image> --prompt P -n N --ids` with the sampler of
/// `opts`, by the CLI that runs `math`.
pub fn generate_ids_with(
    image: &Path,
    prompt: &str,
    n: usize,
    opts: &crate::boards::BuildOpts,
    math: Math,
) -> Result<Vec<u32>> {
    let o = Command::new(ferrite_with(math)?)
        .arg("generate")
        .arg(image)
        .args(["--prompt", prompt, "-n", &n.to_string(), "--ids"])
        .args(opts.sampler_args())
        .output()
        .context("running ferrite generate")?;
    if !o.status.success() {
        bail!(
            "ferrite generate: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    parse_ids(&String::from_utf8(o.stdout)?, "ferrite generate --ids")
}

/// The last position's logits of `ferrite logits <image> --tokens ...`,
/// parsed straight to f32 (shortest round-trip text gives the exact bits),
/// by the CLI that runs `math`.
pub fn last_logits(image: &Path, tokens: &[u32], math: Math) -> Result<Vec<f32>> {
    let list: Vec<String> = tokens.iter().map(u32::to_string).collect();
    let o = Command::new(ferrite_with(math)?)
        .arg("logits")
        .arg(image)
        .args(["--tokens", &list.join(",")])
        .output()
        .context("running ferrite logits")?;
    if !o.status.success() {
        bail!(
            "ferrite logits: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let text = String::from_utf8(o.stdout)?;
    let text = text.trim();
    let inner = text
        .strip_suffix("]]")
        .context("ferrite logits: not a JSON list of lists")?;
    let last = inner.rsplit('[').next().context("ferrite logits: empty")?;
    last.split(',')
        .map(|s| {
            s.trim()
                .parse::<f32>()
                .with_context(|| format!("ferrite logits: bad number {s:?}"))
        })
        .collect()
}

/// The key=value pairs of the line before last and the value of the last
/// line of `ferrite eval <image> <args>` (the CLI that runs `math`).
fn eval(image: &Path, args: &[String], math: Math) -> Result<(Vec<(String, String)>, String)> {
    let o = Command::new(ferrite_with(math)?)
        .arg("eval")
        .arg(image)
        .args(args)
        .output()
        .context("running ferrite eval")?;
    if !o.status.success() {
        bail!(
            "ferrite eval: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let text = String::from_utf8(o.stdout)?;
    let lines: Vec<&str> = text.lines().collect();
    let [.., info, last] = lines.as_slice() else {
        bail!("ferrite eval: unexpected output {text:?}");
    };
    let kv = info
        .split_whitespace()
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let value = last
        .split_once('=')
        .map(|(_, v)| v.to_string())
        .context("ferrite eval: no value on the last line")?;
    Ok((kv, value))
}

fn field<T: std::str::FromStr>(kv: &[(String, String)], key: &str) -> Result<T> {
    kv.iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.parse().ok())
        .with_context(|| format!("ferrite eval: no valid {key}="))
}

/// MQAR on the host: `ferrite eval <image> --mqar ...` (the CLI with or
/// that runs `math`).
pub struct HostMqar {
    pub correct: u64,
    pub total: u64,
    /// The `accuracy=` value as printed (4 decimals).
    pub accuracy: String,
}

pub fn eval_mqar(
    image: &Path,
    seed: u64,
    n: usize,
    pairs: usize,
    seq_len: usize,
    math: Math,
) -> Result<HostMqar> {
    let args: Vec<String> = [
        "--mqar",
        "--seed",
        &seed.to_string(),
        "--n",
        &n.to_string(),
        "--pairs",
        &pairs.to_string(),
        "--seq-len",
        &seq_len.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (kv, accuracy) = eval(image, &args, math)?;
    Ok(HostMqar {
        correct: field(&kv, "correct")?,
        total: field(&kv, "total")?,
        accuracy,
    })
}

/// Bits per byte on the host: `ferrite eval <image> --text F --chunk C` (the
/// CLI that runs `math`).
pub struct HostText {
    /// Sum of -ln p over the predicted tokens (exact f64, parsed from the shortest round-trip text).
    pub nats: f64,
    pub predicted_bytes: u64,
    /// The `bits_per_byte=` value as printed (4 decimals).
    pub bits_per_byte: String,
}

pub fn eval_text(image: &Path, text: &Path, chunk: usize, math: Math) -> Result<HostText> {
    let args = vec![
        "--text".to_string(),
        text.display().to_string(),
        "--chunk".to_string(),
        chunk.to_string(),
    ];
    let (kv, bits_per_byte) = eval(image, &args, math)?;
    Ok(HostText {
        nats: field(&kv, "nats")?,
        predicted_bytes: field(&kv, "predicted_bytes")?,
        bits_per_byte,
    })
}
