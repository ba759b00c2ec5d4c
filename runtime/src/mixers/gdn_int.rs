//! GDN's integer step (state format int16, the integer token path:
//! docs/integer-path.md): the maths of docs/spec.md §3.1 on blocks and
//! 16-bit state mantissas, every step in integer code.
//!
//! **State** (words, in this order):
//!
//! ```text
//! per value head j: [ E_j: i32 | f_j: u32 | M_j: u32 ]     the head's scale; the OR of its mantissas' magnitudes
//! S: [HV][V][K] i16 mantissas (padded to a word)           S_j = mantissa × f_j × 2^(E_j - 32)
//! q, k, v convolution windows (mixers::conv_int), when conv_size > 0
//! ```
//!
//! Each head's scale `σ_j = f_j 2^(E_j - 32)` (`f_j` in `[2^31, 2^32)`)
//! carries the decay: `σ_j ← g_j σ_j` is one scalar product per head and
//! token, exact to 2^-31, so no mantissa is rounded by a decay, however
//! close to 1 it is (a per-element 16-bit decay would stop decaying values
//! below `0.5 / (1 - g)` units). Writes enter at the current scale; before
//! a token's update the head is shifted by whole bits (the shift folded
//! into the first pass over S) so that the larger of its last largest
//! mantissa and this token's `v / σ_j` lies in `[2^12, 2^14)` (the head
//! keeps `M_j`, the OR of its mantissas' magnitudes after the last update,
//! whose top bit is the largest's):
//! 12-14 significant bits, and room for the update to double the largest
//! mantissa before it clamps at ±32767 (each clamp is counted). `M_j = 0`
//! marks an empty head (a new or reset state): its first write chooses the
//! scale.
//!
//! **Per token**: q, k, v, the gates, decay and beta from the products
//! (blocks); the convolutions and SiLUs (`conv_int`); q and k per head to
//! unit vectors in Q14 (q times `1/sqrt(K)`); then per value head and row
//! `r` of S, two passes over the row as in the f32 step:
//!
//! ```text
//! pass 1: S_rc <<= shift (or >>, rounded);  sk = Σ_c S_rc k_c            (exact: i32 per 4 columns, i64)
//!         w = beta (v_r/σ - sk / 2^14)   (delta rule; additive: beta v_r/σ)  clamped to ±(2^17 - 1)
//! pass 2: S_rc += round(w k_c / 2^14), clamped to ±32767;  o_r = Σ_c S_rc q_c   (exact in i32)
//! ```
//!
//! then the head's RMSNorm, `o_norm` and the SiLU gate, and `o_proj`.

use super::gdn_config::{GdnConfig, GdnDecay, QkActivation, QkNorm, HEAD_WORDS};
use super::{conv_int, product, StepCtx};
use crate::error::{part, Error, Result, Rows};
use crate::fixed::activation::{exp_neg_q16, sigmoid_q15, silu15, silu_block, to_q16};
use crate::fixed::block::{
    max_abs, normalize, normalize_with_max, shr_round, Block, F32Bits, TO_15, ZERO_EXP,
};
use crate::fixed::Fx;
use crate::format::Role;
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

/// A head whose largest mantissa (with this token's writes) reaches this is
/// shifted right before its update.
const HIGH: u64 = 1 << 14;
/// A head whose largest mantissa stays below this is shifted left.
const LOW: u64 = 1 << 12;
/// Largest update factor `w` (so that `w k` with `|k| <= 2^14` fits an i32).
const W_MAX: i64 = (1 << 17) - 1;
/// Largest state mantissa.
const S_MAX: i32 = i16::MAX as i32;
/// q and k are unit vectors in Q14.
const UNIT: i32 = 1 << 14;
/// The l2norm epsilon of docs/spec.md (1e-6, as the f32 step has it).
const L2_EPS: Fx = Fx::from_f32_bits(1e-6f32.to_bits());

/// Bits of `v` (`v` in `[2^(b-1), 2^b)`; 0 for 0).
#[inline]
fn bits(v: u64) -> i32 {
    64 - crate::fixed::wide::lz64(v) as i32
}

/// A factor `F` as a 16-bit mantissa and a right shift: `x F ≈ (x m) >> s`
/// for `|x| <= 2^15` (so that `x m` fits an i32).
#[derive(Clone, Copy)]
struct Factor {
    m: i32,
    s: i32,
}

impl Factor {
    fn new(f: Fx) -> Factor {
        if f.is_zero() {
            return Factor { m: 0, s: 0 };
        }
        let m = (f.mantissa() >> 16) as i32; // [2^15, 2^16)
        Factor {
            m: if f.is_negative() { -m } else { m },
            s: -(f.exponent() + 16),
        }
    }

    /// `x F`, rounded; saturated to `±i32::MAX` where a left shift would
    /// overflow.
    #[inline(always)]
    fn apply(self, x: i32) -> i32 {
        let p = x * self.m;
        if self.s >= 0 {
            shr_round(p, self.s as u32)
        } else {
            let wide = (p as i64) << (-self.s).min(32);
            wide.clamp(-(i32::MAX as i64), i32::MAX as i64) as i32
        }
    }
}

/// Scales one q or k head (a slice of a normal block with exponent `e`) to
/// `extra` times its unit vector in Q14 (`qk_norm` l2 or sum).
fn unit_q14(m: &mut [i32], e: i32, norm: QkNorm, extra: Fx) {
    let max = max_abs(m);
    if max == 0 {
        return;
    }
    // The head's own 15-bit view (a head may be far smaller than the block).
    let sh = bits(max as u64) - 15;
    for v in m.iter_mut() {
        *v = if sh >= 0 {
            shr_round(*v, sh as u32)
        } else {
            *v << -sh
        };
    }
    let e = e.saturating_add(sh);
    // The norm in units of the head's own mantissas: `1 / ||m 2^e||` times
    // `2^e`, i.e. the epsilon moved by `2^-e` instead of the sum by `2^e`
    // (exact, so the same bits), so that the result is a unit vector
    // whatever `e` — even an exponent read from a hostile state.
    let inv = match norm {
        QkNorm::Sum => {
            let s1: u64 = m.iter().map(|v| v.unsigned_abs() as u64).sum();
            let n1 = Fx::from_u64(s1, 0, false);
            let floor = Fx::from_f32_bits(1e-6f32.to_bits()).shl(e.saturating_neg());
            if n1.gt(floor) { n1 } else { floor }.recip()
        }
        _ => {
            let ss: u64 = m
                .iter()
                .map(|v| (v.unsigned_abs() * v.unsigned_abs()) as u64)
                .sum();
            (Fx::from_u64(ss, 0, false) + L2_EPS.shl(e.saturating_mul(-2))).rsqrt()
        }
    };
    let f = Factor::new((inv * extra).shl(14));
    for v in m.iter_mut() {
        *v = f.apply(*v).clamp(-UNIT, UNIT);
    }
}

/// q/k activations other than SiLU (which the convolution applies).
fn activate(m: &mut [i32], e: i32, act: QkActivation) -> i32 {
    match act {
        QkActivation::Silu | QkActivation::Identity => e,
        QkActivation::Relu => {
            m.iter_mut().for_each(|v| *v = (*v).max(0));
            normalize(m, e)
        }
        QkActivation::EluPlusOne => {
            // In Q16: x + 1 above 0, e^x below.
            for v in m.iter_mut() {
                let t = to_q16(*v, e);
                *v = if t > 0 {
                    t.saturating_add(1 << 16)
                } else {
                    exp_neg_q16(t.unsigned_abs()) as i32
                };
            }
            normalize(m, -16)
        }
    }
}

/// Reads `(E, f, M)` of a head.
fn head_scale(rec: &[i32]) -> (Option<Fx>, u32) {
    let [e, f, m, ..] = *rec else {
        return (None, 0); // not reached: a record has three words
    };
    let (f, m) = (f as u32, m as u32);
    if m == 0 || f < 1 << 31 {
        return (None, 0);
    }
    let e = crate::fixed::stored_exponent(e) - 32;
    (Some(Fx::from_normal(f, e, false)), m)
}

/// The integer step of a GDN layer (see the module docs).
#[allow(clippy::too_many_arguments)]
pub(crate) fn step(
    c: &GdnConfig,
    ctx: &StepCtx,
    w: &LayerWeights<'_>,
    state: &mut [f32],
    scratch: &mut [f32],
    act: &mut ActBuf<'_>,
    x: Block<'_>,
    out: &mut [i32],
    clamps: &mut u32,
) -> Result<i32> {
    let (h, hv, k, v) = (
        c.num_heads as usize,
        c.num_v_heads as usize,
        c.head_k_dim as usize,
        c.head_v_dim as usize,
    );
    let width = c.conv_size as usize;
    let scratch: &mut [i32] = bytemuck::cast_slice_mut(scratch);
    let too_small = Error::Internal("gdn scratch too small");
    let (q, rest) = scratch.split_at_mut_checked(h * k).ok_or(too_small)?;
    let (kk, rest) = rest.split_at_mut_checked(h * k).ok_or(too_small)?;
    let (vv, rest) = rest.split_at_mut_checked(hv * v).ok_or(too_small)?;
    let (g, rest) = rest.split_at_mut_checked(hv * v).ok_or(too_small)?;
    let (o, rest) = rest.split_at_mut_checked(hv * v).ok_or(too_small)?;
    let (a, rest) = rest.split_at_mut_checked(hv).ok_or(too_small)?;
    let b = rest.get_mut(..hv).ok_or(too_small)?;

    let xin = act.input_int(x)?;
    let mut eq = w.get(Role::QProj)?.matvec_int(&xin, q)?;
    let mut ek = w.get(Role::KProj)?.matvec_int(&xin, kk)?;
    let mut ev = w.get(Role::VProj)?.matvec_int(&xin, vv)?;
    let gated = matches!(c.decay, GdnDecay::Gated);
    let ea = if gated {
        w.get(Role::AProj)?.matvec_int(&xin, a)?
    } else {
        ZERO_EXP
    };
    let eb = if c.use_beta {
        w.get(Role::BProj)?.matvec_int(&xin, b)?
    } else {
        ZERO_EXP
    };
    let eg = if c.use_gate {
        w.get(Role::GProj)?.matvec_int(&xin, g)?
    } else {
        ZERO_EXP
    };

    // The state's parts.
    let state: &mut [i32] = bytemuck::cast_slice_mut(state);
    let bad_state = Error::Internal("gdn state of the wrong size");
    let (heads, rest) = state
        .split_at_mut_checked(hv * HEAD_WORDS as usize)
        .ok_or(bad_state)?;
    let (s_words, convs) = rest
        .split_at_mut_checked((hv * v * k).div_ceil(2))
        .ok_or(bad_state)?;
    let s_all: &mut [i16] = bytemuck::cast_slice_mut(s_words);

    let qk_silu = matches!(c.qk_activation, QkActivation::Silu);
    if width > 0 {
        let qk_words = conv_int::state_words((h * k) as u64, c.conv_size) as usize;
        let (cq, rest) = convs.split_at_mut_checked(qk_words).ok_or(bad_state)?;
        let (ck, cv) = rest.split_at_mut_checked(qk_words).ok_or(bad_state)?;
        let conv = |role| w.get(role);
        eq = conv_int::step(&conv(Role::QConv)?, width, cq, ctx.pos, q, eq, qk_silu)?;
        ek = conv_int::step(&conv(Role::KConv)?, width, ck, ctx.pos, kk, ek, qk_silu)?;
        ev = conv_int::step(&conv(Role::VConv)?, width, cv, ctx.pos, vv, ev, true)?;
    } else {
        if qk_silu {
            eq = silu_block(q, eq);
            ek = silu_block(kk, ek);
        }
        ev = silu_block(vv, ev);
    }
    eq = activate(q, eq, c.qk_activation);
    ek = activate(kk, ek, c.qk_activation);

    let q_extra = Fx::from_i64(k as i64, 0).rsqrt();
    // `k`, `v` and `h` are nonzero (checked at load); the `max(1)`s state
    // it, so no chunk size or division below has a panic branch.
    let (k, v) = (k.max(1), v.max(1));
    for (qh, kh) in Rows(q.chunks_exact_mut(k)).zip(kk.chunks_exact_mut(k)) {
        unit_q14(qh, eq, c.qk_norm, q_extra);
        unit_q14(kh, ek, c.qk_norm, Fx::ONE);
    }

    let (a_log, dt_bias) = if gated {
        (
            Some(w.get(Role::ALog)?.stored_vector()?),
            Some(w.get(Role::DtBias)?.stored_vector()?),
        )
    } else {
        (None, None)
    };
    let o_norm = w.get(Role::ONorm)?.stored_vector()?;
    let eps = Fx::from_f32_bits(ctx.norm_eps.to_bits());
    let group = (hv / h.max(1)).max(1);
    let beta_scale: i64 = if c.allow_neg_eigval { 2 } else { 1 };
    // Each value head's record, S, values, output, gate, a and b (`hv` of
    // each: the state and scratch were sized so).
    let per_head = heads
        .as_chunks_mut::<3>()
        .0
        .iter_mut()
        .zip(s_all.chunks_exact_mut((v * k).max(1)))
        .zip(vv.chunks_exact(v))
        .zip(o.chunks_exact_mut(v))
        .zip(g.chunks_exact(v))
        .zip(a.iter_mut().zip(b.iter()))
        .take(hv);
    for (j, (((((rec, s), vj), oj), gj), (aj, &bj))) in per_head.enumerate() {
        let beta = beta_scale
            * if c.use_beta {
                sigmoid_q15(to_q16(bj, eb)) as i64
            } else {
                1 << 15
            };
        let decay = match (&a_log, &dt_bias) {
            (Some(al), Some(dt)) => {
                let z = Fx::from_i64(*aj as i64, ea) + Fx::from_f32_bits(dt.bits(j));
                let rate = Fx::from_f32_bits(al.bits(j)).exp();
                (-(rate * z.softplus())).exp()
            }
            _ => match c.decay {
                GdnDecay::Retention => Fx::ONE - Fx::pow2((-5i32).saturating_sub(j as i32)),
                _ => Fx::ONE,
            },
        };
        let at = (j / group) * k;
        let head = Head {
            s,
            rec,
            q: part(q, at..at + k, "gdn query head")?,
            k: part(kk, at..at + k, "gdn key head")?,
            v: Block { m: vj, e: ev },
            o: &mut *oj,
        };
        let sigma = head.update(decay, beta, c.delta_rule, clamps);
        // The head's output, normed and gated, with its exponent in a[j]
        // (a and b are not read again).
        let gate = c.use_gate.then_some(Block { m: gj, e: eg });
        *aj = norm_head(oj, sigma, &o_norm, gate, eps);
    }
    // One block of all heads: each to the largest head exponent.
    let top = a.iter().copied().max().unwrap_or(ZERO_EXP);
    let mut max = 0u32;
    for (oh, &aj) in o.chunks_exact_mut(v).zip(a.iter()) {
        let d = (top - aj).clamp(0, 32) as u32;
        for e in oh.iter_mut() {
            *e = shr_round(*e, d);
            max = max.max(e.unsigned_abs());
        }
    }
    let eo = normalize_with_max(o, top, max);
    let oin = act.input_int(Block { m: o, e: eo })?;
    w.get(Role::OProj)?.matvec_int(&oin, out)
}

/// The largest magnitude a state of this layout holds, as f32 (for
/// inspection: `Session::state_max_abs`): each head's largest mantissa
/// times its scale, and each convolution slot's.
pub(crate) fn state_max_abs(c: &GdnConfig, state: &[i32]) -> f32 {
    let (h, hv, k, v) = (
        c.num_heads as u64,
        c.num_v_heads as u64,
        c.head_k_dim as u64,
        c.head_v_dim as u64,
    );
    let heads = (hv * HEAD_WORDS) as usize;
    let s_words = product(&[hv, v, k]).div_ceil(2) as usize;
    let s_all: &[i16] = state
        .get(heads..heads + s_words)
        .map_or(&[], |w| bytemuck::cast_slice(w));
    let mut top = Fx::ZERO;
    for (j, rec) in state.chunks_exact(3).take(hv as usize).enumerate() {
        if let (Some(sg), _) = head_scale(rec) {
            let m = s_all
                .iter()
                .skip(j * (v * k) as usize)
                .take((v * k) as usize)
                .fold(0u32, |a, e| a.max(e.unsigned_abs() as u32));
            let x = sg * Fx::from_i64(m as i64, 0);
            if x.gt(top) {
                top = x;
            }
        }
    }
    let mut at = heads + s_words;
    if c.conv_size > 0 {
        for ch in [h * k, h * k, hv * v] {
            let words = conv_int::state_words(ch, c.conv_size) as usize;
            if let Some(ring) = state.get(at..at + words) {
                let x = conv_int::max_abs(ring, ch as usize, c.conv_size as usize);
                if x.gt(top) {
                    top = x;
                }
            }
            at += words;
        }
    }
    f32::from_bits(top.to_f32_bits())
}

/// One value head's part of the step.
struct Head<'s> {
    /// Its S, `[V][K]` mantissas.
    s: &'s mut [i16],
    /// Its scale record `E, f, M`.
    rec: &'s mut [i32; 3],
    /// Its q head (Q14, times `1/sqrt(K)`) and k head (Q14 unit).
    q: &'s [i32],
    k: &'s [i32],
    /// Its values (a slice of the v block).
    v: Block<'s>,
    /// Its output `S q` (mantissa times `σ 2^-14`).
    o: &'s mut [i32],
}

impl Head<'_> {
    /// Decays, updates S and writes `o = S q`; returns the head's scale σ
    /// (`o_r = o[r] σ 2^-14`), zero for an empty head.
    fn update(self, decay: Fx, beta: i64, delta_rule: bool, clamps: &mut u32) -> Fx {
        let Head { s, rec, q, k, v, o } = self;
        // `max(1)`: a head has `K > 0` columns; no chunk size of zero.
        let kd = k.len().max(1);
        let (old, m_s) = head_scale(rec);
        // The decay is the scale's: no mantissa changes.
        let mut sigma = old.map(|sg| sg * decay).filter(|sg| !sg.is_zero());
        if sigma.is_none() && m_s != 0 {
            // Decayed below any representable scale: the head is empty.
            s.fill(0);
        }
        let m_s = if sigma.is_some() { m_s } else { 0 };
        let vmax = max_abs(v.m) as u64;
        if vmax == 0 && m_s == 0 {
            o.fill(0);
            *rec = [0, 0, 0];
            return Fx::ZERO;
        }
        // v / σ in mantissa units, and the head's shift before its update.
        let mut shift = 0i32;
        let sg = match sigma {
            None => {
                // An empty head: the scale that puts max |v / σ| in [2^12, 2^13).
                Fx::pow2(bits(vmax) + v.e - 13)
            }
            Some(sg) => {
                // max |v / σ| from the 15-bit view of the largest v.
                let f = Factor::new(Fx::pow2(v.e + TO_15 as i32) * sg.recip());
                let p = (vmax >> TO_15) * f.m.unsigned_abs() as u64;
                let vtop = if f.s >= 0 {
                    p >> f.s.min(63)
                } else {
                    p << (-f.s).min(30)
                };
                let top = (m_s as u64).max(vtop);
                if top >= HIGH {
                    shift = bits(top) - 14; // top >> shift in [2^13, 2^14)
                } else if top < LOW && top > 0 {
                    shift = bits(top) - 13; // negative: into [2^12, 2^13)
                }
                sg.shl(shift)
            }
        };
        sigma = Some(sg);
        let fv = Factor::new(Fx::pow2(v.e + TO_15 as i32) * sg.recip());
        // Simple passes over the head (few live values: the M0 has eight
        // low registers), `o` holding each row's scalar in between.
        if shift > 0 {
            s.iter_mut()
                .for_each(|e| *e = shr_round(i32::from(*e), shift as u32) as i16);
        } else if shift < 0 {
            let l = (-shift).min(15);
            s.iter_mut().for_each(|e| *e = (i32::from(*e) << l) as i16);
        }
        // S k per row, exactly: i32 per 4 columns (|Σ_4 S k| <= 2 · 2^15 ·
        // 2^14 by Cauchy-Schwarz, k a unit vector), then i64.
        for ((row, &vm), or) in s.chunks_exact(kd).zip(v.m).zip(o.iter_mut()) {
            let u = if delta_rule {
                let mut sk = 0i64;
                for (rc, kc) in row.chunks(4).zip(k.chunks(4)) {
                    let part: i32 = rc.iter().zip(kc).map(|(&e, &kv)| i32::from(e) * kv).sum();
                    sk += part as i64;
                }
                fv.apply(vm >> TO_15) as i64 - ((sk + (1 << 13)) >> 14)
            } else {
                fv.apply(vm >> TO_15) as i64
            };
            *or = ((u * beta) >> 15).clamp(-W_MAX, W_MAX) as i32;
        }
        // The write (|w k| < 2^31 - 2^14: the rounding fits) and S q
        // (|Σ S q| < 2^29: q is a unit vector over sqrt(K)).
        let mut count = 0u32;
        let new_max = write_rows(s, kd, o, k, q, &mut count);
        *clamps = clamps.saturating_add(count);
        let sg = sigma.unwrap_or(Fx::ZERO);
        *rec = [sg.exponent() + 32, sg.mantissa() as i32, new_max as i32];
        if new_max == 0 {
            *rec = [0, 0, 0];
        }
        sg
    }
}

/// The delta write and `S q` of a head ([`Head::update`]): row `r` of `s`
/// (`kd` columns) gains `w_r k` rounded (`w_r = o[r]`, `|w_r k| < 2^31 -
/// 2^14`: the rounding fits), clamped to ±32767 (each clamp counted in
/// `count`), and `o[r]` becomes the row times `q` (`|Σ S q| < 2^29`: q is a
/// unit vector over sqrt(K)). Returns the OR of the new values' magnitudes:
/// the same top bit as their maximum (the head's shift decisions read only
/// that), one instruction cheaper.
#[inline(always)]
fn write_rows(
    s: &mut [i16],
    kd: usize,
    o: &mut [i32],
    k: &[i32],
    q: &[i32],
    count: &mut u32,
) -> u32 {
    let mut new_max = 0u32;
    for (row, or) in s.chunks_exact_mut(kd).zip(o.iter_mut()) {
        let wr = *or;
        let write = |kv: i32| (wr * kv + (1 << 13)) >> 14; // |.| < 2^17
                                                           // The row without the clamp: an OR of magnitudes within S_MAX
                                                           // (2^15 - 1, all ones) is within it exactly when every one is, so
                                                           // then the row took no clamp, and `sq` and the OR are the clamped
                                                           // row's.
        let (mut sq, mut row_or) = (0i32, 0u32);
        for ((e, &kv), &qv) in row.iter_mut().zip(k).zip(q) {
            let x = i32::from(*e) + write(kv);
            *e = x as i16;
            sq = sq.wrapping_add(x.wrapping_mul(qv));
            row_or |= x.unsigned_abs();
        }
        if row_or > S_MAX as u32 {
            // Some value left the int16 range: the row again, clamped, from
            // its old values (`x as i16` kept them mod 2^16).
            (sq, row_or) = (0, 0);
            for ((e, &kv), &qv) in row.iter_mut().zip(k).zip(q) {
                let w = write(kv);
                let old = (i32::from(*e) - w) as i16;
                let mut x = i32::from(old) + w;
                if !(-S_MAX..=S_MAX).contains(&x) {
                    x = x.clamp(-S_MAX, S_MAX);
                    *count += 1;
                }
                *e = x as i16;
                sq += x * qv;
                row_or |= x.unsigned_abs();
            }
        }
        new_max |= row_or;
        *or = sq;
    }
    new_max
}

/// RMSNorm of one head's output `o_r σ 2^-14` over its `V` values (eps
/// `eps`), times `o_norm` and the SiLU gate: in place, returns the
/// exponent (the values below 2^31, not normal).
fn norm_head(
    o: &mut [i32],
    sigma: Fx,
    o_norm: &F32Bits<'_>,
    gate: Option<Block<'_>>,
    eps: Fx,
) -> i32 {
    let omax = max_abs(o);
    if omax == 0 || sigma.is_zero() {
        o.fill(0);
        return i32::MIN / 2;
    }
    let sh = bits(omax as u64) - 15;
    for e in o.iter_mut() {
        *e = if sh >= 0 {
            shr_round(*e, sh as u32)
        } else {
            *e << -sh
        };
    }
    // value_r = u_r × fo.
    let fo = sigma.shl(sh - 14);
    let ss: u64 = o
        .iter()
        .map(|u| (u.unsigned_abs() * u.unsigned_abs()) as u64)
        .sum();
    let mean = Fx::from_u64(ss, 0, false) * Fx::from_i64(o.len() as i64, 0).recip() * fo * fo;
    let f = Factor::new(((mean + eps).rsqrt() * fo).shl(15));
    let we = o_norm.exp15();
    let (bits, base) = o_norm.raw();
    match gate {
        // Every trained norm weight (the largest at least 2^-110) and a
        // gate of `V` values: the weight by `decode_wide` (`at15`'s bits),
        // the gate without a lookup an element, one loop a case.
        Some(gb)
            if base >= F32Bits::WIDE_BASE && bits.len() >= o.len() && gb.m.len() >= o.len() =>
        {
            for ((e, &b), &g) in o.iter_mut().zip(bits).zip(gb.m) {
                let t = (*e * F32Bits::decode_wide(b, base)) >> 15;
                *e = f.apply((t * silu15(g, gb.e)) >> 15);
            }
        }
        None if base >= F32Bits::WIDE_BASE && bits.len() >= o.len() => {
            for (e, &b) in o.iter_mut().zip(bits) {
                *e = f.apply((*e * F32Bits::decode_wide(b, base)) >> 15);
            }
        }
        _ => {
            for (c, e) in o.iter_mut().enumerate() {
                // u (15 bits) times the weight (15 bits): 30 bits, then its
                // 15-bit view.
                let mut t = (*e * o_norm.at15(c)) >> 15;
                if let Some(gb) = gate {
                    // `get`: the gate has `V` values (a slice of the gate block).
                    t = (t * silu15(gb.m.get(c).copied().unwrap_or(0), gb.e)) >> 15;
                }
                *e = f.apply(t);
            }
        }
    }
    // u fo rms w = t 2^15 fo rms 2^we = (t F) 2^we with F = rms fo 2^15;
    // the gate's silu15 2^(eg + 15) and its >> 15 add eg + 30.
    we + gate.map_or(0, |gb| gb.e + 30)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// The write as it was, a clamp test an element.
    fn write_rows_clamping(
        s: &mut [i16],
        kd: usize,
        o: &mut [i32],
        k: &[i32],
        q: &[i32],
        count: &mut u32,
    ) -> u32 {
        let mut new_max = 0u32;
        for (row, or) in s.chunks_exact_mut(kd).zip(o.iter_mut()) {
            let wr = *or;
            let mut sq = 0i32;
            for ((e, &kv), &qv) in row.iter_mut().zip(k).zip(q) {
                let mut x = i32::from(*e) + ((wr * kv + (1 << 13)) >> 14);
                if !(-S_MAX..=S_MAX).contains(&x) {
                    x = x.clamp(-S_MAX, S_MAX);
                    *count += 1;
                }
                *e = x as i16;
                sq += x * qv;
                new_max |= x.unsigned_abs();
            }
            *or = sq;
        }
        new_max
    }

    /// `norm_head`'s last loop as it was, one loop for every case: the
    /// weight by `at15`, the gate looked up an element.
    fn norm_head_plain(
        o: &mut [i32],
        sigma: Fx,
        o_norm: &F32Bits<'_>,
        gate: Option<Block<'_>>,
        eps: Fx,
    ) -> i32 {
        let omax = max_abs(o);
        if omax == 0 || sigma.is_zero() {
            o.fill(0);
            return i32::MIN / 2;
        }
        let sh = bits(omax as u64) - 15;
        for e in o.iter_mut() {
            *e = if sh >= 0 {
                shr_round(*e, sh as u32)
            } else {
                *e << -sh
            };
        }
        let fo = sigma.shl(sh - 14);
        let ss: u64 = o
            .iter()
            .map(|u| (u.unsigned_abs() * u.unsigned_abs()) as u64)
            .sum();
        let mean = Fx::from_u64(ss, 0, false) * Fx::from_i64(o.len() as i64, 0).recip() * fo * fo;
        let f = Factor::new(((mean + eps).rsqrt() * fo).shl(15));
        let we = o_norm.exp15();
        for (c, e) in o.iter_mut().enumerate() {
            let mut t = (*e * o_norm.at15(c)) >> 15;
            if let Some(gb) = gate {
                t = (t * silu15(gb.m.get(c).copied().unwrap_or(0), gb.e)) >> 15;
            }
            *e = f.apply(t);
        }
        we + gate.map_or(0, |gb| gb.e + 30)
    }

    /// The same outputs and exponents as the plain loop: norm weights of
    /// every spread (trained ones and ones below 2^-110, subnormals and
    /// zeros), with and without a gate, gates shorter than the head.
    #[test]
    fn the_head_norm_is_the_plain_one() {
        let mut rng = crate::fixed::testing::Rng(0x0a0b_0c0d);
        for case in 0..600usize {
            let v = 1 + case % 70;
            let spread = [0, 3, 12, 40][case % 4];
            let low = [0, -20, -120, -140][(case / 4) % 4];
            let w: Vec<f32> = (0..v)
                .map(|i| match (case + i) % 13 {
                    0 => 0.0,
                    1 if case % 5 == 0 => f32::from_bits(1 + i as u32),
                    _ => (rng.next() * 2f64.powi(low - (i as i32 % (spread + 1)))) as f32,
                })
                .collect();
            let o_norm = F32Bits::new(&w);
            let o0: Vec<i32> = (0..v)
                .map(|_| (rng.next() * 2f64.powi(1 + (case % 29) as i32)) as i32)
                .collect();
            let glen = if case % 7 == 0 { v / 2 } else { v };
            let g: Vec<i32> = (0..glen)
                .map(|_| (rng.next() * 2f64.powi(29)) as i32)
                .collect();
            let gate = (case % 3 != 0).then_some(Block {
                m: &g,
                e: (case % 11) as i32 - 40,
            });
            let sigma = Fx::from_i64(1 + case as i64 * 7919, -(case as i32 % 30));
            let eps = Fx::from_i64(1, -20);
            let (mut a, mut b) = (o0.clone(), o0.clone());
            let ea = norm_head(&mut a, sigma, &o_norm, gate, eps);
            let eb = norm_head_plain(&mut b, sigma, &o_norm, gate, eps);
            assert_eq!((ea, &a), (eb, &b), "case {case}");
        }
    }

    /// The same states, outputs, OR and clamp count, with rows that clamp
    /// (writes up to W_MAX on states near ±32767) and rows that do not.
    #[test]
    fn the_write_is_the_clamping_one() {
        let mut rng = crate::fixed::testing::Rng(0x0006_d411);
        let mut int = |scale: f64| (rng.next() * scale) as i32;
        for case in 0..400 {
            let (kd, rows) = (1 + case % 17, 1 + case % 9);
            // k and q: unit vectors in Q14 at most (|k_i| <= 2^14).
            let k: Vec<i32> = (0..kd).map(|_| int(16384.0)).collect();
            let q: Vec<i32> = (0..kd).map(|_| int(16384.0 / (kd as f64).sqrt())).collect();
            let big = if case % 3 == 0 { 32767.0 } else { 8000.0 };
            let s0: Vec<i16> = (0..rows * kd).map(|_| int(big) as i16).collect();
            let wmax = [W_MAX as f64, 2048.0, 40.0][case % 3];
            let o0: Vec<i32> = (0..rows).map(|_| int(wmax)).collect();
            let (mut s1, mut o1, mut c1) = (s0.clone(), o0.clone(), 0);
            let (mut s2, mut o2, mut c2) = (s0.clone(), o0.clone(), 0);
            let m1 = write_rows(&mut s1, kd, &mut o1, &k, &q, &mut c1);
            let m2 = write_rows_clamping(&mut s2, kd, &mut o2, &k, &q, &mut c2);
            assert_eq!((m1, &s1, &o1, c1), (m2, &s2, &o2, c2), "case {case}");
        }
    }
}
