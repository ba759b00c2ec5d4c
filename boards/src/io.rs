//! The interface a target supplies to the generation path (the one thing
//! every platform module and the generation path share).

use core::fmt;

/// What a target supplies to the generation path: text out and a counter.
pub trait Platform {
    /// Streams model output (bytes of UTF-8 text, possibly split
    /// mid-character); control bytes but `\n` and `\t` are shown as `\xNN`.
    fn text(&mut self, bytes: &[u8]);
    /// Writes one line.
    fn line(&mut self, args: fmt::Arguments<'_>);
    /// A monotonic counter in the unit of the `run:` line: instructions
    /// under QEMU, microseconds on a chip. [`generate`] reads it once per
    /// token, so a 32-bit hardware counter may be widened here.
    fn now(&mut self) -> u64;
}
