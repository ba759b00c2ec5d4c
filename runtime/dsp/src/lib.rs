//! # ferrite-dsp
//!
//! The integer tile kernels of the `ferrite` runtime for Cortex-M cores
//! with the DSP extension (M4, M7, M33): four rows of int8 (or int4) weights
//! against i16 activations, two multiply-accumulates per `SMLAD`.
//!
//! This crate holds all of ferrite's `unsafe` code: two assembly functions
//! (`global_asm!`, so that they own every register) and the calls to them.
//! The public functions are safe: they check lengths and alignment and
//! return `None` instead of calling the assembly when a check fails (and
//! always on other architectures), so a caller can fall back to portable
//! code.
//!
//! Layout (the runtime's tiled layout, `docs/image-format.md`): a tile is
//! 4 rows x 16 columns, each row 16 contiguous int8 values (int4: 8 bytes,
//! per 8 columns byte `j` holding column `j` low and `j + 4` high). The
//! activations are i16 in pair order ([`widen_pairs`]): per 4 columns
//! `x0, x2, x1, x3`, so that `SXTB16 w` (bytes 0 and 2 of a weight word)
//! meets the word `[x0, x2]` and `SXTB16 w, ROR #8` meets `[x1, x3]`.
#![no_std]
#![deny(missing_docs)]

/// Rows of a tile.
pub const TILE_ROWS: usize = 4;
/// Columns of a tile.
pub const TILE_COLS: usize = 16;

/// Widens int8 activations to i16 in pair order (per 4 columns `x0, x2,
/// x1, x3`). Extra elements of the longer slice are left alone; a trailing
/// partial group of 4 is copied in order.
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

/// Number of whole tiles when the lengths and alignment suit the assembly:
/// `bytes == tile_bytes * n`, `wide.len() == 16 * n`, both slices on
/// 4-byte boundaries (`LDRD`/`LDM` fault on unaligned words).
fn tiles(bytes: usize, tile_bytes: usize, ptr: usize, wide: &[i16]) -> Option<usize> {
    let n = bytes / tile_bytes;
    if bytes == 0 && wide.is_empty() {
        return Some(0);
    }
    let fits = bytes == n * tile_bytes
        && wide.len() == n * TILE_COLS
        && ptr % 4 == 0
        && (wide.as_ptr() as usize) % 4 == 0
        && u32::try_from(n).is_ok();
    fits.then_some(n)
}

/// The four row sums of `n` int8 tiles (`64 * n` bytes) against `16 * n`
/// activations in pair order. `None` when lengths or alignment do not suit
/// the assembly, or on a core without it.
pub fn dot4_i8(tiles_i8: &[i8], wide: &[i16]) -> Option<[i32; TILE_ROWS]> {
    let n = tiles(tiles_i8.len(), 64, tiles_i8.as_ptr() as usize, wide)?;
    if n == 0 {
        return Some([0; TILE_ROWS]);
    }
    asm::dot4_i8(tiles_i8.as_ptr(), wide.as_ptr(), n as u32)
}

/// As [`dot4_i8`] for int4 tiles (`32 * n` bytes).
pub fn dot4_i4(tiles_i4: &[u8], wide: &[i16]) -> Option<[i32; TILE_ROWS]> {
    let n = tiles(tiles_i4.len(), 32, tiles_i4.as_ptr() as usize, wide)?;
    if n == 0 {
        return Some([0; TILE_ROWS]);
    }
    // The assembly multiplies nibbles shifted into the top of each byte
    // (16 times their value): every sum is a multiple of 16, so the shift
    // is exact.
    asm::dot4_i4(tiles_i4.as_ptr(), wide.as_ptr(), n as u32).map(|a| a.map(|v| v >> 4))
}

#[cfg(ferrite_dsp_asm)]
mod asm {
    use super::TILE_ROWS;

    // Register use (both functions): r0 weights, r1 activations, r2 tiles
    // left, r3-r6 the four row sums, r7-r10 four activation words (8
    // columns), r11/r12/lr temporaries. Per tile: two LDM of activations,
    // per row and 8 columns one load of weights, 4 SXTB16 and 4 SMLAD.
    // The 14 registers are all in use, so the functions save r4-r11 and lr,
    // and keep the output pointer on the stack.
    core::arch::global_asm!(
        ".syntax unified",
        ".arch armv7e-m",
        ".thumb",
        ".section .text.ferrite_dsp_dot4_i8,\"ax\",%progbits",
        ".global ferrite_dsp_dot4_i8",
        ".type ferrite_dsp_dot4_i8,%function",
        ".thumb_func",
        ".p2align 2",
        // fn(w: *const i8, x: *const i16, n: u32, out: *mut [i32; 4])
        "ferrite_dsp_dot4_i8:",
        "push {{r4-r11, lr}}",
        "push {{r3}}",
        "movs r3, #0",
        "movs r4, #0",
        "movs r5, #0",
        "movs r6, #0",
        "1:",
        "ldm r1!, {{r7-r10}}",
        "ldrd r11, r12, [r0, #0]",
        "sxtb16 lr, r11",
        "smlad r3, lr, r7, r3",
        "sxtb16 lr, r11, ror #8",
        "smlad r3, lr, r8, r3",
        "sxtb16 lr, r12",
        "smlad r3, lr, r9, r3",
        "sxtb16 lr, r12, ror #8",
        "smlad r3, lr, r10, r3",
        "ldrd r11, r12, [r0, #16]",
        "sxtb16 lr, r11",
        "smlad r4, lr, r7, r4",
        "sxtb16 lr, r11, ror #8",
        "smlad r4, lr, r8, r4",
        "sxtb16 lr, r12",
        "smlad r4, lr, r9, r4",
        "sxtb16 lr, r12, ror #8",
        "smlad r4, lr, r10, r4",
        "ldrd r11, r12, [r0, #32]",
        "sxtb16 lr, r11",
        "smlad r5, lr, r7, r5",
        "sxtb16 lr, r11, ror #8",
        "smlad r5, lr, r8, r5",
        "sxtb16 lr, r12",
        "smlad r5, lr, r9, r5",
        "sxtb16 lr, r12, ror #8",
        "smlad r5, lr, r10, r5",
        "ldrd r11, r12, [r0, #48]",
        "sxtb16 lr, r11",
        "smlad r6, lr, r7, r6",
        "sxtb16 lr, r11, ror #8",
        "smlad r6, lr, r8, r6",
        "sxtb16 lr, r12",
        "smlad r6, lr, r9, r6",
        "sxtb16 lr, r12, ror #8",
        "smlad r6, lr, r10, r6",
        "ldm r1!, {{r7-r10}}",
        "ldrd r11, r12, [r0, #8]",
        "sxtb16 lr, r11",
        "smlad r3, lr, r7, r3",
        "sxtb16 lr, r11, ror #8",
        "smlad r3, lr, r8, r3",
        "sxtb16 lr, r12",
        "smlad r3, lr, r9, r3",
        "sxtb16 lr, r12, ror #8",
        "smlad r3, lr, r10, r3",
        "ldrd r11, r12, [r0, #24]",
        "sxtb16 lr, r11",
        "smlad r4, lr, r7, r4",
        "sxtb16 lr, r11, ror #8",
        "smlad r4, lr, r8, r4",
        "sxtb16 lr, r12",
        "smlad r4, lr, r9, r4",
        "sxtb16 lr, r12, ror #8",
        "smlad r4, lr, r10, r4",
        "ldrd r11, r12, [r0, #40]",
        "sxtb16 lr, r11",
        "smlad r5, lr, r7, r5",
        "sxtb16 lr, r11, ror #8",
        "smlad r5, lr, r8, r5",
        "sxtb16 lr, r12",
        "smlad r5, lr, r9, r5",
        "sxtb16 lr, r12, ror #8",
        "smlad r5, lr, r10, r5",
        "ldrd r11, r12, [r0, #56]",
        "sxtb16 lr, r11",
        "smlad r6, lr, r7, r6",
        "sxtb16 lr, r11, ror #8",
        "smlad r6, lr, r8, r6",
        "sxtb16 lr, r12",
        "smlad r6, lr, r9, r6",
        "sxtb16 lr, r12, ror #8",
        "smlad r6, lr, r10, r6",
        "adds r0, #64",
        "subs r2, #1",
        "bne 1b",
        "pop {{r7}}",
        "stm r7, {{r3-r6}}",
        "pop {{r4-r11, pc}}",
        ".size ferrite_dsp_dot4_i8, . - ferrite_dsp_dot4_i8",
        // int4: per row and 8 columns one word of nibbles; `lsl #4` moves
        // the low nibbles to the top of each byte, `and 0xF0F0F0F0` keeps
        // the high ones there, so SXTB16 yields 16 x the values.
        ".section .text.ferrite_dsp_dot4_i4,\"ax\",%progbits",
        ".global ferrite_dsp_dot4_i4",
        ".type ferrite_dsp_dot4_i4,%function",
        ".thumb_func",
        ".p2align 2",
        "ferrite_dsp_dot4_i4:",
        "push {{r4-r11, lr}}",
        "push {{r3}}",
        "movs r3, #0",
        "movs r4, #0",
        "movs r5, #0",
        "movs r6, #0",
        "2:",
        "ldm r1!, {{r7-r10}}",
        "ldr r11, [r0, #0]",
        "lsl r12, r11, #4",
        "sxtb16 lr, r12",
        "smlad r3, lr, r7, r3",
        "sxtb16 lr, r12, ror #8",
        "smlad r3, lr, r8, r3",
        "and r11, r11, #0xF0F0F0F0",
        "sxtb16 lr, r11",
        "smlad r3, lr, r9, r3",
        "sxtb16 lr, r11, ror #8",
        "smlad r3, lr, r10, r3",
        "ldr r11, [r0, #8]",
        "lsl r12, r11, #4",
        "sxtb16 lr, r12",
        "smlad r4, lr, r7, r4",
        "sxtb16 lr, r12, ror #8",
        "smlad r4, lr, r8, r4",
        "and r11, r11, #0xF0F0F0F0",
        "sxtb16 lr, r11",
        "smlad r4, lr, r9, r4",
        "sxtb16 lr, r11, ror #8",
        "smlad r4, lr, r10, r4",
        "ldr r11, [r0, #16]",
        "lsl r12, r11, #4",
        "sxtb16 lr, r12",
        "smlad r5, lr, r7, r5",
        "sxtb16 lr, r12, ror #8",
        "smlad r5, lr, r8, r5",
        "and r11, r11, #0xF0F0F0F0",
        "sxtb16 lr, r11",
        "smlad r5, lr, r9, r5",
        "sxtb16 lr, r11, ror #8",
        "smlad r5, lr, r10, r5",
        "ldr r11, [r0, #24]",
        "lsl r12, r11, #4",
        "sxtb16 lr, r12",
        "smlad r6, lr, r7, r6",
        "sxtb16 lr, r12, ror #8",
        "smlad r6, lr, r8, r6",
        "and r11, r11, #0xF0F0F0F0",
        "sxtb16 lr, r11",
        "smlad r6, lr, r9, r6",
        "sxtb16 lr, r11, ror #8",
        "smlad r6, lr, r10, r6",
        "ldm r1!, {{r7-r10}}",
        "ldr r11, [r0, #4]",
        "lsl r12, r11, #4",
        "sxtb16 lr, r12",
        "smlad r3, lr, r7, r3",
        "sxtb16 lr, r12, ror #8",
        "smlad r3, lr, r8, r3",
        "and r11, r11, #0xF0F0F0F0",
        "sxtb16 lr, r11",
        "smlad r3, lr, r9, r3",
        "sxtb16 lr, r11, ror #8",
        "smlad r3, lr, r10, r3",
        "ldr r11, [r0, #12]",
        "lsl r12, r11, #4",
        "sxtb16 lr, r12",
        "smlad r4, lr, r7, r4",
        "sxtb16 lr, r12, ror #8",
        "smlad r4, lr, r8, r4",
        "and r11, r11, #0xF0F0F0F0",
        "sxtb16 lr, r11",
        "smlad r4, lr, r9, r4",
        "sxtb16 lr, r11, ror #8",
        "smlad r4, lr, r10, r4",
        "ldr r11, [r0, #20]",
        "lsl r12, r11, #4",
        "sxtb16 lr, r12",
        "smlad r5, lr, r7, r5",
        "sxtb16 lr, r12, ror #8",
        "smlad r5, lr, r8, r5",
        "and r11, r11, #0xF0F0F0F0",
        "sxtb16 lr, r11",
        "smlad r5, lr, r9, r5",
        "sxtb16 lr, r11, ror #8",
        "smlad r5, lr, r10, r5",
        "ldr r11, [r0, #28]",
        "lsl r12, r11, #4",
        "sxtb16 lr, r12",
        "smlad r6, lr, r7, r6",
        "sxtb16 lr, r12, ror #8",
        "smlad r6, lr, r8, r6",
        "and r11, r11, #0xF0F0F0F0",
        "sxtb16 lr, r11",
        "smlad r6, lr, r9, r6",
        "sxtb16 lr, r11, ror #8",
        "smlad r6, lr, r10, r6",
        "adds r0, #32",
        "subs r2, #1",
        "bne 2b",
        "pop {{r7}}",
        "stm r7, {{r3-r6}}",
        "pop {{r4-r11, pc}}",
        ".size ferrite_dsp_dot4_i4, . - ferrite_dsp_dot4_i4",
    );

    extern "C" {
        fn ferrite_dsp_dot4_i8(w: *const i8, x: *const i16, n: u32, out: *mut [i32; TILE_ROWS]);
        fn ferrite_dsp_dot4_i4(w: *const u8, x: *const i16, n: u32, out: *mut [i32; TILE_ROWS]);
    }

    /// Runs the int8 assembly over `n >= 1` tiles.
    pub fn dot4_i8(w: *const i8, x: *const i16, n: u32) -> Option<[i32; TILE_ROWS]> {
        let mut out = [0i32; TILE_ROWS];
        // SAFETY: the caller (`super::dot4_i8`) checked that `w` points to
        // `64 * n` readable bytes and `x` to `16 * n` readable i16, both
        // 4-byte aligned, and that n >= 1; the function reads exactly those,
        // writes the 16 bytes of `out`, and restores every callee-saved
        // register it uses (AAPCS).
        unsafe { ferrite_dsp_dot4_i8(w, x, n, &mut out) };
        Some(out)
    }

    /// Runs the int4 assembly over `n >= 1` tiles (sums are 16 x the dot products).
    pub fn dot4_i4(w: *const u8, x: *const i16, n: u32) -> Option<[i32; TILE_ROWS]> {
        let mut out = [0i32; TILE_ROWS];
        // SAFETY: as for `dot4_i8`, with `32 * n` bytes of weights.
        unsafe { ferrite_dsp_dot4_i4(w, x, n, &mut out) };
        Some(out)
    }
}

#[cfg(not(ferrite_dsp_asm))]
mod asm {
    use super::TILE_ROWS;

    /// No DSP assembly on this target.
    pub fn dot4_i8(_w: *const i8, _x: *const i16, _n: u32) -> Option<[i32; TILE_ROWS]> {
        None
    }

    /// No DSP assembly on this target.
    pub fn dot4_i4(_w: *const u8, _x: *const i16, _n: u32) -> Option<[i32; TILE_ROWS]> {
        None
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
        // Wrong activation length, a partial tile: refused everywhere.
        assert_eq!(dot4_i8(&tiles, &wide[..8]), None);
        assert_eq!(dot4_i8(&tiles[..63], &wide), None);
        assert_eq!(dot4_i4(&[0u8; 31], &wide), None);
        // Zero tiles is an empty sum.
        assert_eq!(dot4_i8(&[], &[]), Some([0; 4]));
    }
}
