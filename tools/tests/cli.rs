//! The `ferrite` binary itself: `quantize` at every dtype on every fixture,
//! its group-size and rule errors, `inspect`'s report, and `inspect` on every
//! broken image of `tests/corrupt/` (non-zero exit, one line, no panic).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .expect("ferrite runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit status 1 (not a panic's 101) with exactly one line on stderr.
fn assert_one_line_failure(o: &Output, what: &str) -> String {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{what}: status {:?}, stderr {err}",
        o.status
    );
    assert!(!err.contains("panicked"), "{what} panicked: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{what}: not one line: {err:?}"
    );
    assert!(err.starts_with("error: "), "{what}: {err}");
    err.trim_end().to_string()
}

fn fixtures() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("tests/fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.json").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 20);
    dirs
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrite-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn quantize_works_at_every_dtype_on_every_fixture() {
    let out = tmp("q.fer");
    let out = out.to_str().unwrap();
    for dir in fixtures() {
        let d = dir.to_str().unwrap();
        for args in [
            &["--dtype", "f32"][..],
            &["--dtype", "f16"],
            &["--dtype", "int8"],
            &["--dtype", "int4"],
            &["--dtype", "int8", "--group-size", "16"],
            &["--dtype", "int4", "--group-size", "8"],
        ] {
            let mut all = vec!["quantize", d, "-o", out];
            all.extend_from_slice(args);
            let o = ferrite(&all);
            assert!(o.status.success(), "{d} {args:?}: {}", stderr(&o));
            assert!(stderr(&o).contains("wrote "), "{}", stderr(&o));
            let o = ferrite(&["inspect", out]);
            assert!(o.status.success(), "inspect {d} {args:?}: {}", stderr(&o));
        }
    }
}

#[test]
fn a_group_size_that_does_not_divide_names_the_tensor() {
    let d = repo().join("tests/fixtures/gdn_gate");
    let out = tmp("g.fer");
    let (d, out) = (d.to_str().unwrap(), out.to_str().unwrap());
    // hidden 32, intermediate 80: 64 fails on the first D-input matrix, 32 on down_proj.
    for (group, tensor, dim) in [
        ("64", "model.embeddings.weight", 32),
        ("32", "model.layers.0.mlp.down_proj.weight", 80),
        ("128", "model.embeddings.weight", 32),
    ] {
        let o = ferrite(&[
            "quantize",
            d,
            "-o",
            out,
            "--dtype",
            "int8",
            "--group-size",
            group,
        ]);
        let line = assert_one_line_failure(&o, group);
        assert!(
            line.contains(tensor) && line.contains(&format!("input dimension {dim}")),
            "{line}"
        );
    }
    let o = ferrite(&[
        "quantize",
        d,
        "-o",
        out,
        "--dtype",
        "int4",
        "--group-size",
        "1",
    ]);
    assert!(assert_one_line_failure(&o, "odd int4").contains("even group size"));
    let o = ferrite(&[
        "quantize",
        d,
        "-o",
        out,
        "--dtype",
        "int8",
        "--group-size",
        "0",
    ]);
    assert!(assert_one_line_failure(&o, "zero").contains("out of range"));
}

#[test]
fn rules_keep_chosen_tensors_at_another_dtype() {
    let d = repo().join("tests/fixtures/gsa_relu_untied");
    let out = tmp("r.fer");
    let (d, out) = (d.to_str().unwrap(), out.to_str().unwrap());
    let o = ferrite(&[
        "quantize",
        d,
        "-o",
        out,
        "--dtype",
        "int4",
        "--rule",
        "lm_head.weight=int8",
        "--rule",
        "*.mlp.*=f16",
        "--rule",
        "*norm.weight=f16",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = String::from_utf8(ferrite(&["inspect", out]).stdout).unwrap();
    let dtype_of = |name: &str| -> String {
        let line = report
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} not in {report}"));
        line.split_whitespace().nth(1).unwrap().to_string()
    };
    assert_eq!(dtype_of("lm_head.weight"), "int8");
    assert_eq!(dtype_of("model.embeddings.weight"), "int4");
    assert_eq!(dtype_of("model.layers.0.mlp.up_proj.weight"), "f16");
    assert_eq!(dtype_of("model.layers.0.attn.q_proj.weight"), "int4");
    assert_eq!(dtype_of("model.layers.0.attn_norm.weight"), "f16");
    // A vector may not be quantized, even by a rule; the error names it.
    let o = ferrite(&["quantize", d, "-o", out, "--rule", "*attn_norm.weight=int8"]);
    let line = assert_one_line_failure(&o, "rule on a vector");
    assert!(line.contains("model.layers.0.attn_norm.weight"), "{line}");
    let o = ferrite(&["quantize", d, "-o", out, "--rule", "x=int3"]);
    assert_one_line_failure(&o, "bad rule");
}

#[test]
fn inspect_reports_dtype_group_bytes_error_flash_and_ram() {
    let d = repo().join("tests/fixtures/hybrid_all4_untied");
    let out = tmp("i.fer");
    let (d, out) = (d.to_str().unwrap(), out.to_str().unwrap());
    assert!(ferrite(&["quantize", d, "-o", out, "--dtype", "int4"])
        .status
        .success());
    let o = ferrite(&["inspect", out]);
    assert!(o.status.success());
    let report = String::from_utf8(o.stdout).unwrap();
    let header = report.lines().find(|l| l.starts_with("tensor")).unwrap();
    for col in ["dtype", "group", "shape", "bytes", "rel_err"] {
        assert!(header.contains(col), "{header}");
    }
    let q = report
        .lines()
        .find(|l| l.starts_with("model.layers.0.attn.q_proj.weight"))
        .unwrap();
    let f: Vec<&str> = q.split_whitespace().collect();
    assert_eq!((f[1], f[2], f[3]), ("int4", "32", "16x32"), "{q}");
    // 16x32 int4 tiled = 256 bytes + 16 rows x 4 bytes of row scales + 16
    // rows x 1 group x 1 byte of group multipliers.
    assert_eq!(f[4], "336");
    let err: f32 = f[5].parse().unwrap();
    assert!(err > 0.01 && err < 0.2, "{q}");
    let last = report.lines().last().unwrap();
    let flash = std::fs::metadata(out).unwrap().len();
    assert!(
        last.starts_with(&format!("flash_bytes={flash} ram_bytes=")),
        "{last}"
    );
}

#[test]
fn inspect_refuses_every_corrupt_image_on_one_line() {
    let dir = repo().join("tests/corrupt");
    let manifest = std::fs::read_to_string(dir.join("MANIFEST")).unwrap();
    let mut n = 0;
    for line in manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut parts = line.splitn(3, '\t');
        let (file, _variant, message) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let o = ferrite(&["inspect", dir.join(file).to_str().unwrap()]);
        let got = assert_one_line_failure(&o, file);
        assert_eq!(got, format!("error: {message}"), "{file}");
        assert!(o.stdout.is_empty(), "{file}: printed before refusing");
        for cmd in [
            &["logits", "--tokens", "1,2"][..],
            &["generate", "--prompt", "hi"],
        ] {
            let o = ferrite(
                &[cmd[0], dir.join(file).to_str().unwrap()]
                    .into_iter()
                    .chain(cmd[1..].iter().copied())
                    .collect::<Vec<_>>(),
            );
            assert_eq!(
                assert_one_line_failure(&o, file),
                format!("error: {message}")
            );
        }
        n += 1;
    }
    assert!(n >= 20, "corpus has only {n} images");
}

#[test]
fn a_model_dir_with_tokenizer_json_gets_its_bpe() {
    let dir = repo().join("tests/tokenizer/model");
    let image = tmp("bpe.fer");
    let o = ferrite(&[
        "quantize",
        dir.to_str().unwrap(),
        "-o",
        image.to_str().unwrap(),
        "--dtype",
        "int8",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let img = image.to_str().unwrap();
    let o = ferrite(&["inspect", img]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.starts_with("ferrite image v3:") // BPE (v2) and tiled int8 (v3)
            && text.contains("tokenizer bpe (vocab 800, 543 merges, GPT-2 pre-tokenizer)"),
        "{text}"
    );
    // The ids tests/tokenizer/expected.json gives for "Hello, world!".
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("tests/tokenizer/expected.json")).unwrap(),
    )
    .unwrap();
    let want: Vec<String> = expected["samples"][0]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    assert_eq!(expected["samples"][0]["text"], "Hello, world!");
    let o = ferrite(&["tokenize", img, "--text", "Hello, world!"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), want.join(","));
    let o = ferrite(&[
        "generate",
        img,
        "--prompt",
        "Once upon a time",
        "-n",
        "5",
        "--ids",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text_file = repo().join("tests/tokenizer/model/config.json");
    let o = ferrite(&["eval", img, "--text", text_file.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        out.contains("tokenizer=bpe") && out.contains("bits_per_byte="),
        "{out}"
    );
}

#[test]
fn a_tokenizer_json_the_runtime_cannot_follow_is_refused_naming_the_field() {
    let src = repo().join("tests/tokenizer/model");
    let dir = tmp("bpe-normalized");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("tokenizer.json")).unwrap())
            .unwrap();
    tok["normalizer"] = serde_json::json!({"type": "NFKC"});
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    let out = tmp("bpe-normalized.fer");
    let o = ferrite(&[
        "quantize",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = assert_one_line_failure(&o, "normalizer");
    assert!(err.contains("normalizer"), "{err}");
}
