//! The assembly wrappers' guards, where the assembly is real (issue 29,
//! item 1). `ferrite_asm`'s safe functions are the only check in front of
//! the `unsafe` kernels; on the host they are stubs that always refuse, so
//! only a board can show that they refuse what the assembly cannot take and
//! accept what it can.
//!
//! For every wrapper of this build's module (none on the M0: portable), a
//! valid shape (2 tiles x 2 row blocks, or one block for `dot4_*`) and its
//! variants:
//! - weights one byte short, one byte long, one tile too many, empty;
//!   activations a column short, a column long, a tile too many, empty;
//!   outputs a row short, a row long, a block too many, empty: **refused**, and the output and the
//!   canary words after it untouched;
//! - the valid shape on aligned slices: **accepted** (only the assembly
//!   returns `true`, so this shows it runs) with the exact sums;
//! - weights 1-3 bytes and activations 1-3 bytes (widened: 1 element) off
//!   their alignment: refused exactly where the wrapper's contract says it
//!   needs alignment (the DSP's `LDRD`/`LDM`: 4 bytes), else accepted with
//!   the exact sums.
//!
//! The bytes after each input slice hold poison (int8 127, i16 0x7fff), so
//! an accepted call that reads past a slice gives wrong sums; an accepted
//! call that writes past its output changes a canary.

use ferrite::kernels::arch;
use ferrite::kernels::tiled::{TILE_COLS, TILE_ROWS};
use ferrite_asm::{dsp, helium, rv32, v6m, v7m, Kernels, KERNELS};

use crate::tally::{block_sums, Tally};

/// Row sums: weights (bytes), int8 activations, widened activations, out.
type RowsFn = fn(&[u8], &[i8], &[i16], &mut [i32]) -> bool;
/// One row block's sums: weights, int8 activations, widened activations.
type Dot4Fn = fn(&[u8], &[i8], &[i16]) -> Option<[i32; TILE_ROWS]>;

#[derive(Clone, Copy)]
enum Call {
    Rows(RowsFn),
    Dot4(Dot4Fn),
}

/// One wrapper and its contract.
#[derive(Clone, Copy)]
struct Wrapper {
    name: &'static str,
    int4: bool,
    /// It reads the widened activations (`arch::prepare`), not the int8 ones.
    wide: bool,
    /// Alignment (bytes) it needs of the weights and the activations.
    align: usize,
    call: Call,
}

impl Wrapper {
    fn tile_bytes(&self) -> usize {
        if self.int4 {
            32
        } else {
            64
        }
    }
}

fn i8s(w: &[u8]) -> &[i8] {
    bytemuck::cast_slice(w)
}

/// The wrappers of this build's module.
fn wrappers() -> &'static [Wrapper] {
    const fn w(name: &'static str, int4: bool, wide: bool, align: usize, call: Call) -> Wrapper {
        Wrapper {
            name,
            int4,
            wide,
            align,
            call,
        }
    }
    const DSP: &[Wrapper] = &[
        w(
            "dsp::rows_i8",
            false,
            true,
            4,
            Call::Rows(|w, _, x, o| dsp::rows_i8(i8s(w), x, o)),
        ),
        w(
            "dsp::rows_i4",
            true,
            true,
            4,
            Call::Rows(|w, _, x, o| dsp::rows_i4(w, x, o)),
        ),
        w(
            "dsp::dot4_i8",
            false,
            true,
            4,
            Call::Dot4(|w, _, x| dsp::dot4_i8(i8s(w), x)),
        ),
        w(
            "dsp::dot4_i4",
            true,
            true,
            4,
            Call::Dot4(|w, _, x| dsp::dot4_i4(w, x)),
        ),
    ];
    const HELIUM: &[Wrapper] = &[
        w(
            "helium::rows_i8",
            false,
            false,
            1,
            Call::Rows(|w, q, _, o| helium::rows_i8(i8s(w), q, o)),
        ),
        w(
            "helium::rows_i4",
            true,
            true,
            1,
            Call::Rows(|w, _, x, o| helium::rows_i4(w, x, o)),
        ),
        w(
            "helium::dot4_i8",
            false,
            false,
            1,
            Call::Dot4(|w, q, _| helium::dot4_i8(i8s(w), q)),
        ),
        w(
            "helium::dot4_i4",
            true,
            true,
            1,
            Call::Dot4(|w, _, x| helium::dot4_i4(w, x)),
        ),
    ];
    const V7M: &[Wrapper] = &[w(
        "v7m::rows_i8",
        false,
        false,
        1,
        Call::Rows(|w, q, _, o| v7m::rows_i8(i8s(w), q, o)),
    )];
    const V6M: &[Wrapper] = &[w(
        "v6m::rows_i8",
        false,
        false,
        1,
        Call::Rows(|w, q, _, o| v6m::rows_i8(i8s(w), q, o)),
    )];
    const RV32: &[Wrapper] = &[w(
        "rv32::rows_i8",
        false,
        false,
        1,
        Call::Rows(|w, q, _, o| rv32::rows_i8(i8s(w), q, o)),
    )];
    match KERNELS {
        Kernels::Dsp => DSP,
        Kernels::Helium => HELIUM,
        Kernels::V7m => V7M,
        Kernels::V6m => V6M,
        Kernels::Rv32 => RV32,
        _ => &[],
    }
}

/// Tiles and row blocks of the valid shape.
const TILES: usize = 2;
const BLOCKS: usize = 2;
/// Room for the largest variant (one tile or block more) and an offset of 3.
const W_ROOM: usize = 64 * (TILES + 1) * (BLOCKS + 1) + 8;
const X_ROOM: usize = TILE_COLS * (TILES + 1) + 8;
/// Canary words after the output.
const CANARY: usize = 4;
const CANARY_WORD: i32 = 0x5a5a_5a5a;

/// The buffers of one call: inputs followed by poison, the output by canaries.
struct Slots {
    w: ferrite::Aligned<[u8; W_ROOM]>,
    q: ferrite::Aligned<[i8; X_ROOM]>,
    wide: ferrite::Aligned<[i16; X_ROOM]>,
    out: [i32; TILE_ROWS * (BLOCKS + 1) + CANARY],
}

/// A variant of the valid shape: lengths and offsets.
#[derive(Clone, Copy)]
struct Shape {
    what: &'static str,
    w_len: usize,
    cols: usize,
    out_len: usize,
    w_off: usize,
    x_off: usize,
}

/// The variants, and whether the shape (alignment aside) is valid.
fn shapes(wr: &Wrapper) -> impl Iterator<Item = (Shape, bool)> + '_ {
    let (t, blocks) = (
        wr.tile_bytes(),
        if matches!(wr.call, Call::Dot4(_)) {
            1
        } else {
            BLOCKS
        },
    );
    let valid = Shape {
        what: "valid",
        w_len: t * TILES * blocks,
        cols: TILE_COLS * TILES,
        out_len: TILE_ROWS * blocks,
        w_off: 0,
        x_off: 0,
    };
    let with = move |what, f: fn(&mut Shape, usize)| {
        let mut s = Shape { what, ..valid };
        f(&mut s, t);
        s
    };
    let bad = [
        with("weights one byte short", |s, _| s.w_len -= 1),
        with("weights one byte long", |s, _| s.w_len += 1),
        with("weights a tile too many", |s, t| s.w_len += t),
        with("weights empty", |s, _| s.w_len = 0),
        with("activations a column short", |s, _| s.cols -= 1),
        with("activations a column long", |s, _| s.cols += 1),
        with("activations a tile too many", |s, _| s.cols += TILE_COLS),
        with("activations empty", |s, _| s.cols = 0),
    ];
    let bad_out = [
        with("output a row short", |s, _| s.out_len -= 1),
        with("output a row long", |s, _| s.out_len += 1),
        with("output a block too many", |s, _| s.out_len += TILE_ROWS),
        with("output empty", |s, _| s.out_len = 0),
    ];
    let rows = matches!(wr.call, Call::Rows(_));
    let offsets = (1..4).map(move |o| {
        (
            Shape {
                what: "weights off alignment",
                w_off: o,
                ..valid
            },
            true,
        )
    });
    let x_offsets = (1..if wr.wide { 2 } else { 4 }).map(move |o| {
        (
            Shape {
                what: "activations off alignment",
                x_off: o,
                ..valid
            },
            true,
        )
    });
    core::iter::once((valid, true))
        .chain(bad.into_iter().map(|s| (s, false)))
        .chain(
            bad_out
                .into_iter()
                .filter(move |_| rows)
                .map(|s| (s, false)),
        )
        .chain(offsets)
        .chain(x_offsets)
}

impl Slots {
    /// Random inputs for `s` with poison after them; the output pre-filled.
    fn fill(&mut self, rng: &mut ferrite_boards::mqar::SplitMix64, s: &Shape) {
        self.w.0.fill(0x7f);
        for b in &mut self.w.0[s.w_off..s.w_off + s.w_len] {
            *b = rng.next_u64() as u8;
        }
        self.q.0.fill(127);
        for v in &mut self.q.0[s.x_off..s.x_off + s.cols] {
            *v = rng.next_u64() as i8;
        }
        self.wide.0.fill(0x7fff);
        if arch::WIDE {
            let (q, wide) = (&self.q.0[s.x_off..s.x_off + s.cols], &mut self.wide.0);
            arch::prepare(q, &mut wide[s.x_off..s.x_off + s.cols]);
        }
        self.out.fill(CANARY_WORD);
    }
}

static mut SLOTS: Slots = Slots {
    w: ferrite::Aligned([0; W_ROOM]),
    q: ferrite::Aligned([0; X_ROOM]),
    wide: ferrite::Aligned([0; X_ROOM]),
    out: [0; TILE_ROWS * (BLOCKS + 1) + CANARY],
};

/// Runs every wrapper of this build's module on every variant.
pub fn check(rng: &mut ferrite_boards::mqar::SplitMix64, t: &mut Tally) {
    // SAFETY: the only reference to SLOTS, taken once (one call from main).
    let b = unsafe { &mut *core::ptr::addr_of_mut!(SLOTS) };
    for wr in wrappers() {
        for (s, shape_ok) in shapes(wr) {
            b.fill(rng, &s);
            let aligned =
                s.w_off % wr.align == 0 && (s.x_off * if wr.wide { 2 } else { 1 }) % wr.align == 0;
            let must_accept = shape_ok && aligned;
            let w = &b.w.0[s.w_off..s.w_off + s.w_len];
            let q = &b.q.0[s.x_off..s.x_off + s.cols];
            let x = &b.wide.0[s.x_off..s.x_off + s.cols];
            let accepted = match wr.call {
                Call::Rows(f) => f(w, q, x, &mut b.out[..s.out_len]),
                Call::Dot4(f) => match f(w, q, x) {
                    Some(sums) => {
                        b.out[..TILE_ROWS].copy_from_slice(&sums);
                        true
                    }
                    None => false,
                },
            };
            let written = if accepted { s.out_len } else { 0 };
            let canaries = b.out[written..].iter().all(|&v| v == CANARY_WORD);
            let exact = !accepted
                || (0..s.out_len / TILE_ROWS).all(|blk| {
                    let (w, q) = (&b.w.0[s.w_off..], &b.q.0[s.x_off..]);
                    b.out[blk * TILE_ROWS..(blk + 1) * TILE_ROWS]
                        == block_sums(w, q, wr.int4, s.cols, blk)
                });
            t.check(
                accepted == must_accept && canaries && exact,
                format_args!(
                    "guard {} {}: accepted={accepted} (want {must_accept}) canaries={canaries} exact={exact}",
                    wr.name, s.what
                ),
            );
        }
    }
}
