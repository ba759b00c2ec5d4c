//! The host side: the `ferrite` CLI (built from tools/) makes images and the
//! reference outputs the boards are checked against.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};

use crate::boards::{root_dir, Board};

/// `target/release/ferrite`, built once per xtask run.
pub fn ferrite() -> Result<&'static Path> {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    if let Some(p) = BIN.get() {
        return Ok(p);
    }
    let root = root_dir();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&root)
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "ferrite-tools",
            "--bin",
            "ferrite",
        ])
        .status()
        .context("building the host CLI (cargo build -p ferrite-tools)")?;
    if !status.success() {
        bail!("building the host CLI failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(BIN.get_or_init(|| target.join("release").join("ferrite")))
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
fn model_image(dir: &Path, model: &str, dtype: &str) -> Result<PathBuf> {
    if !dir.is_dir() {
        bail!("model directory {} not found", dir.display());
    }
    std::fs::create_dir_all(images_dir())?;
    let out = images_dir().join(format!("{model}.{dtype}.fer"));
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
    fixture_image(board.model.0, board.model.1)
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

/// `ferrite generate <image> --prompt P -n N --ids`.
pub fn generate_ids(image: &Path, prompt: &str, n: usize) -> Result<Vec<u32>> {
    let o = Command::new(ferrite()?)
        .arg("generate")
        .arg(image)
        .args(["--prompt", prompt, "-n", &n.to_string(), "--ids"])
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
/// parsed straight to f32 (shortest round-trip text gives the exact bits).
pub fn last_logits(image: &Path, tokens: &[u32]) -> Result<Vec<f32>> {
    let list: Vec<String> = tokens.iter().map(u32::to_string).collect();
    let o = Command::new(ferrite()?)
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
