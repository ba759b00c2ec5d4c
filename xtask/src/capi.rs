//! `cargo xtask capi` and its `test` step: the C API (capi/, docs/c-api.md).
//! The header is what cbindgen writes now; the host C test passes under
//! ASan and UBSan; the panic branches left in the library's code are named
//! (none may be the C API's own); the C example runs on the m4f board under
//! QEMU and prints the Rust `generate` firmware's tokens and checksum.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, ensure, Context, Result};

use crate::boards::{self, root_dir, work_dir, DEFAULT_N, DEFAULT_PROMPT};
use crate::setup::{self, cargo};
use crate::{host, image_check};

/// `capi`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct Args {
    /// Rewrite capi/include/ferrite.h instead of failing when it is stale
    #[arg(long)]
    pub bless: bool,
    /// Only build the static library for every embedded target of the
    /// boards' and chips' table (riscv32imc for the ESP32-C3 included)
    #[arg(long)]
    pub all_targets: bool,
}

/// Runs every check; the failures are listed at the end.
pub fn run(args: &Args) -> Result<ExitCode> {
    if args.all_targets {
        embedded_libraries()?;
        return Ok(ExitCode::SUCCESS);
    }
    Ok(if check(args.bless)? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Every check of the C API, each run even when one before failed.
pub fn check(bless: bool) -> Result<bool> {
    let checks: [(&str, &dyn Fn() -> Result<()>); 5] = [
        (
            "clippy -D warnings (host and thumbv7em) and rustdoc -D warnings",
            &lint,
        ),
        ("header is fresh (cbindgen)", &|| header(bless)),
        ("host C test under ASan and UBSan", &host_test),
        ("panic branches in the Cortex-M4F library", &panic_branches),
        ("C example on the m4f board under QEMU", &example),
    ];
    let mut ok = true;
    for (name, f) in checks {
        eprintln!("-- capi: {name}");
        if let Err(e) = f() {
            eprintln!("capi: {name}: FAILED: {e:#}");
            ok = false;
        }
    }
    Ok(ok)
}

fn capi_dir() -> PathBuf {
    root_dir().join("capi")
}

/// Runs `cmd`, an error with its name when it fails.
fn run_cmd(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} exited with {status}");
    Ok(())
}

/// The crate linted on the host (its tests too) and for the Cortex-M4F,
/// with and without `panic-check`, and its docs built without warnings.
fn lint() -> Result<()> {
    let runs = [
        "clippy --quiet --all-targets --features verify -- -D warnings",
        "clippy --quiet --target thumbv7em-none-eabihf --features verify,fast-math -- -D warnings",
        "clippy --quiet --target thumbv7em-none-eabihf --features panic-check -- -D warnings",
        "doc --quiet --no-deps --document-private-items",
    ];
    for args in runs {
        run_cmd(
            cargo(args)
                .current_dir(capi_dir())
                .env("CARGO_TARGET_DIR", capi_dir().join("target").join("lint"))
                .env("RUSTDOCFLAGS", "-D warnings"),
        )?;
    }
    Ok(())
}

/// capi/include/ferrite.h against what cbindgen writes from capi/src now.
fn header(bless: bool) -> Result<()> {
    setup::ensure_cbindgen()?;
    let committed = capi_dir().join("include/ferrite.h");
    let fresh = work_dir().join("ferrite.h");
    std::fs::create_dir_all(work_dir())?;
    run_cmd(
        Command::new("cbindgen")
            .current_dir(capi_dir())
            .args([
                "--quiet",
                "--config",
                "cbindgen.toml",
                "--crate",
                "ferrite-capi",
                "-o",
            ])
            .arg(&fresh)
            .arg("."),
    )?;
    let fresh_text = std::fs::read_to_string(&fresh)?;
    if std::fs::read_to_string(&committed).ok().as_deref() == Some(fresh_text.as_str()) {
        return Ok(());
    }
    if bless {
        std::fs::write(&committed, fresh_text)?;
        eprintln!("capi: wrote {}", committed.display());
        return Ok(());
    }
    bail!(
        "{} is stale: run `cargo xtask capi --bless` and commit it",
        committed.display()
    )
}

/// Builds `libferrite_capi.a` for `target` (None: the host) with `features`
/// (no defaults) and `CARGO_ENCODED_RUSTFLAGS` `rustflags`, in a target
/// directory of its own; its path.
fn library(target: Option<&str>, features: &[&str], rustflags: &str, dir: &str) -> Result<PathBuf> {
    let target_dir = capi_dir().join("target").join(dir);
    let mut cmd = cargo("build --quiet --release --no-default-features");
    cmd.current_dir(capi_dir())
        .args(["--features", &features.join(",")])
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
        .env("CARGO_TARGET_DIR", &target_dir);
    let mut out = target_dir;
    if let Some(t) = target {
        cmd.args(["--target", t]);
        out.push(t);
    }
    run_cmd(&mut cmd)?;
    let lib = out.join("release").join("libferrite_capi.a");
    eprintln!(
        "capi: {} ({} bytes; features {})",
        lib.strip_prefix(root_dir()).unwrap_or(&lib).display(),
        std::fs::metadata(&lib)?.len(),
        features.join(",")
    );
    Ok(lib)
}

/// `libferrite_capi.a` for every target triple of the boards' and chips'
/// table, with the host library's features (fast math where the boards
/// build it: `fast-math`); fails at the first that does not build.
pub fn embedded_libraries() -> Result<()> {
    setup::ensure_toolchain()?;
    for triple in ferrite_common::target::triples() {
        library(
            Some(triple),
            &[LIBRARY_FEATURES, &["fast-math"]].concat(),
            "",
            "embedded",
        )?;
    }
    Ok(())
}

/// The library's features everywhere it is built: the defaults and `verify`.
const LIBRARY_FEATURES: &[&str] = &["bpe", "all-mixers", "int-path", "block-options", "verify"];

/// The host library: the default features and `verify`.
fn host_library() -> Result<PathBuf> {
    library(None, LIBRARY_FEATURES, "", "host")
}

/// The host's shared library (`cargo rustc --crate-type cdylib`: the
/// manifest names `staticlib` alone, so that the embedded builds warn about
/// nothing), with the host library's features; its directory.
fn shared_library() -> Result<PathBuf> {
    let target_dir = capi_dir().join("target").join("shared");
    run_cmd(
        cargo("rustc --quiet --release --lib --crate-type cdylib --no-default-features")
            .current_dir(capi_dir())
            .args(["--features", "bpe,all-mixers,int-path,block-options,verify"])
            .env("CARGO_TARGET_DIR", &target_dir),
    )?;
    Ok(target_dir.join("release"))
}

/// tests/c/test_capi.c with gcc -fsanitize=address,undefined, linked with
/// the static library and with the shared one, each run on the committed
/// image tests/images/tiny_int8.fer (byte tokenizer) and the BPE test model.
fn host_test() -> Result<()> {
    let lib = host_library()?;
    let shared = shared_library()?;
    let c = capi_dir();
    let build = |exe: &Path, link: &[String]| {
        run_cmd(
            Command::new("gcc")
                .args([
                    "-std=c99",
                    "-D_ISOC11_SOURCE",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                ])
                .args(["-g", "-O1"])
                .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
                .arg("-I")
                .arg(c.join("include"))
                .arg(c.join("tests/c/test_capi.c"))
                .args(link)
                .args(["-lm", "-o"])
                .arg(exe),
        )
    };
    let exe = work_dir().join("test_capi");
    let exe_shared = work_dir().join("test_capi_shared");
    build(&exe, &[lib.display().to_string()])?;
    build(
        &exe_shared,
        &[format!("-L{}", shared.display()), "-lferrite_capi".into()],
    )?;
    let images = [
        root_dir().join("tests/images/tiny_int8.fer"),
        host::bpe_image("f32")?,
    ];
    // A model with cross layers (2 baked memories): ferrite_select_memory and
    // the caller-owned memories (ferrite_memory_len, ferrite_encode_memory,
    // ferrite_feed_with_memory, ferrite_generate_with_memory).
    let cross = host::fixture_image("hybrid_gdn_cross", "int8")?;
    for exe in [&exe, &exe_shared] {
        for image in &images {
            eprintln!(
                "capi: {} {}",
                exe.file_name().unwrap_or_default().to_string_lossy(),
                short_path(&image.display().to_string())
            );
            let out = Command::new(exe)
                .arg(image)
                .arg(&cross)
                .env("LD_LIBRARY_PATH", &shared)
                .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
                .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
                .output()
                .context("running test_capi")?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            eprint!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
            ensure!(out.status.success(), "test_capi exited with {}", out.status);
            ensure!(
                !stderr.contains("Sanitizer") && !stderr.contains("runtime error"),
                "a sanitizer reported"
            );
        }
    }
    Ok(())
}

/// The Cortex-M4F flags the example and the panic check compile with.
const M4F: [&str; 4] = [
    "-mcpu=cortex-m4",
    "-mthumb",
    "-mfloat-abi=hard",
    "-mfpu=fpv4-sp-d16",
];

/// The library for the M4F with every feature and the `panic-check`
/// handler, linked into tests/c/link_all.c (every function's address taken)
/// with --gc-sections: it links only if no panic branch is left. When one
/// is, the program is linked again with the handler's symbol defined, and
/// every call to a panic function is traced through the debug info to the
/// first source line outside the Rust library (`core`): one in capi/src
/// fails the check, the runtime's are listed (what the runtime's "no panics
/// on input" rests on its checks and fuzzing for, not on the optimiser).
fn panic_branches() -> Result<()> {
    setup::ensure_arm_gcc()?;
    let features = [LIBRARY_FEATURES, &["fast-math", "panic-check"]].concat();
    let lib = library(Some("thumbv7em-none-eabihf"), &features, "", "panic-check")?;
    let elf = work_dir().join("link_all.elf");
    let link = |extra: &[&str]| {
        let mut cmd = Command::new("arm-none-eabi-gcc");
        cmd.args(M4F)
            .args([
                "-Os",
                "--specs=nano.specs",
                "--specs=nosys.specs",
                "-Wl,--gc-sections",
            ])
            .args(extra)
            .arg("-I")
            .arg(capi_dir().join("include"))
            .arg(capi_dir().join("tests/c/link_all.c"))
            .arg(&lib)
            .arg("-o")
            .arg(&elf);
        cmd.output().context("running arm-none-eabi-gcc")
    };
    let first = link(&[])?;
    if first.status.success() {
        eprintln!("capi: no panic branch is left in any function of ferrite.h");
        return Ok(());
    }
    let why = String::from_utf8_lossy(&first.stderr);
    ensure!(
        why.contains("ferrite_capi_panic_is_reachable"),
        "linking link_all.c failed:\n{why}"
    );
    let second = link(&["-Wl,--defsym=ferrite_capi_panic_is_reachable=0"])?;
    ensure!(
        second.status.success(),
        "linking link_all.c failed:\n{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let sites = panic_sites(&elf)?;
    let own: Vec<_> = sites.iter().filter(|s| s.contains("capi/src/")).collect();
    let runtime = sites.iter().filter(|s| s.contains("runtime/src/")).count();
    eprintln!(
        "capi: {} panic branches are left, {runtime} of them in the runtime (runtime/src), {} in the C API:",
        sites.len(),
        own.len()
    );
    for s in &sites {
        eprintln!("  {s}");
    }
    let free = panic_free_functions(&lib)?;
    eprintln!(
        "capi: functions with no panic branch left, linked alone ({}): {}",
        free.len(),
        free.join(", ")
    );
    ensure!(own.is_empty(), "the C API's own code has panic branches");
    let lost: Vec<_> = PANIC_FREE
        .iter()
        .filter(|f| !free.iter().any(|g| g == *f))
        .collect();
    ensure!(
        lost.is_empty(),
        "these functions gained a panic branch (docs/c-api.md, \"No panics\"): {lost:?}"
    );
    Ok(())
}

/// The functions proven panic-free by the link (docs/c-api.md, "No
/// panics"): every function of ferrite.h, `ferrite_update_validate_signed`
/// included since the runtime's Ed25519 is its own strict verification on
/// curve25519-dalek (ed25519-compact left 9 panic branches in it,
/// ed25519-dalek 1, salty 6: measured there). When the first link fails,
/// a panic branch come back into any of them fails the check.
const PANIC_FREE: &[&str] = &[
    "ferrite_abi_version",
    "ferrite_session_len",
    "ferrite_model_load",
    "ferrite_model_info",
    "ferrite_session_init",
    "ferrite_feed",
    "ferrite_logits",
    "ferrite_position",
    "ferrite_reset",
    "ferrite_seek",
    "ferrite_select_memory",
    "ferrite_memory_len",
    "ferrite_encode_memory",
    "ferrite_feed_with_memory",
    "ferrite_generate_with_memory",
    "ferrite_sampler_init",
    "ferrite_sample",
    "ferrite_generate",
    "ferrite_resume",
    "ferrite_tokenize",
    "ferrite_detokenize",
    "ferrite_snapshot_len",
    "ferrite_snapshot",
    "ferrite_restore",
    "ferrite_update_receive",
    "ferrite_update_validate",
    "ferrite_update_validate_signed",
    "ferrite_strerror",
];

/// Each call to a panic function in `elf`, as `function (file:line)` of the
/// first frame outside the Rust library, sorted and deduplicated.
fn panic_sites(elf: &Path) -> Result<Vec<String>> {
    let dis = Command::new("arm-none-eabi-objdump")
        .args(["-d", "-C", "--no-show-raw-insn"])
        .arg(elf)
        .output()
        .context("running arm-none-eabi-objdump")?;
    let is_panic = |name: &str| {
        name.starts_with("core::panicking::")
            || name.ends_with("_fail")
            || name.ends_with("_failed")
            || name == "__rustc::rust_begin_unwind"
    };
    let mut current = String::new();
    let mut addresses = Vec::new();
    for line in String::from_utf8_lossy(&dis.stdout).lines() {
        if let Some(name) = line.strip_suffix(">:").and_then(|l| l.split_once(" <")) {
            current = name.1.to_string();
            continue;
        }
        // `  8a2c:	bl	8010 <core::panicking::panic_fmt>`
        let Some((addr, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        let Some(target) = rest.split_once('<').and_then(|(_, t)| t.split_once('>')) else {
            continue;
        };
        let target = target.0.split('+').next().unwrap_or_default();
        let branch = rest.trim_start().starts_with('b');
        if branch && is_panic(target) && !is_panic(&current) {
            addresses.push(format!("0x{}", addr.trim()));
        }
    }
    if addresses.is_empty() {
        return Ok(Vec::new());
    }
    let lines = Command::new("arm-none-eabi-addr2line")
        .args(["-i", "-f", "-C", "-a", "-e"])
        .arg(elf)
        .args(&addresses)
        .output()
        .context("running arm-none-eabi-addr2line")?;
    let mut sites = Vec::new();
    let mut found: Option<String> = None;
    let text = String::from_utf8_lossy(&lines.stdout);
    let mut it = text.lines().peekable();
    while let Some(line) = it.next() {
        if line.starts_with("0x") {
            found = None;
            continue;
        }
        let location = it.next().unwrap_or_default();
        let in_std = location.contains("/rustc/") || location.contains("library/core");
        // A call whose frames are all the Rust library's (an out-of-line
        // `Zip::new`, say) is named by its outermost frame, not left out.
        let outermost = it.peek().is_none_or(|l| l.starts_with("0x"));
        if found.is_none() && (!in_std || outermost) {
            let rel = short_path(location);
            let site = format!("{line} ({rel})");
            sites.push(site.clone());
            found = Some(site);
        }
    }
    sites.sort();
    sites.dedup();
    Ok(sites)
}

/// `location` from the repository's root, or from a registry crate's folder.
fn short_path(location: &str) -> &str {
    let root = root_dir();
    let root = root.to_str().unwrap_or("/");
    if let Some(rel) = location.strip_prefix(root) {
        return rel.trim_start_matches('/');
    }
    match location.split_once("/registry/src/") {
        Some((_, r)) => r.split_once('/').map_or(r, |(_, r)| r),
        None => location,
    }
}

/// The functions of ferrite.h (those tests/c/link_all.c lists) whose own
/// code, linked alone, has no panic branch left.
fn panic_free_functions(lib: &Path) -> Result<Vec<String>> {
    let all = std::fs::read_to_string(capi_dir().join("tests/c/link_all.c"))?;
    let names = all
        .split("(any_fn)")
        .skip(1)
        .filter_map(|s| s.split(',').next())
        .map(str::trim);
    let dir = work_dir().join("capi-one");
    std::fs::create_dir_all(&dir)?;
    let mut free = Vec::new();
    for name in names {
        let c = dir.join("one.c");
        std::fs::write(
            &c,
            format!("#include \"ferrite.h\"\nvoid *volatile f = (void *){name};\nint main(void) {{ return f != 0; }}\n"),
        )?;
        let linked = Command::new("arm-none-eabi-gcc")
            .args(M4F)
            .args([
                "-Os",
                "--specs=nano.specs",
                "--specs=nosys.specs",
                "-Wl,--gc-sections",
            ])
            .arg("-I")
            .arg(capi_dir().join("include"))
            .arg(&c)
            .arg(lib)
            .arg("-o")
            .arg(dir.join("one.elf"))
            .output()
            .context("running arm-none-eabi-gcc")?;
        if linked.status.success() {
            free.push(name.to_string());
        }
    }
    Ok(free)
}

/// The example: the m4f board's default image, the library built as the
/// board's firmware is (the image's features, fast-math, the board's
/// `-C target-cpu`), `make`, QEMU; its report lines against the Rust
/// firmware's recorded ones (boards/expected/m4f.out).
fn example() -> Result<()> {
    setup::ensure_arm_gcc()?;
    setup::ensure_qemu()?;
    let board = boards::named("m4f")?;
    let image = host::default_image(board)?;
    let facts = image_check::check(&image)?;
    let mut features = facts.features();
    features.push("fast-math");
    let lib = library(
        Some(board.triple),
        &features,
        &boards::rustflags(board),
        "m4f",
    )?;
    let host_lib = host_library()?;
    let dir = capi_dir().join("examples/m4f");
    let build = work_dir().join("capi-m4f");
    let cmake_build = work_dir().join("capi-m4f-cmake");
    run_cmd(
        Command::new("make")
            .current_dir(&dir)
            .arg("--quiet")
            .arg(format!("MODEL={}", image.display()))
            .arg(format!("LIB={}", lib.display()))
            .arg(format!("HOST_LIB={}", host_lib.display()))
            .arg(format!("BUILD={}", build.display()))
            .arg(format!("PROMPT={DEFAULT_PROMPT}"))
            .arg(format!("N={DEFAULT_N}")),
    )?;
    run_cmd(
        Command::new("cmake")
            .args(["-S"])
            .arg(&dir)
            .arg("-B")
            .arg(&cmake_build)
            .arg(format!("-DMODEL={}", image.display()))
            .arg(format!("-DFERRITE_LIB={}", lib.display()))
            .arg(format!("-DFERRITE_HOST_LIB={}", host_lib.display()))
            .arg(format!("-DPROMPT={DEFAULT_PROMPT}"))
            .arg(format!("-DN={DEFAULT_N}"))
            .stdout(std::process::Stdio::null()),
    )?;
    run_cmd(
        Command::new("cmake")
            .arg("--build")
            .arg(&cmake_build)
            .stdout(std::process::Stdio::null()),
    )?;
    let expected_path = crate::paths::expected_dir().join("m4f.out");
    let expected = std::fs::read(&expected_path)?;
    let expected = String::from_utf8_lossy(&expected);
    let line = |text: &str, prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .map(str::to_string)
    };
    let mut output = String::new();
    let mut sizes = boards::Sizes::default();
    for (how, elf) in [
        ("make", build.join("example.elf")),
        ("cmake", cmake_build.join("example.elf")),
    ] {
        let run = boards::run_qemu(
            board,
            &elf,
            &build,
            false,
            false,
            boards::timeout_for(DEFAULT_N),
        )?;
        output = String::from_utf8_lossy(&run.output).into_owned();
        sizes = run.sizes;
        if how == "make" {
            eprint!("{output}");
        }
        ensure!(
            run.status == 0,
            "the example ({how}) exited with {}",
            run.status
        );
        for prefix in [DEFAULT_PROMPT, "tokens: ", "tokens_hash: ", "checksum: "] {
            let want = line(&expected, prefix)
                .with_context(|| format!("{} has no {prefix:?} line", expected_path.display()))?;
            let got = line(&output, prefix)
                .with_context(|| format!("the example ({how}) printed no {prefix:?} line"))?;
            ensure!(
                got == want,
                "the C example's ({how}) {prefix:?} line differs from the Rust firmware's ({}):\n  C:    {got}\n  Rust: {want}",
                expected_path.display()
            );
        }
    }
    let run = sizes;
    eprintln!(
        "capi: the C example on m4f (make and CMake): the Rust firmware's text, tokens and checksum; flash {} bytes, RAM {} bytes (without the stack); {}",
        run.flash,
        run.ram,
        line(&output, "run: ").unwrap_or_default()
    );
    Ok(())
}
