//! `ferrite keygen`, `sign` (one step and detached), `verify` and
//! `inspect`'s signature line, as a user runs them: files written, lines
//! printed, and every refusal a non-zero exit with one line.

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

fn ok(args: &[&str]) -> String {
    let o = ferrite(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{args:?}: {err}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Exit status 1 with one `error:` line that contains `want`.
fn refused(args: &[&str], want: &str) {
    let o = ferrite(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err:?}");
    assert!(
        err.starts_with("error: ") && err.contains(want),
        "{args:?}: {err}"
    );
}

fn tmp(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("ferrite-sign-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).to_string_lossy().into_owned()
}

fn key(name: &str) -> String {
    repo()
        .join("tests/keys")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// A small image to sign.
fn image() -> String {
    let out = tmp("plain.fer");
    let fixture = repo().join("tests/fixtures/swa_gqa");
    ok(&[
        "quantize",
        fixture.to_str().unwrap(),
        "-o",
        &out,
        "--dtype",
        "int8",
    ]);
    out
}

#[test]
fn keygen_writes_a_private_and_a_public_file_and_never_overwrites() {
    let base = tmp("k");
    let line = ok(&["keygen", "-o", &base]);
    let (pem, public) = (format!("{base}.pem"), format!("{base}.pub"));
    let text = std::fs::read_to_string(&pem).unwrap();
    assert!(text.starts_with("-----BEGIN PRIVATE KEY-----"), "{text}");
    let hex = std::fs::read_to_string(&public).unwrap();
    assert_eq!(hex.trim().len(), 64);
    assert!(line.contains(&hex.trim()[..16]), "the key id: {line}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&pem).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o077,
            0,
            "the private key is readable by others: {mode:o}"
        );
    }
    refused(&["keygen", "-o", &base], "keygen never overwrites a key");
}

#[test]
fn sign_inspect_and_verify_as_a_firmware_would() {
    let plain = image();
    let signed = tmp("signed.fer");
    let line = ok(&[
        "sign",
        &plain,
        "--key",
        &key("test-signer.pem"),
        "--counter",
        "3",
        "-o",
        &signed,
    ]);
    assert!(
        line.contains("key 1c3ea13b13db3c1f security_counter 3"),
        "{line}"
    );
    let inspect = ok(&["inspect", &signed]);
    assert!(inspect.starts_with("ferrite image v7"), "{inspect}");
    assert!(
        inspect.contains(
            "signature: key 1c3ea13b13db3c1f security_counter 3 (verifies against that key)"
        ),
        "{inspect}"
    );
    assert!(ok(&["inspect", &plain]).contains("signature: none"));
    let trust = key("test-signer.pub");
    let v = ok(&["verify", &signed, "--trust", &trust, "--min-counter", "3"]);
    assert_eq!(
        v.trim(),
        "verified: key 1c3ea13b13db3c1f security_counter 3"
    );
    refused(
        &["verify", &signed, "--trust", &key("other-signer.pub")],
        "does not trust",
    );
    refused(
        &["verify", &signed, "--trust", &trust, "--min-counter", "4"],
        "rollback: the image's security counter is 3",
    );
    refused(
        &["verify", &plain, "--trust", &trust],
        "the image is not signed",
    );
    let corrupt = repo().join("tests/corrupt/overflow_gdn_heads.fer");
    refused(
        &[
            "sign",
            corrupt.to_str().unwrap(),
            "--key",
            &key("test-signer.pem"),
            "-o",
            &tmp("x.fer"),
        ],
        "size overflow",
    );
    refused(
        &["sign", &plain, "--key", &trust, "-o", &tmp("x.fer")],
        "not an Ed25519 private key",
    );
    let o = ferrite(&["sign", &plain, "-o", &tmp("x.fer")]);
    assert_eq!(o.status.code(), Some(2), "no mode is an argument error");
}

#[test]
fn the_detached_flow_gives_the_one_step_image() {
    let plain = image();
    let prepared = tmp("prepared.fer");
    let digest_file = tmp("digest.bin");
    let out = ok(&[
        "sign",
        &plain,
        "--public-key",
        &key("test-signer.pub"),
        "--counter",
        "5",
        "-o",
        &prepared,
        "--digest-out",
        &digest_file,
    ]);
    let digest_hex = out
        .lines()
        .find_map(|l| l.strip_prefix("digest: "))
        .expect("a digest line");
    let digest = std::fs::read(&digest_file).unwrap();
    assert_eq!(ferrite_tools::sign::hex(&digest), digest_hex);
    // The signer elsewhere: only the 32 bytes.
    use ed25519_dalek::Signer;
    let signer = ferrite_tools::sign::read_secret_key(Path::new(&key("test-signer.pem"))).unwrap();
    let sig = signer.sign(&digest).to_bytes();
    let sig_file = tmp("sig.hex");
    std::fs::write(&sig_file, ferrite_tools::sign::hex(&sig)).unwrap();
    let attached = tmp("attached.fer");
    ok(&["sign", &prepared, "--attach", &sig_file, "-o", &attached]);
    let one_step = tmp("one-step.fer");
    ok(&[
        "sign",
        &plain,
        "--key",
        &key("test-signer.pem"),
        "--counter",
        "5",
        "-o",
        &one_step,
    ]);
    assert_eq!(
        std::fs::read(&attached).unwrap(),
        std::fs::read(&one_step).unwrap()
    );
    // A signature over something else, or of the wrong length, is not attached.
    let wrong = tmp("wrong.bin");
    std::fs::write(&wrong, signer.sign(b"other").to_bytes()).unwrap();
    refused(
        &["sign", &prepared, "--attach", &wrong, "-o", &tmp("x.fer")],
        "does not verify",
    );
    refused(
        &[
            "sign",
            &prepared,
            "--attach",
            &digest_file,
            "-o",
            &tmp("x.fer"),
        ],
        "want 64 bytes or 128 hex digits",
    );
}
