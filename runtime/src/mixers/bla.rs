//! `bla` — Blurry Window Attention (docs/spec.md §3.4; the project's definition,
//! built from what arXiv 2606.09862 states in its introduction).
//!
//! BLA is an ABC method (attention with bounded-memory control) whose memory is
//! a *frequency window*: the last period of `P` tokens is represented by `M + 1`
//! Fourier modes, and a blurry key/value history is reconstructed from them at
//! `N` slot phases `u_n = n P / N` by Dirichlet (or Fejér) kernel
//! interpolation. Written in slot form, slot `n` takes token `t` with weight
//! `phi_n(t) = kernel(2 pi (u_n - t) / P) / P`:
//! ```text
//! gated : Ks_n = (1 - phi_n) Ks_n + phi_n k_t      (GSA with alpha = 1 - phi)
//! scalar: Ks_n = gamma Ks_n + phi_n k_t             (damped oscillators)
//! none  : Ks_n = Ks_n + phi_n k_t                   (ABC)
//! o_t   = sum_n softmax_n(q_t . Ks_n / sqrt(K)) Vs_n
//! ```
//! At full resolution (`2M + 1 = N = P`) phi is one-hot and gated BLA is exactly
//! sliding-window attention with window `P`; with fewer modes each slot is a
//! kernel-weighted (blurred) average of the tokens near its phase.
//!
//! phi depends only on the config and on `r = t mod P`. Format 5 images
//! ([`BlaPhiSource::Computed`], the tools' default) store none: each token the
//! runtime computes the row `phi[r, 0..N]` once ([`BlaConfig::phi_row`]:
//! the closed forms of the kernels, angles reduced exactly in integers,
//! [`crate::math::SinPi`]) into the layer's scratch and uses it for every
//! head, for keys and values. Older images ([`BlaPhiSource::Table`]) store the
//! `[P, N]` table, computed in f64 on the host ([`BlaConfig::phi`]) and
//! rounded to f32. During the first period only slots whose phase the
//! stream has reached (`u_n <= t`) take part in the softmax.
//!
//! With `Hkv < H` key/value heads (`num_kv_heads`, issue 28) query head `h`
//! reads the slots of key/value head `h / (H / Hkv)`: `k_proj` and `v_proj`
//! give `Hkv` heads, and the slots are written once per key/value head.
//!
//! State layout (f32): `Ks [Hkv][N][K]`, `Vs [Hkv][N][V]`, then the
//! short-convolution caches when `use_short_conv` is set; the int16 state of
//! the integer token path is `mixers/bla_int.rs`'s. The phase and warm-up count derive from
//! the session's 64-bit token position.

use super::bla_config::{BlaConfig, BlaDecay, BlaKernel, BlaPhiSource};
use super::{conv, push, push_conv_specs, width, Mixer, SpecSink, StepCtx};
use crate::error::{part_mut, split_mut, Error, Result, Rows, StepResult};
use crate::format::{dim_ok, Role};
use crate::math::{dot, softmax_in_place, SinPi};
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

impl BlaConfig {
    /// Computes the write weights `row[n] = phi[r, n]` of a token at phase
    /// `r` for the slots `n < N` (`row` holds `N` values; extra ones are left
    /// alone), in f32: what the runtime uses for [`BlaPhiSource::Computed`]
    /// (docs/spec.md §3.4, §4).
    ///
    /// With `L = N P` and `j = (n P - r N) mod L` the angle is
    /// `x = 2 pi j / L`, and the kernels have closed forms:
    /// ```text
    /// dirichlet  D_M(x) = sin(pi (2M+1) j / L) / sin(pi j / L)             (2M+1 at j = 0)
    /// fejer      F_M(x) = (sin(pi (M+1) j / L) / sin(pi j / L))^2 / (M+1)   (M+1 at j = 0)
    /// Nyquist (2M = P): minus cos(2 pi M j / L), over (M+1) for fejer
    /// phi[r, n] = kernel / P
    /// ```
    /// Each sine and cosine comes from [`SinPi`] with denominator `L`
    /// (the angles reduced exactly in integers), then a fixed order of f32
    /// operations: the same bits on every target. Against [`BlaConfig::phi`]
    /// (the f64 cosine series) the error is within 6 x 2^-23 of the largest
    /// weight (measured over thousands of configurations: 4.4); at full
    /// resolution (`N = P`, `M = floor(P/2)`, Dirichlet) the row is exactly
    /// one-hot.
    ///
    /// An error only for a configuration that [`BlaConfig::from_words`]
    /// refuses (or `r >= P`).
    pub fn phi_row(&self, r: u32, row: &mut [f32]) -> Result<()> {
        let (p, n, m) = (self.period as u64, self.slots as u64, self.modes as u64);
        // P, N <= 2^20 keep L <= 2^40 and every numerator below 2^62.
        if !dim_ok(self.period) || !dim_ok(self.slots) || 2 * m > p || r as u64 >= p {
            return Err(Error::Internal("bla phi of an unchecked configuration"));
        }
        let l = p * n;
        let sin = SinPi::new(l).ok_or(Error::Internal("bla phi denominator"))?;
        let nyquist = m > 0 && 2 * m == p;
        let mult = match self.kernel {
            BlaKernel::Dirichlet => 2 * m + 1,
            BlaKernel::Fejer => m + 1,
        };
        let fejer = self.kernel == BlaKernel::Fejer;
        let (peak, modes1, period) = (mult as f32, (m + 1) as f32, p as f32);
        // The angles in units of pi / L, stepped from slot to slot without a
        // division: the denominator's j = n P - r N + L, in (0, 2L) (each
        // kernel is L-periodic in j: a half turn more negates numerator and
        // denominator alike, and the cosine's 2M j moves a whole turn), the
        // numerator's mult * j and the cosine's 2M j, both mod 2L.
        let turn = 2 * l;
        let mut j = l - r as u64 * n;
        let (mut num, num_step) = ((mult * j) % turn, (mult * p) % turn);
        let (mut cos, cos_step) = ((2 * m * j) % turn, (2 * m * p) % turn);
        for out in row.iter_mut().take(n as usize) {
            // j = L: the slot's phase is the token's (the kernel's peak).
            let ratio = if j == l {
                peak
            } else {
                sin.sin(num) / sin.sin(j)
            };
            // Dirichlet: ratio; Fejér: ratio^2 / (M+1); Nyquist: minus the
            // cosine (over M+1 for Fejér).
            let mut kernel = if fejer { ratio * ratio } else { ratio };
            if nyquist {
                kernel -= sin.cos(cos);
            }
            if fejer {
                kernel /= modes1;
            }
            *out = kernel / period;
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

    /// Writes one token `x` into the slot rows of one head:
    /// `row_n = keep_n * row_n + phi(n) * x` with `keep_n` set by the decay.
    fn write_slots(&self, phi: impl Fn(usize) -> f32, rows: &mut [f32], x: &[f32]) {
        // `max(1)`: a head has `K, V > 0` values, no chunk size of zero.
        for (slot, row) in rows.chunks_exact_mut(x.len().max(1)).enumerate() {
            let p = phi(slot);
            let keep = match self.decay {
                BlaDecay::Gated => 1.0 - p,
                BlaDecay::Scalar => self.gamma,
                BlaDecay::None => 1.0,
            };
            row.iter_mut()
                .zip(x)
                .for_each(|(e, &xc)| *e = keep * *e + p * xc);
        }
    }
}

impl Mixer for BlaConfig {
    fn push_specs(&self, layer: u16, d: u32, s: &mut dyn SpecSink) {
        let (h, k, v) = (self.num_heads, self.head_k_dim, self.head_v_dim);
        let (qk, vo) = (width(h, k), width(h, v));
        let (kvk, kvv) = (width(self.num_kv_heads, k), width(self.num_kv_heads, v));
        push(s, layer, Role::QProj, [qk, d, 0], true);
        push(s, layer, Role::KProj, [kvk, d, 0], true);
        push(s, layer, Role::VProj, [kvv, d, 0], true);
        if self.conv_size > 0 {
            push_conv_specs(s, layer, [qk, kvk, kvv], self.conv_size);
        }
        if self.phi_source == BlaPhiSource::Table {
            push(s, layer, Role::BlaPhi, [self.period, self.slots, 0], false);
        }
        push(s, layer, Role::OProj, [d, vo, 0], true);
    }

    fn step(
        &self,
        ctx: &StepCtx,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> StepResult<()> {
        self.run(ctx, w, state, scratch, act, x, out)
            .map_err(Error::at_step)
    }

    #[cfg(feature = "int-path")]
    fn step_int(
        &self,
        ctx: &StepCtx,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: crate::fixed::Block<'_>,
        out: &mut [i32],
        clamps: &mut u32,
    ) -> StepResult<i32> {
        super::bla_int::step(self, ctx, w, state, scratch, act, x, out, clamps)
            .map_err(Error::at_step)
    }
}

impl BlaConfig {
    /// [`Mixer::step`] with the load-time error type, converted once by
    /// `step` (everything here was checked at load: an error is a bug).
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        ctx: &StepCtx,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        let x = act.input(x)?;
        let (h, hkv, k, v, n) = self.dims();
        const SCRATCH: &str = "bla scratch too small";
        // k and v use the first `Hkv` heads of their `H`-head parts.
        let (q, rest) = split_mut(scratch, h * k, SCRATCH)?;
        let (kk, rest) = split_mut(rest, h * k, SCRATCH)?;
        let kk = part_mut(kk, ..hkv * k, SCRATCH)?;
        let (vv, rest) = split_mut(rest, h * v, SCRATCH)?;
        let vv = part_mut(vv, ..hkv * v, SCRATCH)?;
        let (o, rest) = split_mut(rest, h * v, SCRATCH)?;
        let row_len = match self.phi_source {
            BlaPhiSource::Table => 0,
            BlaPhiSource::Computed => n,
        };
        let (scores, phi_row) = split_mut(
            part_mut(rest, ..n.saturating_add(row_len), SCRATCH)?,
            n,
            SCRATCH,
        )?;

        w.get(Role::QProj)?.matvec(&x, q)?;
        w.get(Role::KProj)?.matvec(&x, kk)?;
        w.get(Role::VProj)?.matvec(&x, vv)?;
        const STATE: &str = "bla state too small";
        let (ks_all, rest) = split_mut(state, hkv * n * k, STATE)?;
        let (vs_all, conv_state) = split_mut(rest, hkv * n * v, STATE)?;
        if self.conv_size > 0 {
            conv::step_qkv(w, self.conv_size as usize, conv_state, q, kk, vv)?;
        }

        // `max(1)`: the period is nonzero (checked at load), stated
        // without a panic branch.
        let r = (ctx.pos % (self.period as u64).max(1)) as usize;
        // The token's row of phi: the stored table's row r, or computed once
        // here for every head, keys and values.
        let table = match self.phi_source {
            BlaPhiSource::Table => Some(w.get(Role::BlaPhi)?),
            BlaPhiSource::Computed => {
                self.phi_row(r as u32, phi_row)?;
                None
            }
        };
        let phi_r = |slot: usize| match &table {
            Some(t) => t.at(r * n + slot),
            None => phi_row.get(slot).copied().unwrap_or(0.0),
        };
        let live = self.live_slots(ctx.pos);
        let scale = 1.0 / libm::sqrtf(k as f32);
        let live_scores = part_mut(scores, ..live, "bla live slots")?;
        // The sizes are nonzero (checked at load): the `max(1)`s state it,
        // so no chunk size has a panic branch. Each key/value head's key
        // and value slots, key and value, and its `group = H / Hkv` query
        // heads' queries and outputs (one of each when `Hkv = H`).
        let (k, v, n) = (k.max(1), v.max(1), n.max(1));
        let group = (h / hkv.max(1)).max(1);
        let per_kv_head = Rows(ks_all.chunks_exact_mut((n * k).max(1)))
            .zip(vs_all.chunks_exact_mut((n * v).max(1)))
            .zip(Rows(kk.chunks_exact(k)).zip(vv.chunks_exact(v)))
            .zip(
                Rows(q.chunks_exact((group * k).max(1)))
                    .zip(o.chunks_exact_mut((group * v).max(1))),
            )
            .take(hkv);
        for (((ks, vs), (kh, vh)), (qg, og)) in per_kv_head {
            self.write_slots(phi_r, ks, kh);
            self.write_slots(phi_r, vs, vh);
            for (qh, oh) in Rows(qg.chunks_exact(k)).zip(og.chunks_exact_mut(v)) {
                for (s, krow) in live_scores.iter_mut().zip(ks.chunks_exact(k)) {
                    *s = dot(qh, krow) * scale;
                }
                softmax_in_place(live_scores);
                oh.fill(0.0);
                for (&p, vrow) in live_scores.iter().zip(vs.chunks_exact(v)) {
                    oh.iter_mut().zip(vrow).for_each(|(e, &vc)| *e += p * vc);
                }
            }
        }
        w.get(Role::OProj)?.matvec(&act.input(o)?, out)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::mixers::bla_config::test_config as config;
    use core::f64::consts::PI;

    /// Deterministic pseudo-random key for token `t`, channel `c`.
    fn key(t: usize, c: usize) -> f64 {
        libm::sin(1.7 * t as f64 + 0.9 * c as f64 + 0.3 * (t * t % 7) as f64)
    }

    /// The slot form (the runtime's f32 update) equals the Fourier mode form:
    /// `C_m, S_m` rotated and damped each token, slots reconstructed from them.
    #[test]
    fn slot_form_equals_mode_form_for_none_and_scalar_decay() {
        const K: usize = 3;
        const T: usize = 50;
        for (p, m, n) in [(12u32, 3u32, 7u32), (8, 4, 8), (9, 4, 9), (10, 2, 5)] {
            for kernel in [BlaKernel::Dirichlet, BlaKernel::Fejer] {
                for (decay, gamma) in [(BlaDecay::None, 1.0f32), (BlaDecay::Scalar, 0.9)] {
                    let c = config(p, m, n, kernel, decay, gamma);
                    let mut slots = [0.0f32; 16 * K];
                    let rows = &mut slots[..n as usize * K];
                    let mut cos_m = [[0.0f64; K]; 8];
                    let mut sin_m = [[0.0f64; K]; 8];
                    for t in 0..T {
                        let x: [f32; K] = core::array::from_fn(|ch| key(t, ch) as f32);
                        let r = (t % p as usize) as u32;
                        c.write_slots(|slot| c.phi(r, slot as u32) as f32, rows, &x);
                        let g = gamma as f64;
                        for mode in 0..=m as usize {
                            let w = 2.0 * PI * mode as f64 / p as f64;
                            for ch in 0..K {
                                let (cm, sm) = (cos_m[mode][ch], sin_m[mode][ch]);
                                cos_m[mode][ch] =
                                    g * (libm::cos(w) * cm - libm::sin(w) * sm) + key(t, ch);
                                sin_m[mode][ch] = g * (libm::sin(w) * cm + libm::cos(w) * sm);
                            }
                        }
                        for slot in 0..n as usize {
                            let u = slot as f64 * p as f64 / n as f64;
                            for ch in 0..K {
                                let mut want = 0.0;
                                for mode in 0..=m as usize {
                                    let a = 2.0 * PI * mode as f64 / p as f64 * (u - t as f64);
                                    want += c.mode_weight(mode as u32)
                                        * (libm::cos(a) * cos_m[mode][ch]
                                            - libm::sin(a) * sin_m[mode][ch]);
                                }
                                want /= p as f64;
                                let got = rows[slot * K + ch] as f64;
                                assert!(
                                    (got - want).abs() < 2e-5 * (1.0 + want.abs()),
                                    "P={p} M={m} N={n} {kernel:?} {decay:?} t={t} slot={slot}: {got} vs {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The row the runtime computes, against the f64 cosine series
    /// ([`BlaConfig::phi`]) over the given phases: the worst error in units
    /// of 2^-23 of the largest weight of the configuration.
    fn computed_phi_error(c: &BlaConfig, phases: impl Iterator<Item = u32>) -> f64 {
        let n = c.slots as usize;
        let mut row = std::vec![0.0f32; n + 1];
        let scale = (0..c.slots).map(|s| c.phi(0, s).abs()).fold(0.0, f64::max);
        let mut worst = 0f64;
        for r in phases {
            row[n] = 7.0;
            c.phi_row(r, &mut row[..n]).unwrap();
            for (slot, &got) in row[..n].iter().enumerate() {
                let want = c.phi(r, slot as u32);
                let err = (got as f64 - want).abs() / (scale * f32::EPSILON as f64);
                worst = worst.max(err);
            }
            assert_eq!(row[n], 7.0, "only N values are written");
        }
        worst
    }

    /// Every configuration with `P <= 24` (all `M`, `N <= P + 3`, both
    /// kernels, Nyquist or not) and a few large ones, among them the shipped
    /// models' (`P = 64`, `M = 4, 7, 15`) and the largest a record allows:
    /// the computed row is within 6 x 2^-23 of the configuration's largest
    /// weight (measured: 4.4).
    #[test]
    fn computed_phi_matches_the_f64_series() {
        let mut worst = 0f64;
        for (p, m, n, phases) in crate::mixers::bla_config::phi_test_configs() {
            for kernel in [BlaKernel::Dirichlet, BlaKernel::Fejer] {
                let c = config(p, m, n, kernel, BlaDecay::Gated, 1.0);
                let e = computed_phi_error(&c, phases.iter().copied());
                assert!(e < 6.0, "P={p} M={m} N={n} {kernel:?}: {e}");
                worst = worst.max(e);
            }
        }
        // The largest sizes a record allows (L = 2^40): a few phases.
        for kernel in [BlaKernel::Dirichlet, BlaKernel::Fejer] {
            let c = config(1 << 20, 3, (1 << 20) - 1, kernel, BlaDecay::Gated, 1.0);
            let e = computed_phi_error(&c, [0, 1, 12_345, (1 << 20) - 1].into_iter());
            assert!(e < 6.0, "largest {kernel:?}: {e}");
            worst = worst.max(e);
        }
        assert!(worst > 1.0, "the measure measures nothing: {worst}");
    }

    /// At full resolution (`N = P`, `M = floor(P/2)`, Dirichlet; the
    /// Nyquist rule for even `P`) the computed rows are exactly one-hot: the
    /// integer reduction makes every zero and every one exact.
    #[test]
    fn computed_full_resolution_phi_is_exactly_one_hot() {
        for p in 1..=70u32 {
            let c = config(p, p / 2, p, BlaKernel::Dirichlet, BlaDecay::Gated, 1.0);
            let mut row = std::vec![f32::NAN; p as usize];
            for r in 0..p {
                c.phi_row(r, &mut row).unwrap();
                for (n, &v) in row.iter().enumerate() {
                    let want = if n as u32 == r { 1.0 } else { 0.0 };
                    assert_eq!(v, want, "P={p} r={r} n={n}");
                }
            }
        }
    }

    #[test]
    fn phi_row_refuses_unchecked_configurations() {
        let mut row = [0.0f32; 4];
        let c = config(8, 4, 4, BlaKernel::Dirichlet, BlaDecay::Gated, 1.0);
        assert!(c.phi_row(8, &mut row).is_err());
        for bad in [
            config(8, 5, 4, BlaKernel::Dirichlet, BlaDecay::Gated, 1.0),
            config(0, 0, 4, BlaKernel::Fejer, BlaDecay::Gated, 1.0),
            config(8, 4, 0, BlaKernel::Fejer, BlaDecay::Gated, 1.0),
            config(
                u32::MAX,
                4,
                u32::MAX,
                BlaKernel::Fejer,
                BlaDecay::Gated,
                1.0,
            ),
        ] {
            assert!(bad.phi_row(0, &mut row).is_err(), "{bad:?}");
        }
    }
}
