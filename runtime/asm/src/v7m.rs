//! Cortex-M3 kernels (Thumb-2 without the DSP extension): per column, the
//! activation is loaded once (`LDRSB`) and each of the 4 rows of a tile is
//! one `LDRSB` and one `MLA`: 148 instructions for the 64
//! multiply-accumulates of a tile (2.3 per MAC). The compiler gets the same
//! loop from safe code but schedules all 16 activations of a tile into
//! registers first and spills them (3.7 instructions per MAC).

use crate::shape;

/// Row sums of int8 tiles: `weights` holds `out.len() / 4` row blocks of
/// `x.len() / 16` tiles; `out[4 b + r]` = row `r` of block `b` times `x`.
/// Returns `false`, leaving `out` alone, when the shapes disagree or the
/// target has no Cortex-M3 assembly (byte loads need no alignment).
pub fn rows_i8(weights: &[i8], x: &[i8], out: &mut [i32]) -> bool {
    let Some((tiles, blocks)) = shape(weights.len(), 64, x.len(), out.len()) else {
        return false;
    };
    asm::rows_i8(
        weights.as_ptr(),
        x.as_ptr(),
        tiles,
        out.as_mut_ptr(),
        blocks,
    )
}

#[cfg(ferrite_kernels = "v7m")]
mod asm {
    /// Column `$c` of a tile: activation at `[r1, #c]`, the rows' weights at
    /// `[r0, #c + 16 r]`.
    macro_rules! column {
        ($c:literal, $c16:literal, $c32:literal, $c48:literal) => {
            concat!(
                "ldrsb.w r7, [r1, #",
                $c,
                "]\n",
                "ldrsb.w r8, [r0, #",
                $c,
                "]\n",
                "mla r3, r8, r7, r3\n",
                "ldrsb.w r8, [r0, #",
                $c16,
                "]\n",
                "mla r4, r8, r7, r4\n",
                "ldrsb.w r8, [r0, #",
                $c32,
                "]\n",
                "mla r5, r8, r7, r5\n",
                "ldrsb.w r8, [r0, #",
                $c48,
                "]\n",
                "mla r6, r8, r7, r6\n",
            )
        };
    }

    core::arch::global_asm!(
        ".syntax unified",
        ".thumb",
        ".section .text.ferrite_asm_v7m_rows_i8,\"ax\",%progbits",
        ".global ferrite_asm_v7m_rows_i8",
        ".type ferrite_asm_v7m_rows_i8,%function",
        ".thumb_func",
        ".p2align 2",
        // fn(w: r0, x: r1, tiles: r2, out: r3, blocks: [sp]). r3-r6 row
        // sums, r7 activation, r8 weight; x, tiles, out and blocks in a
        // stack frame.
        "ferrite_asm_v7m_rows_i8:",
        "push {{r4-r11, lr}}",
        "ldr r12, [sp, #36]",
        "sub sp, #16",
        "str r1, [sp, #0]",
        "str r2, [sp, #4]",
        "str r3, [sp, #8]",
        "str r12, [sp, #12]",
        "1:",
        "ldr r1, [sp, #0]",
        "ldr r2, [sp, #4]",
        "movs r3, #0",
        "movs r4, #0",
        "movs r5, #0",
        "movs r6, #0",
        "2:",
        column!("0", "16", "32", "48"),
        column!("1", "17", "33", "49"),
        column!("2", "18", "34", "50"),
        column!("3", "19", "35", "51"),
        column!("4", "20", "36", "52"),
        column!("5", "21", "37", "53"),
        column!("6", "22", "38", "54"),
        column!("7", "23", "39", "55"),
        column!("8", "24", "40", "56"),
        column!("9", "25", "41", "57"),
        column!("10", "26", "42", "58"),
        column!("11", "27", "43", "59"),
        column!("12", "28", "44", "60"),
        column!("13", "29", "45", "61"),
        column!("14", "30", "46", "62"),
        column!("15", "31", "47", "63"),
        "adds r0, #64",
        "adds r1, #16",
        "subs r2, #1",
        "bne 2b",
        "ldr r7, [sp, #8]",
        "stm r7!, {{r3-r6}}",
        "str r7, [sp, #8]",
        "ldr r7, [sp, #12]",
        "subs r7, #1",
        "str r7, [sp, #12]",
        "bne 1b",
        "add sp, #16",
        "pop {{r4-r11, pc}}",
        ".size ferrite_asm_v7m_rows_i8, . - ferrite_asm_v7m_rows_i8",
    );

    extern "C" {
        fn ferrite_asm_v7m_rows_i8(
            w: *const i8,
            x: *const i8,
            tiles: u32,
            out: *mut i32,
            blocks: u32,
        );
    }

    /// Runs the assembly.
    pub fn rows_i8(w: *const i8, x: *const i8, tiles: u32, out: *mut i32, blocks: u32) -> bool {
        // SAFETY: `super::rows_i8` checked, through `shape`, that `w` points
        // to `64 * tiles * blocks` readable bytes, `x` to `16 * tiles`
        // readable bytes and `out` to `4 * blocks` writable i32, with tiles
        // and blocks >= 1. The function reads and writes exactly those (byte
        // loads need no alignment; `out` is an i32 slice) and restores every
        // callee-saved register it uses (AAPCS).
        unsafe { ferrite_asm_v7m_rows_i8(w, x, tiles, out, blocks) };
        true
    }
}

#[cfg(not(ferrite_kernels = "v7m"))]
mod asm {
    /// No Cortex-M3 assembly on this target.
    pub fn rows_i8(_w: *const i8, _x: *const i8, _t: u32, _o: *mut i32, _b: u32) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_refuse_what_the_assembly_cannot_take() {
        let mut out = [7i32; 4];
        assert!(!rows_i8(&[0; 64], &[0; 8], &mut out));
        assert!(!rows_i8(&[], &[], &mut []));
        assert_eq!(out, [7; 4]);
    }
}
