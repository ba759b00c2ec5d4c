//! Cortex-M4/M7/M33 kernels (DSP extension): `SXTB16` splits a word of
//! four int8 weights into two pairs of i16, `SMLAD` multiplies each pair by
//! a word of two i16 activations and adds both products.
//!
//! Activations are widened to i16 once per vector, in pair order
//! ([`widen_pairs`]): per 4 columns `x0, x2, x1, x3`, so that `SXTB16 w`
//! (bytes 0 and 2 of a weight word) meets the word `[x0, x2]` and
//! `SXTB16 w, ROR #8` meets `[x1, x3]`. int4 weights use the same order:
//! per 8 columns, `w << 4` puts columns 0-3 (low nibbles) in the top of
//! each byte and `w & 0xF0F0F0F0` columns 4-7, so `SXTB16` yields 16 times
//! their values.
//!
//! Per tile (4 rows x 16 columns) the int8 loop runs 77 instructions for
//! 64 multiply-accumulates (2 `LDM` of activations, 8 `LDRD` of weights, 32
//! `SXTB16`, 32 `SMLAD`, 3 of loop), 0.83 per instruction; int4 101.

use crate::{shape, word_aligned, TILE_COLS, TILE_ROWS};

/// Widens int8 activations to i16 in pair order (per 4 columns `x0, x2,
/// x1, x3`). Stops at the shorter slice; a trailing partial group of 4 is
/// copied in order.
pub fn widen_pairs(q: &[i8], wide: &mut [i16]) {
    let n = q.len().min(wide.len());
    let (q, wide) = (&q[..n], &mut wide[..n]);
    let mut quads = wide.chunks_exact_mut(4);
    let mut src = q.chunks_exact(4);
    for (o, x) in (&mut quads).zip(&mut src) {
        o[0] = i16::from(x[0]);
        o[1] = i16::from(x[2]);
        o[2] = i16::from(x[1]);
        o[3] = i16::from(x[3]);
    }
    for (o, &x) in quads.into_remainder().iter_mut().zip(src.remainder()) {
        *o = i16::from(x);
    }
}

/// Row sums of int8 tiles: `weights` holds `out.len() / 4` row blocks of
/// `wide.len() / 16` tiles; `out[4 b + r]` = row `r` of block `b` times the
/// activations (`wide`, pair order). Returns `false`, leaving `out` alone,
/// when the shapes disagree, a slice is not on a 4-byte boundary (`LDRD` and
/// `LDM` need it), or the target has no DSP assembly.
pub fn rows_i8(weights: &[i8], wide: &[i16], out: &mut [i32]) -> bool {
    let Some((tiles, blocks)) = shape(weights.len(), 64, wide.len(), out.len()) else {
        return false;
    };
    if !(word_aligned(weights.as_ptr()) && word_aligned(wide.as_ptr())) {
        return false;
    }
    asm::rows_i8(
        weights.as_ptr(),
        wide.as_ptr(),
        tiles,
        out.as_mut_ptr(),
        blocks,
    )
}

/// As [`rows_i8`] for int4 tiles (32 bytes each).
pub fn rows_i4(weights: &[u8], wide: &[i16], out: &mut [i32]) -> bool {
    let Some((tiles, blocks)) = shape(weights.len(), 32, wide.len(), out.len()) else {
        return false;
    };
    if !(word_aligned(weights.as_ptr()) && word_aligned(wide.as_ptr())) {
        return false;
    }
    if !asm::rows_i4(
        weights.as_ptr(),
        wide.as_ptr(),
        tiles,
        out.as_mut_ptr(),
        blocks,
    ) {
        return false;
    }
    // The assembly sums 16 x the products (nibbles at the top of bytes):
    // every sum is a multiple of 16, so the shift is exact.
    out.iter_mut().for_each(|v| *v >>= 4);
    true
}

/// The four row sums of one row block of int8 tiles (a group of columns).
pub fn dot4_i8(tiles: &[i8], wide: &[i16]) -> Option<[i32; TILE_ROWS]> {
    let mut out = [0i32; TILE_ROWS];
    rows_i8(tiles, wide, &mut out).then_some(out)
}

/// The four row sums of one row block of int4 tiles.
pub fn dot4_i4(tiles: &[u8], wide: &[i16]) -> Option<[i32; TILE_ROWS]> {
    let mut out = [0i32; TILE_ROWS];
    rows_i4(tiles, wide, &mut out).then_some(out)
}

const _: () = assert!(TILE_COLS == 16 && TILE_ROWS == 4);

#[cfg(ferrite_kernels = "dsp")]
mod asm {
    /// Eight columns of one row: two weight words at `[r0, #off]`, four
    /// activation words in r7-r10, sum in `acc`.
    macro_rules! i8_row_half {
        ($acc:literal, $off:literal) => {
            concat!(
                "ldrd r11, r12, [r0, #",
                $off,
                "]\n",
                "sxtb16 lr, r11\n",
                "smlad ",
                $acc,
                ", lr, r7, ",
                $acc,
                "\n",
                "sxtb16 lr, r11, ror #8\n",
                "smlad ",
                $acc,
                ", lr, r8, ",
                $acc,
                "\n",
                "sxtb16 lr, r12\n",
                "smlad ",
                $acc,
                ", lr, r9, ",
                $acc,
                "\n",
                "sxtb16 lr, r12, ror #8\n",
                "smlad ",
                $acc,
                ", lr, r10, ",
                $acc,
                "\n",
            )
        };
    }

    /// Eight int4 columns of one row: one word at `[r0, #off]`.
    macro_rules! i4_row_half {
        ($acc:literal, $off:literal) => {
            concat!(
                "ldr r11, [r0, #",
                $off,
                "]\n",
                "lsl r12, r11, #4\n",
                // Keep each byte's own nibble: the shift also moved the
                // high nibble of the byte below into the low bits.
                "and r12, r12, #0xF0F0F0F0\n",
                "sxtb16 lr, r12\n",
                "smlad ",
                $acc,
                ", lr, r7, ",
                $acc,
                "\n",
                "sxtb16 lr, r12, ror #8\n",
                "smlad ",
                $acc,
                ", lr, r8, ",
                $acc,
                "\n",
                "and r11, r11, #0xF0F0F0F0\n",
                "sxtb16 lr, r11\n",
                "smlad ",
                $acc,
                ", lr, r9, ",
                $acc,
                "\n",
                "sxtb16 lr, r11, ror #8\n",
                "smlad ",
                $acc,
                ", lr, r10, ",
                $acc,
                "\n",
            )
        };
    }

    /// Prologue of both functions: fn(w: r0, x: r1, tiles: r2, out: r3,
    /// blocks: [sp]). Keeps x, tiles, out and blocks in a stack frame, as
    /// the loops need all 14 free registers: r0 weights, r1 activations, r2
    /// tiles left, r3-r6 the row sums, r7-r10 activation words, r11, r12
    /// and lr temporaries.
    macro_rules! prologue {
        ($name:literal) => {
            concat!(
                ".section .text.",
                $name,
                ",\"ax\",%progbits\n",
                ".global ",
                $name,
                "\n",
                ".type ",
                $name,
                ",%function\n",
                ".thumb_func\n",
                ".p2align 2\n",
                $name,
                ":\n",
                "push {{r4-r11, lr}}\n",
                "ldr r12, [sp, #36]\n",
                "sub sp, #16\n",
                "str r1, [sp, #0]\n",
                "str r2, [sp, #4]\n",
                "str r3, [sp, #8]\n",
                "str r12, [sp, #12]\n",
                "1:\n",
                "ldr r1, [sp, #0]\n",
                "ldr r2, [sp, #4]\n",
                "movs r3, #0\n",
                "movs r4, #0\n",
                "movs r5, #0\n",
                "movs r6, #0\n",
                "2:\n",
            )
        };
    }

    /// End of a tile (`$tile` bytes), then of a block: store the four sums.
    macro_rules! epilogue {
        ($name:literal, $tile:literal) => {
            concat!(
                "adds r0, #",
                $tile,
                "\n",
                "subs r2, #1\n",
                "bne 2b\n",
                "ldr r7, [sp, #8]\n",
                "stm r7!, {{r3-r6}}\n",
                "str r7, [sp, #8]\n",
                "ldr r7, [sp, #12]\n",
                "subs r7, #1\n",
                "str r7, [sp, #12]\n",
                "bne 1b\n",
                "add sp, #16\n",
                "pop {{r4-r11, pc}}\n",
                ".size ",
                $name,
                ", . - ",
                $name,
                "\n",
            )
        };
    }

    core::arch::global_asm!(
        ".syntax unified",
        ".thumb",
        // The DSP instructions are v7E-M's; thumbv8m.main does not enable
        // them for assembly by default (the M33 has them).
        ".arch armv7e-m",
        prologue!("ferrite_asm_dsp_rows_i8"),
        "ldm r1!, {{r7-r10}}",
        i8_row_half!("r3", "0"),
        i8_row_half!("r4", "16"),
        i8_row_half!("r5", "32"),
        i8_row_half!("r6", "48"),
        "ldm r1!, {{r7-r10}}",
        i8_row_half!("r3", "8"),
        i8_row_half!("r4", "24"),
        i8_row_half!("r5", "40"),
        i8_row_half!("r6", "56"),
        epilogue!("ferrite_asm_dsp_rows_i8", "64"),
        prologue!("ferrite_asm_dsp_rows_i4"),
        "ldm r1!, {{r7-r10}}",
        i4_row_half!("r3", "0"),
        i4_row_half!("r4", "8"),
        i4_row_half!("r5", "16"),
        i4_row_half!("r6", "24"),
        "ldm r1!, {{r7-r10}}",
        i4_row_half!("r3", "4"),
        i4_row_half!("r4", "12"),
        i4_row_half!("r5", "20"),
        i4_row_half!("r6", "28"),
        epilogue!("ferrite_asm_dsp_rows_i4", "32"),
    );

    extern "C" {
        fn ferrite_asm_dsp_rows_i8(
            w: *const i8,
            x: *const i16,
            tiles: u32,
            out: *mut i32,
            blocks: u32,
        );
        fn ferrite_asm_dsp_rows_i4(
            w: *const u8,
            x: *const i16,
            tiles: u32,
            out: *mut i32,
            blocks: u32,
        );
    }

    /// Runs the int8 assembly.
    pub fn rows_i8(w: *const i8, x: *const i16, tiles: u32, out: *mut i32, blocks: u32) -> bool {
        // SAFETY: `super::rows_i8` checked, through `shape`, that `w` points
        // to `64 * tiles * blocks` readable bytes, `x` to `16 * tiles`
        // readable i16 and `out` to `4 * blocks` writable i32, with tiles
        // and blocks >= 1, and that `w` and `x` are 4-byte aligned (`out` is
        // an i32 slice). The function reads and writes exactly those and
        // restores every callee-saved register it uses (AAPCS).
        unsafe { ferrite_asm_dsp_rows_i8(w, x, tiles, out, blocks) };
        true
    }

    /// Runs the int4 assembly (sums are 16 x the dot products).
    pub fn rows_i4(w: *const u8, x: *const i16, tiles: u32, out: *mut i32, blocks: u32) -> bool {
        // SAFETY: as for `rows_i8`, with `32 * tiles * blocks` bytes of weights.
        unsafe { ferrite_asm_dsp_rows_i4(w, x, tiles, out, blocks) };
        true
    }
}

#[cfg(not(ferrite_kernels = "dsp"))]
mod asm {
    /// No DSP assembly on this target.
    pub fn rows_i8(_w: *const i8, _x: *const i16, _t: u32, _o: *mut i32, _b: u32) -> bool {
        false
    }

    /// No DSP assembly on this target.
    pub fn rows_i4(_w: *const u8, _x: *const i16, _t: u32, _o: *mut i32, _b: u32) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_reordered_per_four_columns() {
        let q: [i8; 6] = [1, 2, 3, 4, -5, -6];
        let mut w = [0i16; 6];
        widen_pairs(&q, &mut w);
        assert_eq!(w, [1, 3, 2, 4, -5, -6]);
    }

    #[test]
    fn wrappers_refuse_what_the_assembly_cannot_take() {
        let tiles = [0i8; 64];
        let wide = [0i16; 16];
        let mut out = [7i32; 4];
        // Wrong activation length, a partial tile, a partial block.
        assert!(!rows_i8(&tiles, &wide[..8], &mut out));
        assert!(!rows_i8(&tiles[..63], &wide, &mut out));
        assert!(!rows_i8(&tiles, &wide, &mut out[..3]));
        assert!(!rows_i4(&[0u8; 31], &wide, &mut out));
        assert!(!rows_i8(&[], &[], &mut []));
        assert_eq!(out, [7; 4], "a refused call leaves out alone");
    }
}
