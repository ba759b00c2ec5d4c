//! Cortex-M0/M0+ kernels (ARMv6-M, Thumb-1: no `MLA`, `LDRSB` with a
//! register offset only, eight low registers for most instructions). The
//! four rows of a tile have a pointer each and share one column register,
//! so a column is one `LDRSB` of the activation and, per row, `LDRSB` +
//! `MULS` + `ADD` into an accumulator kept in a high register (`ADD` is
//! the one arithmetic instruction that reaches them): 14 instructions for 4
//! multiply-accumulates, about 3.6 per MAC with the tile's overhead. The
//! compiler's code for the same loop spills the activations and takes 5.6.

use crate::shape;

/// Row sums of int8 tiles: `weights` holds `out.len() / 4` row blocks of
/// `x.len() / 16` tiles; `out[4 b + r]` = row `r` of block `b` times `x`.
/// Returns `false`, leaving `out` alone, when the shapes disagree or the
/// target has no ARMv6-M assembly (byte loads need no alignment).
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

#[cfg(ferrite_kernels = "v6m")]
mod asm {
    /// One column of a tile: the activation at `[r4, r5]`, the four rows'
    /// weights at `[r0..r3, r5]`, the products added to r8-r11.
    macro_rules! column {
        () => {
            concat!(
                "ldrsb r6, [r4, r5]\n",
                "ldrsb r7, [r0, r5]\n",
                "muls r7, r6, r7\n",
                "add r8, r7\n",
                "ldrsb r7, [r1, r5]\n",
                "muls r7, r6, r7\n",
                "add r9, r7\n",
                "ldrsb r7, [r2, r5]\n",
                "muls r7, r6, r7\n",
                "add r10, r7\n",
                "ldrsb r7, [r3, r5]\n",
                "muls r7, r6, r7\n",
                "add r11, r7\n",
            )
        };
    }

    /// A column, then the next column's index.
    macro_rules! column_next {
        () => {
            concat!(column!(), "adds r5, #1\n")
        };
    }

    core::arch::global_asm!(
        ".syntax unified",
        ".thumb",
        ".section .text.ferrite_asm_v6m_rows_i8,\"ax\",%progbits",
        ".global ferrite_asm_v6m_rows_i8",
        ".type ferrite_asm_v6m_rows_i8,%function",
        ".thumb_func",
        ".p2align 2",
        // fn(w: r0, x: r1, tiles: r2, out: r3, blocks: [sp]). r0-r3 the
        // four rows of the current tile, r4 its activations, r5 the column,
        // r6 the activation, r7 a weight and its product; r8-r11 the row
        // sums, r12 the tiles left in the block; x, tiles, out and the
        // blocks left in a stack frame.
        "ferrite_asm_v6m_rows_i8:",
        "push {{r4-r7, lr}}",
        "mov r4, r8",
        "mov r5, r9",
        "mov r6, r10",
        "mov r7, r11",
        "push {{r4-r7}}",
        "ldr r4, [sp, #36]",
        "sub sp, #16",
        "str r1, [sp, #0]",
        "str r2, [sp, #4]",
        "str r3, [sp, #8]",
        "str r4, [sp, #12]",
        "movs r1, r0",
        "adds r1, #16",
        "movs r2, r0",
        "adds r2, #32",
        "movs r3, r0",
        "adds r3, #48",
        // A row block.
        "1:",
        "ldr r4, [sp, #0]",
        "ldr r6, [sp, #4]",
        "mov r12, r6",
        "movs r6, #0",
        "mov r8, r6",
        "mov r9, r6",
        "mov r10, r6",
        "mov r11, r6",
        // A tile (its body is longer than a conditional branch reaches).
        "2:",
        "movs r5, #0",
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column_next!(),
        column!(),
        "adds r0, #64",
        "adds r1, #64",
        "adds r2, #64",
        "adds r3, #64",
        "adds r4, #16",
        "mov r7, r12",
        "subs r7, #1",
        "mov r12, r7",
        "beq 3f",
        "b 2b",
        // The block's four sums; the rows' pointers are at the next block.
        "3:",
        "ldr r7, [sp, #8]",
        "mov r6, r8",
        "str r6, [r7, #0]",
        "mov r6, r9",
        "str r6, [r7, #4]",
        "mov r6, r10",
        "str r6, [r7, #8]",
        "mov r6, r11",
        "str r6, [r7, #12]",
        "adds r7, #16",
        "str r7, [sp, #8]",
        "ldr r7, [sp, #12]",
        "subs r7, #1",
        "str r7, [sp, #12]",
        "beq 4f",
        "b 1b",
        "4:",
        "add sp, #16",
        "pop {{r4-r7}}",
        "mov r8, r4",
        "mov r9, r5",
        "mov r10, r6",
        "mov r11, r7",
        "pop {{r4-r7, pc}}",
        ".size ferrite_asm_v6m_rows_i8, . - ferrite_asm_v6m_rows_i8",
    );

    extern "C" {
        fn ferrite_asm_v6m_rows_i8(
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
        // loads need no alignment; `out` is an i32 slice, word-aligned) and
        // restores every callee-saved register it uses (AAPCS: r4-r11).
        unsafe { ferrite_asm_v6m_rows_i8(w, x, tiles, out, blocks) };
        true
    }
}

#[cfg(not(ferrite_kernels = "v6m"))]
mod asm {
    /// No ARMv6-M assembly on this target.
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
