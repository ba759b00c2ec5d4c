//! Signature verification (the `verify` feature): SHA-256 over the signed
//! bytes, Ed25519 over the digest ([`ed25519`]: strict RFC 8032
//! verification on curve25519-dalek's arithmetic, chosen so that the C API
//! links no panic branch: `docs/signing.md`, `docs/c-api.md`), once per
//! update or boot.

use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use sha2::{Digest, Sha256, Sha512};

use super::{section, KeyId, LoadError, PublicKey, SignatureError, TrustPolicy, SIGNATURE_LEN};
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

/// Whether `signature` is a valid Ed25519 signature of `message` by `key`:
/// RFC 8032 §5.1.7 with the strict checks of ed25519-dalek's
/// `VerifyingKey::verify_strict`: its semantics, on curve25519-dalek's
/// arithmetic (`tests/tests/signed.rs` compares their verdicts on RFC
/// 8032's vectors and on random, altered, non-canonical and small-order
/// inputs). `S` is canonical (below the group order `L`), the
/// key `A` and `R` decompress and neither is of small order, and the
/// encoding of `[S]B - [k]A`, `k = SHA-512(R || A || message) mod L`, is
/// `R`'s bytes. The arithmetic is curve25519-dalek's, with its
/// constant-time multiplications rather than the variable-time ones and
/// their lookup tables, so that no panic branch is linked
/// (`docs/c-api.md`, "No panics"). [`verify`] calls it on an image's
/// SHA-256 [`digest`]; nothing in it is secret.
pub fn ed25519(key: &PublicKey, message: &[u8], signature: &[u8; SIGNATURE_LEN]) -> bool {
    let (Some(r), Some(s)) = (signature.first_chunk::<32>(), signature.last_chunk::<32>()) else {
        return false;
    };
    let r = CompressedEdwardsY(*r);
    let (Some(a), Some(r_point)) = (CompressedEdwardsY(*key).decompress(), r.decompress()) else {
        return false;
    };
    if a.is_small_order() || r_point.is_small_order() {
        return false;
    }
    let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(*s)) else {
        return false;
    };
    let h: [u8; 64] = Sha512::new()
        .chain_update(r.as_bytes())
        .chain_update(key)
        .chain_update(message)
        .finalize()
        .into();
    let k = Scalar::from_bytes_mod_order_wide(&h);
    (EdwardsPoint::mul_base(&s) - a * k).compress() == r
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
    if !ed25519(key, &digest(s.signed), s.signature) {
        return Err(bad.into());
    }
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
