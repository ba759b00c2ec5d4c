//! The `bla` layer's configuration: its record, checks, state sizes (both
//! state formats), the f64 reference of its write weights and the warm-up
//! rule, shared by the f32 step (`mixers/bla.rs`) and the integer step
//! (`mixers/bla_int.rs`), so neither imports the other's file through it.

use super::{conv, conv_int, product, sum};
use crate::error::{ensure, ensure_size, Error, Result};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, StateFormat, STATE_WORD};
use crate::image::{COMPUTED_PHI_FORMAT_VERSION, INTEGER_PATH_FORMAT_VERSION, MIN_FORMAT_VERSION};

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
/// flags (bit 0 short conv, bit 1 phi computed: format 5) | conv_size |
/// Hkv` (0 = `H`: every record written before the word had a meaning), and
/// word 15 the state format (`format::STATE_WORD`: f32, or int16 on the
/// integer token path, `mixers/bla_int.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlaConfig {
    /// Query heads H.
    pub num_heads: u32,
    /// Key/value heads Hkv (divides H; `H` = one key/value head per query
    /// head, every image written before the option existed): query head
    /// `h` reads the slot memories of key/value head `h / (H / Hkv)`.
    pub num_kv_heads: u32,
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
    /// How the slot memories are kept (record word 15): f32, or int16
    /// with per-(head, slot) scales (`mixers/bla_int.rs`).
    pub state: StateFormat,
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
            num_kv_heads: if w[KV_HEADS_WORD] == 0 {
                w[0]
            } else {
                w[KV_HEADS_WORD]
            },
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
            state: match StateFormat::from_code(w[STATE_WORD]) {
                Some(s) => s,
                None => {
                    return Err(Error::BadConfig {
                        layer,
                        reason: "unknown state format",
                    })
                }
            },
        };
        ensure!(
            !matches!(c.state, StateFormat::Int8Kv | StateFormat::Int8KvLog),
            layer,
            "this mixer has no step for that state format"
        );
        ensure!(w[9] & !3 == 0, layer, "unknown bla flags");
        ensure!(dim_ok(c.num_heads), layer, "bla num_heads out of range");
        ensure!(
            dim_ok(c.num_kv_heads),
            layer,
            "bla num_kv_heads out of range"
        );
        ensure!(
            c.num_heads % c.num_kv_heads == 0,
            layer,
            "num_heads must be a multiple of num_kv_heads"
        );
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
        let mut w = record_words(&[
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
            // 0 for one kv head per query head: the record every image
            // before the option has.
            if self.num_kv_heads == self.num_heads {
                0
            } else {
                self.num_kv_heads
            },
        ]);
        w[STATE_WORD] = self.state as u32;
        w
    }

    /// `(H, Hkv, K, V, N)`.
    pub(super) const fn dims(&self) -> (usize, usize, usize, usize, usize) {
        (
            self.num_heads as usize,
            self.num_kv_heads as usize,
            self.head_k_dim as usize,
            self.head_v_dim as usize,
            self.slots as usize,
        )
    }

    const fn dims64(&self) -> (u64, u64, u64, u64, u64) {
        let (h, g, k) = (self.num_heads, self.num_kv_heads, self.head_k_dim);
        let (v, n) = (self.head_v_dim, self.slots);
        (h as u64, g as u64, k as u64, v as u64, n as u64)
    }

    /// State words: f32, `Hkv * N * (K + V)` plus the convolution caches
    /// (`H*K + Hkv*K + Hkv*V` channels); int16, per kv head and slot four
    /// scale words and `K + V` 16-bit mantissas (keys and values each
    /// padded to a word), then the q, k and v rings of `mixers::conv_int`
    /// (`mixers/bla_int.rs`).
    pub const fn state_len(&self) -> u64 {
        let (h, hkv, k, v, n) = self.dims64();
        if let StateFormat::Int16 = self.state {
            return sum(&[
                product(&[hkv, n, SLOT_WORDS]),
                product(&[hkv, n, k]).div_ceil(2),
                product(&[hkv, n, v]).div_ceil(2),
                conv_int::state_words(product(&[h, k]), self.conv_size),
                conv_int::state_words(product(&[hkv, k]), self.conv_size),
                conv_int::state_words(product(&[hkv, v]), self.conv_size),
            ]);
        }
        let channels = sum(&[product(&[h, k]), product(&[hkv, k]), product(&[hkv, v])]);
        sum(&[
            product(&[hkv, n, k + v]),
            conv::state_words(channels, self.conv_size),
        ])
    }

    /// Scratch words: q, k (`H*K` each), v, o (`H*V` each), scores `[N]`,
    /// and with [`BlaPhiSource::Computed`] the token's row of phi `[N]`; the
    /// int16 state's step instead the token's row of phi as [`crate::fixed::Fx`]
    /// values (two words each, `[2N]`, both phi sources) and an i64
    /// accumulator `[V]` (`2V + 1` words, the one for its alignment).
    /// (The k and v parts are sized for `H` heads; with `Hkv < H` only the
    /// first `Hkv` are used.)
    pub const fn scratch_len(&self) -> u64 {
        let (h, _, k, v, n) = self.dims64();
        if let StateFormat::Int16 = self.state {
            return sum(&[
                product(&[2, h, k]),
                product(&[2, h, v]),
                product(&[3, n]),
                product(&[2, v]) + 1,
            ]);
        }
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

    /// How the layer keeps its slot memories (record word 15).
    pub(crate) const fn state_format(&self) -> StateFormat {
        self.state
    }

    /// The oldest image format version whose layer record holds this
    /// configuration: 6 for an int16 state, 5 for a computed phi, else 1
    /// (every other `bla` record is one that format 1 could hold).
    pub(crate) const fn min_format_version(&self) -> u32 {
        if !matches!(self.state, StateFormat::F32) {
            return INTEGER_PATH_FORMAT_VERSION;
        }
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

/// Index in [`LayerWords`] (the record's word 12) of `num_kv_heads`, 0 for
/// `num_heads` (issue 28: within format 8, no version of its own; an
/// older reader refuses such a layer by its `k_proj` shape).
pub(crate) const KV_HEADS_WORD: usize = 11;

/// Words of a slot's scale records in the int16 state: `Ek | fk | Ev | fv`
/// (`mixers/slots_int.rs`).
pub(crate) const SLOT_WORDS: u64 = 4;

/// A one-head configuration for the tests (`K = V = 3`, no convolution,
/// computed phi, f32 state).
#[cfg(test)]
pub(crate) fn test_config(
    period: u32,
    modes: u32,
    slots: u32,
    kernel: BlaKernel,
    decay: BlaDecay,
    gamma: f32,
) -> BlaConfig {
    BlaConfig {
        num_heads: 1,
        num_kv_heads: 1,
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
        state: StateFormat::F32,
    }
}

#[cfg(test)]
extern crate std;

/// The `(P, M, N)` configurations the write-weight tests cover: every
/// `P <= 24` (all `M`, `N <= P + 3`) and larger ones, the shipped models'
/// (`P = 64`, `M = 4, 7, 15`) among them; and the phases tested of each
/// (all of them up to `P = 128`, else 62 spread over the period).
#[cfg(test)]
pub(crate) fn phi_test_configs() -> std::vec::Vec<(u32, u32, u32, std::vec::Vec<u32>)> {
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
    configs
        .into_iter()
        .map(|(p, m, n)| {
            let phases = if p <= 128 {
                (0..p).collect()
            } else {
                (0..p).step_by(p as usize / 61).chain([p - 1]).collect()
            };
            (p, m, n, phases)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use test_config as config;

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

    /// `num_kv_heads` (record word 12): 0 and `H` both mean one key/value
    /// head per query head (0 is what is written, so older records read
    /// unchanged); a divisor round-trips and shrinks the state by `H /
    /// Hkv`; a non-divisor or an out-of-range count is a typed refusal.
    #[test]
    fn shared_kv_heads_round_trip_shrink_the_state_and_are_checked() {
        let base = BlaConfig {
            num_heads: 4,
            num_kv_heads: 4,
            ..config(12, 3, 7, BlaKernel::Fejer, BlaDecay::Gated, 1.0)
        };
        let w = base.to_words();
        assert_eq!(w[KV_HEADS_WORD], 0);
        assert_eq!(BlaConfig::from_words(&w, None).unwrap(), base);
        let mut explicit = w;
        explicit[KV_HEADS_WORD] = 4;
        assert_eq!(BlaConfig::from_words(&explicit, None).unwrap(), base);
        for state in [StateFormat::F32, StateFormat::Int16] {
            for conv_size in [0, 4] {
                let full = BlaConfig {
                    state,
                    conv_size,
                    ..base
                };
                let shared = BlaConfig {
                    num_kv_heads: 2,
                    ..full
                };
                let w = shared.to_words();
                assert_eq!(w[KV_HEADS_WORD], 2);
                assert_eq!(BlaConfig::from_words(&w, Some(0)).unwrap(), shared);
                assert_eq!(shared.min_format_version(), full.min_format_version());
                if conv_size == 0 {
                    assert_eq!(full.state_len(), 2 * shared.state_len(), "{state:?}");
                } else {
                    assert!(shared.state_len() < full.state_len());
                }
            }
        }
        for (bad, reason) in [
            (3, "num_heads must be a multiple of num_kv_heads"),
            (8, "num_heads must be a multiple of num_kv_heads"),
            (MAX_DIM_PLUS_ONE, "bla num_kv_heads out of range"),
        ] {
            let mut w = base.to_words();
            w[KV_HEADS_WORD] = bad;
            assert_eq!(
                BlaConfig::from_words(&w, Some(1)),
                Err(Error::BadConfig {
                    layer: Some(1),
                    reason
                })
            );
        }
    }

    /// One more than the largest dimension a record allows.
    const MAX_DIM_PLUS_ONE: u32 = crate::format::MAX_DIM + 1;

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
