//! Products wider than 32 bits. Cortex-M0/M0+ (and M23) have only a 32x32
//! -> 32-bit multiply, so a 64-bit product is a library call there; these
//! helpers build it from 16-bit halves on those cores and use the native
//! 64-bit product elsewhere. Both give the same (exact) result.

/// Whether this target lacks a 32x32 -> 64-bit multiply (ARMv6-M, ARMv8-M
/// Baseline: the portable kernels on an `arm` target).
const NO_LONG_MUL: bool = cfg!(all(target_arch = "arm", ferrite_kernels = "portable"));

/// `a * b` as a u64, exactly.
#[inline(always)]
pub fn mul_u32(a: u32, b: u32) -> u64 {
    if NO_LONG_MUL {
        let (al, ah) = (a & 0xffff, a >> 16);
        let (bl, bh) = (b & 0xffff, b >> 16);
        let ll = al * bl;
        let mid = (al * bh) as u64 + (ah * bl) as u64;
        let hh = ah * bh;
        ((hh as u64) << 32) + (mid << 16) + ll as u64
    } else {
        a as u64 * b as u64
    }
}

/// The high 32 bits of `a * b`.
#[inline(always)]
pub fn mulhi_u32(a: u32, b: u32) -> u32 {
    (mul_u32(a, b) >> 32) as u32
}

/// `a * b` for a signed `a`, exactly.
#[inline(always)]
pub fn mul_i32_u32(a: i32, b: u32) -> i64 {
    let p = mul_u32(a.unsigned_abs(), b) as i64;
    if a < 0 {
        -p
    } else {
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_are_exact_at_the_extremes() {
        let cases = [
            0u32,
            1,
            0xffff,
            0x1_0000,
            0x8000_0000,
            0xffff_ffff,
            0x1234_5678,
        ];
        for &a in &cases {
            for &b in &cases {
                assert_eq!(mul_u32(a, b), a as u64 * b as u64);
                assert_eq!(mulhi_u32(a, b), ((a as u64 * b as u64) >> 32) as u32);
                let s = a as i32;
                assert_eq!(mul_i32_u32(s, b), s as i64 * b as i64);
            }
        }
    }
}
