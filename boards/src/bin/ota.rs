//! A/B model update: the board serves model A (embedded in flash at build
//! time), receives model B in 1 KB chunks into a second slot — through
//! semihosting from `update.fer` in QEMU's working directory, standing in for
//! the radio — validates it completely with `ferrite::update` (length
//! against the slot at the header, every byte, `Model::load`,
//! `Model::check_values`, its session against the RAM reserved for it) and
//! only then switches to it. Any failure leaves A serving.
//!
//! Prints `ota: accepted` or `ota: refused <reason>` (or `ota: no update`),
//! then generates with the model that now serves: its text, `tokens:` and a
//! `run:` line, as `generate` does. All memory is static: the update slot
//! (`UPDATE_SLOT_BYTES` of the board table; a flash partition on a real
//! chip, RAM under QEMU) and one session buffer sized for the larger of A's
//! session and `UPDATE_SESSION_BYTES`.
#![no_std]
#![no_main]

use ferrite::update::{self, Refusal};
use ferrite::{Aligned, Model};
use ferrite_boards::{config, fail, platform, say, status, IMAGE, IMAGE_BYTES, TOKEN_LOG};

/// f32 words for the serving model's session: A's (the embedded image,
/// as `cargo xtask ota --image` gave it), or what the board reserves for an
/// update, whichever is larger.
const SESSION_LEN: usize = {
    let (a, update) = (
        ferrite_boards::SESSION_LEN,
        config::UPDATE_SESSION_BYTES / 4,
    );
    if a > update {
        a
    } else {
        update
    }
};
static mut SESSION_BUF: [f32; SESSION_LEN] = [0.0; SESSION_LEN];

/// Slot B: where an update lands before it is validated.
static mut SLOT_B: Aligned<[u8; config::UPDATE_SLOT_BYTES]> =
    Aligned([0; config::UPDATE_SLOT_BYTES]);

/// The transfer's chunk size.
const CHUNK: usize = 1024;
/// Where the update arrives (relative to QEMU's working directory).
const UPDATE: &core::ffi::CStr = c"update.fer";

static mut TOKENS: [u32; TOKEN_LOG] = [0; TOKEN_LOG];

/// Receives and validates the update in `slot`; `None` when none is offered.
fn try_update(slot: &'static mut [u8]) -> Option<Result<Model<'static>, Refusal>> {
    use semihosting::io::Read as _;
    let mut file = semihosting::fs::File::open(UPDATE).ok()?;
    say!(
        "ota: receiving an update into slot B ({} bytes) in {} byte chunks",
        slot.len(),
        CHUNK
    );
    let received = update::receive(slot, CHUNK, |buf| file.read(buf).map_err(|_| ()));
    Some(received.and_then(|len| {
        let slot: &'static [u8] = slot;
        update::validate(&slot[..len], SESSION_LEN)
    }))
}

#[platform::entry]
fn main() -> ! {
    let mut p = platform::init();

    let a = Model::load(&IMAGE.0).unwrap_or_else(|e| fail(e));
    say!("ota: serving model A ({} bytes)", IMAGE_BYTES.len());
    // SAFETY: the only references to these statics, taken once.
    let (slot, buf, log) = unsafe {
        (
            &mut (&mut *core::ptr::addr_of_mut!(SLOT_B)).0[..],
            &mut *core::ptr::addr_of_mut!(SESSION_BUF),
            &mut *core::ptr::addr_of_mut!(TOKENS),
        )
    };
    let model = match try_update(slot) {
        None => {
            say!("ota: no update");
            a
        }
        Some(Ok(b)) => {
            say!("ota: accepted");
            b
        }
        Some(Err(why)) => {
            say!("ota: refused {}", why);
            a
        }
    };

    let words = model.session_len(0).unwrap_or_else(|e| fail(e));
    // The serving model's own share of the buffer, so that the `run:` line
    // reports its session.
    let (needed, got) = (4 * words, 4 * buf.len());
    let buf = buf
        .get_mut(..words)
        .unwrap_or_else(|| fail(ferrite::Error::BufferTooSmall { needed, got }));
    ferrite_boards::generate(&mut p, model, buf, log).unwrap_or_else(|e| fail(e));
    ferrite_boards::exit(status::OK)
}
