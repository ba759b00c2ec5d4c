//! RV32IM kernels: per column, the activation is loaded once (`LB`) and each
//! of the 4 rows of a tile is one `LB`, one `MUL` and one `ADD`: 212
//! instructions for the 64 multiply-accumulates of a tile (3.3 per MAC).
//! The compiler's version of the same loop reached 4.7.

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
    /// Column `$c` of a tile: activation at `$c(t0)`, the rows' weights at
    /// `$c + 16 r (a0)`; sums in a5, a6, a7, t6.
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

    core::arch::global_asm!(
        // Assembly does not see the target's extensions: `isa::choose`
        // builds this only where the target has M (and is not RV32E: a6,
        // a7 and t6 are x16, x17 and x31).
        ".option push",
        ".option arch, +m",
        ".section .text.ferrite_asm_rv32_rows_i8,\"ax\",@progbits",
        ".global ferrite_asm_rv32_rows_i8",
        ".type ferrite_asm_rv32_rows_i8,@function",
        ".p2align 2",
        // fn(w: a0, x: a1, tiles: a2, out: a3, blocks: a4); only
        // caller-saved registers.
        "ferrite_asm_rv32_rows_i8:",
        "1:",
        "mv t0, a1",
        "mv t1, a2",
        "li a5, 0",
        "li a6, 0",
        "li a7, 0",
        "li t6, 0",
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
        "addi a0, a0, 64",
        "addi t0, t0, 16",
        "addi t1, t1, -1",
        "bnez t1, 2b",
        "sw a5, 0(a3)",
        "sw a6, 4(a3)",
        "sw a7, 8(a3)",
        "sw t6, 12(a3)",
        "addi a3, a3, 16",
        "addi a4, a4, -1",
        "bnez a4, 1b",
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
        // reads and writes exactly those and uses only caller-saved
        // registers (the RISC-V calling convention).
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
