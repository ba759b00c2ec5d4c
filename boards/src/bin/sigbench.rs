//! Measures one signature verification under QEMU (`cargo xtask
//! bench-signatures`, docs/signing.md): the crate chosen by the build's
//! `sig-*` feature verifies a fixed signature over a 32-byte SHA-256
//! digest (what a signed image's signature covers), then the same signature
//! with one bit flipped. Without a `sig-*` feature the harness alone is
//! built, so the host subtracts its flash and RAM from each crate's build.
//! `sig-sha256` times SHA-256 over 1 KiB instead (the digest's cost per KiB
//! of image). Prints one line and exits 0 when the good signature verifies
//! and the tampered one is refused (1 otherwise):
//!
//! ```text
//! sigverify: board=m4f crate=salty instructions=N stack_bytes=S verifies=1 rejects_tampered=1
//! ```
//!
//! `instructions` are those of the one call (SysTick's granularity on
//! Cortex-M: tens of instructions); `stack_bytes` the stack the call took
//! below `main`'s frame (the painted stack's peak after it, less before).
#![no_std]
#![no_main]

use core::hint::black_box;

use ferrite_boards::{exit, instructions, platform, say};

/// `s` (hex) as `N` bytes, at compile time.
const fn unhex<const N: usize>(s: &str) -> [u8; N] {
    const fn nibble(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => panic!("not lower-case hex"),
        }
    }
    let b = s.as_bytes();
    assert!(b.len() == 2 * N);
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = nibble(b[2 * i]) << 4 | nibble(b[2 * i + 1]);
        i += 1;
    }
    out
}

/// SHA-256 of "ferrite signature bench": the signed message.
const MSG: [u8; 32] = unhex("d4b69a3def38c1d3d6a429fb84de562a8d54a806a4ec95365779885ca254e248");
/// Ed25519: the public key of RFC 8032's TEST 1 secret key, and its
/// signature over [`MSG`].
const ED_KEY: [u8; 32] = unhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
const ED_SIG: [u8; 64] = unhex(
    "2a574c3ec4456dc1e057363be96294ec33d03a5cd031b72d7a8f9e3d0ff0d240\
     ffa269f7fcd175a25752e07e532f5e3546f04b9147160cef95c5c04c31fb6805",
);
/// ECDSA P-256 (secret key 0x0707..07): the compressed public key and the
/// (r, s) signature over [`MSG`] as a prehashed digest.
#[cfg(feature = "sig-p256")]
const P256_KEY: [u8; 33] =
    unhex("031e18532fd4754c02f3041d9c75ceb33b83ffd81ac7ce4fe882ccb1c98bc5896e");
#[cfg(feature = "sig-p256")]
const P256_SIG: [u8; 64] = unhex(
    "ee6c0ff93d82da5f0f24e56d1156884c665c18d84b9b97a1cb6f5078e353eadc\
     458e4818002ccdd87b89e1cdfe8c197dd990b6ca4f10c1037bd7d87d9719f09d",
);

#[cfg(feature = "sig-dalek")]
const CRATE: &str = "ed25519-dalek";
#[cfg(feature = "sig-salty")]
const CRATE: &str = "salty";
#[cfg(all(feature = "sig-compact", not(feature = "sig-compact-small")))]
const CRATE: &str = "ed25519-compact";
#[cfg(feature = "sig-compact-small")]
const CRATE: &str = "ed25519-compact-opt-size";
#[cfg(feature = "sig-p256")]
const CRATE: &str = "p256";
#[cfg(feature = "sig-sha256")]
const CRATE: &str = "sha2-sha256-1kib";
#[cfg(feature = "sig-ferrite")]
const CRATE: &str = "ferrite";
#[cfg(not(any(
    feature = "sig-dalek",
    feature = "sig-salty",
    feature = "sig-compact",
    feature = "sig-p256",
    feature = "sig-sha256",
    feature = "sig-ferrite"
)))]
const CRATE: &str = "none";

/// Whether `sig` verifies over `msg` (the build's crate; without one, a
/// byte comparison the optimiser cannot drop).
#[inline(never)]
fn verify(msg: &[u8; 32], sig: &[u8; 64]) -> bool {
    #[cfg(feature = "sig-dalek")]
    {
        let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(&ED_KEY) else {
            return false;
        };
        let sig = ed25519_dalek::Signature::from_bytes(sig);
        key.verify_strict(msg, &sig).is_ok()
    }
    #[cfg(feature = "sig-salty")]
    {
        let Ok(key) = salty::PublicKey::try_from(&ED_KEY) else {
            return false;
        };
        key.verify(msg, &salty::Signature::from(sig)).is_ok()
    }
    #[cfg(feature = "sig-compact")]
    {
        let key = ed25519_compact::PublicKey::new(ED_KEY);
        key.verify(msg, &ed25519_compact::Signature::new(*sig))
            .is_ok()
    }
    #[cfg(feature = "sig-ferrite")]
    {
        ferrite::signature::ed25519(&ED_KEY, msg, sig)
    }
    #[cfg(feature = "sig-p256")]
    {
        use p256::ecdsa::signature::hazmat::PrehashVerifier;
        let _ = (ED_KEY, ED_SIG);
        let Ok(key) = p256::ecdsa::VerifyingKey::from_sec1_bytes(&P256_KEY) else {
            return false;
        };
        let Ok(sig) = p256::ecdsa::Signature::from_slice(sig) else {
            return false;
        };
        key.verify_prehash(msg, &sig).is_ok()
    }
    #[cfg(feature = "sig-sha256")]
    {
        use sha2::Digest;
        let _ = ED_KEY;
        let mut h = sha2::Sha256::new();
        for _ in 0..1024 / 64 {
            h.update(sig);
        }
        let digest: [u8; 32] = h.finalize().into();
        // SHA-256 of 1 KiB of ED_SIG repeated (the host's).
        digest == *msg
    }
    #[cfg(not(any(
        feature = "sig-dalek",
        feature = "sig-salty",
        feature = "sig-compact",
        feature = "sig-p256",
        feature = "sig-sha256",
        feature = "sig-ferrite"
    )))]
    {
        let _ = (ED_KEY, msg);
        *sig == ED_SIG
    }
}

/// The signature and message the build's crate checks.
fn vector() -> ([u8; 32], [u8; 64]) {
    #[cfg(feature = "sig-p256")]
    return (MSG, P256_SIG);
    #[cfg(feature = "sig-sha256")]
    return (
        unhex("a4ede5ae5ebe2900a3e2c655d317f5fe3cd2dd2312d813a0e00242912d3fc99e"),
        ED_SIG,
    );
    #[allow(unreachable_code)]
    (MSG, ED_SIG)
}

#[platform::entry]
fn main() -> ! {
    let _p = platform::init();
    let (msg, sig) = vector();
    let before = platform::stack_peak();
    let start = instructions();
    let good = verify(black_box(&msg), black_box(&sig));
    let spent = instructions() - start;
    let stack = platform::stack_peak().saturating_sub(before);
    let mut tampered = sig;
    tampered[40] ^= 1;
    let refused = !verify(black_box(&msg), black_box(&tampered));
    say!(
        "sigverify: board={} crate={CRATE} instructions={spent} stack_bytes={stack} verifies={} rejects_tampered={}",
        ferrite_boards::config::NAME,
        good as u8,
        refused as u8
    );
    exit(if good && refused { 0 } else { 1 })
}
