//! Slot memories in 16 bits with a scale per slot vector, shared by the
//! integer steps of GSA (`gsa_int.rs`) and BLA (`bla_int.rs`): gated BLA
//! is GSA with `α = 1 - phi_n` (docs/integer-path.md).
//!
//! **A slot vector** is `K` (or `V`) i16 mantissas and a scale record `E,
//! f` (`σ = f 2^(E - 32)`, `f` in `[2^31, 2^32)`; `f < 2^31`, 0 in a
//! zeroed state, marks an empty vector: its values are zero).
//!
//! **The update** `h ← α h + β x` ([`update`]; GSA: `β = 1 - α`; BLA:
//! `β = phi_n` with `α = 1 - phi_n`, `γ` or 1). The decay is the scale's:
//! `σ ← α σ` is one [`Fx`] product, exact to 2^-31, so no mantissa is
//! rounded by a gate however close to 1 (a 16-bit memory multiplied
//! element by element stops moving values below `0.5 / (1 - α)` units).
//! `α >= 0` (it may exceed 1), `β` of either sign. The write enters at the
//! new scale through one factor `c = β 2^(e_x) / σ × 2^8` rounded to 15
//! bits (a gain error of at most 2^-15 on the write, the same for every
//! element): `n_i = (m_i << 8) + round(x15_i c)`, all in i32 (`|x15 c| <=
//! 2^30`, `|m << 8| < 2^23`), and the vector is shifted back to 16 bits by
//! `s` bits with `σ ← σ 2^(s - 8)`: `s = 8` (the old mantissas exact) while
//! the largest `|n| >> 8` lies in `[2^13, 2^15)`, else the shift that
//! brings it into `[2^14, 2^15)`. A write that dwarfs the old vector (`c`
//! of 2^15 or more: the write at least ~32 times the old vector, a slot
//! first written with a weight near zero or a gate near 0) moves the scale
//! up first, the old mantissas shifted right (they would lose those bits in
//! the final shift anyway), so no write is shifted left. No mantissa needs
//! a clamp: the shift rounds the largest `|n|` to at most 32767, and a
//! rounding half up keeps every other within it (`|round(-y)| <=
//! round(y)`).
//!
//! **The read** ([`read`], [`read_heads`]): per query head the logits
//! `c q·h_m` (exact i64 sums of 15 x 16-bit products, times the slot's key
//! scale and an optional factor `c`) in Q16, the softmax over the slots
//! (`Fx::exp` of each logit minus the largest, every weight in `(0, 1]`),
//! the values summed in i64 with weights in Q24 of the largest value scale,
//! divided once by the weights' sum (as SWA's attention,
//! `swa_int::attend`); the heads aligned into one normal block.

use crate::error::{part, part_mut, split_mut, Result};
use crate::fixed::block::{max_abs, normalize, normalize_with_max, shr_round};
use crate::fixed::Fx;

/// Extra bits of an update: the old mantissas shifted left by this.
const GUARD: i32 = 8;
/// Largest slot mantissa.
const S_MAX: i64 = i16::MAX as i64;
/// Saturation of [`shift_i64`].
const WIDE_MAX: i64 = 1 << 62;
/// Bits of the write factor's mantissa: a 15-bit view times it stays
/// within 2^30, so the update runs in i32.
const C_BITS: i32 = 15;

/// Bits of `v` (`v` in `[2^(b-1), 2^b)`; 0 for 0).
#[inline]
pub(super) fn bits(v: u64) -> i32 {
    64 - crate::fixed::wide::lz64(v) as i32
}

/// The shift of a part's own 15-bit view: `x15_i = at15(m_i, s)` is at
/// most 2^15 in magnitude, in units of `2^(e + s)`.
pub(super) fn view_shift(m: &[i32]) -> i32 {
    let max = max_abs(m);
    if max == 0 {
        0
    } else {
        bits(max as u64) - 15
    }
}

/// `v` shifted right by `s` (rounded; left for negative `s`, exact: the
/// view of a part below 2^15).
#[inline(always)]
pub(super) fn at15(v: i32, s: i32) -> i32 {
    if s >= 0 {
        shr_round(v, s as u32)
    } else {
        v << (-s).min(31)
    }
}

/// `v / 2^s`, rounded half up (`s > 0`), or `v × 2^-s` saturated at
/// ±2^62 (`s <= 0`); the flag says whether it saturated.
#[inline]
pub(super) fn shift_i64(v: i64, s: i32) -> (i64, bool) {
    if s > 0 {
        if s >= 63 {
            return (0, false);
        }
        ((v + (1i64 << (s - 1))) >> s, false)
    } else {
        let k = (-s).min(63) as u32;
        if v == 0 {
            (0, false)
        } else if v.unsigned_abs() >= (WIDE_MAX as u64) >> k {
            (if v < 0 { -WIDE_MAX } else { WIDE_MAX }, v != 0)
        } else {
            (v << k, false)
        }
    }
}

/// A scale record `E, f`: `σ = f 2^(E - 32)`, `None` for an empty vector.
pub(super) fn read_scale(rec: &[i32]) -> Option<Fx> {
    let [e, f, ..] = *rec else {
        return None; // not reached: a record has at least two words
    };
    let f = f as u32;
    let e = crate::fixed::stored_exponent(e) - 32;
    (f >= 1 << 31).then(|| Fx::from_normal(f, e, false))
}

/// A token's key or value part as the slot updates read it: its 15-bit
/// view (`at15(m_i, s)` of the part's mantissas `m`, with `s` its
/// [`view_shift`]) and that view's unit `2^(e + s)`, taken once for all
/// the slots the part is written into.
pub(super) struct Part<'a> {
    x15: &'a [i32],
    unit: Fx,
}

impl<'a> Part<'a> {
    /// The part with mantissas `m` of a block with exponent `e`: `m` is
    /// replaced by its 15-bit view (each `|x15_i| <= 2^15`).
    pub(super) fn new(m: &'a mut [i32], e: i32) -> Self {
        let shift = to_view(m);
        Part {
            x15: m,
            unit: Fx::pow2(e + shift),
        }
    }
}

/// Replaces the part `m` of a normal block by its own 15-bit view
/// (`at15(m_i, s)`, `s` its [`view_shift`]); returns `s`.
fn to_view(m: &mut [i32]) -> i32 {
    let shift = view_shift(m);
    if shift >= 0 {
        // `at15`'s rounded right shift, branch-free: a part of a normal
        // block (|m| < 2^30, s <= 15) does not wrap (`wrapping_add`:
        // another m gives wrong numbers, no panic).
        let right = shift.min(31) as u32;
        let half = (1i32 << right) >> 1;
        m.iter_mut()
            .for_each(|v| *v = v.wrapping_add(half) >> right);
    } else {
        // A part below 2^14: the exact left shift.
        let left = (-shift).min(31) as u32;
        m.iter_mut().for_each(|v| *v <<= left);
    }
    shift
}

/// The slot update of one key or value vector (see the module docs):
/// `mant` its mantissas, `rec` its scale record, `x` this token's part,
/// the decay `alpha` (`>= 0`) and the write weight `beta` (either sign):
/// `h ← α h + β x`.
pub(super) fn update(mant: &mut [i16], rec: &mut [i32], x: &Part<'_>, alpha: Fx, beta: Fx) {
    let unit = x.unit; // the unit of x's 15-bit view
    let x = x.x15;
    let mut sigma = match read_scale(rec).map(|s| s * alpha) {
        Some(s) if !s.is_zero() => s,
        _ => {
            // Empty (or gated below any scale): the write chooses it.
            mant.fill(0);
            if beta.is_zero() {
                rec.fill(0);
                return;
            }
            beta.abs() * unit
        }
    };
    // c = β 2^(ex + sx) / σ × 2^GUARD, to be used as a 15-bit mantissa
    // `c15 × 2^ce` (ce = c's exponent + 32 - C_BITS).
    let mut c = (beta * unit * sigma.recip()).shl(GUARD);
    // A write that dwarfs the old vector (ce > 0: c >= 2^15, the write at
    // least ~32 times the old vector; a slot written first with a weight
    // near 0, as Fejér's zeros give, or a gate near 0) moves the scale up
    // first: σ × 2^d, the old mantissas shifted right by d (rounded; the
    // final shift would drop those bits anyway), c × 2^-d. So no write is
    // shifted left and none leaves the i32. (d = 0 otherwise: no pass.)
    let drop = if c.is_zero() {
        0
    } else {
        (c.exponent() + 32 - C_BITS).max(0)
    };
    if drop > 0 {
        sigma = sigma.shl(drop);
        c = c.shl(-drop);
        mant.iter_mut()
            .for_each(|m| *m = shr_round(i32::from(*m), drop as u32) as i16);
    }
    // c's mantissa rounded to 15 bits (up to 2^15 itself) and the write's
    // right shift `rs`, rounded half up; a write shifted by 31 or more (at
    // most half a unit of the guard bits) is dropped.
    let c15 = ((c.mantissa() >> (31 - C_BITS)) + 1) >> 1;
    let rs = (-(c.exponent() + 32 - C_BITS)).max(0);
    let c15 = match (rs < 31, c.is_negative()) {
        (false, _) => 0,
        (true, true) => -(c15 as i32),
        (true, false) => c15 as i32,
    };
    // The shifts chosen once, so the loops have no branch: the write is
    // `(x15 c15 + w_half) >> rs`.
    let rs = rs.clamp(0, 30) as u32;
    let w_half = (1i32 << rs) >> 1;
    let n = |m: i16, x15: i32| -> i32 {
        // |x15| <= 2^15 (`Part::new`), so |x15 c15| <= 2^30; |m << 8| <
        // 2^23.
        (i32::from(m) << GUARD) + ((x15 * c15 + w_half) >> rs)
    };
    // The largest |n| (four values a step: `max_of_pairs`).
    let max = crate::fixed::wide::max_of_pairs(mant, x, |m, xi| n(m, xi).unsigned_abs());
    if max == 0 {
        mant.fill(0);
        rec.fill(0);
        return;
    }
    // The shift: the old mantissas kept exact while the largest lies in
    // [2^13, 2^15), else to [2^14, 2^15); one more where rounding would
    // reach 2^15. (`at15`: a right shift rounded, or an exact left shift.)
    let b = 32 - crate::fixed::wide::lz32(max) as i32;
    let mut s = if (GUARD + 14..=GUARD + 15).contains(&b) {
        GUARD
    } else {
        b - 15
    };
    if at15(max as i32, s) > S_MAX as i32 {
        s += 1;
    }
    // The largest now rounds to at most S_MAX (`max < 2^(s + 16)`: one
    // more bit of shift halves a rounded 2^15), and so does every |n|
    // (module docs): the mantissas need no clamp.
    debug_assert!(at15(max as i32, s) <= S_MAX as i32);
    // s in [-14, 17]: |n| + 2^16 stays below 2^31; a left shift (s < 0)
    // is of an |n| below 2^14.
    if s >= 0 {
        let half = (1i32 << s) >> 1;
        write_back(mant, x, |m, xi| (n(m, xi) + half) >> s);
    } else {
        write_back(mant, x, |m, xi| n(m, xi) << -s);
    }
    let sigma = sigma.shl(s - GUARD);
    rec[0] = sigma.exponent() + 32;
    rec[1] = sigma.mantissa() as i32;
}

/// `mant_i ← shifted(mant_i, x_i)` (within ±`S_MAX`: [`update`]'s shift).
#[inline(always)]
fn write_back(mant: &mut [i16], x: &[i32], shifted: impl Fn(i16, i32) -> i32) {
    // Four values a step (`for_each_pair`).
    crate::fixed::wide::for_each_pair(mant, x, |mi, xi| *mi = shifted(*mi, xi) as i16);
}

/// The softmax read of one query head (the module docs): `q` its part of
/// the block (exponent `eq`; replaced by its 15-bit view, taken once for
/// every slot), `qk` the logits' factor (`None`: 1),
/// `scales`, `hk`, `hv` its kv head's slots,
/// `logits` (`[M]`: the logits, then the slots' weights) and `acc` (`[V]`)
/// scratch; writes `o` (`[V]`) as a
/// normal block and returns its exponent (0 for zeros).
#[allow(clippy::too_many_arguments)]
pub(super) fn read(
    q: &mut [i32],
    eq: i32,
    qk: Option<Fx>,
    scales: &[i32],
    hk: &[i16],
    hv: &[i16],
    logits: &mut [i32],
    acc: &mut [i64],
    o: &mut [i32],
    clamps: &mut u32,
) -> i32 {
    // `max(1)`: a head has `K, V > 0` values, no chunk size of zero. Each
    // slot's record (four words: key scale, value scale), key and value.
    let (k, v) = (q.len().max(1), o.len().max(1));
    let recs = scales.as_chunks::<4>().0;
    let sq = to_view(q);
    let q = &*q;
    let mut lmax = i32::MIN;
    for ((l, key), rec) in logits.iter_mut().zip(hk.chunks_exact(k)).zip(recs) {
        // |q15 key| <= 2^30 per term, K < 2^20 terms: exact in i64.
        let dot: i64 = q
            .iter()
            .zip(key)
            .map(|(&a, &b)| i64::from(a) * i64::from(b))
            .sum();
        let lg = match read_scale(&rec[..2]) {
            Some(s) => {
                let l = Fx::from_i64(dot, eq + sq) * s;
                match qk {
                    Some(f) => (l * f).to_fixed(16),
                    None => l.to_fixed(16),
                }
            }
            None => 0,
        };
        if lg.unsigned_abs() > i32::MAX as u64 {
            *clamps = clamps.saturating_add(1);
        }
        *l = lg.clamp(-(i32::MAX as i64), i32::MAX as i64) as i32;
        lmax = lmax.max(*l);
    }
    let vmax = recs
        .iter()
        .take(logits.len())
        .filter_map(|rec| read_scale(&rec[2..]))
        .fold(Fx::ZERO, |a, s| if s.gt(a) { s } else { a });
    acc.fill(0);
    if vmax.is_zero() {
        o.fill(0);
        return 0;
    }
    let inv_vmax = vmax.recip();
    let mut total = Fx::ZERO;
    // Each slot's weight replaces its logit; a slot without a value scale
    // weighs 0 (adds nothing, as skipping it would).
    let mut n = 0;
    for ((l, rec), _) in logits.iter_mut().zip(recs).zip(hv.chunks_exact(v)) {
        // l - lmax in [-2^32, 0]: p in (0, 1].
        let p = Fx::from_i64(*l as i64 - lmax as i64, -16).exp();
        total = total.plus_nonneg(p); // both >= 0
                                      // p × σv / vmax in Q24: at most 2^24 (and a rounding), an i32 (the
                                      // clamp never acts).
        *l = match read_scale(&rec[2..]) {
            Some(sv) => (p * sv * inv_vmax)
                .to_fixed(24)
                .clamp(-(i32::MAX as i64), i32::MAX as i64) as i32,
            None => 0,
        };
        n += 1;
    }
    // The value sums a column at a time: `acc_j = Σ_m w_m x_mj` in a
    // register, each term an i32 × i16 product widened to i64 (`SMLAL` on
    // the Arm cores): the same exact sums as a slot at a time. |w x| <=
    // 2^24 × 2^15; M < 2^20 terms stay below 2^63.
    let ws = logits.get(..n).unwrap_or(&[]);
    for (j, a) in acc.iter_mut().enumerate().take(v) {
        *a = ws
            .iter()
            .zip(hv.chunks_exact(v))
            .map(|(&w, row)| i64::from(w) * i64::from(row.get(j).copied().unwrap_or(0)))
            .sum();
    }
    // o = acc × 2^-24 × vmax / total.
    let f = vmax * total.recip();
    let amax = acc.iter().map(|a| a.unsigned_abs()).max().unwrap_or(0);
    if amax == 0 || f.is_zero() {
        o.fill(0);
        return 0;
    }
    let s = bits(amax) - 30; // acc to 30 bits
    let f15 = (f.mantissa() >> 17) as i64; // [2^14, 2^15)
    let mut omax = 0u32;
    for (x, &a) in o.iter_mut().zip(acc.iter()) {
        let (m, _) = shift_i64(a, s); // |m| <= 2^30
        *x = ((m * f15 + (1 << 14)) >> 15) as i32;
        omax = omax.max(x.unsigned_abs());
    }
    // value = (x 2^15 / f15) 2^(s - 24) f15 2^(f.e + 17)
    normalize_with_max(o, s - 24 + f.exponent() + 17 + 15, omax)
}

/// The reads of every query head ([`read`]) into `o` (`[H V]`, `H` =
/// `q.len() / k`), aligned into one normal block as they come; returns its
/// exponent (0 for zeros). `scales`, `hk`, `hv` hold `slots` slots per kv
/// head (`group` query heads each; `dims = (k, v)`); only the first
/// `logits.len()` slots of each kv head are read. Each head's part of `q`
/// is replaced by its 15-bit view.
#[allow(clippy::too_many_arguments)]
pub(super) fn read_heads(
    q: &mut [i32],
    eq: i32,
    qk: Option<Fx>,
    dims: (usize, usize),
    group: usize,
    slots: usize,
    scales: &[i32],
    hk: &[i16],
    hv: &[i16],
    logits: &mut [i32],
    acc: &mut [i64],
    o: &mut [i32],
    clamps: &mut u32,
) -> Result<i32> {
    const HEAD: &str = "slot read out of its head";
    let (k, v) = dims;
    let live = logits.len().min(slots);
    let h = q.len() / k.max(1);
    let mut eo: Option<i32> = None;
    for head in 0..h {
        let g = head / group.max(1);
        let (done, rest) = split_mut(o, head * v, HEAD)?;
        let oh = part_mut(rest, ..v, HEAD)?;
        let at = g * slots;
        let e = read(
            part_mut(q, head * k..(head + 1) * k, HEAD)?,
            eq,
            qk,
            part(scales, at * 4..(at + live) * 4, HEAD)?,
            part(hk, at * k..(at + live) * k, HEAD)?,
            part(hv, at * v..(at + live) * v, HEAD)?,
            part_mut(logits, ..live, HEAD)?,
            acc,
            oh,
            clamps,
        );
        if oh.iter().all(|&x| x == 0) {
            continue;
        }
        match eo {
            Some(cur) if cur >= e => {
                let s = (cur - e).min(32) as u32;
                oh.iter_mut().for_each(|x| *x = shr_round(*x, s));
            }
            Some(cur) => {
                let s = (e - cur).min(32) as u32;
                done.iter_mut().for_each(|x| *x = shr_round(*x, s));
                eo = Some(e);
            }
            None => eo = Some(e),
        }
    }
    Ok(match eo {
        Some(e) => normalize(o, e),
        None => {
            o.fill(0);
            0
        }
    })
}

/// The largest magnitude an int16 slot state holds (`Session::state_max_abs`
/// of GSA and BLA): `slots` slot vectors of `k` keys and `v` values (the
/// scale records, the keys, the values, as the module docs lay them out),
/// then the q, k, v convolution rings of `channels` (width `conv_size`, 0
/// for none); 0 for a state too short.
pub(super) fn state_max_abs(
    state: &[i32],
    slots: usize,
    (k, v): (usize, usize),
    channels: [usize; 3],
    conv_size: u32,
) -> f32 {
    let n_scales = 4 * slots;
    let (kw, vw) = ((slots * k).div_ceil(2), (slots * v).div_ceil(2));
    let (Some(scales), Some(hk), Some(hv)) = (
        state.get(..n_scales),
        state.get(n_scales..n_scales + kw),
        state.get(n_scales + kw..n_scales + kw + vw),
    ) else {
        return 0.0;
    };
    let (hk, hv): (&[i16], &[i16]) = (bytemuck::cast_slice(hk), bytemuck::cast_slice(hv));
    let mut top = slots_max_abs(scales, hk, hv, k, v);
    if conv_size > 0 {
        let rings = state.get(n_scales + kw + vw..).unwrap_or(&[]);
        let x = super::conv_int::rings_max_abs(rings, channels, conv_size);
        if x.gt(top) {
            top = x;
        }
    }
    f32::from_bits(top.to_f32_bits())
}

/// The largest magnitude of `slots` slot vectors of `k` keys and `v`
/// values (`scales` their records, four words a slot): each vector's
/// largest mantissa times its scale.
fn slots_max_abs(scales: &[i32], hk: &[i16], hv: &[i16], k: usize, v: usize) -> Fx {
    let mut top = Fx::ZERO;
    let max16 = |x: &[i16]| x.iter().fold(0u16, |a, e| a.max(e.unsigned_abs()));
    for (slot, rec) in scales.chunks_exact(4).enumerate() {
        for (part, dim, all) in [(0, k, hk), (2, v, hv)] {
            if let (Some(s), Some(x)) = (
                read_scale(&rec[part..part + 2]),
                all.get(slot * dim..(slot + 1) * dim),
            ) {
                let x = s * Fx::from_i64(max16(x) as i64, 0);
                if x.gt(top) {
                    top = x;
                }
            }
        }
    }
    top
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::fixed::testing::{block_of, fx64, Rng};
    use std::vec;
    use std::vec::Vec;

    fn slot64(mant: &[i16], rec: &[i32]) -> Vec<f64> {
        let s = read_scale(rec).map_or(0.0, fx64);
        mant.iter().map(|&m| m as f64 * s).collect()
    }

    /// The stated tolerance (docs/integer-path.md): a slot vector after
    /// 2,000 updates `h ← α h + (1 - α) x` with random gates (α in 0.5 to
    /// 0.9999, and runs of α near 1) and inputs whose magnitude varies 64x,
    /// against the f64 recurrence on the same inputs, relative to its
    /// largest magnitude so far: within 2^-12 while α is in 0.5-0.99,
    /// within 2^-9 while α is in 0.9998-1 (and 50 tokens after: each token
    /// rounds its write to a 16-bit unit, and a gate that near 1 keeps
    /// ~5,000 tokens' roundings).
    #[test]
    fn slot_updates_track_the_f64_recurrence() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut worst = [0f64; 2];
        for case in 0..20 {
            let d = [4, 16, 32, 64][case % 4];
            let mut mant = vec![0i16; d];
            let mut rec = [0i32; 2];
            let mut exact = vec![0f64; d];
            let mut top = 0f64;
            for t in 0..2000 {
                let amp = 2f64.powi(((t / 100 + case) % 7) as i32 - 3);
                let x: Vec<f64> = (0..d).map(|_| amp * rng.next()).collect();
                let a = if (t / 300) % 2 == 0 {
                    0.5 + 0.49 * (rng.next() + 1.0) / 2.0
                } else {
                    1.0 - 1e-4 * (rng.next() + 1.0)
                };
                let alpha = Fx::from_i64((a * 2f64.powi(40)).round() as i64, -40);
                let a = fx64(alpha);
                let (xm, xe) = block_of(&x);
                update(
                    &mut mant,
                    &mut rec,
                    &Part::new(&mut xm.clone(), xe),
                    alpha,
                    Fx::ONE - alpha,
                );
                let xq: Vec<f64> = xm.iter().map(|&m| m as f64 * 2f64.powi(xe)).collect();
                for (e, xi) in exact.iter_mut().zip(&xq) {
                    *e = a * *e + (1.0 - a) * xi;
                }
                top = exact.iter().fold(top, |m, e| m.max(e.abs()));
                let got = slot64(&mant, &rec);
                let err = got
                    .iter()
                    .zip(&exact)
                    .map(|(g, e)| (g - e).abs())
                    .fold(0.0, f64::max)
                    / top;
                // The slow gates' error and the 50 tokens after them (it decays).
                let slow = (t / 300) % 2 == 1 || (t >= 300 && t % 300 < 50);
                worst[usize::from(slow)] = worst[usize::from(slow)].max(err);
                let bound = if slow { 2f64.powi(-9) } else { 2f64.powi(-12) };
                assert!(err <= bound, "case {case} t {t}: {err:e}");
            }
        }
        std::println!(
            "worst slot error: fast gates {:.3e}, slow {:.3e}",
            worst[0],
            worst[1]
        );
    }

    /// Softmax over slots in f64 of the dequantized slots.
    fn read64(q: &[f64], keys: &[Vec<f64>], values: &[Vec<f64>]) -> Vec<f64> {
        let l: Vec<f64> = keys
            .iter()
            .map(|k| q.iter().zip(k).map(|(a, b)| a * b).sum())
            .collect();
        let max = l.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = l.iter().map(|x| (x - max).exp()).collect();
        let sum: f64 = p.iter().sum();
        (0..values[0].len())
            .map(|i| p.iter().zip(values).map(|(p, v)| p * v[i]).sum::<f64>() / sum)
            .collect()
    }

    /// The stated tolerance (docs/integer-path.md): the softmax read
    /// against f64 over the same slots, within 2^-12 of the largest value
    /// (200 random heads, 1-64 slots, K and V 4-64, slot scales differing
    /// up to 16x, some slots empty).
    #[test]
    fn the_slot_read_matches_f64() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut worst = 0f64;
        for case in 0..200 {
            let slots = 1 + case % 64;
            let (k, v) = ([4, 16, 32, 64][case % 4], [8, 64, 4, 32][case % 4]);
            let amp = [0.3, 1.0, 4.0][case % 3];
            let mut clamps = 0;
            let mut scales = vec![0i32; 4 * slots];
            let mut hk = vec![0i16; slots * k];
            let mut hv = vec![0i16; slots * v];
            for s in 0..slots {
                if case % 7 == 3 && s % 3 == 0 {
                    continue; // an empty slot: logit 0, value 0
                }
                let ks: Vec<f64> = (0..k)
                    .map(|_| amp * rng.next() / (1 + s % 4) as f64)
                    .collect();
                let vs: Vec<f64> = (0..v).map(|_| rng.next() * (1 + s % 4) as f64).collect();
                let (rk, rv) = scales[4 * s..4 * s + 4].split_at_mut(2);
                for (x, mant, rec) in [
                    (&ks, &mut hk[s * k..(s + 1) * k], rk),
                    (&vs, &mut hv[s * v..(s + 1) * v], rv),
                ] {
                    let (m, e) = block_of(x);
                    update(mant, rec, &Part::new(&mut m.clone(), e), Fx::ZERO, Fx::ONE);
                }
            }
            let qf: Vec<f64> = (0..k).map(|_| amp * rng.next()).collect();
            let (qm, qe) = block_of(&qf);
            let keys: Vec<Vec<f64>> = (0..slots)
                .map(|s| slot64(&hk[s * k..(s + 1) * k], &scales[4 * s..4 * s + 2]))
                .collect();
            let values: Vec<Vec<f64>> = (0..slots)
                .map(|s| slot64(&hv[s * v..(s + 1) * v], &scales[4 * s + 2..4 * s + 4]))
                .collect();
            let qd: Vec<f64> = qm.iter().map(|&m| m as f64 * 2f64.powi(qe)).collect();
            let want = read64(&qd, &keys, &values);
            let mut logits = vec![0i32; slots];
            let mut acc = vec![0i64; v];
            let mut o = vec![0i32; v];
            let e = read(
                &mut qm.clone(),
                qe,
                None,
                &scales,
                &hk,
                &hv,
                &mut logits,
                &mut acc,
                &mut o,
                &mut clamps,
            );
            assert_eq!(clamps, 0);
            let vmax = values.iter().flatten().fold(0f64, |a, x| a.max(x.abs()));
            let err = o
                .iter()
                .zip(&want)
                .map(|(&g, w)| (g as f64 * 2f64.powi(e) - w).abs())
                .fold(0.0, f64::max)
                / vmax.max(1e-30);
            worst = worst.max(err);
            assert!(err <= 2f64.powi(-12), "case {case}: {err:e}");
        }
        std::println!("worst read error {worst:.3e}");
    }

    /// A slot first written with a weight near zero (Fejér's zeros: phi
    /// ~1e-12), then with ordinary ones: the write that dwarfs it moves the
    /// scale up instead of saturating; within 2^-14 of the f64 recurrence
    /// (`α = 1`).
    #[test]
    fn a_write_that_dwarfs_the_slot_moves_its_scale() {
        let mut rng = Rng(0x0dd_ba11);
        let d = 16;
        for tiny in [1e-12, 1e-6, -3e-9] {
            let (mut mant, mut rec, mut exact) = (vec![0i16; d], [0i32; 2], vec![0f64; d]);
            for (t, w) in [tiny, 0.3, -0.2, 0.5, tiny, 0.1].into_iter().enumerate() {
                let x: Vec<f64> = (0..d).map(|_| rng.next()).collect();
                let (xm, xe) = block_of(&x);
                let beta = Fx::from_i64((w * 2f64.powi(60)).round() as i64, -60);
                update(
                    &mut mant,
                    &mut rec,
                    &Part::new(&mut xm.clone(), xe),
                    Fx::ONE,
                    beta,
                );
                for (e, &m) in exact.iter_mut().zip(&xm) {
                    *e += fx64(beta) * m as f64 * 2f64.powi(xe);
                }
                let top = exact.iter().fold(0f64, |a, e| a.max(e.abs()));
                let got = slot64(&mant, &rec);
                let err = got
                    .iter()
                    .zip(&exact)
                    .map(|(g, e)| (g - e).abs())
                    .fold(0.0, f64::max);
                assert!(
                    err <= 2f64.powi(-14) * top,
                    "{tiny} t {t}: {err:e} of {top}"
                );
            }
        }
    }

    #[test]
    fn a_zeroed_state_reads_zeros() {
        let (k, v, slots) = (8, 4, 3);
        let scales = vec![0i32; 4 * slots];
        let (hk, hv) = (vec![0i16; slots * k], vec![0i16; slots * v]);
        let (mut logits, mut acc, mut o) = (vec![0; slots], vec![0i64; v], vec![5i32; v]);
        let q = vec![1 << 29; k];
        let mut clamps = 0;
        let e = read(
            &mut q.clone(),
            0,
            None,
            &scales,
            &hk,
            &hv,
            &mut logits,
            &mut acc,
            &mut o,
            &mut clamps,
        );
        assert_eq!((e, o, clamps), (0, vec![0; v], 0));
    }
}
