//! The image embedded in flash and the buffer sizes it fixes at compile time.

use ferrite::Aligned;

/// The image, as xtask (`FERRITE_IMAGE`) gave it.
pub const IMAGE_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/model.fer"));

/// The image in flash, 16-byte aligned for the runtime's in-place casts.
pub static IMAGE: Aligned<[u8; IMAGE_BYTES.len()]> =
    Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/model.fer")));

/// The snapshot `generate` starts from (`FERRITE_SNAPSHOT`, made by
/// `ferrite bake`), as xtask gave it; empty without one.
pub const SNAPSHOT_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/snapshot.bin"));

/// The snapshot in flash, a second blob next to the image (16-byte aligned
/// like it; `Session::restore` reads it as bytes and checks it whole).
pub static SNAPSHOT: Aligned<[u8; SNAPSHOT_BYTES.len()]> =
    Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/snapshot.bin")));

/// f32 words of state + scratch the image needs, at compile time: the
/// firmware's session buffer is exactly this long.
pub const SESSION_LEN: usize = match ferrite::session_len(IMAGE_BYTES, 0) {
    Ok(n) => n,
    Err(_) => panic!(
        "FERRITE_IMAGE is missing or not a ferrite image (build through `cargo xtask board|chip`)"
    ),
};

/// Ids shown on the `tokens:` line; longer runs print these and a hash of
/// all, so that RAM does not depend on N.
pub const TOKEN_LOG: usize = 256;
