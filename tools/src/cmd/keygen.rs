//! `ferrite keygen`: an Ed25519 key pair for `ferrite sign`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use ferrite::signature::KeyId;
use ferrite_tools::sign;

/// Make an Ed25519 key pair for signing images: BASE.pem (the private key,
/// PKCS#8 PEM, readable by its owner only) and BASE.pub (the public key,
/// 64 hex digits, for the firmware's trusted keys). Existing files are
/// never overwritten. Keys kept in an HSM or a signing service are made
/// there instead (docs/signing.md).
#[derive(clap::Args)]
pub struct Args {
    /// Path and name of the two files, without extension.
    #[arg(short, long, value_name = "BASE")]
    output: PathBuf,
}

/// Writes both files and prints the key id and public key.
pub fn run(args: Args) -> Result<()> {
    let (secret, public) = (
        args.output.with_extension("pem"),
        args.output.with_extension("pub"),
    );
    for p in [&secret, &public] {
        if p.exists() {
            bail!("{} exists: keygen never overwrites a key", p.display());
        }
    }
    let key = sign::generate_key()?;
    let mut file = open_private(&secret)?;
    file.write_all(sign::secret_key_pem(&key)?.as_bytes())
        .with_context(|| secret.display().to_string())?;
    let pubkey = key.verifying_key().to_bytes();
    std::fs::write(&public, format!("{}\n", sign::hex(&pubkey)))
        .with_context(|| public.display().to_string())?;
    println!(
        "key {}: private {} public {} ({})",
        KeyId::of(&pubkey),
        secret.display(),
        public.display(),
        sign::hex(&pubkey)
    );
    Ok(())
}

/// A new file only its owner may read (on Unix; elsewhere a plain new file).
fn open_private(path: &std::path::Path) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .with_context(|| path.display().to_string())
}
