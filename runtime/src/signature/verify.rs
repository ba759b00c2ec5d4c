//! Signature verification (the `verify` feature): SHA-256 over the signed
//! bytes, Ed25519 over the digest (ed25519-compact without its precomputed
//! tables, chosen by measurement on the m4f, m3 and rv32imac:
//! `docs/signing.md`), once per update or boot.

use ed25519_compact::{PublicKey, Signature};
use sha2::{Digest, Sha256};

use super::{section, KeyId, LoadError, SignatureError, TrustPolicy};
use crate::image::Header;
use crate::model::Model;

/// What a verified image is signed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Verified {
    /// The key that signed it (one of the trusted keys).
    pub key_id: KeyId,
    /// Its security counter (model version).
    pub security_counter: u32,
}

/// The SHA-256 digest of `signed`: the message an image's Ed25519 signature
/// signs (`ferrite sign --print-digest` prints it for a signing service).
pub fn digest(signed: &[u8]) -> [u8; 32] {
    Sha256::digest(signed).into()
}

/// Checks `image`'s signature and security counter against `policy`,
/// reading only its header before the signature is verified: the section
/// names a trusted key, the signature verifies (RFC 8032 Ed25519; a
/// non-canonical `S` or an undecodable point is refused), and the counter
/// is at least `policy.min_counter`. Does not validate the rest of the
/// image ([`Model::load_signed`] does both).
pub fn verify(image: &[u8], policy: &TrustPolicy<'_>) -> Result<Verified, LoadError> {
    let header = Header::parse(image)?;
    let s = section(image, &header).ok_or(SignatureError::Unsigned)?;
    let key_id = KeyId::of(s.public_key);
    let key = policy
        .keys
        .iter()
        .find(|k| *k == s.public_key)
        .ok_or(SignatureError::UntrustedKey { key_id })?;
    let bad = SignatureError::BadSignature { key_id };
    PublicKey::new(*key)
        .verify(digest(s.signed), &Signature::new(*s.signature))
        .map_err(|_| bad)?;
    if s.security_counter < policy.min_counter {
        return Err(SignatureError::Rollback {
            counter: s.security_counter,
            min: policy.min_counter,
        }
        .into());
    }
    Ok(Verified {
        key_id,
        security_counter: s.security_counter,
    })
}

impl<'a> Model<'a> {
    /// [`Model::load`] for a firmware that runs only signed models: the
    /// signature and security counter are checked first ([`verify`]), so an
    /// image that is unsigned, signed by a key not in `policy.keys`, changed
    /// after signing or older than `policy.min_counter` is refused before
    /// any of it but the header is parsed; then the image is validated as
    /// `load` validates it. Costs one pass of SHA-256 over the image and one
    /// Ed25519 verification: call it once per boot or update, never per token.
    pub fn load_signed(image: &'a [u8], policy: &TrustPolicy<'_>) -> Result<Model<'a>, LoadError> {
        verify(image, policy)?;
        Ok(Model::load(image)?)
    }
}
