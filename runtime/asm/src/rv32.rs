//! RV32IM kernels: the tiles of two row blocks at a time, so that each
//! activation is loaded once (`LB`) for eight rows, and each row is one
//! `LB`, one `MUL` and one `ADD` a column: 404 instructions for the 128
//! multiply-accumulates of a tile pair (3.16 per MAC; 212 for the 64 of a
//! lone block's tile, 3.3). The compiler's version of the one-block loop
//! reached 4.7.

use crate::shape;

/// Row sums of int8 tiles: `weights` holds `out.len() / 4` row blocks of
/// `x.len() / 16` tiles; `out[4 b + r]` = row `r` of block `b` times `x`.
/// Returns `false`, leaving `out` alone, when the shapes disagree or the
/// target has no RV32 assembly (byte loads need no alignment).
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

#[cfg(ferrite_kernels = "rv32")]
mod asm {
    /// Column `$c` of a tile of one row block: activation at `$c(t0)`, the
    /// rows' weights at `$c + 16 r (a0)`; sums in a5, a6, a7, t6.
    macro_rules! column {
        ($c:literal, $c16:literal, $c32:literal, $c48:literal) => {
            concat!(
                "lb t2, ",
                $c,
                "(t0)\n",
                "lb t3, ",
                $c,
                "(a0)\n",
                "mul t3, t3, t2\n",
                "add a5, a5, t3\n",
                "lb t4, ",
                $c16,
                "(a0)\n",
                "mul t4, t4, t2\n",
                "add a6, a6, t4\n",
                "lb t5, ",
                $c32,
                "(a0)\n",
                "mul t5, t5, t2\n",
                "add a7, a7, t5\n",
                "lb t3, ",
                $c48,
                "(a0)\n",
                "mul t3, t3, t2\n",
                "add t6, t6, t3\n",
            )
        };
    }

    /// Column `$c` of the tiles of two row blocks: activation at `$c(t0)`
    /// (loaded once for the eight rows), the first block's rows at
    /// `$c + 16 r (a0)`, the second's at `$c + 16 r (s1)`; sums in a5, a6,
    /// a7, t6 (first block) and t3, t4, t5, s0 (second).
    macro_rules! column2 {
        ($c:literal, $c16:literal, $c32:literal, $c48:literal) => {
            concat!(
                "lb t2, ",
                $c,
                "(t0)\n",
                "lb s2, ",
                $c,
                "(a0)\n",
                "mul s2, s2, t2\n",
                "add a5, a5, s2\n",
                "lb s2, ",
                $c16,
                "(a0)\n",
                "mul s2, s2, t2\n",
                "add a6, a6, s2\n",
                "lb s2, ",
                $c32,
                "(a0)\n",
                "mul s2, s2, t2\n",
                "add a7, a7, s2\n",
                "lb s2, ",
                $c48,
                "(a0)\n",
                "mul s2, s2, t2\n",
                "add t6, t6, s2\n",
                "lb s2, ",
                $c,
                "(s1)\n",
                "mul s2, s2, t2\n",
                "add t3, t3, s2\n",
                "lb s2, ",
                $c16,
                "(s1)\n",
                "mul s2, s2, t2\n",
                "add t4, t4, s2\n",
                "lb s2, ",
                $c32,
                "(s1)\n",
                "mul s2, s2, t2\n",
                "add t5, t5, s2\n",
                "lb s2, ",
                $c48,
                "(s1)\n",
                "mul s2, s2, t2\n",
                "add s0, s0, s2\n",
            )
        };
    }

    core::arch::global_asm!(
        // Assembly does not see the target's extensions: `isa::choose`
        // builds this only where the target has M (and is not RV32E: a6,
        // a7, t3-t6 and s2 are x16-x18 and x28-x31).
        ".option push",
        ".option arch, +m",
        ".section .text.ferrite_asm_rv32_rows_i8,\"ax\",@progbits",
        ".global ferrite_asm_rv32_rows_i8",
        ".type ferrite_asm_rv32_rows_i8,@function",
        ".p2align 2",
        // fn(w: a0, x: a1, tiles: a2, out: a3, blocks: a4). Two row blocks
        // at a time (eight rows sharing each activation load: 25
        // instructions for 8 multiply-accumulates, 3.125 a MAC before the
        // loop's 4 a tile pair), then a last single block the old way (4
        // rows: 3.25). s0-s2 are saved on the stack; t1 holds a row
        // block's bytes (64 tiles), a2 the end of x (x + 16 tiles).
        "ferrite_asm_rv32_rows_i8:",
        "addi sp, sp, -16",
        "sw s0, 0(sp)",
        "sw s1, 4(sp)",
        "sw s2, 8(sp)",
        "slli t1, a2, 6",
        "slli a2, a2, 4",
        "add a2, a2, a1",
        "li t2, 2",
        "bltu a4, t2, 4f",
        "1:",
        "mv t0, a1",
        "add s1, a0, t1",
        "li a5, 0",
        "li a6, 0",
        "li a7, 0",
        "li t6, 0",
        "li t3, 0",
        "li t4, 0",
        "li t5, 0",
        "li s0, 0",
        "2:",
        column2!("0", "16", "32", "48"),
        column2!("1", "17", "33", "49"),
        column2!("2", "18", "34", "50"),
        column2!("3", "19", "35", "51"),
        column2!("4", "20", "36", "52"),
        column2!("5", "21", "37", "53"),
        column2!("6", "22", "38", "54"),
        column2!("7", "23", "39", "55"),
        column2!("8", "24", "40", "56"),
        column2!("9", "25", "41", "57"),
        column2!("10", "26", "42", "58"),
        column2!("11", "27", "43", "59"),
        column2!("12", "28", "44", "60"),
        column2!("13", "29", "45", "61"),
        column2!("14", "30", "46", "62"),
        column2!("15", "31", "47", "63"),
        "addi a0, a0, 64",
        "addi s1, s1, 64",
        "addi t0, t0, 16",
        "bne t0, a2, 2b",
        "sw a5, 0(a3)",
        "sw a6, 4(a3)",
        "sw a7, 8(a3)",
        "sw t6, 12(a3)",
        "sw t3, 16(a3)",
        "sw t4, 20(a3)",
        "sw t5, 24(a3)",
        "sw s0, 28(a3)",
        "addi a3, a3, 32",
        // a0 is at the second block's start: on to the block after it.
        "mv a0, s1",
        "addi a4, a4, -2",
        "li t2, 2",
        "bgeu a4, t2, 1b",
        "4:",
        "beqz a4, 5f",
        // The last block alone (a4 == 1).
        "mv t0, a1",
        "li a5, 0",
        "li a6, 0",
        "li a7, 0",
        "li t6, 0",
        "3:",
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
        "addi a0, a0, 64",
        "addi t0, t0, 16",
        "bne t0, a2, 3b",
        "sw a5, 0(a3)",
        "sw a6, 4(a3)",
        "sw a7, 8(a3)",
        "sw t6, 12(a3)",
        "5:",
        "lw s0, 0(sp)",
        "lw s1, 4(sp)",
        "lw s2, 8(sp)",
        "addi sp, sp, 16",
        "ret",
        ".size ferrite_asm_rv32_rows_i8, . - ferrite_asm_rv32_rows_i8",
        ".option pop",
    );

    extern "C" {
        fn ferrite_asm_rv32_rows_i8(
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
        // readable bytes and `out` to `4 * blocks` writable i32 (4-byte
        // aligned: an i32 slice), with tiles and blocks >= 1. The function
        // reads and writes exactly those, besides 16 bytes of its own
        // stack, and of the callee-saved registers uses only s0-s2, which
        // it saves there and restores (the RISC-V calling convention).
        unsafe { ferrite_asm_rv32_rows_i8(w, x, tiles, out, blocks) };
        true
    }
}

#[cfg(not(ferrite_kernels = "rv32"))]
mod asm {
    /// No RV32 assembly on this target.
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
