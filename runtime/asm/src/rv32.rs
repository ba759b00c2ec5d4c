//! RV32IM kernels: the tiles of four row blocks at a time, so that each
//! activation is loaded once (`LB`) for 16 rows, and each row is one `LB`,
//! one `MUL` and one `ADD` a column: 790 instructions for the 256
//! multiply-accumulates of four blocks' tiles (3.09 per MAC; two blocks
//! 3.16, a lone block 3.3, the way every block went before). The
//! compiler's version of the one-block loop reached 4.7.

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
    /// Four rows of one row block at column `$c` (the activation in t1):
    /// the weights at `$c + 16 r ($p)`, summed into `$r0`..`$r3` (t2 the
    /// product).
    macro_rules! rows4 {
        ($c:literal, $c16:literal, $c32:literal, $c48:literal, $p:literal,
         $r0:literal, $r1:literal, $r2:literal, $r3:literal) => {
            concat!(
                "lb t2, ",
                $c,
                "(",
                $p,
                ")\n",
                "mul t2, t2, t1\n",
                "add ",
                $r0,
                ", ",
                $r0,
                ", t2\n",
                "lb t2, ",
                $c16,
                "(",
                $p,
                ")\n",
                "mul t2, t2, t1\n",
                "add ",
                $r1,
                ", ",
                $r1,
                ", t2\n",
                "lb t2, ",
                $c32,
                "(",
                $p,
                ")\n",
                "mul t2, t2, t1\n",
                "add ",
                $r2,
                ", ",
                $r2,
                ", t2\n",
                "lb t2, ",
                $c48,
                "(",
                $p,
                ")\n",
                "mul t2, t2, t1\n",
                "add ",
                $r3,
                ", ",
                $r3,
                ", t2\n",
            )
        };
    }

    /// Column `$c` of the tiles of four row blocks (16 rows; pointers a0,
    /// a5, a6, a7; sums in s0-s11, t3-t6): the activation loaded once.
    macro_rules! column4 {
        ($c:literal, $c16:literal, $c32:literal, $c48:literal) => {
            concat!(
                "lb t1, ",
                $c,
                "(t0)\n",
                rows4!($c, $c16, $c32, $c48, "a0", "s0", "s1", "s2", "s3"),
                rows4!($c, $c16, $c32, $c48, "a5", "s4", "s5", "s6", "s7"),
                rows4!($c, $c16, $c32, $c48, "a6", "s8", "s9", "s10", "s11"),
                rows4!($c, $c16, $c32, $c48, "a7", "t3", "t4", "t5", "t6"),
            )
        };
    }

    /// Column `$c` of the tiles of two row blocks (8 rows; pointers a0, a5;
    /// sums in s0-s7).
    macro_rules! column2 {
        ($c:literal, $c16:literal, $c32:literal, $c48:literal) => {
            concat!(
                "lb t1, ",
                $c,
                "(t0)\n",
                rows4!($c, $c16, $c32, $c48, "a0", "s0", "s1", "s2", "s3"),
                rows4!($c, $c16, $c32, $c48, "a5", "s4", "s5", "s6", "s7"),
            )
        };
    }

    /// Column `$c` of the tile of one row block (pointer a0; sums in
    /// s0-s3).
    macro_rules! column1 {
        ($c:literal, $c16:literal, $c32:literal, $c48:literal) => {
            concat!(
                "lb t1, ",
                $c,
                "(t0)\n",
                rows4!($c, $c16, $c32, $c48, "a0", "s0", "s1", "s2", "s3"),
            )
        };
    }

    /// The 16 columns of a tile, each by `$column`.
    macro_rules! tile {
        ($column:ident) => {
            concat!(
                $column!("0", "16", "32", "48"),
                $column!("1", "17", "33", "49"),
                $column!("2", "18", "34", "50"),
                $column!("3", "19", "35", "51"),
                $column!("4", "20", "36", "52"),
                $column!("5", "21", "37", "53"),
                $column!("6", "22", "38", "54"),
                $column!("7", "23", "39", "55"),
                $column!("8", "24", "40", "56"),
                $column!("9", "25", "41", "57"),
                $column!("10", "26", "42", "58"),
                $column!("11", "27", "43", "59"),
                $column!("12", "28", "44", "60"),
                $column!("13", "29", "45", "61"),
                $column!("14", "30", "46", "62"),
                $column!("15", "31", "47", "63"),
            )
        };
    }

    core::arch::global_asm!(
        // Assembly does not see the target's extensions: `isa::choose`
        // builds this only where the target has M (and is not RV32E: it
        // uses x16-x31).
        ".option push",
        ".option arch, +m",
        ".section .text.ferrite_asm_rv32_rows_i8,\"ax\",@progbits",
        ".global ferrite_asm_rv32_rows_i8",
        ".type ferrite_asm_rv32_rows_i8,@function",
        ".p2align 2",
        // fn(w: a0, x: a1, tiles: a2, out: a3, blocks: a4). Four row
        // blocks at a time (16 rows sharing each activation load: 49
        // instructions for 16 multiply-accumulates, 3.06 a MAC, and 6 a
        // tile quad for the loop), then two (25 for 8: 3.125), then a last
        // one (13 for 4: 3.25). ra and s0-s11 are saved on the stack; ra
        // holds a row block's bytes (64 tiles), a2 the end of x (x + 16
        // tiles), t0 the activations' pointer, t1 an activation, t2 a
        // product.
        "ferrite_asm_rv32_rows_i8:",
        "addi sp, sp, -64",
        "sw ra, 0(sp)",
        "sw s0, 4(sp)",
        "sw s1, 8(sp)",
        "sw s2, 12(sp)",
        "sw s3, 16(sp)",
        "sw s4, 20(sp)",
        "sw s5, 24(sp)",
        "sw s6, 28(sp)",
        "sw s7, 32(sp)",
        "sw s8, 36(sp)",
        "sw s9, 40(sp)",
        "sw s10, 44(sp)",
        "sw s11, 48(sp)",
        "slli ra, a2, 6",
        "slli a2, a2, 4",
        "add a2, a2, a1",
        "li t1, 4",
        "bltu a4, t1, 3f",
        // Four blocks.
        "1:",
        "mv t0, a1",
        "add a5, a0, ra",
        "add a6, a5, ra",
        "add a7, a6, ra",
        "li s0, 0",
        "li s1, 0",
        "li s2, 0",
        "li s3, 0",
        "li s4, 0",
        "li s5, 0",
        "li s6, 0",
        "li s7, 0",
        "li s8, 0",
        "li s9, 0",
        "li s10, 0",
        "li s11, 0",
        "li t3, 0",
        "li t4, 0",
        "li t5, 0",
        "li t6, 0",
        "2:",
        tile!(column4),
        "addi a0, a0, 64",
        "addi a5, a5, 64",
        "addi a6, a6, 64",
        "addi a7, a7, 64",
        "addi t0, t0, 16",
        "bne t0, a2, 2b",
        "sw s0, 0(a3)",
        "sw s1, 4(a3)",
        "sw s2, 8(a3)",
        "sw s3, 12(a3)",
        "sw s4, 16(a3)",
        "sw s5, 20(a3)",
        "sw s6, 24(a3)",
        "sw s7, 28(a3)",
        "sw s8, 32(a3)",
        "sw s9, 36(a3)",
        "sw s10, 40(a3)",
        "sw s11, 44(a3)",
        "sw t3, 48(a3)",
        "sw t4, 52(a3)",
        "sw t5, 56(a3)",
        "sw t6, 60(a3)",
        "addi a3, a3, 64",
        // a0 is at the second block's start: on past the fourth.
        "mv a0, a7",
        "addi a4, a4, -4",
        "li t1, 4",
        "bgeu a4, t1, 1b",
        // Two blocks (a4 < 4 left).
        "3:",
        "li t1, 2",
        "bltu a4, t1, 5f",
        "mv t0, a1",
        "add a5, a0, ra",
        "li s0, 0",
        "li s1, 0",
        "li s2, 0",
        "li s3, 0",
        "li s4, 0",
        "li s5, 0",
        "li s6, 0",
        "li s7, 0",
        "4:",
        tile!(column2),
        "addi a0, a0, 64",
        "addi a5, a5, 64",
        "addi t0, t0, 16",
        "bne t0, a2, 4b",
        "sw s0, 0(a3)",
        "sw s1, 4(a3)",
        "sw s2, 8(a3)",
        "sw s3, 12(a3)",
        "sw s4, 16(a3)",
        "sw s5, 20(a3)",
        "sw s6, 24(a3)",
        "sw s7, 28(a3)",
        "addi a3, a3, 32",
        "mv a0, a5",
        "addi a4, a4, -2",
        // One block (a4 < 2 left).
        "5:",
        "beqz a4, 7f",
        "mv t0, a1",
        "li s0, 0",
        "li s1, 0",
        "li s2, 0",
        "li s3, 0",
        "6:",
        tile!(column1),
        "addi a0, a0, 64",
        "addi t0, t0, 16",
        "bne t0, a2, 6b",
        "sw s0, 0(a3)",
        "sw s1, 4(a3)",
        "sw s2, 8(a3)",
        "sw s3, 12(a3)",
        "7:",
        "lw ra, 0(sp)",
        "lw s0, 4(sp)",
        "lw s1, 8(sp)",
        "lw s2, 12(sp)",
        "lw s3, 16(sp)",
        "lw s4, 20(sp)",
        "lw s5, 24(sp)",
        "lw s6, 28(sp)",
        "lw s7, 32(sp)",
        "lw s8, 36(sp)",
        "lw s9, 40(sp)",
        "lw s10, 44(sp)",
        "lw s11, 48(sp)",
        "addi sp, sp, 64",
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
        // reads and writes exactly those, besides 64 bytes of its own
        // stack, where it saves the callee-saved registers it uses (ra,
        // s0-s11) and from which it restores them (the RISC-V calling
        // convention); gp and tp are left alone.
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
