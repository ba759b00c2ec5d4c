//! Signing images (format 7, `docs/signing.md`): the signature section
//! appended to an image, in one step with a key file ([`sign`]) or in two
//! around a signer elsewhere (an HSM, a signing service): [`prepare`] writes
//! the image with the section's public key and a zero signature and gives
//! the 32-byte digest to sign, [`attach`] puts the signature made there in
//! and checks it. Keys: PKCS#8 PEM (`ferrite keygen`, or `openssl genpkey
//! -algorithm ed25519`), public keys as 64 hex digits or SPKI PEM.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use ferrite::image::{
    Header, FLAG_SIGNED, HEADER_LEN, SIGNATURE_SECTION_LEN, SIGNED_FORMAT_VERSION,
};
use ferrite::signature::{self, KeyId, PublicKey, TrustPolicy};

use crate::run::AlignedImage;
use crate::writer::seal;

/// `image` without its signature section, header words as before signing
/// (the version signing raised is kept: it is what the bytes need now).
/// Refuses bytes the runtime does not load.
pub fn unsigned(image: &[u8]) -> Result<Vec<u8>> {
    let aligned = AlignedImage::try_new(image)?;
    let model = aligned.model()?;
    let h = *model.header();
    let mut bytes = image[..h.signed_len() as usize].to_vec();
    let plain = Header {
        file_len: bytes.len() as u32,
        flags: 0,
        security_counter: 0,
        ..h
    };
    write_header(&mut bytes, &plain);
    Ok(bytes)
}

/// `image` (signed or not) with a signature section naming `key`, a zero
/// signature and `counter` as its security counter: format version 7 (or
/// the image's, if newer), its CRC sealed. [`digest_to_sign`] is then what
/// the key must sign.
pub fn prepare(image: &[u8], key: &PublicKey, counter: u32) -> Result<Vec<u8>> {
    let mut bytes = unsigned(image)?;
    let body = Header::parse(&bytes).map_err(anyhow::Error::msg)?;
    let len = bytes.len() + SIGNATURE_SECTION_LEN;
    let h = Header {
        version: body.version.max(SIGNED_FORMAT_VERSION),
        file_len: u32::try_from(len).context("a signed image larger than 4 GiB")?,
        flags: FLAG_SIGNED,
        security_counter: counter,
        ..body
    };
    write_header(&mut bytes, &h);
    bytes.extend_from_slice(key);
    bytes.resize(len, 0);
    seal(&mut bytes);
    Ok(bytes)
}

/// The 32 bytes a prepared or signed image's key signs (SHA-256 of every
/// byte before the signature section).
pub fn digest_to_sign(prepared: &[u8]) -> Result<[u8; 32]> {
    let h = Header::parse(prepared).map_err(anyhow::Error::msg)?;
    let s = signature::section(prepared, &h).context("the image has no signature section")?;
    Ok(signature::digest(s.signed))
}

/// The prepared image with `sig` (64 bytes, made elsewhere over
/// [`digest_to_sign`]) in its section; refused unless it verifies against
/// the key the section names.
pub fn attach(prepared: &[u8], sig: &[u8; 64]) -> Result<Vec<u8>> {
    let mut bytes = prepared.to_vec();
    let at = bytes
        .len()
        .checked_sub(64)
        .context("not a prepared image")?;
    bytes[at..].copy_from_slice(sig);
    check(&bytes)?;
    Ok(bytes)
}

/// `image` signed by `key` with security counter `counter`.
pub fn sign(image: &[u8], key: &SigningKey, counter: u32) -> Result<Vec<u8>> {
    let prepared = prepare(image, key.verifying_key().as_bytes(), counter)?;
    let sig = key.sign(&digest_to_sign(&prepared)?).to_bytes();
    attach(&prepared, &sig)
}

/// Seals the CRC of a prepared or signed image and signs it anew in place,
/// without loading it first: what [`sign`] does for bytes the runtime may
/// refuse. Tests use it to sign hostile images (a broken image under a
/// trusted key must still be refused by the loader); `ferrite sign` never does.
pub fn resign_unchecked(bytes: &mut [u8], key: &SigningKey) -> Result<()> {
    seal(bytes);
    let digest = digest_to_sign(bytes)?;
    let at = bytes.len() - 64;
    bytes[at..].copy_from_slice(&key.sign(&digest).to_bytes());
    Ok(())
}

/// Checks that a signed image verifies against the key it names and loads;
/// returns that key's id and the security counter.
pub fn check(image: &[u8]) -> Result<(KeyId, u32)> {
    let aligned = AlignedImage::try_new(image)?;
    let h = Header::parse(aligned.bytes()).map_err(anyhow::Error::msg)?;
    let s = signature::section(aligned.bytes(), &h).context("the image is not signed")?;
    let policy = TrustPolicy {
        keys: &[*s.public_key],
        min_counter: 0,
    };
    ferrite::Model::load_signed(aligned.bytes(), &policy).map_err(anyhow::Error::msg)?;
    Ok((KeyId::of(s.public_key), h.security_counter))
}

/// Writes `h` over the first [`HEADER_LEN`] bytes of `bytes`.
fn write_header(bytes: &mut [u8], h: &Header) {
    let mut head = [0u8; HEADER_LEN];
    h.encode(&mut head);
    bytes[..HEADER_LEN].copy_from_slice(&head);
}

/// A new key from the operating system's random source.
pub fn generate_key() -> Result<SigningKey> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("no random source: {e}"))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// `key` as PKCS#8 PEM (what [`read_secret_key`] and OpenSSL read).
pub fn secret_key_pem(key: &SigningKey) -> Result<String> {
    let pem = key
        .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .map_err(|e| anyhow::anyhow!("encoding the key: {e}"))?;
    Ok(pem.to_string())
}

/// A secret key from a PKCS#8 PEM file (`ferrite keygen`, `openssl genpkey -algorithm ed25519`).
pub fn read_secret_key(path: &Path) -> Result<SigningKey> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    SigningKey::from_pkcs8_pem(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: not an Ed25519 private key in PKCS#8 PEM ({e})",
            path.display()
        )
    })
}

/// A public key from a file: 64 hex digits (`ferrite keygen`'s `.pub`) or
/// SPKI PEM (`openssl pkey -pubout`).
pub fn read_public_key(path: &Path) -> Result<PublicKey> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    if text.contains("-----BEGIN PUBLIC KEY-----") {
        let key = VerifyingKey::from_public_key_pem(&text)
            .map_err(|e| anyhow::anyhow!("{}: not an Ed25519 public key ({e})", path.display()))?;
        return Ok(key.to_bytes());
    }
    parse_hex(text.trim())
        .with_context(|| format!("{}: want 64 hex digits or a PEM public key", path.display()))
}

/// `N` bytes from hex digits (upper or lower case).
pub fn parse_hex<const N: usize>(text: &str) -> Result<[u8; N]> {
    ensure!(
        text.len() == 2 * N && text.is_ascii(),
        "want {} hex digits, got {} characters",
        2 * N,
        text.len()
    );
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)
            .with_context(|| format!("not hex: {:?}", &text[2 * i..2 * i + 2]))?;
    }
    Ok(out)
}

/// Bytes as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A detached signature from a file: 64 raw bytes, or 128 hex digits.
pub fn read_signature(path: &Path) -> Result<[u8; 64]> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    if let Ok(raw) = <[u8; 64]>::try_from(bytes.as_slice()) {
        return Ok(raw);
    }
    match std::str::from_utf8(&bytes) {
        Ok(text) => parse_hex(text.trim())
            .with_context(|| format!("{}: want 64 bytes or 128 hex digits", path.display())),
        Err(_) => bail!(
            "{}: want 64 bytes or 128 hex digits, got {} bytes",
            path.display(),
            bytes.len()
        ),
    }
}
