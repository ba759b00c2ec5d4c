//! Signed images and anti-rollback (format 7; `docs/signing.md`).
//!
//! A signed image ends with a signature section ([`crate::image::SIGNATURE_SECTION_LEN`]
//! bytes): the signer's Ed25519 public key, then an Ed25519 signature over
//! the SHA-256 digest of every byte before the section (header, CRC and
//! security counter included). The header's security counter is the model
//! version that anti-rollback compares with the lowest one the firmware
//! accepts ([`TrustPolicy::min_counter`], kept in flash by
//! [`crate::rollback::RollbackCounter`]).
//!
//! This module reads the section and names the refusals; the `verify`
//! feature adds the cryptography: `signature::verify`, `signature::ed25519`,
//! `Model::load_signed` and `update::validate_signed`.
//! Without it a firmware pays no flash for signatures, and a signed image
//! loads with [`crate::Model::load`] as any other (its signature unread).

use core::fmt;

use crate::error::Error;
use crate::image::Header;

#[cfg(feature = "verify")]
mod verify;
#[cfg(feature = "verify")]
pub use verify::{digest, ed25519, verify, Verified};

/// An Ed25519 public key (32 bytes, RFC 8032 encoding).
pub type PublicKey = [u8; 32];
/// Bytes of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

/// A key's short name: the first 8 bytes of the public key, shown in hex
/// by `ferrite inspect` and in refusals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct KeyId(pub [u8; 8]);

impl KeyId {
    /// The id of `key`.
    pub const fn of(key: &PublicKey) -> KeyId {
        let mut id = [0u8; 8];
        let mut i = 0;
        while i < 8 {
            id[i] = key[i];
            i += 1;
        }
        KeyId(id)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// The signature section of a signed image, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignatureSection<'a> {
    /// Every byte the signature covers (the image before the section).
    pub signed: &'a [u8],
    /// The signer's public key, as the image names it.
    pub public_key: &'a PublicKey,
    /// The Ed25519 signature over the SHA-256 digest of `signed`.
    pub signature: &'a [u8; SIGNATURE_LEN],
    /// The image's model version (header word 15).
    pub security_counter: u32,
}

/// The signature section of `image` (whose header is `header`, from
/// [`Header::parse`]); `None` when the image is not signed.
pub fn section<'a>(image: &'a [u8], header: &Header) -> Option<SignatureSection<'a>> {
    if !header.is_signed() {
        return None;
    }
    let (signed, rest) = image.split_at_checked(header.signed_len() as usize)?;
    let (public_key, rest) = rest.split_first_chunk::<32>()?;
    let (signature, _) = rest.split_first_chunk::<SIGNATURE_LEN>()?;
    Some(SignatureSection {
        signed,
        public_key,
        signature,
        security_counter: header.security_counter,
    })
}

/// What the firmware trusts: the public keys whose signatures it accepts
/// (several, so that a key can be rotated: a new firmware lists the old
/// key and the new one; dropping a key revokes it) and the lowest security
/// counter it accepts (anti-rollback).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrustPolicy<'k> {
    /// The trusted public keys.
    pub keys: &'k [PublicKey],
    /// Images whose security counter is lower are refused.
    pub min_counter: u32,
}

/// Why a signed load or update refused an image for its signature (the
/// model that serves keeps serving).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SignatureError {
    /// The image has no signature section.
    Unsigned,
    /// The image is signed by a key the firmware does not trust.
    UntrustedKey {
        /// The signer the image names.
        key_id: KeyId,
    },
    /// The signature does not verify: a byte before the section changed
    /// after signing, or the signature is not that key's.
    BadSignature {
        /// The signer the image names.
        key_id: KeyId,
    },
    /// A validly signed image older than the firmware accepts.
    Rollback {
        /// The image's security counter.
        counter: u32,
        /// The lowest the firmware accepts.
        min: u32,
    },
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureError::Unsigned => write!(f, "the image is not signed"),
            SignatureError::UntrustedKey { key_id } => {
                write!(f, "the image is signed by key {key_id}, which this firmware does not trust")
            }
            SignatureError::BadSignature { key_id } => write!(
                f,
                "the signature by key {key_id} does not verify (the image was changed after signing, or forged)"
            ),
            SignatureError::Rollback { counter, min } => write!(
                f,
                "rollback: the image's security counter is {counter}, this device accepts {min} or newer"
            ),
        }
    }
}

/// Why `Model::load_signed` (feature `verify`) refused an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LoadError {
    /// The image is invalid (header, CRC, structure or values).
    Invalid(Error),
    /// The image's signature or security counter is refused.
    Signature(SignatureError),
}

impl From<Error> for LoadError {
    fn from(e: Error) -> Self {
        LoadError::Invalid(e)
    }
}

impl From<SignatureError> for LoadError {
    fn from(e: SignatureError) -> Self {
        LoadError::Signature(e)
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Invalid(e) => write!(f, "invalid image: {e}"),
            LoadError::Signature(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;
    use crate::image::{FLAG_SIGNED, HEADER_LEN, SIGNATURE_SECTION_LEN};

    #[test]
    fn a_key_id_is_the_keys_first_bytes_in_hex() {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 0xff]);
        assert_eq!(KeyId::of(&key).to_string(), "deadbeef000102ff");
    }

    #[test]
    fn the_section_is_the_last_96_bytes_of_a_signed_image() {
        let mut image = [0u8; 256];
        for (i, b) in image.iter_mut().enumerate() {
            *b = i as u8;
        }
        let header = Header {
            version: 7,
            file_len: 256,
            crc32: 0,
            config_off: 64,
            config_len: 0,
            table_off: 64,
            tensor_count: 0,
            tokenizer_off: 64,
            tokenizer_len: 0,
            data_off: 64,
            data_len: 0,
            flags: FLAG_SIGNED,
            security_counter: 3,
        };
        let s = section(&image, &header).unwrap();
        assert_eq!(s.signed.len(), 256 - SIGNATURE_SECTION_LEN);
        assert_eq!(s.public_key[0], 160);
        assert_eq!(s.signature[0], 192);
        assert_eq!(s.signature[63], 255);
        assert_eq!(s.security_counter, 3);
        let unsigned = Header { flags: 0, ..header };
        assert_eq!(section(&image, &unsigned), None);
        // A slice shorter than the header claims has no section (never a panic).
        assert_eq!(section(&image[..HEADER_LEN], &header), None);
    }

    #[test]
    fn every_refusal_names_its_numbers() {
        let key_id = KeyId([1, 2, 3, 4, 5, 6, 7, 8]);
        let cases = [
            (SignatureError::Unsigned, "the image is not signed"),
            (
                SignatureError::UntrustedKey { key_id },
                "the image is signed by key 0102030405060708, which this firmware does not trust",
            ),
            (
                SignatureError::BadSignature { key_id },
                "the signature by key 0102030405060708 does not verify (the image was changed after signing, or forged)",
            ),
            (
                SignatureError::Rollback { counter: 2, min: 5 },
                "rollback: the image's security counter is 2, this device accepts 5 or newer",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
            assert_eq!(LoadError::from(e).to_string(), text);
        }
        assert_eq!(
            LoadError::from(Error::BadMagic).to_string(),
            "invalid image: not a ferrite image (bad magic bytes)"
        );
    }
}
