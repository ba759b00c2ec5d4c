//! Text over defmt-RTT (what `probe-rs run` shows): model output is
//! gathered into lines, each sent as one defmt frame once it ends (or the
//! 96-byte buffer fills), cut only at UTF-8 character boundaries; other
//! lines are frames of their own.

use core::fmt;

use defmt_rtt as _;

/// Line buffer: one frame per line of model text.
pub struct Rtt {
    buf: [u8; 96],
    len: usize,
}

impl Default for Rtt {
    fn default() -> Self {
        Rtt::new()
    }
}

impl Rtt {
    /// An empty console.
    pub const fn new() -> Rtt {
        Rtt {
            buf: [0; 96],
            len: 0,
        }
    }

    /// Streams model text (see the module docs). Control bytes (but tab)
    /// are written as `\xNN`, as the QEMU boards show them, so that a random
    /// model cannot drive the terminal.
    pub fn text(&mut self, bytes: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for &b in bytes {
            if b == b'\n' {
                self.flush(self.len);
                continue;
            }
            if (b < 0x20 && b != b'\t') || b == 0x7f {
                self.push(b'\\');
                self.push(b'x');
                self.push(HEX[usize::from(b >> 4)]);
                self.push(HEX[usize::from(b & 15)]);
            } else {
                self.push(b);
            }
        }
    }

    /// Appends one byte, first sending what is buffered when it is full.
    fn push(&mut self, b: u8) {
        if self.len == self.buf.len() {
            // Cut at the last complete character; keep its tail.
            let cut = match core::str::from_utf8(&self.buf) {
                Ok(_) => self.buf.len(),
                Err(e) if e.valid_up_to() > 0 => e.valid_up_to(),
                Err(_) => self.buf.len(),
            };
            self.flush(cut);
        }
        self.buf[self.len] = b;
        self.len += 1;
    }

    /// Sends the first `n` buffered bytes as a frame and keeps the rest.
    fn flush(&mut self, n: usize) {
        let s = &self.buf[..n];
        match core::str::from_utf8(s) {
            Ok(s) => defmt::println!("{=str}", s),
            Err(_) => defmt::println!("{=[u8]:a}", s),
        }
        self.buf.copy_within(n..self.len, 0);
        self.len -= n;
    }

    /// Writes one line (any buffered text first).
    pub fn line(&mut self, args: fmt::Arguments<'_>) {
        if self.len > 0 {
            self.flush(self.len);
        }
        defmt::println!("{}", defmt::Display2Format(&args));
    }
}

/// Reports a panic over RTT, then stops (`probe-rs run` shows the frame and
/// the halted core).
pub fn panic(info: &core::panic::PanicInfo<'_>) {
    defmt::error!("panic: {}", defmt::Display2Format(info));
}
