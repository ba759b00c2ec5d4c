//! Signed images and anti-rollback (issue 31, docs/signing.md): a signed
//! image loads with a trusted key and without any (`Model::load`), keeps
//! its model hash and logits; unsigned, another key, a byte changed after
//! signing (anywhere before the section, CRC re-sealed or not), a changed
//! key or signature and an older security counter are each refused with
//! their typed error, through `Model::load_signed` and
//! `update::validate_signed`, while the model that served still serves.
//! The detached flow gives the same bytes as signing in one step, and the
//! rollback counter only moves up, whatever a power cut interrupts.

use std::path::{Path, PathBuf};

use ferrite::image::{Header, CRC_FIELD, FLAG_SIGNED, SIGNATURE_SECTION_LEN};
use ferrite::rollback::RollbackCounter;
use ferrite::signature::{KeyId, LoadError, PublicKey, SignatureError, TrustPolicy};
use ferrite::update::{receive, validate_signed, Refusal};
use ferrite::{Error, Model};
use ferrite_tests::sim_flash::{SimError, SimFlash, SECTOR};
use ferrite_tests::{fixtures_dir, image_of};
use ferrite_tools::run::{logits, AlignedImage};
use ferrite_tools::sign;
use ferrite_tools::writer::{seal, WriteOptions};

fn key_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("keys")
        .join(name)
}

fn test_key() -> ed25519_dalek::SigningKey {
    sign::read_secret_key(&key_path("test-signer.pem")).unwrap()
}

fn public(name: &str) -> PublicKey {
    sign::read_public_key(&key_path(&format!("{name}.pub"))).unwrap()
}

fn unsigned_image() -> Vec<u8> {
    let dir = fixtures_dir().join("hybrid_all4_untied");
    image_of(&dir, &WriteOptions::default()).bytes().to_vec()
}

fn signed_image(counter: u32) -> Vec<u8> {
    sign::sign(&unsigned_image(), &test_key(), counter).unwrap()
}

/// `Model::load_signed` of `bytes` against `keys` and `min`: the signer's
/// id and counter, or the refusal.
fn load(bytes: &[u8], keys: &[PublicKey], min: u32) -> Result<(KeyId, u32), LoadError> {
    let image = AlignedImage::new(bytes);
    let policy = TrustPolicy {
        keys,
        min_counter: min,
    };
    let model = Model::load_signed(image.bytes(), &policy)?;
    let v = ferrite::signature::verify(image.bytes(), &policy)?;
    assert_eq!(v.security_counter, model.header().security_counter);
    Ok((v.key_id, v.security_counter))
}

#[test]
fn a_signed_image_is_its_unsigned_self_plus_the_section() {
    let plain = unsigned_image();
    let signed = signed_image(7);
    assert_eq!(signed.len(), plain.len() + SIGNATURE_SECTION_LEN);
    let h = Header::parse(&signed).unwrap();
    assert_eq!(
        (h.version, h.flags, h.security_counter),
        (7, FLAG_SIGNED, 7)
    );
    // Everything after the header is the unsigned image's, byte for byte.
    assert_eq!(&signed[64..plain.len()], &plain[64..]);
    assert_eq!(
        &signed[plain.len()..plain.len() + 32],
        &public("test-signer")
    );
    // Loads without a key (a firmware that does not verify), with one, and
    // computes the same: same model hash (snapshots move between them), same logits.
    let (a, b) = (AlignedImage::new(&plain), AlignedImage::new(&signed));
    let (ma, mb) = (a.model().unwrap(), b.model().unwrap());
    assert_eq!(
        ferrite::snapshot::model_hash(&ma).unwrap(),
        ferrite::snapshot::model_hash(&mb).unwrap()
    );
    let tokens = [72, 101, 108, 108, 111];
    assert_eq!(
        logits(ma, &tokens, 0).unwrap(),
        logits(mb, &tokens, 0).unwrap()
    );
    let id = KeyId::of(&public("test-signer"));
    assert_eq!(load(&signed, &[public("test-signer")], 7), Ok((id, 7)));
    // Signing again replaces the section (a new counter), never stacks one.
    let again = sign::sign(&signed, &test_key(), 8).unwrap();
    assert_eq!(again.len(), signed.len());
    assert_eq!(load(&again, &[public("test-signer")], 8), Ok((id, 8)));
}

#[test]
fn the_crc_skips_the_section_and_the_signature_covers_the_crc() {
    let signed = signed_image(1);
    let trusted = [public("test-signer")];
    let id = KeyId::of(&trusted[0]);
    // A changed signature byte: the CRC still matches (Model::load accepts),
    // the signature does not.
    let mut sig = signed.clone();
    let last = sig.len() - 1;
    sig[last] ^= 1;
    assert!(AlignedImage::new(&sig).model().is_ok());
    assert_eq!(
        load(&sig, &trusted, 0),
        Err(LoadError::Signature(SignatureError::BadSignature {
            key_id: id
        }))
    );
    // The CRC field itself is signed.
    let mut crc = signed.clone();
    crc[CRC_FIELD] ^= 1;
    assert_eq!(
        load(&crc, &trusted, 0),
        Err(LoadError::Signature(SignatureError::BadSignature {
            key_id: id
        }))
    );
}

#[test]
fn every_byte_changed_after_signing_is_refused() {
    let signed = signed_image(3);
    let trusted = [public("test-signer")];
    let id = KeyId::of(&trusted[0]);
    let body = signed.len() - SIGNATURE_SECTION_LEN;
    // The header (version, flags, counter), config, table, data; CRC
    // re-sealed, as an attacker would, or not.
    for at in [8, 16, 56, 60, 64, 100, 300, body / 2, body - 1] {
        for reseal in [false, true] {
            let mut b = signed.clone();
            b[at] ^= 0x10;
            if reseal {
                seal(&mut b);
            }
            let got = load(&b, &trusted, 0);
            let refused = matches!(
                got,
                Err(LoadError::Signature(SignatureError::BadSignature { key_id })) if key_id == id
            ) || matches!(got, Err(LoadError::Invalid(_)));
            assert!(refused, "byte {at} (resealed {reseal}): {got:?}");
        }
    }
    // A byte of the named key: that key is not trusted.
    let mut key = signed.clone();
    key[body] ^= 1;
    assert!(matches!(
        load(&key, &trusted, 0),
        Err(LoadError::Signature(SignatureError::UntrustedKey { .. }))
    ));
}

#[test]
fn unsigned_other_key_and_older_images_are_refused_by_name() {
    let trusted = [public("test-signer")];
    assert_eq!(
        load(&unsigned_image(), &trusted, 0),
        Err(LoadError::Signature(SignatureError::Unsigned))
    );
    let other = sign::read_secret_key(&key_path("other-signer.pem")).unwrap();
    let by_other = sign::sign(&unsigned_image(), &other, 9).unwrap();
    let other_id = KeyId::of(&public("other-signer"));
    assert_eq!(
        load(&by_other, &trusted, 0),
        Err(LoadError::Signature(SignatureError::UntrustedKey {
            key_id: other_id
        }))
    );
    // No trusted key at all trusts nothing.
    assert!(load(&signed_image(1), &[], 0).is_err());
    // Rotation: a firmware that lists both keys accepts both signers;
    // revocation: one that dropped the old key refuses it.
    let both = [public("test-signer"), public("other-signer")];
    assert_eq!(load(&by_other, &both, 0), Ok((other_id, 9)));
    assert!(load(&signed_image(1), &both, 0).is_ok());
    assert!(load(&signed_image(1), &both[1..], 0).is_err());
    // Anti-rollback: the counter against the minimum.
    assert_eq!(
        load(&signed_image(4), &trusted, 5),
        Err(LoadError::Signature(SignatureError::Rollback {
            counter: 4,
            min: 5
        }))
    );
    assert!(load(&signed_image(5), &trusted, 5).is_ok());
    assert!(load(&signed_image(u32::MAX), &trusted, u32::MAX).is_ok());
    // A hostile image under a valid signature by the trusted key (the
    // committed corpus's): the signature verifies, the loader refuses it.
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corrupt");
    let signed_hostile = std::fs::read(corpus.join("signed_overflow_gdn_heads.fer")).unwrap();
    let policy = TrustPolicy {
        keys: &trusted,
        min_counter: 1,
    };
    let image = AlignedImage::new(&signed_hostile);
    assert!(ferrite::signature::verify(image.bytes(), &policy).is_ok());
    assert!(matches!(
        Model::load_signed(image.bytes(), &policy),
        Err(LoadError::Invalid(Error::SizeOverflow { .. }))
    ));
    // A structurally broken image is not signed by the tools.
    let corrupt = Path::new(env!("CARGO_MANIFEST_DIR")).join("corrupt/overflow_gdn_heads.fer");
    let hostile = std::fs::read(corrupt).unwrap();
    assert!(
        sign::sign(&hostile, &test_key(), 1).is_err(),
        "the tool signs only images that load"
    );
}

/// Receives `data` into a slot and validates it as a signed update.
fn update(data: &[u8], policy: &TrustPolicy<'_>) -> Result<u32, Refusal> {
    let mut words = vec![0u128; (1 << 20) / 16];
    let slot: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
    let mut at = 0;
    let len = receive(slot, 512, |buf| {
        let n = buf.len().min(data.len() - at);
        buf[..n].copy_from_slice(&data[at..at + n]);
        at += n;
        Ok(n)
    })?;
    let model = validate_signed(&slot[..len], 1 << 20, policy)?;
    Ok(model.header().security_counter)
}

#[test]
fn a_refused_update_leaves_the_serving_model_serving() {
    let a = AlignedImage::new(&signed_image(2));
    let serving = a.model().unwrap();
    let tokens = [1, 2, 3];
    let before = logits(serving, &tokens, 0).unwrap();
    let keys = [public("test-signer")];
    let policy = TrustPolicy {
        keys: &keys,
        min_counter: 2,
    };
    assert_eq!(update(&signed_image(3), &policy), Ok(3));
    let mut tampered = signed_image(3);
    tampered[200] ^= 1;
    let other = sign::read_secret_key(&key_path("other-signer.pem")).unwrap();
    let refusals = [
        (unsigned_image(), "the image is not signed"),
        (
            sign::sign(&unsigned_image(), &other, 3).unwrap(),
            "which this firmware does not trust",
        ),
        (tampered, "does not verify"),
        (
            signed_image(1),
            "rollback: the image's security counter is 1",
        ),
    ];
    for (image, why) in refusals {
        let r = update(&image, &policy).unwrap_err();
        assert!(matches!(r, Refusal::Signature(_)), "{r:?}");
        assert!(r.to_string().contains(why), "{r} / {why}");
    }
    // A cut transfer and a corrupted header are refused as before.
    let good = signed_image(3);
    assert!(matches!(
        update(&good[..good.len() / 2], &policy),
        Err(Refusal::Interrupted { .. })
    ));
    assert_eq!(
        update(&good[..30], &policy),
        Err(Refusal::Interrupted {
            got: 30,
            claimed: good.len()
        })
    );
    let mut magic = good.clone();
    magic[0] ^= 1;
    assert_eq!(
        update(&magic, &policy),
        Err(Refusal::Invalid(Error::BadMagic))
    );
    // A is untouched and computes what it did.
    assert_eq!(logits(serving, &tokens, 0).unwrap(), before);
}

#[test]
fn the_detached_flow_gives_the_one_step_bytes() {
    let key = test_key();
    let pubkey = key.verifying_key().to_bytes();
    let prepared = sign::prepare(&unsigned_image(), &pubkey, 5).unwrap();
    // The signature section is there with a zero signature: not yet valid.
    assert!(prepared[prepared.len() - 64..].iter().all(|&b| b == 0));
    assert!(load(&prepared, &[pubkey], 0).is_err());
    let digest = sign::digest_to_sign(&prepared).unwrap();
    // "Elsewhere": an Ed25519 signer given only the 32 bytes.
    use ed25519_dalek::Signer;
    let sig = key.sign(&digest).to_bytes();
    let attached = sign::attach(&prepared, &sig).unwrap();
    assert_eq!(attached, sign::sign(&unsigned_image(), &key, 5).unwrap());
    // A signature over anything else is not attached.
    let wrong = key.sign(b"something else").to_bytes();
    assert!(sign::attach(&prepared, &wrong).is_err());
}

fn counter(flash: SimFlash<8>) -> RollbackCounter<SimFlash<8>> {
    RollbackCounter::new(flash, 0, SECTOR as u32, SECTOR as u32).unwrap()
}

#[test]
fn the_rollback_counter_only_moves_up() {
    let mut c = counter(SimFlash::new(2 * SECTOR));
    assert_eq!(c.min_accepted(), Ok(0));
    assert_eq!(c.advance(3), Ok(3));
    assert_eq!(c.advance(2), Ok(3));
    assert_eq!(c.advance(3), Ok(3));
    assert_eq!(c.advance(10), Ok(10));
    let flash = c.release();
    // Across a reset: the same flash, a new counter.
    assert_eq!(counter(flash.clone()).min_accepted(), Ok(10));
    // An advance to or below the stored value writes nothing.
    let ops = flash.ops;
    let mut c = counter(flash);
    c.advance(9).unwrap();
    assert_eq!(c.release().ops, ops);
}

#[test]
fn a_power_cut_during_an_advance_keeps_the_old_or_the_new_value() {
    let mut base = counter(SimFlash::new(2 * SECTOR));
    base.advance(4).unwrap();
    let base = base.release();
    let mut whole = counter(SimFlash {
        ops: 0,
        ..base.clone()
    });
    whole.advance(5).unwrap();
    let ops = whole.release().ops;
    assert!(ops > 2, "{ops}");
    let mut saw_old = 0;
    for k in 0..ops {
        let mut c = counter(SimFlash {
            budget: Some(k),
            ops: 0,
            ..base.clone()
        });
        let r = c.advance(5);
        assert_eq!(
            r,
            Err(ferrite::snapshot_slots::SlotError::Flash(
                SimError::PowerCut
            ))
        );
        let after = SimFlash {
            budget: None,
            ..c.release()
        };
        let min = counter(after.clone()).min_accepted().unwrap();
        assert!(min == 4 || min == 5, "cut at {k}: {min}");
        saw_old += usize::from(min == 4);
        // The next boot finishes the advance.
        let mut again = counter(after);
        assert_eq!(again.advance(5), Ok(5));
    }
    assert!(saw_old > 0);
}
