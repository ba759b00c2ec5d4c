//! Cortex-M55 kernels (Helium): per tile, the 16 activations are loaded
//! once into a vector and each of the 4 rows is one `VLDRB.U8` and one
//! `VMLAVA.S8` (16 multiply-accumulates into a scalar), in a low-overhead
//! loop: 10 instructions for 64 multiply-accumulates. Written in assembly
//! because safe code that LLVM vectorizes well for one row block gets
//! vectorized across tiles instead (gathers, 20x slower) once inlined.

use crate::{shape, TILE_ROWS};

/// Row sums of int8 tiles: `weights` holds `out.len() / 4` row blocks of
/// `x.len() / 16` tiles; `out[4 b + r]` = row `r` of block `b` times `x`.
/// Returns `false`, leaving `out` alone, when the shapes disagree or the
/// target has no Helium assembly (`VLDRB` needs no alignment).
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

/// The four row sums of one row block of int8 tiles (a group of columns).
pub fn dot4_i8(tiles: &[i8], x: &[i8]) -> Option<[i32; TILE_ROWS]> {
    let mut out = [0i32; TILE_ROWS];
    rows_i8(tiles, x, &mut out).then_some(out)
}

/// Row sums of int4 tiles (32 bytes each; per 8 columns byte `j` holds
/// column `j` low and `j + 4` high) against i16 activations permuted to
/// the nibbles' order: per 16 columns, first the low nibbles' columns
/// `0-3, 8-11`, then the high nibbles' `4-7, 12-15`. Per tile row: one
/// widening load, three shifts (`(b << 12) >> 12` and `b >> 4` of the
/// sign-extended byte) and two `VMLAVA.S16`. Returns `false`, leaving `out`
/// alone, when the shapes disagree, `x` is not on a 2-byte boundary, or the
/// target has no Helium assembly.
pub fn rows_i4(weights: &[u8], x: &[i16], out: &mut [i32]) -> bool {
    let Some((tiles, blocks)) = shape(weights.len(), 32, x.len(), out.len()) else {
        return false;
    };
    asm::rows_i4(
        weights.as_ptr(),
        x.as_ptr(),
        tiles,
        out.as_mut_ptr(),
        blocks,
    )
}

/// The four row sums of one row block of int4 tiles (a group of columns).
pub fn dot4_i4(tiles: &[u8], x: &[i16]) -> Option<[i32; TILE_ROWS]> {
    let mut out = [0i32; TILE_ROWS];
    rows_i4(tiles, x, &mut out).then_some(out)
}

#[cfg(ferrite_kernels = "helium")]
mod asm {
    core::arch::global_asm!(
        ".syntax unified",
        ".thumb",
        // Assembly does not see `-C target-cpu`: name the core.
        ".cpu cortex-m55",
        ".section .text.ferrite_asm_helium_rows_i8,\"ax\",%progbits",
        ".global ferrite_asm_helium_rows_i8",
        ".type ferrite_asm_helium_rows_i8,%function",
        ".thumb_func",
        ".p2align 2",
        // fn(w: r0, x: r1, tiles: r2, out: r3, blocks: [sp]). VMLAVA needs
        // even accumulators: r4, r6, r8, r10. q0 activations, q1-q3 rows
        // (q4-q7 are callee-saved and not used).
        "ferrite_asm_helium_rows_i8:",
        "push {{r4-r11, lr}}",
        "ldr r12, [sp, #36]",
        "1:",
        "movs r4, #0",
        "movs r6, #0",
        "mov.w r8, #0",
        "mov.w r10, #0",
        "mov r5, r1",
        "dls lr, r2",
        "2:",
        "vldrb.u8 q0, [r5], #16",
        "vldrb.u8 q1, [r0], #16",
        "vmlava.s8 r4, q1, q0",
        "vldrb.u8 q2, [r0], #16",
        "vmlava.s8 r6, q2, q0",
        "vldrb.u8 q3, [r0], #16",
        "vmlava.s8 r8, q3, q0",
        "vldrb.u8 q1, [r0], #16",
        "vmlava.s8 r10, q1, q0",
        "le lr, 2b",
        "str r4, [r3], #4",
        "str r6, [r3], #4",
        "str r8, [r3], #4",
        "str r10, [r3], #4",
        "subs r12, #1",
        "bne 1b",
        "pop {{r4-r11, pc}}",
        ".size ferrite_asm_helium_rows_i8, . - ferrite_asm_helium_rows_i8",
        // int4: fn(w: r0, x (i16, permuted): r1, tiles: r2, out: r3,
        // blocks: [sp]). q0/q1 the low/high nibbles' activations, q2 a tile
        // row sign-extended to i16 lanes, q3 its nibbles in turn.
        ".section .text.ferrite_asm_helium_rows_i4,\"ax\",%progbits",
        ".global ferrite_asm_helium_rows_i4",
        ".type ferrite_asm_helium_rows_i4,%function",
        ".thumb_func",
        ".p2align 2",
        "ferrite_asm_helium_rows_i4:",
        "push {{r4-r11, lr}}",
        "ldr r12, [sp, #36]",
        "3:",
        "movs r4, #0",
        "movs r6, #0",
        "mov.w r8, #0",
        "mov.w r10, #0",
        "mov r5, r1",
        "dls lr, r2",
        "4:",
        "vldrh.u16 q0, [r5], #16",
        "vldrh.u16 q1, [r5], #16",
        "vldrb.s16 q2, [r0]",
        "vshl.i16 q3, q2, #12",
        "vshr.s16 q3, q3, #12",
        "vmlava.s16 r4, q3, q0",
        "vshr.s16 q2, q2, #4",
        "vmlava.s16 r4, q2, q1",
        "vldrb.s16 q2, [r0, #8]",
        "vshl.i16 q3, q2, #12",
        "vshr.s16 q3, q3, #12",
        "vmlava.s16 r6, q3, q0",
        "vshr.s16 q2, q2, #4",
        "vmlava.s16 r6, q2, q1",
        "vldrb.s16 q2, [r0, #16]",
        "vshl.i16 q3, q2, #12",
        "vshr.s16 q3, q3, #12",
        "vmlava.s16 r8, q3, q0",
        "vshr.s16 q2, q2, #4",
        "vmlava.s16 r8, q2, q1",
        "vldrb.s16 q2, [r0, #24]",
        "vshl.i16 q3, q2, #12",
        "vshr.s16 q3, q3, #12",
        "vmlava.s16 r10, q3, q0",
        "vshr.s16 q2, q2, #4",
        "vmlava.s16 r10, q2, q1",
        "adds r0, #32",
        "le lr, 4b",
        "str r4, [r3], #4",
        "str r6, [r3], #4",
        "str r8, [r3], #4",
        "str r10, [r3], #4",
        "subs r12, #1",
        "bne 3b",
        "pop {{r4-r11, pc}}",
        ".size ferrite_asm_helium_rows_i4, . - ferrite_asm_helium_rows_i4",
    );

    extern "C" {
        fn ferrite_asm_helium_rows_i8(
            w: *const i8,
            x: *const i8,
            tiles: u32,
            out: *mut i32,
            blocks: u32,
        );
        fn ferrite_asm_helium_rows_i4(
            w: *const u8,
            x: *const i16,
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
        // loads need no alignment; `out` is an i32 slice), uses only the
        // caller-saved vector registers q0-q3, and restores every
        // callee-saved core register it uses (AAPCS).
        unsafe { ferrite_asm_helium_rows_i8(w, x, tiles, out, blocks) };
        true
    }

    /// Runs the int4 assembly.
    pub fn rows_i4(w: *const u8, x: *const i16, tiles: u32, out: *mut i32, blocks: u32) -> bool {
        // SAFETY: `super::rows_i4` checked, through `shape`, that `w` points
        // to `32 * tiles * blocks` readable bytes, `x` to `16 * tiles`
        // readable i16 (2-byte aligned: an i16 slice, which VLDRH needs) and
        // `out` to `4 * blocks` writable i32, with tiles and blocks >= 1. As
        // the int8 function, it touches only those, q0-q3 and the
        // callee-saved core registers it restores.
        unsafe { ferrite_asm_helium_rows_i4(w, x, tiles, out, blocks) };
        true
    }
}

#[cfg(not(ferrite_kernels = "helium"))]
mod asm {
    /// No Helium assembly on this target.
    pub fn rows_i8(_w: *const i8, _x: *const i8, _t: u32, _o: *mut i32, _b: u32) -> bool {
        false
    }

    /// No Helium assembly on this target.
    pub fn rows_i4(_w: *const u8, _x: *const i16, _t: u32, _o: *mut i32, _b: u32) -> bool {
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
        assert!(!rows_i8(&[0; 60], &[0; 16], &mut out));
        assert!(!rows_i8(&[], &[], &mut []));
        assert_eq!(out, [7; 4]);
    }
}
