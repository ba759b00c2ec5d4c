//! Signed images and anti-rollback (issue 31, docs/signing.md): a signed
//! image loads with a trusted key and without any (`Model::load`), keeps
//! its model hash and logits; unsigned, another key, a byte changed after
//! signing (anywhere before the section, CRC re-sealed or not), a changed
//! key or signature and an older security counter are each refused with
//! their typed error, through `Model::load_signed` and
//! `update::validate_signed`, while the model that served still serves.
//! The detached flow gives the same bytes as signing in one step, and the
//! rollback counter only moves up, whatever a power cut interrupts.
//! `signature::ed25519` (the runtime's own strict RFC 8032 verification)
//! accepts RFC 8032's test vectors and gives ed25519-dalek's
//! `verify_strict` verdict on valid, altered, non-canonical and
//! small-order signatures and keys.

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

fn hex<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0; N];
    assert_eq!(s.len(), 2 * N);
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

#[test]
fn ed25519_accepts_the_rfc8032_vectors() {
    use ed25519_dalek::Signer;
    // RFC 8032 §7.1, TEST 1 to 3: secret key, public key, message, signature.
    let vectors: [(&str, &str, &[u8], &str); 3] = [
        (
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
            b"",
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
        ),
        (
            "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
            "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
            &[0x72],
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
        ),
        (
            "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
            "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
            &[0xaf, 0x82],
            "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
        ),
    ];
    for (secret, public, message, signature) in vectors {
        let (key, sig) = (hex::<32>(public), hex::<64>(signature));
        // The vectors are what ed25519-dalek computes (Ed25519 signing is
        // deterministic), and the runtime accepts them.
        let signer = ed25519_dalek::SigningKey::from_bytes(&hex(secret));
        assert_eq!(signer.verifying_key().to_bytes(), key);
        assert_eq!(signer.sign(message).to_bytes(), sig);
        assert!(ferrite::signature::ed25519(&key, message, &sig));
        let mut bad = sig;
        bad[0] ^= 1;
        assert!(!ferrite::signature::ed25519(&key, message, &bad));
    }
}

/// ed25519-dalek's strict verdict: the reference `signature::ed25519` must
/// give on every input.
fn dalek_strict(key: &[u8; 32], message: &[u8], sig: &[u8; 64]) -> bool {
    let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(key) else {
        return false;
    };
    key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(sig))
        .is_ok()
}

/// `s + L` as 32 little-endian bytes (`s < L < 2^253`: no overflow): the
/// same signature with a non-canonical `S`.
fn plus_l(s: &[u8; 32]) -> [u8; 32] {
    let l = curve25519_dalek::Scalar::ZERO - curve25519_dalek::Scalar::ONE;
    let mut l = l.to_bytes();
    l[0] += 1; // L - 1 + 1: its low byte is 0xec, no carry.
    let (mut out, mut carry) = ([0; 32], 0u16);
    for i in 0..32 {
        let sum = u16::from(s[i]) + u16::from(l[i]) + carry;
        out[i] = sum as u8;
        carry = sum >> 8;
    }
    assert_eq!(carry, 0);
    out
}

#[test]
fn ed25519_gives_ed25519_dalek_strict_verdict_on_every_input() {
    use curve25519_dalek::constants::EIGHT_TORSION;
    use curve25519_dalek::{EdwardsPoint, Scalar};
    use ed25519_dalek::Signer;
    use sha2::{Digest, Sha512};

    // A fixed seed: the same inputs on every run (splitmix64).
    let mut state = 0x5eed_f3e1_7e25_5190_u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let bytes32 = |next: &mut dyn FnMut() -> u64| {
        let mut b = [0u8; 32];
        for c in b.chunks_mut(8) {
            c.copy_from_slice(&next().to_le_bytes());
        }
        b
    };
    let small: Vec<[u8; 32]> = EIGHT_TORSION
        .iter()
        .map(|t| t.compress().to_bytes())
        .collect();
    let (mut cases, mut accepted) = (0usize, 0usize);
    let mut check = |key: &[u8; 32], message: &[u8], sig: &[u8; 64], what: &str| {
        let ours = ferrite::signature::ed25519(key, message, sig);
        assert_eq!(
            ours,
            dalek_strict(key, message, sig),
            "{what}: key {key:02x?}, message {message:02x?}, signature {sig:02x?}"
        );
        cases += 1;
        accepted += usize::from(ours);
    };
    for round in 0..300 {
        let signer = ed25519_dalek::SigningKey::from_bytes(&bytes32(&mut next));
        let key = signer.verifying_key().to_bytes();
        let len = (next() % 80) as usize;
        let message: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let sig = signer.sign(&message).to_bytes();
        check(&key, &message, &sig, "valid");
        assert!(ferrite::signature::ed25519(&key, &message, &sig));

        let bit = |n: u64| ((n % 256) / 8) as usize;
        let (r_bit, s_bit, k_bit) = (next(), next(), next());
        let mut v = sig;
        v[bit(r_bit)] ^= 1 << (r_bit % 8);
        check(&key, &message, &v, "a bit of R flipped");
        let mut v = sig;
        v[32 + bit(s_bit)] ^= 1 << (s_bit % 8);
        check(&key, &message, &v, "a bit of S flipped");
        let mut k = key;
        k[bit(k_bit)] ^= 1 << (k_bit % 8);
        check(&k, &message, &sig, "a bit of the key flipped");
        let mut m = message.clone();
        match m.len() {
            0 => m.push(0),
            n => {
                let b = next();
                m[(b as usize / 8) % n] ^= 1 << (b % 8);
            }
        }
        check(&key, &m, &sig, "a bit of the message flipped");

        // S + L: the same scalar, not canonical.
        let mut v = sig;
        let s: [u8; 32] = sig[32..].try_into().unwrap();
        v[32..].copy_from_slice(&plus_l(&s));
        check(&key, &message, &v, "S + L");
        assert!(!ferrite::signature::ed25519(&key, &message, &v));

        // R of small order (each of the eight in turn), the rest unchanged.
        let t = &small[round % 8];
        let mut v = sig;
        v[..32].copy_from_slice(t);
        check(&key, &message, &v, "R of small order");

        // A key of small order with the signature that verifies under the
        // cofactorless equation for the identity ([k]A = 0: R = [S]B):
        // a forgery a non-strict verifier accepts.
        let s = Scalar::from_bytes_mod_order(bytes32(&mut next));
        let r = EdwardsPoint::mul_base(&s).compress().to_bytes();
        let mut forged = [0u8; 64];
        forged[..32].copy_from_slice(&r);
        forged[32..].copy_from_slice(s.as_bytes());
        check(&small[round % 8], &message, &forged, "a key of small order");
        check(&small[0], &message, &forged, "the identity as the key");
        assert!(!ferrite::signature::ed25519(&small[0], &message, &forged));

        // A non-canonical encoding of R: y = p + j (j < 19), either sign.
        let j = (next() % 19) as u8;
        let mut y = [0xffu8; 32];
        y[0] = 0xed + j;
        y[31] = 0x7f | if next() % 2 == 0 { 0x80 } else { 0 };
        let mut v = sig;
        v[..32].copy_from_slice(&y);
        check(&key, &message, &v, "R not canonical");

        // Signatures made here with torsion added to the key and to R: a
        // mixed-order key and R, verified with the cofactorless equation.
        let (a, nonce) = (
            Scalar::from_bytes_mod_order(bytes32(&mut next)),
            Scalar::from_bytes_mod_order(bytes32(&mut next)),
        );
        let ta = EIGHT_TORSION[(next() % 8) as usize];
        let tr = EIGHT_TORSION[(next() % 8) as usize];
        let big_a = (EdwardsPoint::mul_base(&a) + ta).compress();
        let big_r = (EdwardsPoint::mul_base(&nonce) + tr).compress();
        let h: [u8; 64] = Sha512::new()
            .chain_update(big_r.as_bytes())
            .chain_update(big_a.as_bytes())
            .chain_update(&message)
            .finalize()
            .into();
        let s = nonce + Scalar::from_bytes_mod_order_wide(&h) * a;
        let mut v = [0u8; 64];
        v[..32].copy_from_slice(big_r.as_bytes());
        v[32..].copy_from_slice(s.as_bytes());
        check(big_a.as_bytes(), &message, &v, "torsion in the key and R");
    }
    // Every valid signature and some of the made ones are accepted, the rest refused.
    assert!(accepted >= 300 && accepted < cases, "{accepted} of {cases}");
}
