//! `ferrite sign`: the signature section (format 7, docs/signing.md).

use std::path::PathBuf;

use anyhow::{Context, Result};
use ferrite::signature::KeyId;
use ferrite_tools::sign;

/// Sign an image for firmware that runs only signed models (format 7):
/// with a private key here (--key), or in two steps around a signer
/// elsewhere, an HSM or a signing service: --public-key prepares the image
/// and prints the SHA-256 digest to sign, --attach puts the 64-byte Ed25519
/// signature made there into the prepared image (it must verify).
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["key", "public_key", "attach"])))]
pub struct Args {
    /// The image to sign (signed already: signed anew), or with --attach the prepared image.
    image: PathBuf,
    /// Sign with this Ed25519 private key (PKCS#8 PEM: `ferrite keygen`,
    /// `openssl genpkey -algorithm ed25519`).
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// Detached, step 1: prepare the image for this public key (64 hex
    /// digits or PEM), write it to --output and print the digest to sign.
    #[arg(long, value_name = "FILE")]
    public_key: Option<PathBuf>,
    /// Detached, step 2: the signature over the printed digest (64 bytes,
    /// or 128 hex digits) to put into the prepared image.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["counter", "digest_out"])]
    attach: Option<PathBuf>,
    /// The security counter (model version) the device's anti-rollback
    /// compares: it refuses an image lower than the highest it has run.
    #[arg(long, value_name = "N", default_value_t = 0)]
    counter: u32,
    /// Step 1: also write the 32-byte digest to this file (for `openssl
    /// pkeyutl -sign -rawin -in FILE`).
    #[arg(long, value_name = "FILE", requires = "public_key")]
    digest_out: Option<PathBuf>,
    /// Where to write the signed (or prepared) image.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
}

/// Writes the image and prints one line (step 1: two, the second the digest).
pub fn run(args: Args) -> Result<()> {
    let image = std::fs::read(&args.image).with_context(|| args.image.display().to_string())?;
    let what = if let Some(path) = &args.key {
        let key = sign::read_secret_key(path)?;
        sign::sign(&image, &key, args.counter)?
    } else if let Some(path) = &args.public_key {
        let key = sign::read_public_key(path)?;
        let prepared = sign::prepare(&image, &key, args.counter)?;
        let digest = sign::digest_to_sign(&prepared)?;
        write(&args.output, &prepared)?;
        if let Some(out) = &args.digest_out {
            std::fs::write(out, digest).with_context(|| out.display().to_string())?;
        }
        println!(
            "prepared {}: key {} security_counter {}; sign this digest with Ed25519, then --attach the signature",
            args.output.display(),
            KeyId::of(&key),
            args.counter
        );
        println!("digest: {}", sign::hex(&digest));
        return Ok(());
    } else {
        let path = args.attach.as_ref().context("no mode")?;
        sign::attach(&image, &sign::read_signature(path)?)?
    };
    write(&args.output, &what)?;
    let (key_id, counter) = sign::check(&what)?;
    println!(
        "signed {}: key {key_id} security_counter {counter}",
        args.output.display()
    );
    Ok(())
}

fn write(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| path.display().to_string())
}
