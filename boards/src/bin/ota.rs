//! A/B model update: the board serves model A (embedded in flash at build
//! time), receives model B in 1 KB chunks into a second slot — through
//! semihosting from `update.fer` in QEMU's working directory, standing in for
//! the radio — validates it completely with `ferrite::update` (length
//! against the slot at the header, every byte, `Model::load`,
//! `Model::check_values`, its session against the RAM reserved for it) and
//! only then switches to it. Any failure leaves A serving.
//!
//! Built with the `verify` feature and trusted keys (`FERRITE_TRUSTED_KEYS`,
//! docs/signing.md) it runs only signed models: `update::validate_signed`
//! checks the signature and the security counter first, and a rollback
//! counter in flash (RAM standing in, carried across a simulated reset in
//! `counter.bin` through semihosting) is advanced after each switch. A
//! second update, `update2.fer`, may then follow in the same boot, into the
//! slot that is not serving (the anti-rollback check within one boot).
//!
//! Prints `ota: accepted` or `ota: refused <reason>` per update (or `ota:
//! no update`), then generates with the model that now serves: its text,
//! `tokens:` and a `run:` line, as `generate` does. All memory is static: the update slot
//! (`UPDATE_SLOT_BYTES` of the board table; a flash partition on a real
//! chip, RAM under QEMU) and one session buffer sized for the larger of A's
//! session and `UPDATE_SESSION_BYTES`.
#![no_std]
#![no_main]

use core::ffi::CStr;

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
const UPDATE: &CStr = c"update.fer";

static mut TOKENS: [u32; TOKEN_LOG] = [0; TOKEN_LOG];

/// Receives the update `name` into `slot` and validates it (signed, when
/// `trust` is given); `None` when none is offered.
fn try_update(
    name: &CStr,
    slot: &'static mut [u8],
    label: char,
    #[cfg(feature = "verify")] trust: &mut signed::Trust,
) -> Option<Result<Model<'static>, Refusal>> {
    use semihosting::io::Read as _;
    let mut file = semihosting::fs::File::open(name).ok()?;
    say!(
        "ota: receiving an update into slot {label} ({} bytes) in {CHUNK} byte chunks",
        slot.len()
    );
    let received = update::receive(slot, CHUNK, |buf| file.read(buf).map_err(|_| ()));
    Some(received.and_then(|len| {
        let slot: &'static [u8] = slot;
        #[cfg(feature = "verify")]
        return trust.validate(&slot[..len], SESSION_LEN);
        #[cfg(not(feature = "verify"))]
        update::validate(&slot[..len], SESSION_LEN)
    }))
}

/// Prints the verdict; the model that serves after it.
fn settle(
    offered: Option<Result<Model<'static>, Refusal>>,
    serving: Model<'static>,
    #[cfg(feature = "verify")] trust: &mut signed::Trust,
) -> Model<'static> {
    match offered {
        None => {
            say!("ota: no update");
            serving
        }
        Some(Ok(b)) => {
            say!("ota: accepted");
            // The switch (a boot record on a real chip), then the counter.
            #[cfg(feature = "verify")]
            trust.advance(&b);
            b
        }
        Some(Err(why)) => {
            say!("ota: refused {}", why);
            serving
        }
    }
}

#[platform::entry]
fn main() -> ! {
    let mut p = platform::init();
    let a = Model::load(&IMAGE.0).unwrap_or_else(|e| fail(e));
    say!("ota: serving model A ({} bytes)", IMAGE_BYTES.len());
    #[cfg(feature = "verify")]
    let mut trust = signed::Trust::boot();
    #[cfg(feature = "verify")]
    trust.serve_factory(&a);
    // SAFETY: the only references to these statics, taken once.
    let (slot, buf, log) = unsafe {
        (
            &mut (&mut *core::ptr::addr_of_mut!(SLOT_B)).0[..],
            &mut *core::ptr::addr_of_mut!(SESSION_BUF),
            &mut *core::ptr::addr_of_mut!(TOKENS),
        )
    };
    #[cfg(not(feature = "verify"))]
    let model = settle(try_update(UPDATE, slot, 'B'), a);
    #[cfg(feature = "verify")]
    let model = {
        let first = try_update(UPDATE, slot, 'B', &mut trust);
        let serving = settle(first, a, &mut trust);
        // A second update in the same boot lands in the slot not serving.
        match try_update(signed::UPDATE2, signed::slot_c(), 'C', &mut trust) {
            None => serving,
            second => settle(second, serving, &mut trust),
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

/// Signed updates and the rollback counter (the `verify` feature).
#[cfg(feature = "verify")]
mod signed {
    use core::ffi::CStr;

    use ferrite::rollback::RollbackCounter;
    use ferrite::signature::{self, KeyId, TrustPolicy};
    use ferrite::update::{self, Refusal};
    use ferrite::{Aligned, Model};
    use ferrite_boards::ram_flash::{RamFlash, SECTOR};
    use ferrite_boards::{config, fail_with, instructions, say};

    /// The second update of a boot.
    pub const UPDATE2: &CStr = c"update2.fer";
    /// Where the counter's flash is carried across a simulated reset.
    const COUNTER_FILE: &CStr = c"counter.bin";

    /// Slot C: the second update's (the slot not serving after B).
    static mut SLOT_C: Aligned<[u8; config::UPDATE_SLOT_BYTES]> =
        Aligned([0; config::UPDATE_SLOT_BYTES]);
    /// The counter's two flash sectors (RAM standing in).
    static mut COUNTER_FLASH: [u8; 2 * SECTOR] = [0xFF; 2 * SECTOR];

    /// Slot C, taken once.
    pub fn slot_c() -> &'static mut [u8] {
        // SAFETY: the only reference to SLOT_C, taken once.
        unsafe { &mut (&mut *core::ptr::addr_of_mut!(SLOT_C)).0[..] }
    }

    /// The trusted keys and the device's rollback counter.
    pub struct Trust {
        /// The counter's flash.
        flash: &'static mut [u8],
        /// The lowest security counter accepted now.
        min: u32,
    }

    impl Trust {
        /// Reads the counter (from `counter.bin` when a previous boot left one).
        pub fn boot() -> Trust {
            use semihosting::io::Read as _;
            // SAFETY: the only reference to COUNTER_FLASH, taken once.
            let flash = unsafe { &mut *core::ptr::addr_of_mut!(COUNTER_FLASH) };
            let carried = semihosting::fs::File::open(COUNTER_FILE)
                .ok()
                .and_then(|mut f| f.read_exact(flash).ok())
                .is_some();
            if !carried {
                flash.fill(0xFF);
            }
            let mut trust = Trust { flash, min: 0 };
            trust.min = trust
                .counter()
                .min_accepted()
                .unwrap_or_else(|e| fail_with(format_args!("rollback counter: {e}")));
            say!(
                "ota: rollback counter: lowest accepted security counter {} ({}); {} trusted key(s)",
                trust.min,
                if carried {
                    "carried across a reset"
                } else {
                    "a new device"
                },
                config::TRUSTED_KEYS.len()
            );
            trust
        }

        /// The counter over its flash.
        fn counter(&mut self) -> RollbackCounter<RamFlash<'_>> {
            let flash = RamFlash {
                mem: &mut *self.flash,
                budget: None,
                ops: 0,
            };
            RollbackCounter::new(flash, 0, SECTOR as u32, SECTOR as u32)
                .unwrap_or_else(|e| fail_with(format_args!("rollback counter: {e}")))
        }

        /// The factory model A: verified at boot when it is signed (the
        /// firmware's own image is otherwise covered by the bootloader's
        /// check of the firmware).
        pub fn serve_factory(&mut self, a: &Model<'static>) {
            if a.header().is_signed() {
                Model::load_signed(a.image(), &self.policy())
                    .unwrap_or_else(|e| fail_with(format_args!("model A refused: {e}")));
                self.advance(a);
            }
        }

        fn policy(&self) -> TrustPolicy<'static> {
            TrustPolicy {
                keys: config::TRUSTED_KEYS,
                min_counter: self.min,
            }
        }

        /// `update::validate_signed`, its cost printed when it passes.
        pub fn validate(
            &mut self,
            image: &'static [u8],
            session_words: usize,
        ) -> Result<Model<'static>, Refusal> {
            let start = instructions();
            let model = update::validate_signed(image, session_words, &self.policy())?;
            let spent = instructions() - start;
            if let Some(s) = signature::section(model.image(), model.header()) {
                say!(
                    "ota: validated key={} security_counter={} instructions={spent}",
                    KeyId::of(s.public_key),
                    s.security_counter
                );
            }
            Ok(model)
        }

        /// Raises the counter to `model`'s (after the switch to it) and
        /// saves the flash to `counter.bin`.
        pub fn advance(&mut self, model: &Model<'static>) {
            let to = model.header().security_counter;
            self.min = self
                .counter()
                .advance(to)
                .unwrap_or_else(|e| fail_with(format_args!("rollback counter: {e}")));
            let _ = semihosting::fs::write(COUNTER_FILE, &*self.flash);
            say!(
                "ota: rollback counter: lowest accepted security counter now {}",
                self.min
            );
        }
    }
}
