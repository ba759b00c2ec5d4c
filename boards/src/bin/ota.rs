//! A model that is not known at build time: the image arrives at run time
//! (read through semihosting from `ota.fer`, as an over-the-air download
//! would), into a heap buffer. The firmware validates it with `Model::load`
//! (header, config, tensor table, CRC), sizes the session from it, and
//! generates; a damaged download is refused with a message, not a crash.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::mem::MaybeUninit;

use embedded_alloc::LlffHeap as Heap;
use ferrite::{Model, Session};
use ferrite_boards::{config, platform, say, status};

#[global_allocator]
static HEAP: Heap = Heap::empty();
static mut HEAP_MEM: [MaybeUninit<u8>; config::HEAP_BYTES] =
    [MaybeUninit::uninit(); config::HEAP_BYTES];

/// Where the download lands (relative to QEMU's working directory).
const DOWNLOAD: &core::ffi::CStr = c"ota.fer";
/// The runtime requires 16-byte aligned images.
const IMAGE_ALIGN: usize = 16;

fn refuse(why: core::fmt::Arguments<'_>) -> ! {
    say!(
        "ota: refused the download: {}; keeping the current model",
        why
    );
    ferrite_boards::exit(status::RUNTIME_ERROR)
}

/// Reads the whole download into a 16-byte aligned heap buffer.
fn receive() -> &'static [u8] {
    use semihosting::io::Read as _;
    let mut file = semihosting::fs::File::open(DOWNLOAD)
        .unwrap_or_else(|_| refuse(format_args!("no download (ota.fer not found)")));
    let len = file.metadata().map(|m| m.len() as usize).unwrap_or(0);
    if len == 0 {
        refuse(format_args!("the download is empty"));
    }
    let layout = core::alloc::Layout::from_size_align(len, IMAGE_ALIGN).unwrap();
    // SAFETY: non-zero size; the buffer is initialized by the reads below
    // before it is turned into a slice, and lives for the rest of the program.
    let ptr = unsafe { alloc::alloc::alloc(layout) };
    if ptr.is_null() {
        refuse(format_args!(
            "{} bytes do not fit the {} byte heap",
            len,
            config::HEAP_BYTES
        ));
    }
    let buf = unsafe {
        ptr.write_bytes(0, len);
        core::slice::from_raw_parts_mut(ptr, len)
    };
    let mut got = 0;
    while got < len {
        match file.read(&mut buf[got..]) {
            Ok(0) => refuse(format_args!(
                "the transfer stopped at {} of {} bytes",
                got, len
            )),
            Ok(n) => got += n,
            Err(_) => refuse(format_args!("read error at {} of {} bytes", got, len)),
        }
    }
    buf
}

#[platform::entry]
fn main() -> ! {
    platform::init();
    // SAFETY: called once, before any allocation; HEAP_MEM is used by nothing else.
    unsafe {
        HEAP.init(
            core::ptr::addr_of_mut!(HEAP_MEM) as usize,
            config::HEAP_BYTES,
        )
    }

    let image = receive();
    say!("ota: received {} bytes", image.len());
    let model = Model::load(image).unwrap_or_else(|e| refuse(format_args!("{}", e)));
    let words = model
        .session_len(0)
        .unwrap_or_else(|e| refuse(format_args!("{}", e)));
    let state_bytes = model
        .state_bytes(0)
        .unwrap_or_else(|e| refuse(format_args!("{}", e)));
    say!(
        "ota: image valid; session needs {} bytes ({} of state)",
        4 * words,
        state_bytes
    );

    let mut buf: Vec<f32> = Vec::new();
    if buf.try_reserve_exact(words).is_err() {
        refuse(format_args!(
            "the session's {} bytes do not fit the heap",
            4 * words
        ));
    }
    buf.resize(words, 0.0);
    let mut log: Vec<u32> = Vec::new();
    let shown = config::N.min(256);
    if log.try_reserve_exact(shown).is_err() {
        refuse(format_args!("no heap left for the token log"));
    }
    log.resize(shown, 0);

    let mut session =
        Session::new(model, &mut buf).unwrap_or_else(|e| refuse(format_args!("{}", e)));
    let out = match ferrite_boards::generate(&mut session, config::PROMPT, config::N, &mut log) {
        Ok(o) => o,
        Err(e) => {
            say!("error: {}", e);
            ferrite_boards::exit(status::RUNTIME_ERROR)
        }
    };
    ferrite_boards::print_outcome(&out, &log, config::N);
    say!(
        "run: board={} prompt_tokens={} tokens={} instructions={} instructions_per_token={} stack_bytes={} state_bytes={} session_bytes={} heap_bytes={}",
        config::BOARD,
        out.prompt_tokens,
        config::N,
        out.instructions,
        out.instructions / out.fed as u64,
        platform::stack_peak(),
        state_bytes,
        4 * words,
        config::HEAP_BYTES,
    );
    ferrite_boards::exit(status::OK)
}
