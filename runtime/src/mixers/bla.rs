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
//! State layout: `Ks [H][N][K]`, `Vs [H][N][V]`, then the short-convolution
//! caches when `use_short_conv` is set. The phase and warm-up count derive from
//! the session's 64-bit token position.

use super::{conv, product, push, push_conv_specs, sum, width, Mixer, Specs, StepCtx};
use crate::error::{ensure, ensure_size, Error, Result, StepResult};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, Role};
use crate::image::{COMPUTED_PHI_FORMAT_VERSION, MIN_FORMAT_VERSION};
use crate::math::{dot, softmax_in_place, SinPi};
use crate::tensor::ActBuf;
use crate::weights::LayerWeights;

/// Interpolation kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlaKernel {
    /// `D_M(x) = 1 + 2 sum_{m=1..M} cos(m x)` (the m = P/2 term weighs 1).
    Dirichlet = 0,
    /// `F_M(x) = (1/(M+1)) sum_{j=0..M} D_j(x)`, non-negative.
    Fejer = 1,
}

/// How slots forget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlaDecay {
    /// `Ks_n = (1 - phi_n) Ks_n + phi_n k`.
    Gated = 0,
    /// `Ks_n = gamma Ks_n + phi_n k`.
    Scalar = 1,
    /// `Ks_n = Ks_n + phi_n k`.
    None = 2,
}

/// Where a layer's write weights `phi` come from (bit 1 of the record's
/// flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlaPhiSource {
    /// The image stores the `[P, N]` f32 table `attn.phi`, computed in f64 by
    /// the tools (every format version; the only choice before format 5).
    Table = 0,
    /// The image stores no table: the runtime computes each token's row
    /// ([`BlaConfig::phi_row`]). Format 5
    /// ([`crate::image::COMPUTED_PHI_FORMAT_VERSION`]).
    Computed = 1,
}

/// Blurry Window Attention layer configuration.
///
/// Record words: `H | K | V | P | M | N | kernel | decay | gamma (f32 bits) |
/// flags (bit 0 short conv, bit 1 phi computed: format 5) | conv_size`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlaConfig {
    /// Heads H.
    pub num_heads: u32,
    /// q/k head size K.
    pub head_k_dim: u32,
    /// Value head size V.
    pub head_v_dim: u32,
    /// Period P in tokens.
    pub period: u32,
    /// Highest Fourier mode M (`2M <= P`).
    pub modes: u32,
    /// Slots N.
    pub slots: u32,
    /// Interpolation kernel.
    pub kernel: BlaKernel,
    /// Forgetting rule.
    pub decay: BlaDecay,
    /// Decay factor of [`BlaDecay::Scalar`].
    pub gamma: f32,
    /// Short convolution width on q, k, v (0 = none).
    pub conv_size: u32,
    /// Whether the image stores `phi` or the runtime computes it.
    pub phi_source: BlaPhiSource,
}

impl BlaConfig {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<BlaConfig> {
        let kernel = match w[6] {
            0 => BlaKernel::Dirichlet,
            1 => BlaKernel::Fejer,
            _ => {
                return Err(Error::BadConfig {
                    layer,
                    reason: "unknown bla kernel",
                })
            }
        };
        let decay = match w[7] {
            0 => BlaDecay::Gated,
            1 => BlaDecay::Scalar,
            2 => BlaDecay::None,
            _ => {
                return Err(Error::BadConfig {
                    layer,
                    reason: "unknown bla decay",
                })
            }
        };
        let c = BlaConfig {
            num_heads: w[0],
            head_k_dim: w[1],
            head_v_dim: w[2],
            period: w[3],
            modes: w[4],
            slots: w[5],
            kernel,
            decay,
            gamma: f32::from_bits(w[8]),
            conv_size: if w[9] & 1 != 0 { w[10] } else { 0 },
            phi_source: if w[9] & 2 != 0 {
                BlaPhiSource::Computed
            } else {
                BlaPhiSource::Table
            },
        };
        ensure!(w[9] & !3 == 0, layer, "unknown bla flags");
        ensure!(dim_ok(c.num_heads), layer, "bla num_heads out of range");
        ensure!(
            dim_ok(c.head_k_dim) && dim_ok(c.head_v_dim),
            layer,
            "bla head dims out of range"
        );
        ensure!(
            dim_ok(c.period) && dim_ok(c.slots),
            layer,
            "bla period and slots must be >= 1"
        );
        ensure!(
            // `modes <= period / 2` is `2 * modes <= period` without overflow.
            c.modes <= c.period / 2,
            layer,
            "bla modes must satisfy 2 * modes <= period"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_k_dim),
            layer,
            "bla num_heads * head_k_dim exceeds 2^20"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_v_dim),
            layer,
            "bla num_heads * head_v_dim exceeds 2^20"
        );
        ensure!(
            c.gamma.is_finite() && c.gamma > 0.0 && c.gamma <= 1.0,
            layer,
            "bla gamma must be in (0, 1]"
        );
        ensure!(
            w[9] & 1 == 0 || (w[10] >= 1 && w[10] <= 64),
            layer,
            "bla conv_size must be 1..=64"
        );
        Ok(c)
    }

    /// Encodes the layer record words.
    pub fn to_words(&self) -> LayerWords {
        record_words(&[
            self.num_heads,
            self.head_k_dim,
            self.head_v_dim,
            self.period,
            self.modes,
            self.slots,
            self.kernel as u32,
            self.decay as u32,
            self.gamma.to_bits(),
            (self.conv_size > 0) as u32 | (self.phi_source as u32) << 1,
            self.conv_size,
        ])
    }

    const fn dims(&self) -> (usize, usize, usize, usize) {
        (
            self.num_heads as usize,
            self.head_k_dim as usize,
            self.head_v_dim as usize,
            self.slots as usize,
        )
    }

    const fn dims64(&self) -> (u64, u64, u64, u64) {
        let (h, k, v, n) = (self.num_heads, self.head_k_dim, self.head_v_dim, self.slots);
        (h as u64, k as u64, v as u64, n as u64)
    }

    /// State words: `H * N * (K + V)` plus the convolution caches.
    pub const fn state_len(&self) -> u64 {
        let (h, k, v, n) = self.dims64();
        let channels = sum(&[product(&[2, h, k]), product(&[h, v])]);
        sum(&[
            product(&[h, n, k + v]),
            conv::state_words(channels, self.conv_size),
        ])
    }

    /// Scratch words: q, k (`H*K` each), v, o (`H*V` each), scores `[N]`,
    /// and with [`BlaPhiSource::Computed`] the token's row of phi `[N]`.
    pub const fn scratch_len(&self) -> u64 {
        let (h, k, v, n) = self.dims64();
        let row = match self.phi_source {
            BlaPhiSource::Table => 0,
            BlaPhiSource::Computed => n,
        };
        sum(&[product(&[2, h, k]), product(&[2, h, v]), n, row])
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words with a pinned prefix of up to `pinned_max` tokens
    /// ([`BlaConfig::state_len`]; `pinned_max` is for SWA only).
    pub(crate) const fn layer_state_len(&self, _pinned_max: usize) -> u64 {
        self.state_len()
    }

    /// Input width of the output projection (`o_proj` columns): `H * V`.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        self.num_heads as u64 * self.head_v_dim as u64
    }

    /// How the layer keeps its state: f32 only (no integer step yet; in an
    /// image on the integer token path the layer runs its f32 step).
    pub(crate) const fn state_format(&self) -> crate::format::StateFormat {
        crate::format::StateFormat::F32
    }

    /// The oldest image format version whose layer record holds this
    /// configuration: 5 for a computed phi, else 1 (every other `bla` record
    /// is one that format 1 could hold).
    pub(crate) const fn min_format_version(&self) -> u32 {
        match self.phi_source {
            BlaPhiSource::Table => MIN_FORMAT_VERSION,
            BlaPhiSource::Computed => COMPUTED_PHI_FORMAT_VERSION,
        }
    }

    /// Cosine coefficient of mode `m` in the kernel (mode 0 weighs 1).
    pub fn mode_weight(&self, m: u32) -> f64 {
        if m > self.modes {
            return 0.0;
        }
        let nyquist = if m == 0 || 2 * m as u64 == self.period as u64 {
            1.0
        } else {
            2.0
        };
        match self.kernel {
            BlaKernel::Dirichlet => nyquist,
            BlaKernel::Fejer => nyquist * (1.0 - m as f64 / (self.modes as f64 + 1.0)),
        }
    }

    /// Write weight of slot `n` for a token at phase `r = t mod P`:
    /// `kernel(2 pi (u_n - r) / P) / P` with `u_n = n P / N` (computed in f64).
    pub fn phi(&self, r: u32, n: u32) -> f64 {
        let x = 2.0
            * core::f64::consts::PI
            * (n as f64 / self.slots as f64 - r as f64 / self.period as f64);
        let sum: f64 = (0..=self.modes)
            .map(|m| self.mode_weight(m) * libm::cos(m as f64 * x))
            .sum();
        sum / self.period as f64
    }

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
        for (slot, row) in rows.chunks_exact_mut(x.len()).enumerate() {
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

    /// Slots that take part in the softmax at position `t`: those with
    /// `u_n <= t` during the first period, all of them afterwards.
    pub fn live_slots(&self, t: u64) -> usize {
        let (p, n) = (self.period as u64, self.slots as u64);
        if t >= p {
            n as usize
        } else {
            ((t * n) / p + 1).min(n) as usize
        }
    }
}

impl Mixer for BlaConfig {
    fn push_specs(&self, layer: u16, d: u32, s: &mut Specs) {
        let (h, k, v) = (self.num_heads, self.head_k_dim, self.head_v_dim);
        let (qk, vo) = (width(h, k), width(h, v));
        push(s, layer, Role::QProj, [qk, d, 0], true);
        push(s, layer, Role::KProj, [qk, d, 0], true);
        push(s, layer, Role::VProj, [vo, d, 0], true);
        if self.conv_size > 0 {
            push_conv_specs(s, layer, [qk, qk, vo], self.conv_size);
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
        let (h, k, v, n) = self.dims();
        let (q, rest) = scratch.split_at_mut(h * k);
        let (kk, rest) = rest.split_at_mut(h * k);
        let (vv, rest) = rest.split_at_mut(h * v);
        let (o, rest) = rest.split_at_mut(h * v);
        let row_len = match self.phi_source {
            BlaPhiSource::Table => 0,
            BlaPhiSource::Computed => n,
        };
        let (scores, phi_row) = rest
            .get_mut(..n.saturating_add(row_len))
            .ok_or(Error::BadHeader("bla scratch too small"))?
            .split_at_mut(n);

        w.get(Role::QProj)?.matvec(&x, q)?;
        w.get(Role::KProj)?.matvec(&x, kk)?;
        w.get(Role::VProj)?.matvec(&x, vv)?;
        let (ks_all, rest) = state.split_at_mut(h * n * k);
        let (vs_all, conv_state) = rest.split_at_mut(h * n * v);
        if self.conv_size > 0 {
            conv::step_qkv(w, self.conv_size as usize, conv_state, q, kk, vv)?;
        }

        let r = (ctx.pos % self.period as u64) as usize;
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
        for head in 0..h {
            let ks = &mut ks_all[head * n * k..(head + 1) * n * k];
            let vs = &mut vs_all[head * n * v..(head + 1) * n * v];
            let (kh, vh) = (&kk[head * k..(head + 1) * k], &vv[head * v..(head + 1) * v]);
            self.write_slots(phi_r, ks, kh);
            self.write_slots(phi_r, vs, vh);
            let qh = &q[head * k..(head + 1) * k];
            let live_scores = &mut scores[..live];
            for (s, krow) in live_scores.iter_mut().zip(ks.chunks_exact(k)) {
                *s = dot(qh, krow) * scale;
            }
            softmax_in_place(live_scores);
            let oh = &mut o[head * v..(head + 1) * v];
            oh.fill(0.0);
            for (&p, vrow) in live_scores.iter().zip(vs.chunks_exact(v)) {
                oh.iter_mut().zip(vrow).for_each(|(e, &vc)| *e += p * vc);
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
    use core::f64::consts::PI;

    fn config(
        period: u32,
        modes: u32,
        slots: u32,
        kernel: BlaKernel,
        decay: BlaDecay,
        gamma: f32,
    ) -> BlaConfig {
        BlaConfig {
            num_heads: 1,
            head_k_dim: 3,
            head_v_dim: 3,
            period,
            modes,
            slots,
            kernel,
            decay,
            gamma,
            conv_size: 0,
            phi_source: BlaPhiSource::Computed,
        }
    }

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

    #[test]
    fn full_resolution_phi_is_one_hot() {
        let c = config(7, 3, 7, BlaKernel::Dirichlet, BlaDecay::Gated, 1.0);
        for r in 0..7 {
            for n in 0..7 {
                let want = if r == n { 1.0 } else { 0.0 };
                assert!((c.phi(r, n) - want).abs() < 1e-12, "r={r} n={n}");
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
        let mut configs = std::vec::Vec::new();
        for p in 1..=24u32 {
            for m in 0..=p / 2 {
                for n in 1..=p + 3 {
                    configs.push((p, m, n));
                }
            }
        }
        configs.extend([
            (64, 4, 9),
            (64, 7, 15),
            (64, 15, 31),
            (64, 32, 64),
            (64, 32, 16),
            (100, 50, 7),
            (1000, 17, 50),
            (4096, 100, 201),
        ]);
        for (p, m, n) in configs {
            for kernel in [BlaKernel::Dirichlet, BlaKernel::Fejer] {
                let c = config(p, m, n, kernel, BlaDecay::Gated, 1.0);
                let phases: std::vec::Vec<u32> = if p <= 128 {
                    (0..p).collect()
                } else {
                    (0..p).step_by(p as usize / 61).chain([p - 1]).collect()
                };
                let e = computed_phi_error(&c, phases.into_iter());
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

    #[test]
    fn the_phi_flag_round_trips_and_needs_format_5() {
        for source in [BlaPhiSource::Table, BlaPhiSource::Computed] {
            let c = BlaConfig {
                phi_source: source,
                ..config(12, 3, 7, BlaKernel::Fejer, BlaDecay::Scalar, 0.9)
            };
            let parsed = BlaConfig::from_words(&c.to_words(), None).unwrap();
            assert_eq!(parsed, c);
            let want = if source == BlaPhiSource::Computed {
                5
            } else {
                1
            };
            assert_eq!(c.min_format_version(), want);
            let table = BlaConfig {
                phi_source: BlaPhiSource::Table,
                ..c
            };
            let row = if source == BlaPhiSource::Computed {
                7
            } else {
                0
            };
            assert_eq!(c.scratch_len() - table.scratch_len(), row);
        }
        let mut w = config(12, 3, 7, BlaKernel::Fejer, BlaDecay::Gated, 1.0).to_words();
        w[9] |= 4;
        assert!(BlaConfig::from_words(&w, None).is_err());
    }

    #[test]
    fn fewer_modes_blur_the_window() {
        // Each slot's weights over one period sum to 1 and peak at its own phase;
        // Fejér weights (2M < P) are non-negative.
        let c = config(16, 3, 7, BlaKernel::Fejer, BlaDecay::Gated, 1.0);
        for n in 0..7 {
            let weights: [f64; 16] = core::array::from_fn(|r| c.phi(r as u32, n));
            let sum: f64 = weights.iter().sum();
            assert!((sum - 1.0).abs() < 1e-12);
            let u = n as f64 * 16.0 / 7.0;
            let peak = (0..16)
                .max_by(|&a, &b| weights[a].total_cmp(&weights[b]))
                .unwrap();
            let dist = (peak as f64 - u).abs().min(16.0 - (peak as f64 - u).abs());
            assert!(dist <= 0.5 + 1e-9, "slot {n}: peak at {peak}, phase {u}");
            assert!(weights.iter().all(|&w| w >= -1e-12));
        }
    }

    #[test]
    fn live_slots_follow_the_phases_in_the_first_period() {
        let c = config(10, 2, 4, BlaKernel::Dirichlet, BlaDecay::Gated, 1.0);
        // Phases u_n = 0, 2.5, 5, 7.5.
        let live: [usize; 12] = core::array::from_fn(|t| c.live_slots(t as u64));
        assert_eq!(live, [1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 4, 4]);
        assert_eq!(c.live_slots(u64::MAX), 4);
    }
}
