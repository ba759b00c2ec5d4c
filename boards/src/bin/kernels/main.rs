//! Differential test of this build's tile kernels on the board: the integer
//! path's matrix-vector products of the kernel module chosen for the target
//! (`ferrite::kernels::arch`: `dsp` assembly on the M4F/M7, `helium` on the
//! M55, `portable` elsewhere) against the element-by-element reference
//! (`generic::matvec_tiled_i8` / `_i4`), **bit for bit** (`f32::to_bits`),
//! as `runtime/tests/tiled.rs` does on the host:
//!
//! - random cases (splitmix64, seed 0): 1 to 13 rows (padding rows zero or
//!   garbage), 16 to 96 columns, one group per row, groups of 16 or any
//!   multiple of 16 dividing the columns; then larger ones, up to 64 rows and
//!   1,024 columns; weights over the whole int8/int4 range (-128 and -8
//!   included), activations over the whole i8 range, random multipliers and
//!   row scales;
//! - extremes: every weight -128 (int4: -8) against activations of -127,
//!   127 and -128, every multiplier 255, from one row of one tile to 4,096
//!   columns (one group per row, and 256 groups) as far as the board's RAM
//!   allows (the M3: 4 rows of int8, 8 of int4), with the exact sums checked;
//! - misaligned slices: `arch::dot4_i8`, `arch::dot4_i4` and `arch::rows_i8`
//!   on weights 0-3 bytes off a word boundary, int8 activations 0-3 bytes off
//!   and widened activations 0-1 element off (the assembly wrappers refuse
//!   what they cannot load and fall back to portable code; the sums must be
//!   exact either way).
//!
//! - the assembly wrappers' guards ([`guards`]): every wrapper of this
//!   build's module refuses the shapes and alignments its assembly cannot
//!   take (output and canaries untouched) and accepts, with exact sums and
//!   nothing read or written out of bounds, those it can.
//!
//! Prints the first failing case, then one line
//! `kernels: board=<b> module=<m> cases=<n> failed=<k> max_cols=<c>`, and
//! exits with status 1 when any case failed (`cargo xtask test-boards`).
#![no_std]
#![no_main]

mod guards;
mod tally;

use core::fmt;

use ferrite::kernels::arch;
use ferrite::kernels::generic::{matvec_tiled_i4, matvec_tiled_i8};
use ferrite::kernels::tiled::{
    self, i4_offset, i8_offset, padded_rows, QVec, TiledI4, TiledI8, TILE_COLS, TILE_ROWS,
};
use ferrite::Aligned;
use ferrite_boards::mqar::SplitMix64;
use ferrite_boards::{config, platform, status};
use tally::{block_sums, Tally};

/// Bytes of weights the largest case may take: the M3 has 64 KB of RAM, the
/// M0 16 KB.
const W_BYTES: usize = if config::RAM_BYTES <= 16 << 10 {
    4 << 10
} else if config::RAM_BYTES <= 64 << 10 {
    16 << 10
} else {
    32 << 10
};
/// Widest input (the M0: as wide as its largest case).
const MAX_COLS: usize = if config::RAM_BYTES <= 16 << 10 {
    1024
} else {
    4096
};
/// Most padded rows of a case (random cases; the extremes have at most 8).
const MAX_ROWS: usize = 64;
/// Most multipliers of a case (padded rows x groups).
const M_LEN: usize = MAX_COLS;

/// All the memory the test uses, static (no heap, bounded stack).
struct Bufs {
    /// Weights, with 4 bytes of slack for the misaligned cases.
    w: Aligned<[u8; W_BYTES + 4]>,
    /// int8 activations, with slack.
    q: Aligned<[i8; MAX_COLS + 4]>,
    /// Widened activations (`arch::prepare`), with slack.
    wide: Aligned<[i16; MAX_COLS + 2]>,
    d: [f32; MAX_ROWS],
    m: [u8; M_LEN],
    got: [f32; MAX_ROWS],
    want: [f32; MAX_ROWS],
}

static mut BUFS: Bufs = Bufs {
    w: Aligned([0; W_BYTES + 4]),
    q: Aligned([0; MAX_COLS + 4]),
    wide: Aligned([0; MAX_COLS + 2]),
    d: [0.0; MAX_ROWS],
    m: [0; M_LEN],
    got: [0.0; MAX_ROWS],
    want: [0.0; MAX_ROWS],
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dtype {
    I8,
    I4,
}

impl Dtype {
    fn name(self) -> &'static str {
        match self {
            Dtype::I8 => "int8",
            Dtype::I4 => "int4",
        }
    }

    /// Payload bytes of `rows` (unpadded) x `cols`.
    fn bytes(self, rows: usize, cols: usize) -> usize {
        match self {
            Dtype::I8 => padded_rows(rows) * cols,
            Dtype::I4 => padded_rows(rows) * cols / 2,
        }
    }
}

/// One matrix-vector case; its data is in [`Bufs`].
#[derive(Clone, Copy)]
struct Case {
    dtype: Dtype,
    rows: usize,
    cols: usize,
    group: usize,
    scale: f32,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dtype={} rows={} cols={} group={} scale_bits={:#010x}",
            self.dtype.name(),
            self.rows,
            self.cols,
            self.group,
            self.scale.to_bits()
        )
    }
}

/// A float in `[lo, hi)`.
fn uniform(rng: &mut SplitMix64, lo: f32, hi: f32) -> f32 {
    let unit = (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
    lo + (hi - lo) * unit
}

impl Bufs {
    /// Random activations, widened as the session does.
    fn random_x(&mut self, rng: &mut SplitMix64, cols: usize) {
        for v in &mut self.q.0[..cols] {
            *v = rng.next_u64() as i8;
        }
        self.prepare(0, 0, cols);
    }

    /// `arch::prepare` of the `cols` activations at `q[oq..]` into `wide[ow..]`.
    fn prepare(&mut self, oq: usize, ow: usize, cols: usize) {
        if arch::WIDE {
            arch::prepare(&self.q.0[oq..oq + cols], &mut self.wide.0[ow..ow + cols]);
        }
    }

    /// The activations at `q[oq..]` / `wide[ow..]`.
    fn x(&self, oq: usize, ow: usize, cols: usize, scale: f32) -> QVec<'_> {
        QVec {
            q: &self.q.0[oq..oq + cols],
            wide: if arch::WIDE {
                &self.wide.0[ow..ow + cols]
            } else {
                &[]
            },
            scale,
        }
    }

    /// Random weights at `w[off..]` (any byte is a valid int8 pair or int4
    /// quad), padding rows zero or left as garbage.
    fn random_w(
        &mut self,
        rng: &mut SplitMix64,
        dtype: Dtype,
        rows: usize,
        cols: usize,
        off: usize,
        zero_pad: bool,
    ) {
        let bytes = dtype.bytes(rows, cols);
        for b in &mut self.w.0[off..off + bytes] {
            *b = rng.next_u64() as u8;
        }
        if zero_pad {
            let w = &mut self.w.0[off..off + bytes];
            for r in rows..padded_rows(rows) {
                for c in 0..cols {
                    match dtype {
                        Dtype::I8 => w[i8_offset(r, c, cols)] = 0,
                        Dtype::I4 => {
                            let (byte, high) = i4_offset(r, c, cols);
                            w[byte] &= if high { 0x0F } else { 0xF0 };
                        }
                    }
                }
            }
        }
    }

    /// Random row scales and multipliers for `case`.
    fn random_scales(&mut self, rng: &mut SplitMix64, case: &Case) {
        let prows = padded_rows(case.rows);
        for d in &mut self.d[..prows] {
            *d = uniform(rng, -2.0, 2.0);
        }
        for m in &mut self.m[..prows * (case.cols / case.group)] {
            *m = rng.next_u64() as u8;
        }
    }

    /// Runs `case` (weights at `w[0..]`, activations at `q[0..]`) through
    /// this build's `tiled::matvec_*` and the reference; compares the bits.
    fn matvec(&mut self, case: &Case, t: &mut Tally) {
        let (rows, cols, group) = (case.rows, case.cols, case.group);
        let prows = padded_rows(rows);
        let bytes = case.dtype.bytes(rows, cols);
        let (w, q, wide) = (&self.w.0, &self.q.0, &self.wide.0);
        let x = QVec {
            q: &q[..cols],
            wide: if arch::WIDE { &wide[..cols] } else { &[] },
            scale: case.scale,
        };
        let (d, m) = (&self.d[..prows], &self.m[..prows * (cols / group)]);
        let got = &mut self.got[..rows];
        let want = &mut self.want[..rows];
        got.fill(f32::NAN);
        want.fill(f32::NAN);
        match case.dtype {
            Dtype::I8 => {
                let w = TiledI8 {
                    rows,
                    cols,
                    group,
                    q: bytemuck::cast_slice(&w[..bytes]),
                    row_scales: d,
                    mults: m,
                };
                tiled::matvec_i8(&w, &x, got);
                matvec_tiled_i8(&w, &x, want);
            }
            Dtype::I4 => {
                let w = TiledI4 {
                    rows,
                    cols,
                    group,
                    q: &w[..bytes],
                    row_scales: d,
                    mults: m,
                };
                tiled::matvec_i4(&w, &x, got);
                matvec_tiled_i4(&w, &x, want);
            }
        }
        let bad = got
            .iter()
            .zip(want.iter())
            .position(|(g, w)| g.to_bits() != w.to_bits());
        let row = bad.unwrap_or(0);
        t.check(
            bad.is_none(),
            format_args!(
                "matvec {case} row={row} got={:#010x} want={:#010x}",
                got[row].to_bits(),
                want[row].to_bits()
            ),
        );
    }
}

/// Shapes of the extreme cases: (rows, cols, group).
const EXTREME_SHAPES: &[(usize, usize, usize)] = &[
    (1, 16, 16),
    (4, 16, 16),
    (5, 64, 16),
    (3, 256, 64),
    (8, 256, 16),
    (4, 4096, 4096),
    (7, 4096, 4096),
    (8, 4096, 16),
];

#[platform::entry]
fn main() -> ! {
    platform::init();
    // SAFETY: the only reference to BUFS, taken once.
    let b = unsafe { &mut *core::ptr::addr_of_mut!(BUFS) };
    let mut rng = SplitMix64::new(0);
    let mut t = Tally {
        cases: 0,
        failed: 0,
    };
    let mut max_cols = 0;

    // Random cases: small (many shapes and groups), then large.
    for i in 0..200 {
        let small = i < 160;
        let rows = if small {
            1 + rng.below(13) as usize
        } else {
            1 + rng.below(MAX_ROWS as u32) as usize
        };
        let most_tiles = if small {
            6
        } else {
            (W_BYTES / (padded_rows(rows) * TILE_COLS)).min(64)
        };
        let tiles = 1 + rng.below(most_tiles as u32) as usize;
        let cols = TILE_COLS * tiles;
        // One group per row, groups of 16, or any divisor of the tiles.
        let group_tiles = match rng.below(3) {
            0 => tiles,
            1 => 1,
            _ => loop {
                let g = 1 + rng.below(tiles as u32) as usize;
                if tiles.is_multiple_of(g) {
                    break g;
                }
            },
        };
        let group = TILE_COLS * group_tiles;
        if cols / group * padded_rows(rows) > M_LEN {
            continue;
        }
        let zero_pad = rng.below(2) == 0;
        b.random_x(&mut rng, cols);
        for dtype in [Dtype::I8, Dtype::I4] {
            let case = Case {
                dtype,
                rows,
                cols,
                group,
                scale: uniform(&mut rng, 0.0, 0.1),
            };
            b.random_w(&mut rng, dtype, rows, cols, 0, zero_pad);
            b.random_scales(&mut rng, &case);
            b.matvec(&case, &mut t);
        }
    }

    // Extremes: every weight at its minimum, every multiplier 255.
    for &(rows, cols, group) in EXTREME_SHAPES {
        for dtype in [Dtype::I8, Dtype::I4] {
            let bytes = dtype.bytes(rows, cols);
            if bytes > W_BYTES {
                continue;
            }
            max_cols = max_cols.max(cols);
            let prows = padded_rows(rows);
            let fill = match dtype {
                Dtype::I8 => 0x80, // -128
                Dtype::I4 => 0x88, // -8, -8
            };
            b.w.0[..bytes].fill(fill);
            b.d[..prows].fill(1.0);
            b.m[..prows * (cols / group)].fill(255);
            for xv in [-127i8, 127, -128] {
                b.q.0[..cols].fill(xv);
                b.prepare(0, 0, cols);
                let case = Case {
                    dtype,
                    rows,
                    cols,
                    group,
                    scale: 1.0,
                };
                b.matvec(&case, &mut t);
                // The sums are exact: weight * x * cols * 255, in f32.
                let wv = if dtype == Dtype::I8 { -128 } else { -8 };
                let exact = (wv * i64::from(xv) * cols as i64 * 255) as f32;
                let bad = b.got[..rows].iter().position(|y| *y != exact);
                t.check(
                    bad.is_none(),
                    format_args!(
                        "exact {case} x={xv} row={} got={} want={exact}",
                        bad.unwrap_or(0),
                        b.got[bad.unwrap_or(0)]
                    ),
                );
            }
        }
    }

    // Misaligned slices: weights 0-3 bytes off, activations 0-3 bytes off,
    // widened activations 0-1 element off.
    for &(tiles, blocks) in &[(1usize, 1usize), (3, 2), (8, 3)] {
        let cols = TILE_COLS * tiles;
        for dtype in [Dtype::I8, Dtype::I4] {
            let rows = TILE_ROWS * blocks;
            let bytes = dtype.bytes(rows, cols);
            let block_bytes = bytes / blocks;
            for ow in 0..4 {
                b.random_w(&mut rng, dtype, rows, cols, ow, false);
                for oq in 0..4 {
                    for owide in 0..2 {
                        for v in &mut b.q.0[oq..oq + cols] {
                            *v = rng.next_u64() as i8;
                        }
                        b.prepare(oq, owide, cols);
                        let x = b.x(oq, owide, cols, 1.0);
                        let w = &b.w.0[ow..ow + bytes];
                        let mut out = [0i32; 4 * 3];
                        let out = &mut out[..TILE_ROWS * blocks];
                        let got = match dtype {
                            Dtype::I8 => {
                                arch::rows_i8(bytemuck::cast_slice(w), &x, out);
                                arch::dot4_i8(bytemuck::cast_slice(&w[..block_bytes]), &x)
                            }
                            Dtype::I4 => {
                                // No rows_i4 in the arch API: one block at a time.
                                for (k, o) in out.chunks_exact_mut(TILE_ROWS).enumerate() {
                                    let blk = &w[k * block_bytes..(k + 1) * block_bytes];
                                    o.copy_from_slice(&arch::dot4_i4(blk, &x));
                                }
                                arch::dot4_i4(&w[..block_bytes], &x)
                            }
                        };
                        let want =
                            block_sums(&b.w.0[ow..], &b.q.0[oq..], dtype == Dtype::I4, cols, 0);
                        t.check(
                            got == want,
                            format_args!(
                                "dot4 dtype={} cols={cols} w_offset={ow} q_offset={oq} wide_offset={owide} got={got:?} want={want:?}",
                                dtype.name()
                            ),
                        );
                        for (blk, o) in out.chunks_exact(TILE_ROWS).enumerate() {
                            let want = block_sums(
                                &b.w.0[ow..],
                                &b.q.0[oq..],
                                dtype == Dtype::I4,
                                cols,
                                blk,
                            );
                            t.check(
                                o == want,
                                format_args!(
                                    "rows dtype={} cols={cols} blocks={blocks} block={blk} w_offset={ow} q_offset={oq} wide_offset={owide} got={o:?} want={want:?}",
                                    dtype.name()
                                ),
                            );
                        }
                    }
                }
            }
        }
    }

    guards::check(&mut rng, &mut t);

    ferrite_boards::console::line(ferrite_common::kernels_line!(
        config::NAME,
        arch::NAME,
        t.cases,
        t.failed,
        max_cols
    ));
    ferrite_boards::exit(if t.failed == 0 {
        status::OK
    } else {
        status::CHECK_FAILED
    })
}
