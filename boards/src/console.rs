//! The host console, over semihosting: plain text by default, defmt frames
//! with the `defmt` feature (never both: a defmt stream must not contain
//! plain prints). The firmware only uses [`text`], [`say!`](crate::say) and
//! [`panic_message`], so it reads the same either way.

use core::fmt;

/// Streams model output. Control bytes (except `\n` and `\t`) are written as
/// `\xNN` so a random model cannot drive the terminal; other bytes pass as
/// they are (UTF-8 text stays readable).
pub fn text(bytes: &[u8]) {
    imp::text(bytes)
}

/// Writes one line (use [`crate::say!`]).
pub fn line(args: fmt::Arguments<'_>) {
    imp::line(args)
}

/// Writes out anything buffered.
pub fn flush() {
    imp::flush()
}

/// Reports a panic (location and message).
pub fn panic_message(info: &core::panic::PanicInfo<'_>) {
    imp::line(format_args!("panic: {}", info));
}

/// `say!("fmt", args..)`: one line on the console, plain or defmt.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => { $crate::console::line(format_args!($($arg)*)) };
}

#[cfg(not(feature = "defmt"))]
mod imp {
    use core::fmt::{self, Write as _};
    use semihosting::io::Write as _;

    /// Small line buffer so that one line costs one semihosting call.
    struct Console {
        buf: [u8; 128],
        len: usize,
    }

    static mut CONSOLE: Console = Console {
        buf: [0; 128],
        len: 0,
    };

    fn with<R>(f: impl FnOnce(&mut Console) -> R) -> R {
        // SAFETY: single core, and no interrupt handler prints; a panic while
        // printing re-enters only to append its message.
        f(unsafe { &mut *core::ptr::addr_of_mut!(CONSOLE) })
    }

    impl Console {
        fn push(&mut self, bytes: &[u8]) {
            for &b in bytes {
                if self.len == self.buf.len() {
                    self.flush();
                }
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
        fn flush(&mut self) {
            if self.len > 0 {
                if let Ok(mut out) = semihosting::io::stdout() {
                    let _ = out.write_all(&self.buf[..self.len]);
                }
                self.len = 0;
            }
        }
    }

    impl fmt::Write for Console {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.push(s.as_bytes());
            Ok(())
        }
    }

    pub fn text(bytes: &[u8]) {
        with(|c| {
            for &b in bytes {
                if (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f {
                    let _ = write!(c, "\\x{:02x}", b);
                } else {
                    c.push(&[b]);
                }
            }
            c.flush();
        })
    }

    pub fn line(args: fmt::Arguments<'_>) {
        with(|c| {
            let _ = c.write_fmt(args);
            c.push(b"\n");
            c.flush();
        })
    }

    pub fn flush() {
        with(|c| c.flush())
    }
}

#[cfg(feature = "defmt")]
mod imp {
    use core::fmt;

    pub fn text(bytes: &[u8]) {
        defmt::info!("text {=[u8]:a}", bytes);
    }

    pub fn line(args: fmt::Arguments<'_>) {
        defmt::println!("{}", defmt::Display2Format(&args));
    }

    pub fn flush() {}

    /// defmt's global logger: frames go to semihosting stdout as they are
    /// encoded (one write per frame, or per 256 bytes), on both ISAs.
    #[defmt::global_logger]
    struct Logger;

    struct Frame {
        buf: [u8; 256],
        len: usize,
    }

    // Three statics, so that the encoder and the sink it calls never alias.
    static mut ENCODER: defmt::Encoder = defmt::Encoder::new();
    static mut FRAME: Frame = Frame {
        buf: [0; 256],
        len: 0,
    };
    static mut RESTORE: critical_section::RestoreState = critical_section::RestoreState::invalid();

    fn frame() -> &'static mut Frame {
        // SAFETY: only used between acquire and release, inside a critical section.
        unsafe { &mut *core::ptr::addr_of_mut!(FRAME) }
    }

    fn encoder() -> &'static mut defmt::Encoder {
        // SAFETY: as for `frame`.
        unsafe { &mut *core::ptr::addr_of_mut!(ENCODER) }
    }

    fn emit() {
        use semihosting::io::Write as _;
        let f = frame();
        if f.len > 0 {
            if let Ok(mut out) = semihosting::io::stdout() {
                let _ = out.write_all(&f.buf[..f.len]);
            }
            f.len = 0;
        }
    }

    fn sink(bytes: &[u8]) {
        for &b in bytes {
            if frame().len == 256 {
                emit();
            }
            let f = frame();
            f.buf[f.len] = b;
            f.len += 1;
        }
    }

    unsafe impl defmt::Logger for Logger {
        fn acquire() {
            // SAFETY: paired with the release in `release`.
            let restore = unsafe { critical_section::acquire() };
            unsafe { *core::ptr::addr_of_mut!(RESTORE) = restore };
            encoder().start_frame(sink);
        }
        unsafe fn flush() {
            emit();
        }
        unsafe fn release() {
            encoder().end_frame(sink);
            emit();
            let restore = unsafe { *core::ptr::addr_of!(RESTORE) };
            unsafe { critical_section::release(restore) };
        }
        unsafe fn write(bytes: &[u8]) {
            encoder().write(bytes, sink);
        }
    }

    // Timestamps count instructions retired (under QEMU -icount shift=0: nanoseconds).
    defmt::timestamp!("{=u64}", crate::counter::instructions());
}
