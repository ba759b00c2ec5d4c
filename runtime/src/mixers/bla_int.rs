//! BLA's integer step (state format int16, the integer token path:
//! docs/integer-path.md, "BLA on the integer path"): the maths of
//! docs/spec.md §3.4 on blocks and 16-bit slot memories, every step in
//! integer code.
//!
//! **State** (i32 words, in this order; `Hkv` key/value heads, `N` slots;
//! the layout of GSA's int16 state):
//!
//! ```text
//! scales [Hkv][N][ Ek: i32 | fk: u32 | Ev: i32 | fv: u32 ] per (kv head, slot): its key and its value scale
//! Ks: [Hkv][N][K] i16 mantissas (padded to a word)         slot n's key   = mantissa × fk 2^(Ek - 32)
//! Vs: [Hkv][N][V] i16 mantissas (padded to a word)         slot n's value = mantissa × fv 2^(Ev - 32)
//! q, k, v convolution rings (mixers::conv_int), when conv_size > 0
//! ```
//!
//! **The write weights** `phi[r, n]` (`r = t mod P`) as [`Fx`] values, once
//! per token for every head, keys and values ([`phi_row`]): with a
//! computed phi the closed forms of the kernels (those of the f32 step,
//! `BlaConfig::phi_row`) with [`SinPiFx`] (angles reduced exactly in
//! integers) and exact divisions, so the full-resolution row (`N = P`,
//! `M = floor(P/2)`, Dirichlet) is exactly one-hot; with a stored table the
//! f32 entries of row `r` read by their bits.
//!
//! **The slot updates** are GSA's (`slots_int::update`) with, per slot,
//! decay `α` and write weight `β`: gated `α = 1 - phi_n` (0 where phi
//! exceeds 1), `β = phi_n`; scalar `α = γ` (by its bits), `β = phi_n`;
//! none `α = 1`, `β = phi_n`. `β` takes either sign (the Dirichlet
//! kernel's negative lobes).
//!
//! **Per token**: q, k, v from the products (blocks); with
//! `use_short_conv` the convolutions with SiLU (`conv_int`, as the f32
//! step's `conv::step_qkv`); the slot updates, per key/value head; per
//! query head the softmax read (of its key/value head `h / (H / Hkv)`)
//! over the live slots (`slots_int::read`, the logits times `1/sqrt(K)`);
//! the heads aligned into one block; `o_proj`.

use super::bla_config::{BlaConfig, BlaDecay, BlaKernel, BlaPhiSource, SLOT_WORDS};
use super::slots_int::{self, read_heads, update, Part};
use super::{conv_int, StepCtx};
use crate::error::{Error, Result, Rows};
use crate::fixed::trig::SinPiFx;
use crate::fixed::wide::div_u64_u32;
use crate::fixed::{Block, Fx};
use crate::format::{dim_ok, Role};
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

/// Words of one [`Fx`] in the scratch row: mantissa, then `2 e + sign`.
const FX_WORDS: usize = 2;

/// Stores `x` into two words.
fn put(x: Fx, out: &mut [i32]) {
    out[0] = x.mantissa() as i32;
    out[1] = x.exponent().wrapping_mul(2) | x.is_negative() as i32;
}

/// Reads the [`Fx`] that [`put`] stored (exactly).
fn get(w: &[i32]) -> Fx {
    Fx::from_u64(w[0] as u32 as u64, w[1] >> 1, w[1] & 1 != 0)
}

/// `a / b` to 32 bits (truncated), exact where the quotient has 32
/// significant bits (`a / a = 1`); `b` nonzero.
fn div(a: Fx, b: Fx) -> Fx {
    if a.is_zero() || b.is_zero() {
        return Fx::ZERO;
    }
    // [2^31, 2^32) << 32 over [2^31, 2^32): the quotient in (2^31, 2^33),
    // its top bit apart (a >= b) so the rest is a 32-bit quotient.
    let (am, bm) = (a.mantissa(), b.mantissa());
    let q = if am >= bm {
        (1u64 << 32) + div_u64_u32(am - bm, 0, bm) as u64
    } else {
        div_u64_u32(am, 0, bm) as u64
    };
    Fx::from_u64(
        q,
        a.exponent() - b.exponent() - 32,
        a.is_negative() != b.is_negative(),
    )
}

/// The write weights `phi[r, n]` of a token at phase `r` for the slots `n <
/// N`, [`FX_WORDS`] words each into `row`, computed as the f32 step's
/// `BlaConfig::phi_row` in [`Fx`] (see the module docs): with `L = N P` and
/// `j = (n P - r N) mod L`,
/// ```text
/// dirichlet  D = sin(pi (2M+1) j / L) / sin(pi j / L)           (2M+1 at j = 0)
/// fejer      F = (sin(pi (M+1) j / L) / sin(pi j / L))^2         ((M+1)^2 at j = 0)
/// Nyquist (2M = P): minus cos(2 pi M j / L), before the division
/// phi = D / P,  F / ((M+1) P)
/// ```
/// Against the f64 cosine series within 2^-27 of the configuration's
/// largest weight (`tests`; measured 0.9 x 2^-28). An error only for a configuration that
/// `BlaConfig::from_words` refuses (or `r >= P`).
pub(crate) fn phi_row(c: &BlaConfig, r: u32, row: &mut [i32]) -> Result<()> {
    let (p, n, m) = (c.period as u64, c.slots as u64, c.modes as u64);
    if !dim_ok(c.period) || !dim_ok(c.slots) || 2 * m > p || r as u64 >= p {
        return Err(Error::Internal("bla phi of an unchecked configuration"));
    }
    if row.len() < n as usize * FX_WORDS {
        return Err(Error::Internal("bla phi row too short"));
    }
    let l = p * n; // <= 2^40
    let sin = SinPiFx::new(l).ok_or(Error::Internal("bla phi denominator"))?;
    let nyquist = m > 0 && 2 * m == p;
    let fejer = c.kernel == BlaKernel::Fejer;
    let mult = if fejer { m + 1 } else { 2 * m + 1 };
    let peak = Fx::from_u64(mult, 0, false);
    // Over P, or (M+1) P for Fejér: one division.
    let denom = Fx::from_u64(if fejer { (m + 1) * p } else { p }, 0, false);
    // As the f32 row: j = n P - r N + L in (0, 2L), the numerator's
    // mult * j and the cosine's 2M j mod 2L, stepped without a division.
    let turn = 2 * l;
    let mut j = l - r as u64 * n;
    let (mut num, num_step) = ((mult * j) % turn, (mult * p) % turn);
    let (mut cos, cos_step) = ((2 * m * j) % turn, (2 * m * p) % turn);
    for out in row.chunks_exact_mut(FX_WORDS).take(n as usize) {
        let ratio = if j == l {
            peak
        } else {
            div(sin.sin(num), sin.sin(j))
        };
        let mut kernel = if fejer { ratio * ratio } else { ratio };
        if nyquist {
            kernel = kernel - sin.cos(cos);
        }
        put(div(kernel, denom), out);
        j += p;
        num += num_step;
        if num >= turn {
            num -= turn;
        }
        cos += cos_step;
        if cos >= turn {
            cos -= turn;
        }
    }
    Ok(())
}

/// Slot `n`'s decay and write weight for write weight `phi` (the module
/// docs).
fn gate(c: &BlaConfig, phi: Fx, gamma: Fx) -> (Fx, Fx) {
    let alpha = match c.decay {
        BlaDecay::Gated if phi.gt(Fx::ONE) => Fx::ZERO,
        BlaDecay::Gated => Fx::ONE - phi,
        BlaDecay::Scalar => gamma,
        BlaDecay::None => Fx::ONE,
    };
    (alpha, phi)
}

/// The state's parts: scales, Ks, Vs (as words), the convolution rings.
type Parts<'s> = (&'s mut [i32], &'s mut [i32], &'s mut [i32], &'s mut [i32]);

/// Splits an int16 state into its parts (`None` if it is too short).
fn parts<'s>(c: &BlaConfig, state: &'s mut [i32]) -> Option<Parts<'s>> {
    let (_, hkv, k, v, n) = c.dims();
    let (scales, rest) = state.split_at_mut_checked(hkv * n * SLOT_WORDS as usize)?;
    let (kw, rest) = rest.split_at_mut_checked((hkv * n * k).div_ceil(2))?;
    let (vw, convs) = rest.split_at_mut_checked((hkv * n * v).div_ceil(2))?;
    Some((scales, kw, vw, convs))
}

/// The largest magnitude an int16 BLA state holds (`Session::state_max_abs`):
/// every slot vector's largest mantissa times its scale, and the
/// convolution rings.
pub(crate) fn state_max_abs(c: &BlaConfig, state: &[i32]) -> f32 {
    let (h, hkv, k, v, n) = c.dims();
    let channels = [h * k, hkv * k, hkv * v];
    slots_int::state_max_abs(state, hkv * n, (k, v), channels, c.conv_size)
}

/// One token of `bla` with the int16 state ([`crate::mixers::Mixer::step_int`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn step(
    c: &BlaConfig,
    ctx: &StepCtx,
    w: &LayerWeights<'_>,
    state: &mut [f32],
    scratch: &mut [f32],
    act: &mut ActBuf<'_>,
    x: Block<'_>,
    out: &mut [i32],
    clamps: &mut u32,
) -> Result<i32> {
    let (h, hkv, k, v, n) = c.dims();
    let scratch: &mut [i32] = bytemuck::cast_slice_mut(scratch);
    let too_small = Error::Internal("bla scratch too small");
    // k and v use the first `Hkv` heads of their `H`-head parts.
    let (q, rest) = scratch.split_at_mut_checked(h * k).ok_or(too_small)?;
    let (kk, rest) = rest.split_at_mut_checked(h * k).ok_or(too_small)?;
    let kk = kk.get_mut(..hkv * k).ok_or(too_small)?;
    let (vv, rest) = rest.split_at_mut_checked(h * v).ok_or(too_small)?;
    let vv = vv.get_mut(..hkv * v).ok_or(too_small)?;
    let (o, rest) = rest.split_at_mut_checked(h * v).ok_or(too_small)?;
    let (logits, rest) = rest.split_at_mut_checked(n).ok_or(too_small)?;
    let (phi, rest) = rest.split_at_mut_checked(n * FX_WORDS).ok_or(too_small)?;
    let acc: &mut [i64] = {
        let (_, aligned, _) = bytemuck::pod_align_to_mut::<i32, i64>(rest);
        aligned.get_mut(..v).ok_or(too_small)?
    };

    let xin = act.input_int(x)?;
    let mut eq = w.get(Role::QProj)?.matvec_int(&xin, q)?;
    let mut ek = w.get(Role::KProj)?.matvec_int(&xin, kk)?;
    let mut ev = w.get(Role::VProj)?.matvec_int(&xin, vv)?;

    let state: &mut [i32] = bytemuck::cast_slice_mut(state);
    let bad_state = Error::Internal("bla state of the wrong size");
    let (scales, kw, vw, convs) = parts(c, state).ok_or(bad_state)?;
    let ks_all: &mut [i16] = bytemuck::cast_slice_mut(kw);
    let vs_all: &mut [i16] = bytemuck::cast_slice_mut(vw);
    if c.conv_size > 0 {
        // As the f32 step (`conv::step_qkv`): q, k, v convolved with SiLU.
        let parts = [(&mut *q, &mut eq), (&mut *kk, &mut ek), (&mut *vv, &mut ev)];
        conv_int::step_qkv(w, c.conv_size, convs, ctx.pos, parts)?;
    }

    // The token's row of phi, once for every head.
    // `max(1)`: the period is nonzero (checked at load), stated without a
    // panic branch.
    let r = (ctx.pos % (c.period as u64).max(1)) as u32;
    match c.phi_source {
        BlaPhiSource::Computed => phi_row(c, r, phi)?,
        BlaPhiSource::Table => {
            let table = w.get(Role::BlaPhi)?;
            let vals = table
                .f32_values()
                .and_then(|t| t.get(r as usize * n..(r as usize + 1) * n))
                .ok_or(Error::Internal("bla phi table not f32"))?;
            for (out, val) in phi.chunks_exact_mut(FX_WORDS).zip(vals) {
                put(Fx::from_f32_bits(val.to_bits()), out);
            }
        }
    }
    let gamma = Fx::from_f32_bits(c.gamma.to_bits());
    // The sizes are nonzero (checked at load): the `max(1)`s state it, so
    // no chunk size has a panic branch. Each head's keys, values, slot
    // records (four words a slot) and slot states.
    let (k1, v1, n1) = (k.max(1), v.max(1), n.max(1));
    let per_head = Rows(kk.chunks_exact_mut(k1))
        .zip(vv.chunks_exact_mut(v1))
        .zip(scales.chunks_exact_mut((n1 * 4).max(1)))
        .zip(ks_all.chunks_exact_mut((n1 * k1).max(1)))
        .zip(vs_all.chunks_exact_mut((n1 * v1).max(1)))
        .take(hkv);
    for ((((kh, vh), recs), ksh), vsh) in per_head {
        let xk = Part::new(kh, ek);
        let xv = Part::new(vh, ev);
        let slots = phi
            .chunks_exact(FX_WORDS)
            .zip(recs.as_chunks_mut::<4>().0)
            .zip(ksh.chunks_exact_mut(k1))
            .zip(vsh.chunks_exact_mut(v1));
        for (((p, rec), ks), vs) in slots {
            let (alpha, beta) = gate(c, get(p), gamma);
            let (rk, rv) = rec.split_at_mut(2);
            update(ks, rk, &xk, alpha, beta);
            update(vs, rv, &xv, alpha, beta);
        }
    }

    let live = c.live_slots(ctx.pos).min(n);
    let inv_sqrt_k = Fx::from_u64(k as u64, 0, false).rsqrt();
    let eo = read_heads(
        q,
        eq,
        Some(inv_sqrt_k),
        (k, v),
        h / hkv.max(1),
        n,
        scales,
        ks_all,
        vs_all,
        &mut logits[..live],
        acc,
        o,
        clamps,
    )?;
    let oin = act.input_int(Block { m: o, e: eo })?;
    w.get(Role::OProj)?.matvec_int(&oin, out)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::fixed::testing::fx64;
    use crate::format::StateFormat;
    use crate::mixers::bla_config::test_config as config;
    use std::vec;

    /// The integer row against the f64 cosine series (`BlaConfig::phi`),
    /// in units of 2^-24 of the configuration's largest weight.
    fn phi_error(c: &BlaConfig, phases: impl Iterator<Item = u32>) -> f64 {
        let n = c.slots as usize;
        let mut row = vec![0i32; FX_WORDS * n + 2];
        let scale = (0..c.slots).map(|s| c.phi(0, s).abs()).fold(0.0, f64::max);
        let mut worst = 0f64;
        for r in phases {
            row[FX_WORDS * n] = 7;
            phi_row(c, r, &mut row[..FX_WORDS * n]).unwrap();
            for slot in 0..n {
                let got = fx64(get(&row[FX_WORDS * slot..]));
                let want = c.phi(r, slot as u32);
                worst = worst.max((got - want).abs() / (scale * 2f64.powi(-24)));
            }
            assert_eq!(row[FX_WORDS * n], 7, "only N values are written");
        }
        worst
    }

    /// The stated tolerance (docs/integer-path.md): every configuration
    /// with `P <= 24` (all `M`, `N <= P + 3`, both kernels) and large ones
    /// (the shipped models' `P = 64`, the largest a record allows): the
    /// integer row is within 2^-27 of the largest weight of the f64 series
    /// (the f32 row: 6 x 2^-23).
    #[test]
    fn the_integer_phi_row_matches_the_f64_series() {
        let mut worst = 0f64;
        for (p, m, n, phases) in crate::mixers::bla_config::phi_test_configs() {
            for kernel in [BlaKernel::Dirichlet, BlaKernel::Fejer] {
                let c = config(p, m, n, kernel, BlaDecay::Gated, 1.0);
                let e = phi_error(&c, phases.iter().copied());
                assert!(e <= 0.125, "P={p} M={m} N={n} {kernel:?}: {e}");
                worst = worst.max(e);
            }
        }
        for kernel in [BlaKernel::Dirichlet, BlaKernel::Fejer] {
            let c = config(1 << 20, 3, (1 << 20) - 1, kernel, BlaDecay::Gated, 1.0);
            let e = phi_error(&c, [0, 1, 12_345, (1 << 20) - 1].into_iter());
            assert!(e <= 0.125, "largest {kernel:?}: {e}");
            worst = worst.max(e);
        }
        std::println!("worst integer phi error: {worst:.4} x 2^-24 of the largest weight");
        assert!(worst > 0.0, "the measure measures nothing");
    }

    /// At full resolution the integer rows are exactly one-hot (gated BLA
    /// is then exactly a window of `P` tokens).
    #[test]
    fn the_integer_full_resolution_row_is_exactly_one_hot() {
        for p in 1..=70u32 {
            let c = config(p, p / 2, p, BlaKernel::Dirichlet, BlaDecay::Gated, 1.0);
            let mut row = vec![0i32; FX_WORDS * p as usize];
            for r in 0..p {
                phi_row(&c, r, &mut row).unwrap();
                for n in 0..p as usize {
                    let want = if n as u32 == r { Fx::ONE } else { Fx::ZERO };
                    assert_eq!(get(&row[FX_WORDS * n..]), want, "P={p} r={r} n={n}");
                }
            }
        }
    }

    #[test]
    fn phi_row_refuses_unchecked_configurations_and_short_rows() {
        let mut row = [0i32; 8];
        let c = config(8, 4, 4, BlaKernel::Dirichlet, BlaDecay::Gated, 1.0);
        assert!(phi_row(&c, 8, &mut row).is_err());
        assert!(phi_row(&c, 0, &mut row[..7]).is_err());
        for bad in [
            config(8, 5, 4, BlaKernel::Dirichlet, BlaDecay::Gated, 1.0),
            config(0, 0, 4, BlaKernel::Fejer, BlaDecay::Gated, 1.0),
            config(8, 4, 0, BlaKernel::Fejer, BlaDecay::Gated, 1.0),
        ] {
            assert!(phi_row(&bad, 0, &mut row).is_err(), "{bad:?}");
        }
    }

    /// The stored words round-trip every [`Fx`] exactly, signs included.
    #[test]
    fn scratch_words_hold_fx_exactly() {
        let mut w = [0i32; 2];
        for x in [
            Fx::ZERO,
            Fx::ONE,
            -Fx::ONE,
            Fx::MAX,
            Fx::pow2(-(1 << 20) + 40),
            Fx::from_i64(-12345, -70),
        ] {
            put(x, &mut w);
            assert_eq!(get(&w), x);
        }
    }

    /// The slot update with BLA's weights against the f64 recurrence of
    /// each decay: `Ks = α Ks + phi k` over 3 periods of the shipped
    /// models' shape (P 64, M 4, N 9, both kernels): within 2^-10 of the
    /// largest value so far. (Each token rounds its write to a
    /// 16-bit unit, and the weights `alpha` of these slots lie near 1 —
    /// 0.86 to 1.03 — so a slot keeps tens of tokens' roundings: GSA's slow
    /// gates, `slots_int`'s test, the same way.)
    #[test]
    fn bla_slot_updates_track_the_f64_recurrence() {
        use crate::fixed::testing::{block_of, Rng};
        use crate::mixers::slots_int::read_scale;
        let mut rng = Rng(0x51ab_1e55_0bad_cafe);
        let mut worst = 0f64;
        for kernel in [BlaKernel::Dirichlet, BlaKernel::Fejer] {
            for (decay, gamma) in [
                (BlaDecay::Gated, 1.0f32),
                (BlaDecay::Scalar, 0.97),
                (BlaDecay::None, 1.0),
            ] {
                let c = BlaConfig {
                    state: StateFormat::Int16,
                    ..config(64, 4, 9, kernel, decay, gamma)
                };
                let d = 16;
                let n = c.slots as usize;
                let mut mant = vec![0i16; n * d];
                let mut recs = vec![0i32; n * 2];
                let mut exact = vec![0f64; n * d];
                let mut row = vec![0i32; FX_WORDS * n];
                let mut top = 0f64;
                let g = Fx::from_f32_bits(gamma.to_bits());
                for t in 0..192u32 {
                    let x: std::vec::Vec<f64> = (0..d).map(|_| rng.next()).collect();
                    let (xm, xe) = block_of(&x);
                    let xq: std::vec::Vec<f64> =
                        xm.iter().map(|&m| m as f64 * 2f64.powi(xe)).collect();
                    phi_row(&c, t % 64, &mut row).unwrap();
                    for s in 0..n {
                        let (alpha, beta) = gate(&c, get(&row[FX_WORDS * s..]), g);
                        let (a, b) = (fx64(alpha), fx64(beta));
                        update(
                            &mut mant[s * d..(s + 1) * d],
                            &mut recs[2 * s..2 * s + 2],
                            &Part::new(&mut xm.clone(), xe),
                            alpha,
                            beta,
                        );
                        for (e, xi) in exact[s * d..(s + 1) * d].iter_mut().zip(&xq) {
                            *e = a * *e + b * xi;
                        }
                    }
                    top = exact.iter().fold(top, |m, e| m.max(e.abs()));
                    for s in 0..n {
                        let sc = read_scale(&recs[2 * s..2 * s + 2]).map_or(0.0, fx64);
                        for i in 0..d {
                            let got = mant[s * d + i] as f64 * sc;
                            let err = (got - exact[s * d + i]).abs() / top;
                            worst = worst.max(err);
                            assert!(err <= 2f64.powi(-10), "{kernel:?} {decay:?} t {t}: {err:e}");
                        }
                    }
                }
            }
        }
        std::println!("worst bla slot error {worst:.3e}");
    }
}
