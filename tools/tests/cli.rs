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
            // The RWKV-7 fixtures' low-rank up-projections have 8 inputs (and
            // gla_gla's second decay projection): a group of 16 cannot divide
            // them, and that is refused by name.
            if args.contains(&"16") && (d.contains("rwkv7") || d.contains("gla_gla")) {
                let line = assert_one_line_failure(&o, d);
                assert!(
                    line.contains("group size 16 does not divide the input dimension 8"),
                    "{line}"
                );
                continue;
            }
            assert!(o.status.success(), "{d} {args:?}: {}", stderr(&o));
            assert!(stderr(&o).contains("wrote "), "{}", stderr(&o));
            let o = ferrite(&["inspect", out]);
            assert!(o.status.success(), "inspect {d} {args:?}: {}", stderr(&o));
        }
    }
}

#[test]
fn bla_phi_is_computed_by_default_and_stored_on_request() {
    let d = repo().join("tests/fixtures/bla_fejer_gated_conv");
    let d = d.to_str().unwrap();
    let out = tmp("phi.fer");
    let out = out.to_str().unwrap();
    let mut sizes = Vec::new();
    for (args, version, summary, has_table) in [
        (
            &[][..],
            5,
            "bla phi computed by the runtime (no table)",
            false,
        ),
        (&["--bla-phi", "computed"], 5, "bla phi computed", false),
        (
            &["--bla-phi", "table"],
            1,
            "bla phi stored as a table",
            true,
        ),
    ] {
        let mut all = vec!["quantize", d, "-o", out];
        all.extend_from_slice(args);
        let o = ferrite(&all);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(&format!("format v{version},")) && err.contains(summary),
            "{args:?}: {err}"
        );
        let o = ferrite(&["inspect", out]);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            text.starts_with(&format!("ferrite image v{version}:")),
            "{text}"
        );
        assert_eq!(text.contains("attn.phi"), has_table, "{args:?}: {text}");
        let source = if has_table { "Table" } else { "Computed" };
        assert!(text.contains(&format!("phi_source: {source}")), "{text}");
        sizes.push(std::fs::metadata(out).unwrap().len());
    }
    assert!(sizes[0] == sizes[1] && sizes[0] < sizes[2], "{sizes:?}");
    // Without a bla layer it changes nothing: a warning (scripts pass it to
    // every model), the image as without it.
    let g = repo().join("tests/fixtures/gdn_gate");
    let o = ferrite(&[
        "quantize",
        g.to_str().unwrap(),
        "-o",
        out,
        "--bla-phi",
        "table",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: --bla-phi does nothing: the model has no bla layer")
            && !stderr(&o).contains("bla phi"),
        "{}",
        stderr(&o)
    );
    let o = ferrite(&["quantize", d, "-o", out, "--bla-phi", "cosine"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
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
    for col in ["dtype", "group", "shape", "bytes", "rel_err", "layout"] {
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
    assert_eq!(f[6], "tiled", "{q}");
    // hybrid_all4_untied (d 32, intermediate 48, vocab 256, untied), by
    // hand, rows x 32 columns but the MLP's down (32 x 48) and the mixers'
    // o (32 x 32): MLPs 4 x (48 + 48 + down); gdn q 16, k 16, v 32, a 4,
    // b 4, g 32, o; gsa q 32, k 16, v 16, f 12, o; swa q 32, k 16, v 16,
    // o; bla q, k, v 32 each, o; the head 256.
    let (down, o) = (32 * 48, 32 * 32);
    let macs = 4 * ((48 + 48) * 32 + down)
        + (16 + 16 + 32 + 4 + 4 + 32) * 32
        + o
        + (32 + 16 + 16 + 12) * 32
        + o
        + (32 + 16 + 16) * 32
        + o
        + 3 * 32 * 32
        + o
        + 256 * 32;
    assert!(
        report.contains(&format!("\nproducts: macs_per_token={macs}\n")),
        "{report}"
    );
    let last = report.lines().last().unwrap();
    let flash = std::fs::metadata(out).unwrap().len();
    assert!(
        last.starts_with(&format!("flash_bytes={flash} ram_bytes=")),
        "{last}"
    );
}

/// A `cross` layer's memories: their bytes in flash and the layer's state
/// in RAM, per layer and in total (docs/cross-attention.md); `--memory`
/// selects one, an index past them is refused on one line.
#[test]
fn inspect_shows_cross_memories_and_logits_select_one() {
    let d = repo().join("tests/fixtures/cross_memories");
    let out = tmp("cross.fer");
    let (d, out) = (d.to_str().unwrap(), out.to_str().unwrap());
    assert!(ferrite(&["quantize", d, "-o", out, "--dtype", "int8"])
        .status
        .success());
    let o = ferrite(&["inspect", out]);
    assert!(o.status.success());
    let report = String::from_utf8(o.stdout).unwrap();
    // Layer 0: 3 memories x 12 slots x 2 kv heads x 8 = 576 values each
    // of keys and values, int8 in groups of 64 (a 4-byte scale each):
    // 2 x (576 + 9 x 4).
    assert!(
        report.contains("layer 0: cross memories 3 x 12 slots, 1224 bytes in flash (keys and values, read in place), 4 bytes of state in RAM (the selected memory)"),
        "{report}"
    );
    // Layer 1: 3 x 5 x 1 x 16 = 240 values, groups of 16: 2 x (240 + 15 x 4).
    assert!(
        report.contains("layer 1: cross memories 3 x 5 slots, 600 bytes in flash"),
        "{report}"
    );
    assert!(
        report.contains("\ncross memories: flash_bytes=1824\n"),
        "{report}"
    );
    let logits = |m: &str| ferrite(&["logits", out, "--tokens", "1,2,3", "--memory", m]);
    let (a, b) = (logits("0"), logits("2"));
    assert!(a.status.success() && b.status.success());
    assert_ne!(a.stdout, b.stdout, "memories 0 and 2 gave the same logits");
    let err = assert_one_line_failure(&logits("3"), "--memory 3");
    assert!(
        err.contains("no memory 3: a cross layer has 3 (0..=2)"),
        "{err}"
    );
}

/// `quantize --memory` (docs/cross-attention.md, "The memory encoder"):
/// texts encoded by the model's encoder and baked as memories 0, 1, ... (the
/// slots their token count), selected by `logits --memory`; every refusal
/// (a file that cannot be read, an empty one, texts of different token
/// counts, more than 8, a model without a cross layer) on one line.
#[test]
fn quantize_bakes_memory_texts_and_refuses_bad_ones_on_one_line() {
    let d = repo().join("tests/fixtures/cross_encoder");
    let d = d.to_str().unwrap();
    let text = |name: &str, body: &str| {
        let p = tmp(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (a, b) = (
        text("mem-a.txt", "pump 3 runs at 40"),
        text("mem-b.txt", "pump 7 stops at 9"),
    );
    let out = tmp("baked.fer");
    let out = out.to_str().unwrap();
    let o = ferrite(&[
        "quantize", d, "-o", out, "--dtype", "int8", "--memory", &a, "--memory", &b,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("memories: 2 of 17 slots (tokens) each"),
        "{}",
        stderr(&o)
    );
    let report = String::from_utf8(ferrite(&["inspect", out]).stdout).unwrap();
    assert!(
        report.contains("layer 1: cross memories 2 x 17 slots"),
        "{report}"
    );
    let logits = |m: &str| ferrite(&["logits", out, "--tokens", "1,2,3", "--memory", m]);
    let (l0, l1) = (logits("0"), logits("1"));
    assert!(l0.status.success() && l1.status.success());
    assert_ne!(l0.stdout, l1.stdout, "the two texts gave the same logits");
    let q = |extra: &[&str], model: &str| {
        let mut args = vec!["quantize", model, "-o", out];
        args.extend_from_slice(extra);
        ferrite(&args)
    };
    let missing = tmp("no-such-memory.txt");
    let missing = missing.to_str().unwrap();
    let empty = text("mem-empty.txt", "");
    let short = text("mem-short.txt", "pump 3");
    let nine: Vec<&str> = (0..9).flat_map(|_| ["--memory", a.as_str()]).collect();
    let plain = repo().join("tests/fixtures/gdn_gate");
    for (o, says) in [
        (q(&["--memory", missing], d), "cannot read"),
        (q(&["--memory", &empty], d), "the memory is empty"),
        (
            q(&["--memory", &a, "--memory", &short], d),
            "same number of tokens",
        ),
        (q(&nine, d), "1..=8 memories per image, got 9"),
        (
            q(&["--memory", &a], plain.to_str().unwrap()),
            "needs a model with a cross layer",
        ),
    ] {
        let err = assert_one_line_failure(&o, says);
        assert!(err.contains(says), "{says}: {err}");
    }
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

/// Exit status 2 with clap's whole message folded into one line, never cut:
/// the error, then (for a missing or conflicting argument) the usage, then
/// the pointer to --help.
fn assert_clap_failure(o: &Output, what: &str) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{what}: {:?} {err}", o.status);
    assert!(!err.contains("panicked"), "{what} panicked: {err}");
    assert!(
        err.starts_with("error: ")
            && err
                .trim_end()
                .ends_with("For more information, try '--help'."),
        "{what}: not clap's whole message: {err:?}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{what}: not one line: {err:?}"
    );
    err
}

/// Neither a panic nor an allocation failure nor a cut message.
fn assert_no_abort(o: &Output, what: &str) {
    let err = stderr(o);
    for bad in [
        "panicked",
        "memory allocation",
        "capacity overflow",
        "stack backtrace",
    ] {
        assert!(!err.contains(bad), "{what}: {err}");
    }
    assert!(
        o.status.code().is_some(),
        "{what}: killed by a signal: {:?}",
        o.status
    );
}

/// A quantized image of a fixture (byte tokenizer), made once per name.
fn image(fixture: &str) -> String {
    let out = tmp(&format!("{fixture}.fer"));
    if !out.exists() {
        let part = tmp(&format!("{fixture}.fer.{:?}", std::thread::current().id()));
        let dir = repo().join("tests/fixtures").join(fixture);
        let o = ferrite(&[
            "quantize",
            dir.to_str().unwrap(),
            "-o",
            part.to_str().unwrap(),
            "--dtype",
            "int8",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::rename(&part, &out).unwrap();
    }
    out.to_str().unwrap().to_string()
}

#[test]
fn generate_streams_a_huge_count_until_its_reader_stops() {
    use std::io::Read;
    let img = image("gsa_swish_gqa");
    for (n, ids) in [
        ("1000000000000", false),
        ("4611686018427387904", false),
        ("18446744073709551615", true),
    ] {
        let mut args = vec!["generate", img.as_str(), "--prompt", "hi", "-n", n];
        if ids {
            args.push("--ids");
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut head = [0u8; 4000];
        child
            .stdout
            .take()
            .unwrap()
            .read_exact(&mut head)
            .unwrap_or_else(|e| panic!("-n {n}: no output streamed: {e}"));
        // The pipe is closed: the next write fails and ferrite exits quietly.
        let o = child.wait_with_output().unwrap();
        assert_no_abort(&o, n);
        assert!(o.status.success(), "-n {n}: {:?} {}", o.status, stderr(&o));
        assert_eq!(stderr(&o), "", "-n {n}");
        if ids {
            assert!(head.iter().all(|b| b.is_ascii_digit() || *b == b','));
        }
    }
}

/// `ferrite logits .. | head`: the JSON rows' writes end as quietly as the
/// others when the reader goes away (serde_json wraps the io error).
#[test]
fn logits_stop_quietly_when_their_reader_stops() {
    use std::io::Read;
    let img = image("gsa_swish_gqa");
    let tokens = vec!["7"; 3000].join(",");
    for _ in 0..3 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(["logits", img.as_str(), "--tokens", &tokens])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut head = [0u8; 4000];
        child
            .stdout
            .take()
            .unwrap()
            .read_exact(&mut head)
            .expect("logits stream");
        let o = child.wait_with_output().unwrap();
        assert_no_abort(&o, "logits");
        assert!(o.status.success(), "{:?} {}", o.status, stderr(&o));
        assert_eq!(stderr(&o), "");
        assert!(head.starts_with(b"[["));
    }
}

#[test]
fn mqar_of_any_size_runs_in_constant_memory_until_stopped() {
    let img = image("gsa_swish_gqa");
    for extra in [
        &["-n", "18446744073709551615"][..],
        &["--seq-len", "18446744073709551615"],
        &["--seq-len", "18446744073709551614", "--queries", "spread"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(["eval", img.as_str(), "--mqar"])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let running = child.try_wait().unwrap().is_none();
        let _ = child.kill();
        let o = child.wait_with_output().unwrap();
        assert!(running, "{extra:?} ended: {:?} {}", o.status, stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
    // The sequences are drawn one token at a time: a long one prints.
    let o = ferrite(&["mqar-sample", "--seq-len", "100000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).split(',').count(),
        100_000
    );
}

#[test]
fn mqar_queries_spread_on_the_cli() {
    use ferrite_tools::mqar::{generate, MqarParams, Queries};
    let img = image("gdn_gate");
    let spread = MqarParams {
        pairs: 4,
        seq_len: 30,
        queries: Queries::Spread,
    };
    // mqar-sample: the collected spread sequences.
    let o = ferrite(&[
        "mqar-sample",
        "--seed",
        "5",
        "-n",
        "3",
        "--pairs",
        "4",
        "--seq-len",
        "30",
        "--queries",
        "spread",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want: Vec<String> = generate(5, 3, spread)
        .unwrap()
        .iter()
        .map(|s| {
            let ids: Vec<String> = s.tokens.iter().map(u32::to_string).collect();
            ids.join(",") + "\n"
        })
        .collect();
    assert_eq!(String::from_utf8(o.stdout).unwrap(), want.concat());
    // eval: `end` keeps its line; spread says so, and scores the spread
    // sequences' queries.
    let summary = |o: &Output| {
        assert!(o.status.success(), "{}", stderr(o));
        let out = String::from_utf8(o.stdout.clone()).unwrap();
        out.lines().rev().nth(1).unwrap().to_string()
    };
    let args = [
        "eval",
        &img,
        "--mqar",
        "-n",
        "3",
        "--pairs",
        "4",
        "--seq-len",
        "30",
    ];
    let end = summary(&ferrite(&args));
    assert!(
        end.starts_with("sequences=3 pairs=4 seq_len=30 seed=0 correct="),
        "{end}"
    );
    let line = summary(&ferrite(&[&args[..], &["--queries", "spread"]].concat()));
    let image = ferrite_tools::run::AlignedImage::read(Path::new(&img)).unwrap();
    let (correct, total) = ferrite_tools::eval::mqar_counts(
        image.model().unwrap(),
        &generate(0, 3, spread).unwrap(),
        |_| {},
    )
    .unwrap();
    assert_eq!(
        line,
        format!(
            "sequences=3 pairs=4 seq_len=30 queries=spread seed=0 correct={correct} total={total}"
        )
    );
    assert_eq!(total, 12);
    // An odd length has no two-token slots.
    for cmd in [&["mqar-sample"][..], &["eval", &img, "--mqar"]] {
        let o = ferrite(&[cmd, &["--seq-len", "65", "--queries", "spread"]].concat());
        let line = assert_one_line_failure(&o, "odd spread");
        assert!(line.contains("seq_len 65 must be even"), "{line}");
    }
    let o = ferrite(&["mqar-sample", "--queries", "middle"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("[possible values: end, spread]"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn soak_and_calibration_take_the_mqar_shape() {
    use ferrite_tools::mqar::{MqarParams, Queries};
    use ferrite_tools::soak::{soak, SoakOptions, SoakSource};
    let img = image("gdn_gate");
    let shape = ["--pairs", "4", "--seq-len", "30", "--queries", "spread"];
    let run = ["soak", &img, "--mqar", "--tokens", "600", "--window", "300"];
    // The CLI streams the shape it is given: its line is the library's for it.
    let line = |o: &Output| {
        assert!(o.status.success(), "{}", stderr(o));
        let out = String::from_utf8(o.stdout.clone()).unwrap();
        out.lines().last().unwrap().to_string()
    };
    let want = |params: MqarParams| {
        let image = ferrite_tools::run::AlignedImage::read(Path::new(&img)).unwrap();
        let opts = SoakOptions {
            tokens: 600,
            window: 300,
            scan_every: 1000,
        };
        let source = SoakSource::Mqar { seed: 0, params };
        soak(image.model().unwrap(), source, opts, |_| {})
            .unwrap()
            .line()
    };
    let spread = MqarParams {
        pairs: 4,
        seq_len: 30,
        queries: Queries::Spread,
    };
    let shaped = line(&ferrite(&[&run[..], &shape].concat()));
    assert_eq!(shaped, want(spread));
    assert_eq!(line(&ferrite(&run)), want(MqarParams::default()));
    assert_ne!(shaped, want(MqarParams::default()));
    // The shape is an MQAR option: with --text it is an argument error.
    let text = repo().join("README.md");
    let o = ferrite(&[
        "soak",
        &img,
        "--text",
        text.to_str().unwrap(),
        "--pairs",
        "4",
    ]);
    assert_clap_failure(&o, "soak --text --pairs");
    // quantize: GPTQ calibrated on the given shape, which changes the image.
    let dir = repo().join("tests/fixtures/gdn_gate");
    let calibrated = |name: &str, extra: &[&str]| -> Output {
        let out = tmp(name);
        let base = [
            "quantize",
            dir.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--dtype",
            "int4",
            "--layout",
            "tiled",
            "--calibrate-mqar",
            "4",
        ];
        ferrite(&[&base[..], extra].concat())
    };
    let quantize = |name: &str, extra: &[&str]| -> Vec<u8> {
        let o = calibrated(name, extra);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        std::fs::read(tmp(name)).unwrap()
    };
    let calibration = [
        "--calibrate-pairs",
        "4",
        "--calibrate-seq-len",
        "30",
        "--calibrate-queries",
        "spread",
    ];
    let end = quantize("cal-end.fer", &[]);
    let explicit_end = quantize("cal-end2.fer", &["--calibrate-queries", "end"]);
    assert_eq!(end, explicit_end);
    assert_ne!(quantize("cal-spread.fer", &calibration), end);
    // A shape the generator refuses is one line; the shape without
    // --calibrate-mqar is an argument error.
    let o = calibrated(
        "cal-bad.fer",
        &[
            "--calibrate-pairs",
            "4",
            "--calibrate-seq-len",
            "31",
            "--calibrate-queries",
            "spread",
        ],
    );
    let err = assert_one_line_failure(&o, "odd calibration length");
    assert!(err.contains("seq_len 31 must be even"), "{err}");
    let o = ferrite(&[
        "quantize",
        dir.to_str().unwrap(),
        "-o",
        tmp("cal-none.fer").to_str().unwrap(),
        "--calibrate-pairs",
        "4",
    ]);
    assert_clap_failure(&o, "--calibrate-pairs alone");
}

#[test]
fn impossible_pins_are_refused_on_one_line() {
    let swa = image("swa_pinned");
    let gdn = image("gdn_gate");
    for (args, want) in [
        (
            vec!["generate", &swa, "--prompt", "hi", "--pin", "100000000000"],
            "--pin 100000000000 is larger than the prompt (2 tokens)",
        ),
        (
            vec!["generate", &swa, "--prompt", "hi", "--pin", "3"],
            "--pin 3 is larger than the prompt (2 tokens)",
        ),
        (
            vec!["logits", &swa, "--tokens", "1,2", "--pin", "3"],
            "--pin 3 is larger than --tokens (2 tokens)",
        ),
        (
            vec!["generate", &gdn, "--prompt", "hi", "--pin", "1"],
            "--pin 1 does nothing: the model has no sliding-window attention (swa) layer",
        ),
        (
            vec!["logits", &gdn, "--tokens", "1,2", "--pin", "1"],
            "--pin 1 does nothing",
        ),
    ] {
        let o = ferrite(&args);
        assert_no_abort(&o, want);
        let line = assert_one_line_failure(&o, want);
        assert!(line.starts_with(&format!("error: {want}")), "{line}");
    }
    // Pinning the whole prompt is fine.
    let o = ferrite(&["generate", &swa, "--prompt", "hi", "--pin", "2", "-n", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn argument_errors_keep_clap_s_whole_message_on_one_line() {
    let img = image("gdn_gate");
    let err = assert_clap_failure(&ferrite(&["generate", &img]), "no --prompt");
    assert!(
        err.contains("not provided: --prompt <PROMPT>; Usage: ferrite generate"),
        "{err}"
    );
    let err = assert_clap_failure(
        &ferrite(&["generate", &img, "--prompt", "hi", "-n", "-1"]),
        "negative -n",
    );
    assert!(err.contains("invalid value '-1'"), "{err}");
    let err = assert_clap_failure(
        &ferrite(&["generate", &img, "--prompt", "hi", "--temperature", "warm"]),
        "bad float",
    );
    assert!(err.contains("'warm'"), "{err}");
    let err = assert_clap_failure(&ferrite(&["eval", &img]), "no mode");
    assert!(err.contains("--text <TEXT>"), "{err}");
    // Options of the other eval mode would do nothing.
    let text = repo().join("tests/images/README.md");
    let text = text.to_str().unwrap();
    for (args, other) in [
        (vec!["eval", &img, "--mqar", "--chunk", "64"], "--chunk"),
        (vec!["eval", &img, "--text", text, "--seed", "3"], "--seed"),
        (vec!["eval", &img, "--text", text, "-n", "3"], "-n"),
        (
            vec!["eval", &img, "--text", text, "--pairs", "3"],
            "--pairs",
        ),
        (
            vec!["eval", &img, "--text", text, "--seq-len", "99"],
            "--seq-len",
        ),
        (
            vec!["eval", &img, "--text", text, "--queries", "spread"],
            "--queries",
        ),
    ] {
        let err = assert_clap_failure(&ferrite(&args), other);
        assert!(
            err.contains("cannot be used with") && err.contains("Usage: ferrite eval"),
            "{other}: {err}"
        );
    }
    // A negative temperature is a value the sampler refuses, with its reason.
    let o = ferrite(&["generate", &img, "--prompt", "hi", "--temperature", "-1"]);
    let line = assert_one_line_failure(&o, "--temperature -1");
    assert!(
        line.contains("temperature must be finite and >= 0"),
        "{line}"
    );
    // --help and --version still print to stdout and succeed.
    for args in [&["--help"][..], &["generate", "--help"], &["--version"]] {
        let o = ferrite(args);
        assert!(o.status.success() && !o.stdout.is_empty(), "{args:?}");
    }
    let help = String::from_utf8(ferrite(&["generate", "--help"]).stdout).unwrap();
    assert!(
        help.contains("2^64 - 1") && help.contains("warnings"),
        "{help}"
    );
}

#[test]
fn quantize_options_that_change_nothing_are_refused() {
    let gdn = repo().join("tests/fixtures/gdn_gate");
    let untied = repo().join("tests/fixtures/gsa_relu_untied");
    let fla_plain = repo().join("tests/fla/gdn_gva_f32");
    let fla_windowed = repo().join("tests/fla/hybrid_gdn_attn_f32");
    let out = tmp("nothing.fer");
    let out = out.to_str().unwrap();
    let (gdn, untied) = (gdn.to_str().unwrap(), untied.to_str().unwrap());
    let (fla_plain, fla_windowed) = (fla_plain.to_str().unwrap(), fla_windowed.to_str().unwrap());
    for (args, want) in [
        (
            vec![gdn, "--group-size", "32"],
            "--group-size 32 does nothing: no tensor is quantized (--dtype f32)",
        ),
        (
            vec![gdn, "--dtype", "f16", "--group-size", "16", "--rule", "*norm*=f32"],
            "--group-size 16 does nothing: no tensor is quantized (--dtype f16 and no --rule picks int8 or int4)",
        ),
        (
            vec![gdn, "--rule", "model.layers.9.*=int8"],
            "--rule model.layers.9.*=int8 matches no tensor of this model",
        ),
        (
            vec![gdn, "--rule", "lm_head.weight=int8"],
            "--rule lm_head.weight=int8 matches no tensor of this model: its lm_head is tied",
        ),
        (
            vec![untied, "--rule", "*proj*=int8", "--rule", "*.q_proj.*=f16"],
            "--rule *.q_proj.*=f16 decides no tensor",
        ),
        (
            vec![gdn, "--dtype", "int4", "--rule", "*.weight=f16"],
            "--dtype int4 does nothing: a --rule decides every weight matrix",
        ),
        (vec![gdn, "--window", "16"], "--window 16 does nothing"),
        (
            vec![fla_plain, "--window", "16"],
            "--window 16 does nothing: the checkpoint has no attention layer",
        ),
        (
            vec![fla_windowed, "--window", "16"],
            "--window 16 does nothing: every attention layer of the checkpoint has its own window_size",
        ),
    ] {
        let mut all = vec!["quantize", "-o", out];
        all.extend_from_slice(&args);
        let line = assert_one_line_failure(&ferrite(&all), want);
        assert!(line.starts_with(&format!("error: {want}")), "{line}");
    }
    // The same options where they do something are accepted.
    for args in [
        vec![
            gdn,
            "--dtype",
            "f16",
            "--group-size",
            "16",
            "--rule",
            "*.mlp.*=int8",
        ],
        vec![untied, "--rule", "*.q_proj.*=f16", "--rule", "*proj*=int8"],
    ] {
        let mut all = vec!["quantize", "-o", out];
        all.extend_from_slice(&args);
        let o = ferrite(&all);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
}

/// An fla checkpoint of a model type ferrite does not run is told which it
/// does, fla's among them (not only ferrite's own "ferrite").
#[test]
fn an_fla_model_type_ferrite_does_not_run_is_told_the_ones_it_does() {
    let dir = tmp("rwkv6");
    std::fs::create_dir_all(&dir).unwrap();
    let config = std::fs::read_to_string(repo().join("tests/fla/gdn_gva_f32/config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&config).unwrap();
    config["model_type"] = "rwkv6".into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let out = tmp("rwkv6.fer");
    let o = ferrite(&[
        "quantize",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let line = assert_one_line_failure(&o, "rwkv6");
    assert_eq!(
        line,
        "error: config: model_type \"rwkv6\" is not supported: ferrite runs \"ferrite\", \
         and fla's \"gated_deltanet\", \"gsa\", \"delta_net\", \"mamba2\", \"rwkv7\", \"gla\", \"hgrn2\", \"retnet\""
    );
    assert!(!out.exists());
}

/// Asserts that a refusal names every model type ferrite runs, each quoted:
/// its own format's ([`ferrite_tools::config_json::MODEL_TYPE`]) and every fla
/// type of the importer's table ([`ferrite_tools::fla::MODEL_TYPES`]), the
/// lists the code itself reads (a type added to the table must be named).
fn assert_names_the_model_types_run(line: &str, what: &str) {
    let run = std::iter::once(ferrite_tools::config_json::MODEL_TYPE).chain(
        ferrite_tools::fla::MODEL_TYPES
            .iter()
            .map(|&(name, _)| name),
    );
    for name in run {
        assert!(
            line.contains(&format!("{name:?}")),
            "{what}: {name} not named in: {line}"
        );
    }
    assert!(!line.contains("must be one of"), "{what}: {line}");
}

/// A model type neither ferrite nor its fla importer runs (an HF `llama`,
/// fla's own `transformer`, `rwkv6` or `gla`) is refused in one line by its
/// name, naming every type that is run, and leaves no image.
#[test]
fn an_unknown_model_type_is_told_every_type_that_runs() {
    let config = std::fs::read_to_string(repo().join("tests/fla/gdn_gva_f32/config.json")).unwrap();
    for model_type in [
        "llama",
        "transformer",
        "rwkv6",
        "linear_attn",
        "Gated_DeltaNet",
    ] {
        let dir = tmp(&format!("unknown-{model_type}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut config: serde_json::Value = serde_json::from_str(&config).unwrap();
        config["model_type"] = model_type.into();
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        assert_model_type_refused(&dir, model_type, &format!("unknown-{model_type}"));
    }
}

/// fla's RWKV-7 and Mamba-2 checkpoints (tests/fla, issue 27) quantize; the
/// Mamba-2 one has two groups of B and C, so it is refused in one line
/// naming `n_groups` and the option until told how its heads read them
/// (`--mamba2-groups`), which another type's checkpoint refuses.
#[test]
fn fla_rwkv7_and_mamba2_checkpoints_quantize_once_their_groups_are_named() {
    let fla = repo().join("tests/fla");
    for case in ["rwkv7_f32", "rwkv7_bf16"] {
        let out = tmp(&format!("{case}.fer"));
        let dir = fla.join(case);
        let o = ferrite(&[
            "quantize",
            dir.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{case}: {}", stderr(&o));
    }
    for case in ["mamba2_groups_f32", "mamba2_groups_bf16"] {
        let out = tmp(&format!("{case}.fer"));
        let (dir, out_s) = (fla.join(case), out.to_str().unwrap().to_string());
        let o = ferrite(&["quantize", dir.to_str().unwrap(), "-o", &out_s]);
        let line = assert_one_line_failure(&o, case);
        assert!(
            line.contains("'n_groups' = 2") && line.contains("--mamba2-groups"),
            "{case}: {line}"
        );
        assert!(!out.exists(), "{case}");
        let o = ferrite(&[
            "quantize",
            dir.to_str().unwrap(),
            "-o",
            &out_s,
            "--mamba2-groups",
            "interleaved",
        ]);
        assert!(o.status.success(), "{case}: {}", stderr(&o));
    }
    let out = tmp("rwkv7-groups.fer");
    let dir = fla.join("rwkv7_f32");
    let o = ferrite(&[
        "quantize",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--mamba2-groups",
        "blocked",
    ]);
    let line = assert_one_line_failure(&o, "rwkv7 with --mamba2-groups");
    assert!(line.contains("--mamba2-groups does nothing"), "{line}");
}

/// `ferrite quantize <dir>` fails in one line saying `model_type` is not
/// supported and naming every type that runs, and writes no image (`what`
/// names the case and its output file).
fn assert_model_type_refused(dir: &Path, model_type: &str, what: &str) {
    let out = tmp(&format!("{what}.fer"));
    let o = ferrite(&[
        "quantize",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let line = assert_one_line_failure(&o, what);
    assert!(
        line.starts_with(&format!(
            "error: config: model_type \"{model_type}\" is not supported: ferrite runs"
        )),
        "{what}: {line}"
    );
    assert_names_the_model_types_run(&line, what);
    assert!(!out.exists(), "{what}");
}

#[test]
fn options_a_script_may_pass_regardless_are_warnings() {
    let img = image("gdn_gate");
    let plain = ferrite(&["generate", &img, "--prompt", "hi", "-n", "8"]);
    assert!(plain.status.success());
    for (args, want) in [
        (
            vec!["--top-k", "5", "--top-p", "0.5", "--seed", "3"],
            "warning: --temperature 0 is greedy decoding: --top-k, --top-p and --seed do nothing",
        ),
        (
            vec!["--temperature", "0.7", "--top-k", "1"],
            "warning: --top-k 1 is greedy decoding: --temperature does nothing",
        ),
    ] {
        let mut all = vec!["generate", img.as_str(), "--prompt", "hi", "-n", "8"];
        all.extend_from_slice(&args);
        let o = ferrite(&all);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stderr(&o).trim_end(), want);
        assert_eq!(o.stdout, plain.stdout, "{args:?}");
    }
    // xtask passes the neutral sampler to greedy runs: no warning.
    let o = ferrite(&[
        "generate",
        &img,
        "--prompt",
        "hi",
        "-n",
        "8",
        "--temperature",
        "0",
        "--top-k",
        "0",
        "--top-p",
        "1",
        "--seed",
        "0",
    ]);
    assert!(o.status.success() && o.stderr.is_empty(), "{}", stderr(&o));
    // --chunk longer than the text: scored without a reset, with a warning.
    let text = tmp("short.txt");
    std::fs::write(&text, "a short text").unwrap();
    let text = text.to_str().unwrap();
    let o = ferrite(&["eval", &img, "--text", text, "--chunk", "1000000000000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim_end(),
        "warning: --chunk 1000000000000 is longer than the text (12 tokens): the state is never reset"
    );
    let default = ferrite(&["eval", &img, "--text", text]);
    assert!(default.status.success() && default.stderr.is_empty());
    let line = assert_one_line_failure(
        &ferrite(&["eval", &img, "--text", text, "--chunk", "1"]),
        "chunk 1",
    );
    assert_eq!(line, "error: --chunk must be at least 2");
}

#[test]
fn streamed_output_keeps_its_format() {
    let img = image("hybrid_all4_untied");
    // generate --ids: one comma-separated line, the same tokens as the text.
    let text = ferrite(&["generate", &img, "--prompt", "Once", "-n", "40"]);
    let ids = ferrite(&["generate", &img, "--prompt", "Once", "-n", "40", "--ids"]);
    assert!(text.status.success() && ids.status.success());
    let ids = String::from_utf8(ids.stdout).unwrap();
    assert!(
        ids.ends_with('\n') && ids.matches('\n').count() == 1,
        "{ids:?}"
    );
    let bytes: Vec<u8> = ids
        .trim_end()
        .split(',')
        .map(|s| s.parse::<u8>().unwrap())
        .chain([b'\n'])
        .collect();
    assert_eq!(bytes, text.stdout);
    let none = ferrite(&["generate", &img, "--prompt", "Once", "-n", "0", "--ids"]);
    assert_eq!(none.stdout, b"\n");
    // logits: the JSON serde_json writes for the whole Vec<Vec<f32>>.
    let tokens = [1u32, 72, 105, 255, 0, 33];
    let list: Vec<String> = tokens.iter().map(u32::to_string).collect();
    let o = ferrite(&["logits", &img, "--tokens", &list.join(","), "--pin", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let image = ferrite_tools::run::AlignedImage::read(Path::new(&img)).unwrap();
    let want = ferrite_tools::run::logits(image.model().unwrap(), &tokens, 2).unwrap();
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        serde_json::to_string(&want).unwrap() + "\n"
    );
    // A token outside the vocabulary is refused before anything is printed.
    let o = ferrite(&["logits", &img, "--tokens", "1,2,256"]);
    assert_one_line_failure(&o, "token 256");
    assert!(o.stdout.is_empty());
    // mqar-sample: the collected sequences, one line each.
    let o = ferrite(&[
        "mqar-sample",
        "--seed",
        "5",
        "-n",
        "3",
        "--pairs",
        "4",
        "--seq-len",
        "30",
    ]);
    let want: Vec<String> = ferrite_tools::mqar::generate(
        5,
        3,
        ferrite_tools::mqar::MqarParams {
            pairs: 4,
            seq_len: 30,
            ..Default::default()
        },
    )
    .unwrap()
    .iter()
    .map(|s| {
        let ids: Vec<String> = s.tokens.iter().map(u32::to_string).collect();
        ids.join(",") + "\n"
    })
    .collect();
    assert_eq!(String::from_utf8(o.stdout).unwrap(), want.concat());
}

/// Peak resident memory so far (VmHWM, KiB) of a live process. A child's
/// `ru_maxrss` (wait4) is no use here: Linux counts in it the memory of the
/// process it was exec'd from, the test process, which is much larger.
#[cfg(target_os = "linux")]
fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e} (did ferrite exit?)"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"))
}

/// Runs `ferrite args`, reading its stdout; returns its VmHWM when `count`
/// (of the output so far) first reaches `early` and `late`, and the final
/// count. The output must not end before `late` plus a pipe's capacity
/// (64 KiB), so that ferrite is still alive, blocked or not, at each sample.
#[cfg(target_os = "linux")]
fn peaks_while_streaming(
    args: &[&str],
    count: impl Fn(&[u8]) -> usize,
    early: usize,
    late: usize,
) -> (u64, u64, usize) {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (mut seen, mut peaks) = (0, Vec::new());
    let mut buf = [0u8; 4096];
    loop {
        let k = stdout.read(&mut buf).unwrap();
        if k == 0 {
            break;
        }
        seen += count(&buf[..k]);
        if (peaks.is_empty() && seen >= early) || (peaks.len() == 1 && seen >= late) {
            peaks.push(vm_hwm_kib(child.id()));
        }
    }
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {:?} {}",
        o.status,
        stderr(&o)
    );
    assert_eq!(peaks.len(), 2, "{args:?}: output ended at {seen}");
    (peaks[0], peaks[1], seen)
}

#[test]
fn generate_streams_in_constant_memory() {
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("skipped: a process's peak memory is read from /proc/<pid>/status (Linux only)");
    }
    #[cfg(target_os = "linux")]
    {
        // The old generate held 4 bytes per generated token (about 800 KiB
        // between the two samples); streaming holds none.
        const MARGIN_KIB: u64 = 256;
        const N: usize = 300_000;
        let img = image("gsa_swish_gqa");
        let n = N.to_string();
        let commas = |b: &[u8]| b.iter().filter(|&&c| c == b',').count();
        for ids in [false, true] {
            let mut args = vec!["generate", img.as_str(), "--prompt", "hi", "-n", &n];
            if ids {
                args.push("--ids");
            }
            // Byte tokenizer: one byte per token, or one comma per token but the last.
            let (early, late, seen) = if ids {
                peaks_while_streaming(&args, commas, 1_000, N - 100_000)
            } else {
                peaks_while_streaming(&args, |b| b.len(), 1_000, N - 100_000)
            };
            assert_eq!(seen, if ids { N - 1 } else { N + 1 }, "ids {ids}");
            eprintln!(
                "generate (ids {ids}): VmHWM {early} KiB after 1,000 tokens, {late} KiB after {} of {N}",
                N - 100_000
            );
            assert!(
                late < early + MARGIN_KIB,
                "ids {ids}: peak memory grew from {early} KiB to {late} KiB"
            );
        }
        // MQAR sequences stream too: one of 4,000,000 tokens (16 MB as ids).
        let (early, late, _) = peaks_while_streaming(
            &["mqar-sample", "--seq-len", "4000000"],
            commas,
            1_000,
            3_500_000,
        );
        assert!(
            late < early + MARGIN_KIB,
            "mqar-sample: {early} KiB -> {late} KiB"
        );
    }
}

#[test]
fn quantize_path_int_writes_format_6_and_inspect_shows_the_state_formats() {
    let d = repo().join("tests/fixtures/hybrid_gdn_swa");
    let d = d.to_str().unwrap();
    let out = tmp("int.fer");
    let out = out.to_str().unwrap();
    let o = ferrite(&["quantize", d, "-o", out, "--dtype", "int8", "--path", "int"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("format v6"), "{err}");
    // Both layers have an integer step: GDN's int16 state, SWA's int8 KV cache
    // with log scales.
    assert!(!err.contains("have no integer step"), "{err}");
    let o = ferrite(&["inspect", out]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("token path: int"), "{text}");
    assert!(text.contains("layer 0: gdn state int16"), "{text}");
    assert!(text.contains("layer 1: swa state int8-log"), "{text}");
    // --state f32 keeps every layer on its f32 step (still format 6).
    let o = ferrite(&[
        "quantize", d, "-o", out, "--dtype", "int8", "--path", "int", "--state", "f32",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&ferrite(&["inspect", out]).stdout).into_owned();
    assert!(text.contains("layer 0: gdn state f32"), "{text}");
    // The f32 path is unchanged: no token path line says int.
    let o = ferrite(&["quantize", d, "-o", out, "--dtype", "int8"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&ferrite(&["inspect", out]).stdout).contains("token path: f32"));
}

#[test]
fn quantize_path_int_gives_gsa_and_bla_layers_the_int16_state() {
    for (fixture, layers) in [
        (
            "gsa_swish_gqa",
            &["layer 0: gsa state int16", "layer 1: gsa state int16"][..],
        ),
        (
            "bla_dirichlet_gated_blur_conv",
            &["layer 0: bla state int16", "layer 1: bla state int16"],
        ),
        ("bla_fejer_scalar_nyquist", &["layer 0: bla state int16"]),
    ] {
        let d = repo().join("tests/fixtures").join(fixture);
        let out = tmp(&format!("{fixture}_int.fer"));
        let (d, out) = (d.to_str().unwrap(), out.to_str().unwrap());
        let o = ferrite(&["quantize", d, "-o", out, "--dtype", "int8", "--path", "int"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(!err.contains("have no integer step"), "{fixture}: {err}");
        let text = String::from_utf8_lossy(&ferrite(&["inspect", out]).stdout).into_owned();
        for line in layers {
            assert!(text.contains(line), "{fixture}: {text}");
        }
    }
}

#[test]
fn quantize_path_int_refuses_what_it_cannot_run_on_one_line() {
    let d = repo().join("tests/fixtures/gdn_gate");
    let d = d.to_str().unwrap();
    let out = tmp("int-bad.fer");
    let out = out.to_str().unwrap();
    for (args, want) in [
        (
            &["--path", "int"][..],
            "--path int needs --dtype int8 or int4",
        ),
        (
            &["--dtype", "int8", "--path", "int", "--layout", "rows"][..],
            "in the tiled layout",
        ),
        (
            &["--dtype", "int8", "--state", "int16"][..],
            "--state int16 needs --path int",
        ),
        (
            &[
                "--dtype",
                "int8",
                "--path",
                "int",
                "--rule",
                "*norm.weight=f16",
            ][..],
            "reads model.norm.weight as f32 bits",
        ),
    ] {
        let mut all = vec!["quantize", d, "-o", out];
        all.extend_from_slice(args);
        let err = assert_one_line_failure(&ferrite(&all), want);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `generate --save-state` then `--load-state` prints the tokens of one
/// uninterrupted greedy run, and `inspect` shows the snapshot.
#[test]
fn generate_save_and_load_state_continue_the_uninterrupted_run() {
    let image = repo().join("tests/images/tiny_int8.fer");
    let img = image.to_str().unwrap();
    let snap = tmp("cut.snap");
    let snap = snap.to_str().unwrap();
    let ids = |o: &Output| String::from_utf8_lossy(&o.stdout).trim().to_string();
    let whole = ferrite(&["generate", img, "--prompt", "Hello", "-n", "20", "--ids"]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    let first = ferrite(&[
        "generate",
        img,
        "--prompt",
        "Hello",
        "-n",
        "8",
        "--ids",
        "--save-state",
        snap,
    ]);
    assert!(first.status.success(), "{}", stderr(&first));
    let second = ferrite(&["generate", img, "--load-state", snap, "-n", "12", "--ids"]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(format!("{},{}", ids(&first), ids(&second)), ids(&whole));
    // Not a constant stream: the comparison can tell a wrong restore.
    let all = ids(&whole);
    let distinct: std::collections::HashSet<&str> = all.split(',').collect();
    assert!(distinct.len() > 1, "{}", ids(&whole));

    let report = String::from_utf8(ferrite(&["inspect", snap]).stdout).unwrap();
    let len = std::fs::metadata(snap).unwrap().len();
    // "Hello" (5 byte tokens) and the 8 generated ones were fed.
    assert!(
        report.starts_with("ferrite snapshot v1: model_hash=0x")
            && report.contains(" position 13 stream_len 13 pinned 0 of 0 logits yes ")
            && report.trim_end().ends_with(&format!("bytes={len}")),
        "{report}"
    );
    let image_report = String::from_utf8(ferrite(&["inspect", img]).stdout).unwrap();
    let hash = report.split_whitespace().nth(3).unwrap();
    assert!(
        image_report.contains(&format!("snapshots: {hash} math libm snapshot_bytes={len}")),
        "{hash} not in {image_report}"
    );

    // A snapshot of another model is refused on one line.
    let other = tmp("other.fer");
    let other = other.to_str().unwrap();
    let d = repo().join("tests/fixtures/gdn_gate");
    assert!(ferrite(&["quantize", d.to_str().unwrap(), "-o", other])
        .status
        .success());
    let o = ferrite(&["generate", other, "--load-state", snap, "-n", "3"]);
    let err = assert_one_line_failure(&o, "another model");
    assert!(err.contains("snapshot belongs to another model"), "{err}");
}

/// A sampling run (`--temperature`, `--top-k`, `--top-p`, `--seed`) cut
/// with `--save-state` and resumed with `--load-state` prints exactly the
/// uninterrupted run's tokens: the snapshot carries the sampler (format
/// version 2, shown by `inspect`); without it (a fresh generator of the same
/// seed) the continuation differs. Sampling options given at the load that
/// differ from the snapshot's are replaced, with a warning.
#[test]
fn generate_save_and_load_state_continue_a_sampled_run() {
    let image = repo().join("tests/images/tiny_int8.fer");
    let img = image.to_str().unwrap();
    let snap = tmp("sampled.snap");
    let snap = snap.to_str().unwrap();
    let ids = |o: &Output| String::from_utf8_lossy(&o.stdout).trim().to_string();
    let sampling = [
        "--temperature",
        "2",
        "--top-k",
        "20",
        "--top-p",
        "0.95",
        "--seed",
        "5",
    ];
    let run = |extra: &[&str]| {
        let mut a = vec!["generate", img, "--ids"];
        a.extend_from_slice(extra);
        let o = ferrite(&a);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        o
    };
    let whole = run(&[&["--prompt", "Hello", "-n", "20"][..], &sampling].concat());
    let greedy = run(&["--prompt", "Hello", "-n", "20"]);
    assert_ne!(
        ids(&whole),
        ids(&greedy),
        "the sampled run is the greedy one"
    );
    let first = run(&[
        &["--prompt", "Hello", "-n", "8", "--save-state", snap][..],
        &sampling,
    ]
    .concat());
    let report = String::from_utf8(ferrite(&["inspect", snap]).stdout).unwrap();
    assert!(
        report.starts_with("ferrite snapshot v2: ")
            && report.contains("\nsampler: temperature 2 top_k 20 top_p 0.95 seed 5 draws 8\n"),
        "{report}"
    );
    // Resumed with no sampling options: the snapshot's sampler goes on.
    let second = run(&["--load-state", snap, "-n", "12"]);
    assert_eq!(format!("{},{}", ids(&first), ids(&second)), ids(&whole));
    assert!(stderr(&second).is_empty(), "{}", stderr(&second));
    // With other options: replaced by the snapshot's, with a warning.
    let other = run(&[
        "--load-state",
        snap,
        "-n",
        "12",
        "--temperature",
        "0.5",
        "--seed",
        "9",
    ]);
    assert_eq!(ids(&other), ids(&second));
    assert!(
        stderr(&other).contains("carries its sampler"),
        "{}",
        stderr(&other)
    );
    // A greedy snapshot of the same stream (version 1, no sampler) resumed
    // with the same options draws from a fresh generator: another stream.
    let v1 = tmp("sampled_v1.snap");
    let v1 = v1.to_str().unwrap();
    let mut bytes = std::fs::read(snap).unwrap();
    let len = bytes.len() - 32;
    bytes.truncate(len);
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    bytes[16..20].copy_from_slice(&(len as u32).to_le_bytes());
    bytes[36..40].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32(&bytes[24..]);
    bytes[20..24].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(v1, &bytes).unwrap();
    let fresh = run(&[&["--load-state", v1, "-n", "12"][..], &sampling].concat());
    assert_ne!(
        ids(&fresh),
        ids(&second),
        "a fresh generator went on the same way"
    );
    // Saved again after the resumed run: the sampler has drawn 20 times.
    let again = tmp("sampled_again.snap");
    let again = again.to_str().unwrap();
    run(&["--load-state", snap, "-n", "12", "--save-state", again]);
    let report = String::from_utf8(ferrite(&["inspect", again]).stdout).unwrap();
    assert!(report.contains(" seed 5 draws 20\n"), "{report}");
}

/// CRC-32/ISO-HDLC (the snapshot's), bit by bit.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Every broken snapshot of `tests/corrupt-snapshot/` is refused by
/// `generate --load-state` with its MANIFEST message on one line, and
/// `inspect` refuses those whose header or CRC is wrong the same way.
#[test]
fn load_state_refuses_every_corrupt_snapshot_on_one_line() {
    let dir = repo().join("tests/corrupt-snapshot");
    let image = repo().join("tests/images/tiny_int8.fer");
    let manifest = std::fs::read_to_string(dir.join("MANIFEST")).unwrap();
    let mut n = 0;
    for line in manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let parts: Vec<&str> = line.splitn(3, '\t').collect();
        let (file, variant, message) = (parts[0], parts[1], parts[2]);
        let path = dir.join(file);
        let path = path.to_str().unwrap();
        let o = ferrite(&[
            "generate",
            image.to_str().unwrap(),
            "--load-state",
            path,
            "-n",
            "2",
        ]);
        let got = assert_one_line_failure(&o, file);
        // The CLI sizes its session with the snapshot's own pinned
        // capacity, so a capacity edited behind the CRC shows as a length
        // that does not match the model's state for that capacity.
        let want = match variant {
            "OtherPinnedCapacity" => "bad snapshot: length does not match the model's state",
            _ => message,
        };
        assert_eq!(got, format!("error: {path}: {want}"), "{file}");
        assert!(o.stdout.is_empty(), "{file}: generated before refusing");
        let header_level = ["Truncated", "BadMagic", "UnsupportedVersion", "CrcMismatch"];
        if header_level.contains(&variant) {
            let o = ferrite(&["inspect", path]);
            let got = assert_one_line_failure(&o, file);
            // A file without the snapshot magic is read as an image.
            if std::fs::read(dir.join(file))
                .unwrap()
                .starts_with(b"FERSNAP\0")
            {
                assert_eq!(got, format!("error: {message}"), "inspect {file}");
            }
        }
        n += 1;
    }
    assert!(n >= 20, "corpus has only {n} snapshots");
}

/// `bake` (from `--prompt` and from `--prompt-file`) writes the snapshot of
/// the stream after the prompt: `generate --load-state` of it prints the
/// tokens of `generate --prompt`, and the file is the one `generate -n 0
/// --save-state` writes. A module this CLI does not run is refused on one
/// line that names the cargo feature of the CLI that does.
#[test]
fn bake_writes_the_state_after_the_prompt_and_refuses_another_math_module() {
    let image = repo().join("tests/images/tiny_int8.fer");
    let img = image.to_str().unwrap();
    let ids = |o: &Output| String::from_utf8_lossy(&o.stdout).trim().to_string();
    let whole = ferrite(&["generate", img, "--prompt", "Hello", "-n", "12", "--ids"]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    let (baked, from_file) = (tmp("baked.snap"), tmp("baked-file.snap"));
    let (baked, from_file) = (baked.to_str().unwrap(), from_file.to_str().unwrap());
    let o = ferrite(&["bake", img, "--prompt", "Hello", "-o", baked]);
    assert!(o.status.success(), "{}", stderr(&o));
    let prompt = tmp("prompt.txt");
    std::fs::write(&prompt, "Hello").unwrap();
    let p = prompt.to_str().unwrap();
    let o = ferrite(&["bake", img, "--prompt-file", p, "-o", from_file]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(baked).unwrap(),
        std::fs::read(from_file).unwrap()
    );
    let saved = tmp("saved.snap");
    let saved = saved.to_str().unwrap();
    let o = ferrite(&[
        "generate",
        img,
        "--prompt",
        "Hello",
        "-n",
        "0",
        "--save-state",
        saved,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(baked).unwrap(), std::fs::read(saved).unwrap());
    let resumed = ferrite(&["generate", img, "--load-state", baked, "-n", "12", "--ids"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_eq!(ids(&resumed), ids(&whole));

    // This test's CLI is built without fast-math: libm.
    let ok = ferrite(&["bake", img, "--prompt", "Hi", "-o", baked, "--math", "libm"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    for (args, feature) in [
        (&["--math", "float"][..], "--features fast-math`"),
        (&["--math", "int"][..], "--features fast-math-int`"),
        (&["--board", "m4f"][..], "--features fast-math`"),
        (&["--board", "m3"][..], "--features fast-math-int`"),
    ] {
        let mut all = vec!["bake", img, "--prompt", "Hi", "-o", baked];
        all.extend_from_slice(args);
        let err = assert_one_line_failure(&ferrite(&all), "another module");
        assert!(
            err.contains("computes with the libm math module") && err.contains(feature),
            "{args:?}: {err}"
        );
    }
    let err = assert_one_line_failure(
        &ferrite(&["bake", img, "--prompt", "Hi", "-o", baked, "--board", "z80"]),
        "unknown board",
    );
    assert!(err.contains("--board z80: no such target"), "{err}");
    let err = assert_one_line_failure(
        &ferrite(&["bake", img, "--prompt-file", "/no/such/file", "-o", baked]),
        "missing prompt file",
    );
    assert!(err.contains("cannot read /no/such/file"), "{err}");
}
