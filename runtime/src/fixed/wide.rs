//! Products and quotients wider than 32 bits. Cortex-M0/M0+ (and M23) have
//! only a 32x32 -> 32-bit multiply, so a 64-bit product is a library call
//! there; these helpers build it from 16-bit halves on those cores and use
//! the native 64-bit product elsewhere. Both give the same (exact) result.
//! A 64-bit division is a library call on every 32-bit core (some 150
//! instructions); [`div_u64_u32`] divides by a normalized 32-bit divisor
//! with two 32-bit divisions instead, exactly.

/// Whether this target lacks a 32x32 -> 64-bit multiply (ARMv6-M, ARMv8-M
/// Baseline: the ARMv6-M or the portable kernels on an `arm` target).
const NO_LONG_MUL: bool = cfg!(all(
    target_arch = "arm",
    any(ferrite_kernels = "v6m", ferrite_kernels = "portable")
));

/// Whether this target lacks a count-leading-zeros instruction: RV32
/// without Zbb, and the cores [`NO_LONG_MUL`] names (ARMv6-M has no `CLZ`).
/// There LLVM expands `leading_zeros` to some 26 instructions (RV32) or
/// calls `__clzsi2`; [`lz32`] takes about 9.
pub(crate) const NO_CLZ: bool =
    NO_LONG_MUL || cfg!(all(target_arch = "riscv32", not(target_feature = "zbb")));

/// Whether this target saturates a shift count in one instruction (`USAT`:
/// ARMv7-M and later; ARMv6-M has none).
const HAS_USAT: bool = cfg!(target_arch = "arm") && !NO_LONG_MUL;

/// `x.clamp(0, 31)` for an `x` the caller knows to be at least 0: one `USAT`
/// where the core has it, else one unsigned compare (RV32, ARMv6-M: the
/// lower clamp would be a second). The same number for every `x >= 0`.
#[inline(always)]
pub fn shift_up_to_31(x: i32) -> u32 {
    debug_assert!(x >= 0);
    if HAS_USAT {
        x.clamp(0, 31) as u32
    } else {
        (x as u32).min(31)
    }
}

/// Whether the passes of [`max_mapped`], [`max_of_pairs`], [`update_max`],
/// [`update_max_each`], [`update_reduce3`] and [`for_each_pair`] go four
/// values a step: on RV32 and ARMv6-M, where LLVM neither unrolls such
/// loops nor has a `max` instruction (a running maximum there is a compare
/// and a branch, laid out with a jump every value; in a step of four, three
/// of the four maxima do not depend on the running one). Elsewhere (the
/// M4F, the M55: unrolled and predicated already) the plain loop is
/// shorter. Either form gives the same numbers and writes.
pub const STEP4: bool = NO_LONG_MUL || cfg!(target_arch = "riscv32");

/// The largest `key(b)` over `bits` (0 for none): the same number as
/// `bits.iter().map(key).max().unwrap_or(0)`, four values a step where
/// [`STEP4`]. A caller after the largest `f(b)` of a monotone `f` takes
/// `f` of the largest `b` (`max_mapped(d, |b| b) >> 23`).
#[inline(always)]
pub fn max_mapped(bits: &[u32], key: impl Fn(u32) -> u32) -> u32 {
    max_mapped_in::<STEP4>(bits, key)
}

/// [`max_mapped`], four values a step where `S`.
#[inline(always)]
fn max_mapped_in<const S: bool>(bits: &[u32], key: impl Fn(u32) -> u32) -> u32 {
    if !S {
        return bits.iter().fold(0, |a, &b| a.max(key(b)));
    }
    let mut chunks = bits.chunks_exact(4);
    let mut top = 0u32;
    for c in &mut chunks {
        let (a, b) = (key(c[0]).max(key(c[1])), key(c[2]).max(key(c[3])));
        top = top.max(a.max(b));
    }
    chunks.remainder().iter().fold(top, |a, &b| a.max(key(b)))
}

/// The largest `f(a_i, b_i)` over the pairs of `a` and `b` (as far as the
/// shorter goes; 0 for none), four pairs a step where [`STEP4`].
#[inline(always)]
pub fn max_of_pairs<A: Copy, B: Copy>(a: &[A], b: &[B], f: impl Fn(A, B) -> u32) -> u32 {
    max_of_pairs_in::<STEP4, A, B>(a, b, f)
}

/// [`max_of_pairs`], four pairs a step where `S`.
#[inline(always)]
fn max_of_pairs_in<const S: bool, A: Copy, B: Copy>(
    a: &[A],
    b: &[B],
    f: impl Fn(A, B) -> u32,
) -> u32 {
    if !S {
        return a.iter().zip(b).fold(0, |t, (&p, &q)| t.max(f(p, q)));
    }
    let n = a.len().min(b.len());
    let (a, b) = (a.get(..n).unwrap_or(&[]), b.get(..n).unwrap_or(&[]));
    let (mut ac, mut bc) = (a.chunks_exact(4), b.chunks_exact(4));
    let mut top = 0u32;
    for (p, q) in (&mut ac).zip(&mut bc) {
        let u = f(p[0], q[0]).max(f(p[1], q[1]));
        let v = f(p[2], q[2]).max(f(p[3], q[3]));
        top = top.max(u.max(v));
    }
    ac.remainder()
        .iter()
        .zip(bc.remainder())
        .fold(top, |t, (&p, &q)| t.max(f(p, q)))
}

/// [`max_of_pairs`] for a pass that also writes: `f(&mut a_i, b_i)`
/// updates `a_i` and gives its key; returns the largest key. Four pairs a
/// step where [`STEP4`]; the same writes and number either way.
#[inline(always)]
pub fn update_max<A, B: Copy>(a: &mut [A], b: &[B], f: impl Fn(&mut A, B) -> u32) -> u32 {
    update_max_in::<STEP4, A, B>(a, b, f)
}

/// [`update_max`], four pairs a step where `S`.
#[inline(always)]
fn update_max_in<const S: bool, A, B: Copy>(
    a: &mut [A],
    b: &[B],
    f: impl Fn(&mut A, B) -> u32,
) -> u32 {
    if !S {
        return a.iter_mut().zip(b).fold(0, |t, (p, &q)| t.max(f(p, q)));
    }
    let n = a.len().min(b.len());
    let (a, b) = match (a.get_mut(..n), b.get(..n)) {
        (Some(a), Some(b)) => (a, b),
        _ => return 0,
    };
    let (mut ac, mut bc) = (a.chunks_exact_mut(4), b.chunks_exact(4));
    let mut top = 0u32;
    for (p, q) in (&mut ac).zip(&mut bc) {
        let u = f(&mut p[0], q[0]).max(f(&mut p[1], q[1]));
        let v = f(&mut p[2], q[2]).max(f(&mut p[3], q[3]));
        top = top.max(u.max(v));
    }
    ac.into_remainder()
        .iter_mut()
        .zip(bc.remainder())
        .fold(top, |t, (p, &q)| t.max(f(p, q)))
}

/// [`update_max`] over one slice: `f(&mut a_i)` updates `a_i` and gives
/// its key; returns the largest key (0 for none). Four values a step where
/// [`STEP4`].
#[inline(always)]
pub fn update_max_each<A>(a: &mut [A], f: impl Fn(&mut A) -> u32) -> u32 {
    update_max_each_in::<STEP4, A>(a, f)
}

/// [`update_max_each`], four values a step where `S`.
#[inline(always)]
fn update_max_each_in<const S: bool, A>(a: &mut [A], f: impl Fn(&mut A) -> u32) -> u32 {
    if !S {
        return a.iter_mut().fold(0, |t, p| t.max(f(p)));
    }
    let mut ac = a.chunks_exact_mut(4);
    let mut top = 0u32;
    for p in &mut ac {
        let u = f(&mut p[0]).max(f(&mut p[1]));
        let v = f(&mut p[2]).max(f(&mut p[3]));
        top = top.max(u.max(v));
    }
    ac.into_remainder().iter_mut().fold(top, |t, p| t.max(f(p)))
}

/// [`update_max`] with two read-only slices: `f(&mut a_i, b_i, c_i)`, as
/// far as the shortest goes. Four values a step where [`STEP4`].
#[inline(always)]
pub fn update_max3<A, B: Copy, C: Copy>(
    a: &mut [A],
    b: &[B],
    c: &[C],
    f: impl Fn(&mut A, B, C) -> u32,
) -> u32 {
    update_reduce3_in::<STEP4, A, B, C>(a, b, c, f, u32::max)
}

/// [`update_max3`] with another associative and commutative `op` in place
/// of `max` (`|`): `op` of the keys and 0, four values a step where
/// [`STEP4`].
#[inline(always)]
pub fn update_reduce3<A, B: Copy, C: Copy>(
    a: &mut [A],
    b: &[B],
    c: &[C],
    f: impl Fn(&mut A, B, C) -> u32,
    op: impl Fn(u32, u32) -> u32,
) -> u32 {
    update_reduce3_in::<STEP4, A, B, C>(a, b, c, f, op)
}

/// [`update_reduce3`], four values a step where `S`.
#[inline(always)]
fn update_reduce3_in<const S: bool, A, B: Copy, C: Copy>(
    a: &mut [A],
    b: &[B],
    c: &[C],
    f: impl Fn(&mut A, B, C) -> u32,
    op: impl Fn(u32, u32) -> u32,
) -> u32 {
    if !S {
        return a
            .iter_mut()
            .zip(b)
            .zip(c)
            .fold(0, |t, ((p, &q), &r)| op(t, f(p, q, r)));
    }
    let n = a.len().min(b.len()).min(c.len());
    let (a, b, c) = match (a.get_mut(..n), b.get(..n), c.get(..n)) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => return 0,
    };
    let (mut ac, mut bc, mut cc) = (a.chunks_exact_mut(4), b.chunks_exact(4), c.chunks_exact(4));
    let mut top = 0u32;
    for ((p, q), r) in (&mut ac).zip(&mut bc).zip(&mut cc) {
        let u = op(f(&mut p[0], q[0], r[0]), f(&mut p[1], q[1], r[1]));
        let v = op(f(&mut p[2], q[2], r[2]), f(&mut p[3], q[3], r[3]));
        top = op(top, op(u, v));
    }
    ac.into_remainder()
        .iter_mut()
        .zip(bc.remainder())
        .zip(cc.remainder())
        .fold(top, |t, ((p, &q), &r)| op(t, f(p, q, r)))
}

/// `f(&mut a_i, b_i)` over the pairs of `a` and `b` (as far as the shorter
/// goes), four pairs a step where [`STEP4`] (one pointer step and one
/// branch for four).
#[inline(always)]
pub fn for_each_pair<A, B: Copy>(a: &mut [A], b: &[B], f: impl Fn(&mut A, B)) {
    if !STEP4 {
        a.iter_mut().zip(b).for_each(|(p, &q)| f(p, q));
        return;
    }
    update_max_in::<true, A, B>(a, b, |p, q| {
        f(p, q);
        0
    });
}

/// The leading zeros of a byte (`LZ8[0] = 8`).
const LZ8: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).leading_zeros() as u8;
        i += 1;
    }
    t
};

/// `x.leading_zeros()`, in the cheapest exact form for the core: the
/// instruction where there is one, else two compares and a table of bytes
/// ([`lz32_table`]). The same number either way.
#[inline(always)]
pub const fn lz32(x: u32) -> u32 {
    if NO_CLZ {
        lz32_table(x)
    } else {
        x.leading_zeros()
    }
}

/// `x.leading_zeros()` from the top byte that is not zero (of the top two
/// half words' first that is not) and a 256-byte table.
#[inline(always)]
pub const fn lz32_table(x: u32) -> u32 {
    let (mut n, mut v) = (0, x);
    if v >> 16 == 0 {
        n = 16;
        v <<= 16;
    }
    if v >> 24 == 0 {
        n += 8;
        v <<= 8;
    }
    n + LZ8[(v >> 24) as usize] as u32
}

/// `x.leading_zeros()` for a u64: the instruction(s) where the core has
/// one, else [`lz64_table`].
#[inline(always)]
pub const fn lz64(x: u64) -> u32 {
    if NO_CLZ {
        lz64_table(x)
    } else {
        x.leading_zeros()
    }
}

/// `x.leading_zeros()` for a u64 by [`lz32_table`] of its halves.
#[inline(always)]
pub const fn lz64_table(x: u64) -> u32 {
    let hi = (x >> 32) as u32;
    if hi != 0 {
        lz32_table(hi)
    } else {
        32 + lz32_table(x as u32)
    }
}

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

/// `a * b` for two signed values, exactly: one `SMULL` where the core has a
/// long multiply.
#[inline(always)]
pub fn mul_i32(a: i32, b: i32) -> i64 {
    if NO_LONG_MUL {
        let p = mul_u32(a.unsigned_abs(), b.unsigned_abs()) as i64;
        if (a < 0) != (b < 0) {
            -p
        } else {
            p
        }
    } else {
        a as i64 * b as i64
    }
}

/// `(hi 2^32 + lo) / d`, truncated, for a normalized divisor (`d >= 2^31`)
/// and `hi < d`, so that the quotient fits 32 bits; another input gives a
/// wrong quotient (0 for a divisor below 2^31), never a panic. Long division in base 2^16 (Knuth's
/// algorithm D with two digits), each digit estimated by the core's 32-bit
/// division from the divisor's top half and corrected at most twice.
pub fn div_u64_u32(hi: u32, lo: u32, d: u32) -> u32 {
    const B: u32 = 1 << 16;
    if d < 1 << 31 {
        return 0; // not normalized: no quotient promised (and no long loop)
    }
    let (dh, dl) = (d >> 16, d & 0xffff); // dh in [2^15, 2^16)
                                          // One digit of (top B + next) / d for a partial remainder top < d.
    let digit = |top: u32, next: u32| -> u32 {
        let mut q = top / dh;
        let mut r = top - q * dh;
        // q >= B is tested first, so q * dl is a product below 2^32; r < B,
        // so (r << 16) + next stays below 2^32.
        while q >= B || q * dl > (r << 16) + next {
            q -= 1;
            r += dh;
            if r >= B {
                break;
            }
        }
        q
    };
    let (l1, l0) = (lo >> 16, lo & 0xffff);
    let q1 = digit(hi, l1);
    // The remainder after the first digit, below d: exact mod 2^32.
    let rem = (hi << 16).wrapping_add(l1).wrapping_sub(q1.wrapping_mul(d));
    let q0 = digit(rem, l0);
    (q1 << 16) | q0
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    /// `max_mapped` is the plain maximum of the keys for every length 0-9
    /// (whole steps of four and remainders), with the largest anywhere.
    #[test]
    fn max_mapped_and_max_of_pairs_are_the_plain_maximum() {
        both::<false>();
        both::<true>();
    }

    /// The helpers of one form against the plain iterators.
    fn both<const S: bool>() {
        let mut x = 0x9e37_79b9u32;
        for n in 0..10usize {
            for round in 0..50 {
                let v: [u32; 9] = core::array::from_fn(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    if round % 3 == 0 {
                        x & 0xff
                    } else {
                        x
                    }
                });
                let v = &v[..n];
                for key in [|b: u32| b, |b: u32| b << 1] {
                    let want = v.iter().map(|&b| key(b)).max().unwrap_or(0);
                    assert_eq!(max_mapped_in::<S>(v, key), want, "{v:?}");
                }
                // Pairs, the second slice as long, shorter or longer.
                let f = |p: u32, q: u32| p.wrapping_mul(3) ^ q;
                for w in [
                    v,
                    &v[..n / 2],
                    &[7u32, 8, 9, 10, 11, 12, 13, 14, 15, 16][..],
                ] {
                    let want = v.iter().zip(w).map(|(&p, &q)| f(p, q)).max().unwrap_or(0);
                    assert_eq!(max_of_pairs_in::<S, _, _>(v, w, f), want, "{v:?} {w:?}");
                    let (mut got, mut plain) = (v.to_vec(), v.to_vec());
                    let g = |p: &mut u32, q: u32| {
                        *p = f(*p, q);
                        *p >> 1
                    };
                    let want = plain.iter_mut().zip(w).map(|(p, &q)| g(p, q)).max();
                    assert_eq!(update_max_in::<S, _, _>(&mut got, w, g), want.unwrap_or(0));
                    assert_eq!(got, plain);
                    let h = |p: &mut u32| {
                        *p = f(*p, 5);
                        *p >> 2
                    };
                    let want = plain.iter_mut().map(h).max().unwrap_or(0);
                    assert_eq!(update_max_each_in::<S, _>(&mut got, h), want);
                    assert_eq!(got, plain);
                    let k = |p: &mut u32, q: u32, r: u32| {
                        *p = f(*p, q) ^ r.rotate_left(7);
                        *p >> 3
                    };
                    for (op, unit) in [
                        (u32::max as fn(u32, u32) -> u32, 0u32),
                        (|a: u32, b: u32| a | b, 0),
                    ] {
                        let want = plain
                            .iter_mut()
                            .zip(w)
                            .zip(v)
                            .fold(unit, |t, ((p, &q), &r)| op(t, k(p, q, r)));
                        let got_r = update_reduce3_in::<S, _, _, _>(&mut got, w, v, k, op);
                        assert_eq!(got_r, want);
                        assert_eq!(got, plain);
                    }
                    let e = |p: &mut u32, q: u32| *p = p.wrapping_add(q);
                    plain.iter_mut().zip(w).for_each(|(p, &q)| e(p, q));
                    for_each_pair(&mut got, w, e);
                    assert_eq!(got, plain);
                }
            }
        }
    }

    /// The table's count is `leading_zeros` for every u32 (every 7th, and
    /// every value of at most two bits set), and `lz64` for u64s built from
    /// them.
    #[test]
    fn table_leading_zeros_are_the_instructions() {
        let mut x = 0u32;
        loop {
            assert_eq!(lz32_table(x), x.leading_zeros(), "{x:#x}");
            match x.checked_add(7) {
                Some(n) => x = n,
                None => break,
            }
        }
        for i in 0..32 {
            for j in 0..=i {
                let v = (1u32 << i) | (1u32 << j);
                for x in [v, v - 1, 1 << i, (1u32 << i) - 1, u32::MAX >> i] {
                    assert_eq!(lz32_table(x), x.leading_zeros(), "{x:#x}");
                    for y in [0, 1, x, u32::MAX] {
                        let w = (u64::from(x) << 32) | u64::from(y);
                        let z = (u64::from(y) << 32) | u64::from(x);
                        assert_eq!(lz64_table(w), w.leading_zeros());
                        assert_eq!(lz64_table(z), z.leading_zeros());
                        assert_eq!(lz64(w), w.leading_zeros());
                        assert_eq!(lz32(x), x.leading_zeros());
                    }
                }
            }
        }
    }

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
                assert_eq!(mul_i32(s, b as i32), s as i64 * (b as i32) as i64);
            }
        }
    }

    /// Against the u64 division: the edges of both ranges and a million
    /// pseudo-random normalized divisors and numerators (`hi < d`).
    #[test]
    fn wide_quotients_are_exact() {
        let check = |hi: u32, lo: u32, d: u32| {
            let want = (((hi as u64) << 32) | lo as u64) / d as u64;
            assert_eq!(
                div_u64_u32(hi, lo, d) as u64,
                want,
                "{hi:#x} {lo:#x} / {d:#x}"
            );
        };
        let divisors = [
            0x8000_0000u32,
            0x8000_0001,
            0x8000_ffff,
            0xffff_0000,
            0xffff_ffff,
            0xc000_0000,
        ];
        for &d in &divisors {
            for hi in [0, 1, 0xffff, 0x1_0000, d >> 1, d - 1] {
                for lo in [0, 1, 0xffff, 0x1_0000, 0x7fff_ffff, 0xffff_ffff] {
                    check(hi, lo, d);
                }
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..1_000_000 {
            let r = next();
            let d = (r as u32) | 0x8000_0000;
            let hi = ((r >> 32) as u32) % d;
            // Numerators near a multiple of d stress the digit corrections.
            let lo = if r & 1 == 0 {
                next() as u32
            } else {
                d.wrapping_sub((r >> 40) as u32 & 7)
            };
            check(hi, lo, d);
        }
    }
}
