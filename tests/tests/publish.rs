//! The publishable crates (`ferrite-asm`, `ferrite`, `ferrite-tools`) as a
//! user gets them (docs/publishing.md):
//!
//! - what crates.io and docs.rs show: licence files, READMEs, keywords,
//!   categories, MSRV, docs.rs metadata, what each package ships;
//! - the features documented, the versioning policy written down;
//! - the packaged runtime works outside the workspace: the `.crate` files,
//!   unpacked, build `runtime/examples/static_buffer.rs` as a crate of its own,
//!   with the same output as the example in the workspace;
//! - `cargo install --path tools` gives a `ferrite` that works from any
//!   directory, with no cargo variable set.
//!
//! The last two run cargo (offline when the local cache allows it, else
//! online); their builds go to `target/publish/` and `target/release/`, so a
//! second run takes seconds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ferrite::Model;
use ferrite_tools::run::{logits, AlignedImage};

/// The crates meant for crates.io: (directory, package name).
const CRATES: [(&str, &str); 4] = [
    ("runtime/asm", "ferrite-asm"),
    ("runtime", "ferrite-lm"),
    ("common", "ferrite-common"),
    ("tools", "ferrite-tools"),
];

const COPYRIGHT: &str = "Copyright (c) 2026 The ferrite developers";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn manifest(path: &str) -> toml::Table {
    read(path).parse().unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The workspace's `[workspace.package]`.
fn workspace_package() -> toml::Table {
    manifest("Cargo.toml")["workspace"]["package"]
        .as_table()
        .expect("[workspace.package]")
        .clone()
}

/// A package field, resolved through `field.workspace = true`.
fn field(pkg: &toml::Table, key: &str) -> Option<toml::Value> {
    match pkg.get(key)? {
        toml::Value::Table(t) if t.get("workspace") == Some(&toml::Value::Boolean(true)) => {
            workspace_package().get(key).cloned()
        }
        v => Some(v.clone()),
    }
}

fn strings(v: Option<&toml::Value>) -> Vec<String> {
    v.and_then(toml::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn licence_files_are_the_standard_texts_and_ship_with_every_crate() {
    let ws = workspace_package();
    assert_eq!(ws["license"].as_str(), Some("MIT OR Apache-2.0"));
    let mit = read("LICENSE-MIT");
    assert!(mit.starts_with("MIT License\n\n"), "LICENSE-MIT: {mit:.40}");
    assert!(mit.contains(COPYRIGHT), "LICENSE-MIT lacks {COPYRIGHT:?}");
    for clause in [
        "Permission is hereby granted, free of charge, to any person obtaining a copy",
        "The above copyright notice and this permission notice shall be included in all",
        "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR",
    ] {
        assert!(mit.contains(clause), "LICENSE-MIT lacks {clause:?}");
    }
    let apache = read("LICENSE-APACHE");
    for clause in [
        "Apache License",
        "Version 2.0, January 2004",
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "9. Accepting Warranty or Additional Liability.",
        "END OF TERMS AND CONDITIONS",
    ] {
        assert!(apache.contains(clause), "LICENSE-APACHE lacks {clause:?}");
    }
    assert!(
        apache.len() > 10_000,
        "LICENSE-APACHE is not the whole text"
    );
    for (dir, _) in CRATES {
        for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
            assert_eq!(
                read(&format!("{dir}/{file}")),
                read(file),
                "{dir}/{file} differs from the root's"
            );
        }
    }
}

#[test]
fn publishable_manifests_carry_what_crates_io_and_docs_rs_show() {
    let ws = workspace_package();
    for file in [
        "Cargo.toml",
        "runtime/Cargo.toml",
        "runtime/asm/Cargo.toml",
        "common/Cargo.toml",
        "tools/Cargo.toml",
    ] {
        assert!(
            !read(file).contains("example.invalid"),
            "{file}: a placeholder URL would be published (docs/publishing.md)"
        );
    }
    for (dir, name) in CRATES {
        let m = manifest(&format!("{dir}/Cargo.toml"));
        let pkg = m["package"].as_table().expect("[package]");
        let at = |key: &str| format!("{dir}/Cargo.toml: {key}");
        assert_eq!(pkg["name"].as_str(), Some(name), "{}", at("name"));
        assert_ne!(
            pkg.get("publish"),
            Some(&toml::Value::Boolean(false)),
            "{}",
            at("publish")
        );
        assert!(
            pkg.get("description")
                .and_then(toml::Value::as_str)
                .is_some_and(|d| d.len() > 20),
            "{}",
            at("description")
        );
        for key in ["version", "edition", "license", "rust-version"] {
            assert_eq!(field(pkg, key).as_ref(), ws.get(key), "{}", at(key));
        }
        assert_eq!(
            field(pkg, "repository").as_ref(),
            ws.get("repository"),
            "{}",
            at("repository")
        );

        // README: present, about this crate, stating the MSRV and the licence.
        assert_eq!(
            pkg.get("readme").and_then(toml::Value::as_str),
            Some("README.md"),
            "{}",
            at("readme")
        );
        let readme = read(&format!("{dir}/README.md"));
        assert!(
            readme.starts_with(&format!("# {name}\n")),
            "{dir}/README.md: title"
        );
        let msrv = ws["rust-version"].as_str().unwrap();
        assert!(
            readme.contains(msrv),
            "{dir}/README.md does not state the MSRV {msrv}"
        );
        assert!(
            readme.contains(COPYRIGHT),
            "{dir}/README.md: licence section"
        );

        // crates.io: at most 5 keywords of at most 20 ASCII characters.
        let keywords = strings(pkg.get("keywords"));
        assert!((1..=5).contains(&keywords.len()), "{}", at("keywords"));
        for k in &keywords {
            assert!(
                k.len() <= 20
                    && k.starts_with(|c: char| c.is_ascii_alphabetic())
                    && k.chars().all(|c| c.is_ascii_lowercase()
                        || c.is_ascii_digit()
                        || c == '-'
                        || c == '_'),
                "{}: {k:?}",
                at("keywords")
            );
        }
        assert!(
            keywords.iter().any(|k| k == "embedded"),
            "{}",
            at("keywords")
        );
        let categories = strings(pkg.get("categories"));
        assert!((1..=5).contains(&categories.len()), "{}", at("categories"));
        assert!(
            categories.iter().any(|c| c == "embedded"),
            "{}",
            at("categories")
        );
        if dir.starts_with("runtime") || dir == "common" {
            assert!(keywords.iter().any(|k| k == "no-std"), "{}", at("keywords"));
            assert!(
                categories.iter().any(|c| c == "no-std"),
                "{}",
                at("categories")
            );
            let docs_rs = &m["package"]["metadata"]["docs"]["rs"];
            assert_eq!(
                docs_rs.get("default-target").and_then(toml::Value::as_str),
                Some("thumbv7em-none-eabihf"),
                "{}",
                at("package.metadata.docs.rs")
            );
            assert!(
                strings(docs_rs.get("targets")).len() >= 2,
                "{}",
                at("docs.rs targets")
            );
        }

        // What ships: sources, README, both licences.
        let include = strings(pkg.get("include"));
        for file in ["/src/**", "/README.md", "/LICENSE-MIT", "/LICENSE-APACHE"] {
            assert!(
                include.iter().any(|i| i == file),
                "{}: {file}",
                at("include")
            );
        }
    }
    // docs.rs documents every runtime feature.
    let runtime = manifest("runtime/Cargo.toml");
    assert_eq!(
        runtime["package"]["metadata"]["docs"]["rs"].get("all-features"),
        Some(&toml::Value::Boolean(true))
    );
    // A path dependency needs a version to be packaged: the one it is released with.
    let root = manifest("Cargo.toml");
    assert_eq!(
        root["workspace"]["dependencies"]["ferrite"].get("version"),
        ws.get("version"),
        "[workspace.dependencies] ferrite: version"
    );
    assert_eq!(
        runtime["dependencies"]["ferrite-asm"].get("version"),
        ws.get("version"),
        "runtime/Cargo.toml: ferrite's ferrite-asm, released with it"
    );
}

#[test]
fn every_runtime_feature_is_documented() {
    let m = manifest("runtime/Cargo.toml");
    let features = m["features"].as_table().expect("[features]");
    // On by default: `default`'s features and those they turn on (the
    // mixer families through `all-mixers`).
    let mut defaults = strings(features.get("default"));
    let mut i = 0;
    while i < defaults.len() {
        for f in strings(features.get(defaults[i].as_str())) {
            if features.contains_key(&f) && !defaults.contains(&f) {
                defaults.push(f);
            }
        }
        i += 1;
    }
    let lib = read("runtime/src/lib.rs");
    let section = lib
        .split("//! ## Cargo features")
        .nth(1)
        .and_then(|rest| rest.split("//! ## ").next())
        .expect("runtime/src/lib.rs has a `## Cargo features` section");
    let readme = read("runtime/README.md");
    for name in features.keys().filter(|k| *k != "default") {
        let default = defaults.contains(name);
        let item = if default {
            format!("//! - `{name}` (default)")
        } else {
            format!("//! - `{name}`:")
        };
        assert!(
            section.contains(&item),
            "lib.rs's feature list lacks {item:?}"
        );
        let row = format!("| `{name}` | {} |", if default { "yes" } else { "no" });
        assert!(
            readme.contains(&row),
            "runtime/README.md lacks the row {row:?}"
        );
    }
}

#[test]
fn the_versioning_policy_is_written_down_and_referenced() {
    let changelog = read("CHANGELOG.md");
    let policy = changelog
        .find("\n## Versioning policy\n")
        .expect("CHANGELOG.md: ## Versioning policy");
    let unreleased = changelog.find("\n## Unreleased\n").expect("## Unreleased");
    assert!(policy < unreleased, "the policy comes before the releases");
    let text = &changelog[policy..unreleased];
    for term in [
        "FORMAT_VERSION",
        "MIN_FORMAT_VERSION",
        "rust-version",
        "ferrite-tools",
        "ferrite-asm",
    ] {
        assert!(
            text.contains(term),
            "the versioning policy does not cover {term}"
        );
    }
    let format = read("docs/image-format.md");
    let section = format
        .split("## Versioning policy")
        .nth(1)
        .expect("docs/image-format.md: ## Versioning policy");
    assert!(section.contains("CHANGELOG.md#versioning-policy"));
}

/// The CLI and the runtime find nothing through the build's environment or
/// paths at run time: no `env!`/`option_env!`, no `include_*!` of a file.
#[test]
fn no_published_source_reaches_into_the_repository() {
    for dir in ["runtime/src", "runtime/asm/src", "common/src", "tools/src"] {
        for file in rust_files(&root().join(dir)) {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                for pattern in [
                    "env!(",
                    "include_bytes!(",
                    "include_str!(",
                    "CARGO_MANIFEST_DIR",
                ] {
                    assert!(
                        !code.contains(pattern),
                        "{}:{}: {pattern}",
                        file.display(),
                        n + 1
                    );
                }
            }
        }
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

// ---- cargo-driven checks -------------------------------------------------

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root().join(dir),
        None => root().join("target"),
    }
}

/// `cargo` (the one running these tests) without the variables cargo sets
/// for this test binary, which are not the inner builds' own.
fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
            "CARGO_TARGET_TMPDIR",
        ]
        .iter()
        .any(|p| key.starts_with(p))
        {
            c.env_remove(&*key);
        }
    }
    c
}

fn ok(mut cmd: Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `make()` with `--offline` first (the local cache suffices once the
/// workspace has been built), then online if that fails.
fn offline_first(make: impl Fn() -> Command) -> Output {
    let mut offline = make();
    offline.arg("--offline");
    let out = offline.output().expect("cargo runs");
    if out.status.success() {
        return out;
    }
    eprintln!(
        "note: offline failed, retrying online: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    ok(make())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

/// `--full` only (`cargo xtask test --full`, docs/testing.md): it packages
/// and builds the runtime and an example in a scratch workspace.
#[test]
#[ignore = "builds the packaged crates: cargo xtask test --full"]
fn packaged_runtime_runs_outside_the_workspace() {
    let root = root();
    let version = workspace_package()["version"].as_str().unwrap().to_string();
    let work = target_dir().join("publish");
    let packages = work.join("package-target");
    offline_first(|| {
        let mut c = cargo();
        c.current_dir(&root)
            .args(["package", "--quiet", "--no-verify", "--allow-dirty"])
            .args(["-p", "ferrite-asm", "-p", "ferrite-lm", "--target-dir"])
            .arg(&packages);
        c
    });

    // The standalone crate: the example's source, the image beside it, and
    // the unpacked packages as its only link to ferrite.
    let app = work.join("standalone");
    let vendor = app.join("vendor");
    let _ = std::fs::remove_dir_all(&vendor);
    std::fs::create_dir_all(app.join("src")).unwrap();
    std::fs::create_dir_all(&vendor).unwrap();
    for name in ["ferrite-asm", "ferrite-lm"] {
        let mut tar = Command::new("tar");
        tar.arg("xzf")
            .arg(
                packages
                    .join("package")
                    .join(format!("{name}-{version}.crate")),
            )
            .arg("-C")
            .arg(&vendor);
        ok(tar);
    }
    let shipped = vendor.join(format!("ferrite-lm-{version}"));
    for file in [
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "README.md",
        "build.rs",
        "src/lib.rs",
    ] {
        assert!(
            shipped.join(file).is_file(),
            "the ferrite-lm package lacks {file}"
        );
    }
    std::fs::write(
        app.join("Cargo.toml"),
        format!(
            "[package]\nname = \"static-buffer\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
             [dependencies]\nferrite = {{ package = \"ferrite-lm\", path = \"vendor/ferrite-lm-{version}\" }}\n\n\
             # Not on crates.io yet: the packaged one.\n\
             [patch.crates-io]\nferrite-asm = {{ path = \"vendor/ferrite-asm-{version}\" }}\n\n\
             [workspace]\n"
        ),
    )
    .unwrap();
    let example = read("runtime/examples/static_buffer.rs");
    let image_path = "\"../../tests/images/tiny_int8.fer\"";
    assert_eq!(
        example.matches(image_path).count(),
        2,
        "the example's image path moved"
    );
    std::fs::write(
        app.join("src/main.rs"),
        example.replace(image_path, "\"../tiny_int8.fer\""),
    )
    .unwrap();
    std::fs::copy(
        root.join("tests/images/tiny_int8.fer"),
        app.join("tiny_int8.fer"),
    )
    .unwrap();
    // The workspace's versions of the dependencies (cargo drops the rest).
    std::fs::copy(root.join("Cargo.lock"), app.join("Cargo.lock")).unwrap();

    let standalone = offline_first(|| {
        let mut c = cargo();
        c.current_dir(&app).args(["run", "--quiet", "--release"]);
        c
    });
    let in_workspace = offline_first(|| {
        let mut c = cargo();
        c.current_dir(&root).args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "ferrite-lm",
            "--example",
            "static_buffer",
        ]);
        c
    });
    let text = String::from_utf8_lossy(&standalone.stdout);
    assert!(text.contains("greedy tokens after \"Hi\": ["), "{text}");
    assert_eq!(text, String::from_utf8_lossy(&in_workspace.stdout));
}

/// `--full` only (`cargo xtask test --full`, docs/testing.md): it installs
/// the CLI with `cargo install`, a release build of its own.
#[test]
#[ignore = "builds and installs the CLI: cargo xtask test --full"]
fn installed_cli_runs_from_any_directory() {
    let root = root();
    let scratch = std::env::temp_dir().join(format!("ferrite-publish-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let install = scratch.join("install");
    // The build shares target/release with `cargo build --release -p ferrite-tools`.
    offline_first(|| {
        let mut c = cargo();
        c.current_dir(&root)
            .args(["install", "--quiet", "--locked", "--path"])
            .arg(root.join("tools"))
            .arg("--root")
            .arg(&install)
            .arg("--target-dir")
            .arg(target_dir());
        c
    });
    let bin = install
        .join("bin")
        .join(format!("ferrite{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "cargo install made no {}", bin.display());

    // A directory of a user's own, outside the repository; only PATH (and
    // HOME) in the environment, so nothing points back at the build.
    let user = scratch.join("user");
    copy_dir(&root.join("tests/images/tiny"), &user.join("my-model"));
    let ferrite = |args: &[&str]| {
        let mut c = Command::new(&bin);
        c.current_dir(&user).args(args).env_clear();
        for key in ["PATH", "HOME"] {
            if let Some(v) = std::env::var_os(key) {
                c.env(key, v);
            }
        }
        ok(c)
    };
    ferrite(&["--help"]);
    ferrite(&["quantize", "my-model", "-o", "model.fer", "--dtype", "int8"]);
    let inspect = String::from_utf8_lossy(&ferrite(&["inspect", "model.fer"]).stdout).into_owned();
    assert!(inspect.contains("int8"), "{inspect}");
    let tokens = [72u32, 105, 33];
    let printed = ferrite(&["logits", "model.fer", "--tokens", "72,105,33"]);
    let got: Vec<Vec<f32>> = serde_json::from_slice(&printed.stdout).expect("logits prints JSON");

    let bytes = std::fs::read(user.join("model.fer")).unwrap();
    let image = AlignedImage::new(&bytes);
    let want = logits(Model::load(image.bytes()).unwrap(), &tokens, 0).unwrap();
    assert_eq!(got.len(), want.len());
    for (t, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), w.len());
        for (a, b) in g.iter().zip(w) {
            // The same code; only the JSON round trip in between.
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "token {t}: {a} vs {b}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
