//! Generates text on an ESP32-C3 from the image embedded in flash: the
//! firmware's `generate` (see `ferrite_boards::generate`) at 160 MHz, its
//! text over esp-println (the USB-serial-JTAG port of the C3's own USB
//! connector, or UART0 when that is what is connected: what `espflash
//! flash --monitor` shows). All memory is static and sized at compile time.
#![no_std]
#![no_main]

use core::fmt;

use esp_hal::clock::CpuClock;
use esp_hal::time::Instant;
use ferrite_boards::{Platform, IMAGE, SESSION_LEN, TOKEN_LOG};

// The application descriptor the ESP-IDF second-stage bootloader checks.
esp_bootloader_esp_idf::esp_app_desc!();

static mut SESSION_BUF: [f32; SESSION_LEN] = [0.0; SESSION_LEN];
static mut TOKENS: [u32; TOKEN_LOG] = [0; TOKEN_LOG];

/// esp-println and esp-hal's microsecond clock.
struct Esp;

impl Platform for Esp {
    fn text(&mut self, bytes: &[u8]) {
        // Control bytes (but newline and tab) as `\xNN`, as the QEMU boards
        // show them, so that a random model cannot drive the terminal.
        for &b in bytes {
            if b < 0x20 && b != b'\n' && b != b'\t' || b == 0x7f {
                esp_println::print!("\\x{b:02x}");
            } else {
                esp_println::Printer::write_bytes(&[b]);
            }
        }
    }

    fn line(&mut self, args: fmt::Arguments<'_>) {
        esp_println::println!("{}", args);
    }

    fn now(&mut self) -> u64 {
        Instant::now().duration_since_epoch().as_micros()
    }
}

#[esp_hal::main]
fn main() -> ! {
    let _peripherals = esp_hal::init(esp_hal::Config::default().with_cpu_clock(CpuClock::max()));
    // SAFETY: the only references to SESSION_BUF and TOKENS, taken once.
    let (buf, log) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(SESSION_BUF),
            &mut *core::ptr::addr_of_mut!(TOKENS),
        )
    };
    let mut p = Esp;
    let generated = ferrite_boards::ferrite::Model::load(&IMAGE.0)
        .and_then(|model| ferrite_boards::generate(&mut p, model, buf, log));
    if let Err(e) = generated {
        p.line(format_args!("error: {e}"));
    }
    loop {
        core::hint::spin_loop();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    esp_println::println!("panic: {info}");
    loop {
        core::hint::spin_loop();
    }
}
