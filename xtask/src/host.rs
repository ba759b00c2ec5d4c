//! The host side: the `ferrite` CLI (built from tools/) makes images and the
//! reference outputs the boards are checked against.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{ensure, Context, Result};

use crate::options::{BuildOpts, Math};
use crate::paths::{root_dir, work_dir};
use ferrite_common::report::Fields;
use ferrite_common::target::Target as Board;

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
    let mut target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root_dir().join("target"), PathBuf::from);
    let feature = math.host_feature();
    if feature.is_some() {
        target.push("fast-math");
    }
    let shown = feature
        .map(|f| format!(" --features {f}"))
        .unwrap_or_default();
    eprintln!("building the host CLI (cargo build --release -p ferrite-tools{shown}) ...");
    let status = crate::setup::cargo("build --quiet --release -p ferrite-tools --bin ferrite")
        .args(feature.map(|f| ["--features", f]).iter().flatten())
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .context("building the host CLI (cargo build -p ferrite-tools)")?;
    ensure!(status.success(), "building the host CLI failed");
    let mut bin = target.join("release").join("ferrite");
    if feature.is_some() {
        // Copied beside it, then renamed over it: a copy still running
        // (another xtask) keeps its file.
        let copy = target
            .join("release")
            .join(format!("ferrite-{}", math.name()));
        let tmp = copy.with_extension("tmp");
        std::fs::copy(&bin, &tmp)
            .with_context(|| format!("copying {} to {}", bin.display(), tmp.display()))?;
        std::fs::rename(&tmp, &copy)
            .with_context(|| format!("renaming {} to {}", tmp.display(), copy.display()))?;
        bin = copy;
    }
    Ok(slot.get_or_init(|| bin))
}

/// Runs `cmd` (a `ferrite` command, `what`); its stdout, or its stderr as the error.
fn stdout(cmd: &mut Command, what: &str) -> Result<String> {
    let o = cmd.output().with_context(|| format!("running {what}"))?;
    ensure!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr).trim()
    );
    Ok(String::from_utf8(o.stdout)?)
}

/// `ferrite quantize tests/fixtures/<model> --dtype <dtype>` into the xtask work dir.
pub fn fixture_image(model: &str, dtype: &str) -> Result<PathBuf> {
    model_image(&root_dir().join("tests/fixtures").join(model), model, dtype)
}

/// The random-weight model with the committed byte-level BPE tokenizer
/// (`tests/tokenizer/model`, vocab 800), quantized to `dtype`.
pub fn bpe_image(dtype: &str) -> Result<PathBuf> {
    model_image(
        &root_dir().join("tests/tokenizer/model"),
        "bpe_model",
        dtype,
    )
}

/// A shipped model directory (`models/...`), quantized to `dtype`, named
/// after its path (`models/mqar/bla-m15` -> `mqar-bla-m15.<dtype>.fer`).
pub fn shipped_image(rel: &str, dtype: &str) -> Result<PathBuf> {
    let name = rel.trim_start_matches("models/").replace('/', "-");
    model_image(&root_dir().join(rel), &name, dtype)
}

/// The image a board runs by default.
pub fn default_image(board: &Board) -> Result<PathBuf> {
    match board.model {
        (dir, dtype) if dir.contains('/') => shipped_image(dir, dtype),
        (fixture, dtype) => fixture_image(fixture, dtype),
    }
}

/// `ferrite quantize <dir> --dtype <dtype>` into the xtask work dir as
/// `<name>.<dtype>.fer`; `int8-int`: int8 on the integer token path
/// (`--path int`, format 6).
pub fn model_image(dir: &Path, name: &str, dtype: &str) -> Result<PathBuf> {
    ensure!(dir.is_dir(), "model directory {} not found", dir.display());
    let images = work_dir().join("images");
    std::fs::create_dir_all(&images)?;
    let out = images.join(format!("{name}.{dtype}.fer"));
    let rel = dir.strip_prefix(root_dir()).unwrap_or(dir).display();
    let mut cmd = Command::new(ferrite()?);
    cmd.arg("quantize").arg(dir).arg("-o").arg(&out);
    let what = match dtype.strip_suffix("-int") {
        Some(d) => {
            eprintln!("quantizing {rel} to {d} on the integer token path ...");
            cmd.args(["--dtype", d, "--path", "int"]);
            format!("ferrite quantize {rel} --dtype {d} --path int")
        }
        None => {
            eprintln!("quantizing {rel} to {dtype} ...");
            cmd.args(["--dtype", dtype]);
            format!("ferrite quantize {} --dtype {dtype}", dir.display())
        }
    };
    stdout(&mut cmd, &what)?;
    Ok(out)
}

/// `tests/keys/<name>.pem`/`.pub`: the public test signing keys.
pub fn test_key(name: &str, ext: &str) -> PathBuf {
    root_dir().join("tests/keys").join(format!("{name}.{ext}"))
}

/// The public key of test key `name`, as 64 hex digits.
pub fn test_public_key(name: &str) -> Result<String> {
    let path = test_key(name, "pub");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(text.trim().to_string())
}

/// `ferrite sign <image> --key tests/keys/<key>.pem --counter N` into the
/// xtask work dir; the signed image's path.
pub fn signed_image(image: &Path, key: &str, counter: u32) -> Result<PathBuf> {
    let images = work_dir().join("images");
    std::fs::create_dir_all(&images)?;
    let stem = image
        .file_stem()
        .map_or_else(Default::default, |s| s.to_string_lossy());
    let out = images.join(format!("{stem}.signed-{key}-{counter}.fer"));
    let mut cmd = Command::new(ferrite()?);
    cmd.arg("sign")
        .arg(image)
        .arg("--key")
        .arg(test_key(key, "pem"))
        .args(["--counter", &counter.to_string(), "-o"])
        .arg(&out);
    stdout(&mut cmd, "ferrite sign")?;
    Ok(out)
}

/// `ferrite tokenize <image> --text T`: the prompt's ids in the image's tokenizer.
pub fn tokenize(image: &Path, text: &str) -> Result<Vec<u32>> {
    let mut cmd = Command::new(ferrite()?);
    parse_ids(&stdout(
        cmd.arg("tokenize").arg(image).args(["--text", text]),
        "ferrite tokenize",
    )?)
}

/// The multiply-accumulates of a token's products (`Model::macs_per_token`),
/// as `ferrite inspect <image>` prints them.
pub fn macs_per_token(image: &Path) -> Result<u64> {
    let mut cmd = Command::new(ferrite()?);
    let text = stdout(cmd.arg("inspect").arg(image), "ferrite inspect")?;
    ferrite_common::report::last_value(&text, "products: macs_per_token=")
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no `products: macs_per_token=` line in:\n{text}"))
}

/// Comma-separated token ids.
fn parse_ids(text: &str) -> Result<Vec<u32>> {
    let ids = text.trim().split(',').filter(|s| !s.is_empty());
    ids.map(|s| {
        s.trim()
            .parse()
            .with_context(|| format!("bad token id {s:?}"))
    })
    .collect()
}

/// `ferrite generate <image> --prompt P -n N --ids` (greedy), by the CLI
/// that runs `math`.
pub fn generate_ids(image: &Path, prompt: &str, n: usize, math: Math) -> Result<Vec<u32>> {
    generate_ids_with(image, prompt, n, &BuildOpts::default(), math)
}

/// `ferrite generate <image> --prompt P -n N --ids` with the sampler of
/// `opts`, by the CLI that runs `math`.
pub fn generate_ids_with(
    image: &Path,
    prompt: &str,
    n: usize,
    opts: &BuildOpts,
    math: Math,
) -> Result<Vec<u32>> {
    let mut cmd = Command::new(ferrite_with(math)?);
    cmd.arg("generate")
        .arg(image)
        .args(["--prompt", prompt, "-n", &n.to_string(), "--ids"]);
    parse_ids(&stdout(cmd.args(opts.sampler_args()), "ferrite generate")?)
}

/// `ferrite bake <image> --prompt P --math M` by the CLI that runs `math`
/// (so the state is the bits a board with that module computes) into the
/// xtask work dir; the snapshot's path.
pub fn bake(image: &Path, prompt: &str, math: Math) -> Result<PathBuf> {
    let dir = work_dir().join("snapshots");
    std::fs::create_dir_all(&dir)?;
    let stem = image
        .file_stem()
        .map_or_else(Default::default, |s| s.to_string_lossy());
    let tag = ferrite_common::fnv1a(prompt.bytes().map(u32::from));
    let out = dir.join(format!("{stem}.{}.{tag:08x}.snap", math.name()));
    let mut cmd = Command::new(ferrite_with(math)?);
    cmd.arg("bake")
        .arg(image)
        .args(["--prompt", prompt, "--math", math.name(), "-o"])
        .arg(&out);
    stdout(&mut cmd, "ferrite bake")?;
    Ok(out)
}

/// `ferrite generate <image> -n N --ids --save-state <save>`, from `--prompt
/// P` or (`load`) from the snapshot in that file, greedy, by the CLI that
/// runs `math`: the generated ids (the snapshot written after the last
/// token was fed).
pub fn generate_states(
    image: &Path,
    from: Result<&str, &Path>,
    n: usize,
    save: &Path,
    math: Math,
) -> Result<Vec<u32>> {
    let mut cmd = Command::new(ferrite_with(math)?);
    cmd.arg("generate").arg(image);
    match from {
        Ok(prompt) => cmd.args(["--prompt", prompt]),
        Err(load) => cmd.arg("--load-state").arg(load),
    };
    cmd.args(["-n", &n.to_string(), "--ids", "--save-state"])
        .arg(save);
    parse_ids(&stdout(&mut cmd, "ferrite generate --save-state")?)
}

/// The last position's logits of `ferrite logits <image> --tokens ...`,
/// parsed straight to f32 (shortest round-trip text gives the exact bits),
/// by the CLI that runs `math`, attending to baked memory `memory` (`--memory`; 0: memory 0).
pub fn last_logits(image: &Path, tokens: &[u32], math: Math, memory: u32) -> Result<Vec<f32>> {
    let list: Vec<String> = tokens.iter().map(u32::to_string).collect();
    let mut cmd = Command::new(ferrite_with(math)?);
    cmd.arg("logits")
        .arg(image)
        .args(["--tokens", &list.join(",")]);
    if memory != 0 {
        cmd.args(["--memory", &memory.to_string()]);
    }
    let text = stdout(&mut cmd, "ferrite logits")?;
    let inner = text
        .trim()
        .strip_suffix("]]")
        .context("ferrite logits: not a JSON list of lists")?;
    let last = inner.rsplit('[').next().context("ferrite logits: empty")?;
    let numbers = last.split(',').map(str::trim);
    numbers
        .map(|s| {
            s.parse()
                .with_context(|| format!("ferrite logits: bad number {s:?}"))
        })
        .collect()
}

/// The line before last (`key=value` pairs) and the value of the last line
/// of `ferrite eval <image> <args>` (the CLI that runs `math`).
fn eval(image: &Path, args: &[&OsStr], math: Math) -> Result<(String, String)> {
    let mut cmd = Command::new(ferrite_with(math)?);
    let text = stdout(cmd.arg("eval").arg(image).args(args), "ferrite eval")?;
    let lines: Vec<&str> = text.lines().collect();
    let [.., info, last] = lines.as_slice() else {
        anyhow::bail!("ferrite eval: unexpected output {text:?}");
    };
    let value = last
        .split_once('=')
        .context("ferrite eval: no value on the last line")?;
    Ok((info.to_string(), value.1.into()))
}

/// The value of `key=` in the line `info`, parsed.
fn field<T: std::str::FromStr>(info: &str, key: &str) -> Result<T> {
    let value = Fields(info).get(key).and_then(|v| v.parse().ok());
    value.with_context(|| format!("ferrite eval: no valid {key}="))
}

/// MQAR on the host: `ferrite eval <image> --mqar ...`.
pub struct HostMqar {
    pub correct: u64,
    pub total: u64,
    /// The `accuracy=` value as printed (4 decimals).
    pub accuracy: String,
}

/// `ferrite eval <image> --mqar` with these settings (the CLI that runs `math`).
pub fn eval_mqar(
    image: &Path,
    seed: u64,
    n: usize,
    pairs: usize,
    seq_len: usize,
    math: Math,
) -> Result<HostMqar> {
    let args = format!("--mqar --seed {seed} --n {n} --pairs {pairs} --seq-len {seq_len}");
    let args: Vec<&OsStr> = args.split(' ').map(OsStr::new).collect();
    let (kv, accuracy) = eval(image, &args, math)?;
    Ok(HostMqar {
        correct: field(&kv, "correct")?,
        total: field(&kv, "total")?,
        accuracy,
    })
}

/// Bits per byte on the host: `ferrite eval <image> --text F --chunk C`.
pub struct HostText {
    /// Sum of -ln p over the predicted tokens (exact f64, parsed from the shortest round-trip text).
    pub nats: f64,
    pub predicted_bytes: u64,
    /// The `bits_per_byte=` value as printed (4 decimals).
    pub bits_per_byte: String,
}

/// `ferrite eval <image> --text F --chunk C` (the CLI that runs `math`).
pub fn eval_text(image: &Path, text: &Path, chunk: usize, math: Math) -> Result<HostText> {
    let chunk = chunk.to_string();
    let args = [
        "--text".as_ref(),
        text.as_os_str(),
        "--chunk".as_ref(),
        chunk.as_ref(),
    ];
    let (kv, bits_per_byte) = eval(image, &args, math)?;
    Ok(HostText {
        nats: field(&kv, "nats")?,
        predicted_bytes: field(&kv, "predicted_bytes")?,
        bits_per_byte,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_token_ids() {
        assert_eq!(super::parse_ids("1, 2,3\n").unwrap(), [1, 2, 3]);
        assert!(super::parse_ids("").unwrap().is_empty());
        assert!(super::parse_ids("1,x").is_err());
    }
}
