//! The QEMU boards' [`Platform`](crate::io::Platform) and their exits.

use core::fmt;

use ferrite_common::status;

use crate::{console, counter, io, say};

/// The QEMU boards' [`Platform`]: the semihosting console and the
/// instruction counter.
pub struct Qemu;

impl io::Platform for Qemu {
    /// Writes the text and flushes it: each token is shown as it is made,
    /// and every token's write takes the same path (the same stack depth
    /// after 100 tokens as after 10,000).
    fn text(&mut self, bytes: &[u8]) {
        console::text(bytes);
        console::flush();
    }

    fn line(&mut self, args: fmt::Arguments<'_>) {
        console::line(args)
    }

    fn now(&mut self) -> u64 {
        counter::instructions()
    }
}

/// Ends the program: QEMU exits with `code` (semihosting SYS_EXIT_EXTENDED).
pub fn exit(code: i32) -> ! {
    console::flush();
    semihosting::process::exit(code)
}

/// `peak`, the stack's peak in bytes, once it is known to have stayed in its
/// `room`: a stack that reached the statics (its lowest word written)
/// overwrote them, so the run ends with [`stack_overflow`] instead of figures
/// that cannot be trusted.
pub fn checked_stack_peak(peak: usize, room: usize) -> usize {
    if peak >= room {
        stack_overflow(room)
    }
    peak
}

/// Reports that the stack outgrew the `room` bytes of RAM the statics leave
/// it and exits with [`status::FAULT`]: a QEMU board has no stack guard in
/// hardware, so the firmware checks its painted stack (at the end of a run
/// and in the fault handler).
pub fn stack_overflow(room: usize) -> ! {
    say!(
        "error: stack overflow: the stack outgrew the {room} bytes of RAM the statics leave it ({} bytes of RAM)",
        crate::config::RAM_BYTES
    );
    exit(status::FAULT)
}

/// Reports a runtime error and exits with [`status::RUNTIME_ERROR`].
pub fn fail(e: ferrite::Error) -> ! {
    say!("error: {}", e);
    exit(status::RUNTIME_ERROR)
}

/// Reports a failure outside the runtime's errors (a rollback counter's
/// flash, a refused factory model) and exits with [`status::RUNTIME_ERROR`].
pub fn fail_with(why: fmt::Arguments<'_>) -> ! {
    say!("error: {}", why);
    exit(status::RUNTIME_ERROR)
}
