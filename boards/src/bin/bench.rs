//! Times the matrix-vector products of the runtime under QEMU (`cargo xtask
//! bench-kernels`): for each case of `FERRITE_BENCH` (see `build.rs`),
//! weights in flash as in real use (generated at build time):
//!
//! - `int8`: `tiled::matvec_i8` (this build's kernel module), one group per row;
//! - `int4`: `tiled::matvec_i4`, groups of [`config::BENCH_INT4_GROUP`] columns;
//! - `f32`: `generic::matvec_f32`, row-major;
//!
//! with the input already quantized (and widened where the module reads
//! `QVec::wide`); that per-vector cost, `tiled::quantize` plus
//! `arch::prepare`, is timed on its own for each width (`dtype=quantize`).
//! Each measurement calls the function [`REPS`] times through a function
//! pointer and subtracts the same loop calling an empty function, so the
//! result is the function's own instructions, and SysTick's granularity (40
//! instructions on mps2, 31.25 on the M55, 80 on the M3; RISC-V is exact) is
//! at most 2 ticks / REPS per call. Prints one line per case:
//!
//! ```text
//! kernel: board=m4f module=dsp dtype=int8 rows=256 cols=256 instructions=N macs_per_instruction=X
//! kernel: board=m4f module=dsp dtype=quantize cols=256 instructions=N
//! ```
//!
//! The integer products are then checked once against the reference
//! (`generic::matvec_tiled_*`, bit for bit); a difference prints a
//! `kernel-mismatch:` line and the firmware exits with status 1 at the end.
#![no_std]
#![no_main]

use core::hint::black_box;

use ferrite::kernels::arch;
use ferrite::kernels::generic::{matvec_f32, matvec_tiled_i4, matvec_tiled_i8};
use ferrite::kernels::tiled::{self, padded_rows, QVec, TiledI4, TiledI8};
use ferrite::Aligned;
use ferrite_boards::mqar::SplitMix64;
use ferrite_boards::{config, instructions, platform, say, status};

macro_rules! blob {
    ($name:ident, $bytes:ident, $file:literal) => {
        const $bytes: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/", $file));
        static $name: Aligned<[u8; $bytes.len()]> =
            Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/", $file)));
    };
}

// The weights, in flash (immutable statics).
blob!(W_I8, W_I8_BYTES, "bench_i8.bin");
blob!(W_I4, W_I4_BYTES, "bench_i4.bin");
blob!(W_F32, W_F32_BYTES, "bench_f32.bin");
blob!(ROW_SCALES, ROW_SCALES_BYTES, "bench_d.bin");
blob!(MULTS, MULTS_BYTES, "bench_m.bin");

/// Calls per measurement.
const REPS: u64 = 16;

const fn max_of(cases: &[(&str, usize, usize)], cols: bool) -> usize {
    let mut i = 0;
    let mut m = 1;
    while i < cases.len() {
        let v = if cols { cases[i].2 } else { cases[i].1 };
        if v > m {
            m = v;
        }
        i += 1;
    }
    m
}

const MAX_COLS: usize = max_of(config::BENCH, true);
const MAX_ROWS: usize = padded_rows(max_of(config::BENCH, false));

/// The activations and outputs, in RAM.
struct Bufs {
    x: [f32; MAX_COLS],
    q: Aligned<[i8; MAX_COLS]>,
    wide: Aligned<[i16; MAX_COLS]>,
    y: [f32; MAX_ROWS],
    want: [f32; MAX_ROWS],
}

static mut BUFS: Bufs = Bufs {
    x: [0.0; MAX_COLS],
    q: Aligned([0; MAX_COLS]),
    wide: Aligned([0; MAX_COLS]),
    y: [0.0; MAX_ROWS],
    want: [0.0; MAX_ROWS],
};

/// Instructions of one call of `f(args)`: [`REPS`] calls through a function
/// pointer, less [`REPS`] calls of an empty function, rounded.
fn measure<A>(args: &mut A, f: fn(&mut A)) -> u64 {
    fn nothing<A>(a: &mut A) {
        black_box(a);
    }
    let timed = |g: fn(&mut A), a: &mut A| {
        let start = instructions();
        for _ in 0..REPS {
            black_box(g)(black_box(&mut *a));
        }
        instructions() - start
    };
    let total = timed(f, args);
    let empty = timed(nothing::<A>, args);
    (total.saturating_sub(empty) + REPS / 2) / REPS
}

struct Int8<'a> {
    w: TiledI8<'a>,
    x: QVec<'a>,
    y: &'a mut [f32],
}

struct Int4<'a> {
    w: TiledI4<'a>,
    x: QVec<'a>,
    y: &'a mut [f32],
}

struct F32<'a> {
    w: &'a [f32],
    cols: usize,
    x: &'a [f32],
    y: &'a mut [f32],
}

struct Quantize<'a> {
    x: &'a [f32],
    q: &'a mut [i8],
    wide: &'a mut [i16],
}

fn int8(a: &mut Int8<'_>) {
    tiled::matvec_i8(&a.w, &a.x, a.y);
}

fn int4(a: &mut Int4<'_>) {
    tiled::matvec_i4(&a.w, &a.x, a.y);
}

fn float(a: &mut F32<'_>) {
    matvec_f32(a.w, a.cols, a.x, a.y);
}

fn quantize(a: &mut Quantize<'_>) {
    tiled::quantize(a.x, a.q);
    arch::prepare(a.q, a.wide);
}

/// `num / den` to 3 decimals, rounded half up, without float formatting.
struct Fixed3(u64, u64);

impl core::fmt::Display for Fixed3 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let q = (self.0 * 2_000 + self.1) / (2 * self.1.max(1));
        write!(f, "{}.{:03}", q / 1_000, q % 1_000)
    }
}

/// The first row whose bits differ, with both values.
fn first_difference(got: &[f32], want: &[f32]) -> Option<(usize, u32, u32)> {
    got.iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
        .map(|r| (r, got[r].to_bits(), want[r].to_bits()))
}

#[platform::entry]
fn main() -> ! {
    platform::init();
    // SAFETY: the only reference to BUFS, taken once.
    let b = unsafe { &mut *core::ptr::addr_of_mut!(BUFS) };
    let (board, module) = (config::NAME, arch::NAME);
    let mut rng = SplitMix64::new(1);
    for v in b.x.iter_mut() {
        *v = ((rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32) - 1.0;
    }
    let wide_len = |cols: usize| if arch::WIDE { cols } else { 0 };
    let d: &[f32] = bytemuck::cast_slice(&ROW_SCALES.0);
    let mut mismatches = 0;

    // The per-vector cost of the integer path, once per width.
    let mut timed_cols = [0usize; 16];
    let mut n_timed = 0;
    for &(dtype, _, cols) in config::BENCH {
        if dtype == "f32" || timed_cols[..n_timed].contains(&cols) {
            continue;
        }
        if n_timed < timed_cols.len() {
            timed_cols[n_timed] = cols;
            n_timed += 1;
        }
        let n = measure(
            &mut Quantize {
                x: &b.x[..cols],
                q: &mut b.q.0[..cols],
                wide: &mut b.wide.0[..wide_len(cols)],
            },
            quantize,
        );
        say!("kernel: board={board} module={module} dtype=quantize cols={cols} instructions={n}");
    }

    for &(dtype, rows, cols) in config::BENCH {
        let prows = padded_rows(rows);
        let (y, want) = (&mut b.y[..rows], &mut b.want[..rows]);
        // The input, quantized (and widened) once, as the session does.
        let scale = tiled::quantize(&b.x[..cols], &mut b.q.0[..cols]);
        arch::prepare(&b.q.0[..cols], &mut b.wide.0[..wide_len(cols)]);
        let x = QVec {
            q: &b.q.0[..cols],
            wide: &b.wide.0[..wide_len(cols)],
            scale,
        };
        let n = match dtype {
            "int8" => {
                let w = TiledI8 {
                    rows,
                    cols,
                    group: cols,
                    q: bytemuck::cast_slice(&W_I8.0[..prows * cols]),
                    row_scales: &d[..prows],
                    mults: &MULTS.0[..prows],
                };
                let n = measure(&mut Int8 { w, x, y: &mut *y }, int8);
                matvec_tiled_i8(&w, &x, want);
                n
            }
            "int4" => {
                let group = config::BENCH_INT4_GROUP;
                let w = TiledI4 {
                    rows,
                    cols,
                    group,
                    q: &W_I4.0[..prows * cols / 2],
                    row_scales: &d[..prows],
                    mults: &MULTS.0[..prows * cols / group],
                };
                let n = measure(&mut Int4 { w, x, y: &mut *y }, int4);
                matvec_tiled_i4(&w, &x, want);
                n
            }
            _ => {
                let w: &[f32] = bytemuck::cast_slice(&W_F32.0[..4 * rows * cols]);
                let n = measure(
                    &mut F32 {
                        w,
                        cols,
                        x: &b.x[..cols],
                        y: &mut *y,
                    },
                    float,
                );
                // The reference itself: nothing to compare.
                want.copy_from_slice(y);
                n
            }
        };
        say!(
            "kernel: board={board} module={module} dtype={dtype} rows={rows} cols={cols} instructions={n} macs_per_instruction={}",
            Fixed3((rows * cols) as u64, n)
        );
        if let Some((row, got, want)) = first_difference(y, want) {
            say!(
                "kernel-mismatch: board={board} module={module} dtype={dtype} rows={rows} cols={cols} row={row} got={got:#010x} want={want:#010x}"
            );
            mismatches += 1;
        }
    }
    ferrite_boards::exit(if mismatches == 0 {
        status::OK
    } else {
        status::CHECK_FAILED
    })
}
