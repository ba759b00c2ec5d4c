//! `gdn`'s layer configuration: the record words, the family options
//! (docs/spec.md §3.1.1) and the state sizes of both state formats (f32 and
//! int16). The f32 step is `mixers/gdn.rs`, the integer step
//! `mixers/gdn_int.rs`; both read this.

use super::{conv, conv_int, product, sum};
use crate::error::{ensure, ensure_size, Error, Result};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, StateFormat, STATE_WORD};
use crate::image::{INTEGER_PATH_FORMAT_VERSION, MIN_FORMAT_VERSION, MIXER_OPTIONS_FORMAT_VERSION};

/// How the state decays before each write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdnDecay {
    /// `exp(-exp(A_log) * softplus(a_proj x + dt_bias))` (Gated DeltaNet).
    Gated = 0,
    /// No decay (DeltaNet, linear attention).
    None = 1,
    /// A fixed decay per value head `j`: `gamma_j = 1 - 2^(-5 - j)` (RetNet).
    Retention = 2,
}

/// Activation of q and k before their norm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkActivation {
    /// `silu`, inside the short convolution (Gated DeltaNet, fla's default).
    Silu = 0,
    /// `max(0, x)`, after a convolution without SiLU.
    Relu = 1,
    /// `elu(x) + 1`, after a convolution without SiLU.
    EluPlusOne = 2,
    /// None (the convolution without SiLU, if any).
    Identity = 3,
}

/// Normalisation of q and k (per head) before the update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    /// `u / sqrt(sum u^2 + 1e-6)`.
    L2 = 0,
    /// `u / max(sum |u|, 1e-6)` (fla's `qk_norm = "sum"`).
    Sum = 1,
    /// None.
    None = 2,
}

/// The fixed retention decay of value head `j`: `1 - 2^(-5 - j)` (RetNet's
/// per-head decays), exact in f32 (it rounds to 1 from `j = 20` on).
pub const fn retention_gamma(j: usize) -> f32 {
    let e = j.saturating_add(5);
    if e > 126 {
        return 1.0;
    }
    // 2^-e as f32 bits: biased exponent 127 - e, zero mantissa.
    1.0 - f32::from_bits(((127 - e) as u32) << 23)
}

/// Record flag bits (word 5) of a `gdn` layer.
mod flag {
    pub const USE_GATE: u32 = 1;
    pub const NEG_EIGVAL: u32 = 1 << 1;
    pub const DECAY_SHIFT: u32 = 2; // 2 bits: GdnDecay
    pub const ADDITIVE: u32 = 1 << 4;
    pub const NO_BETA: u32 = 1 << 5;
    pub const ACT_SHIFT: u32 = 6; // 2 bits: QkActivation
    pub const NORM_SHIFT: u32 = 8; // 2 bits: QkNorm
    pub const KNOWN: u32 = (1 << 10) - 1;
}

/// Gated DeltaNet layer configuration (and its family, docs/spec.md §3.1.1).
///
/// Record words: `H | HV | K | V | conv_size (0: no short convolution) | flags`,
/// flags bit 0 `use_gate`, bit 1 `allow_neg_eigval`, bits 2-3 decay
/// (0 gated, 1 none, 2 retention), bit 4 additive update (no delta rule),
/// bit 5 no beta, bits 6-7 q/k activation (0 silu, 1 relu, 2 elu+1,
/// 3 identity), bits 8-9 q/k norm (0 l2, 1 sum, 2 none). Gated DeltaNet has
/// all the new bits zero, so its records are those of format 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GdnConfig {
    /// q/k heads H.
    pub num_heads: u32,
    /// Value heads HV (a multiple of H: grouped value attention).
    pub num_v_heads: u32,
    /// q/k head size K.
    pub head_k_dim: u32,
    /// Value head size V.
    pub head_v_dim: u32,
    /// Short convolution width W (0: none, then q and k get their SiLU, if
    /// any, and v its SiLU without a convolution, as in fla).
    pub conv_size: u32,
    /// Gate the output norm with `silu(g_proj x)`.
    pub use_gate: bool,
    /// Let beta range over (0, 2) (negative eigenvalues).
    pub allow_neg_eigval: bool,
    /// Decay of the state before each write.
    pub decay: GdnDecay,
    /// Delta rule (`true`) or additive update.
    pub delta_rule: bool,
    /// Write strength `beta = sigmoid(b_proj x)`; `false`: beta = 1, no `b_proj`.
    pub use_beta: bool,
    /// Activation of q and k.
    pub qk_activation: QkActivation,
    /// Normalisation of q and k.
    pub qk_norm: QkNorm,
    /// How the state is kept (record word 15, format 6): f32, or int16 for
    /// the integer step (`int_step`, docs/integer-path.md).
    pub state: StateFormat,
}

impl GdnConfig {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<GdnConfig> {
        let f = w[5];
        ensure!(f & !flag::KNOWN == 0, layer, "unknown gdn flags");
        let decay = match (f >> flag::DECAY_SHIFT) & 3 {
            0 => GdnDecay::Gated,
            1 => GdnDecay::None,
            2 => GdnDecay::Retention,
            _ => {
                return Err(Error::BadConfig {
                    layer,
                    reason: "unknown gdn decay",
                })
            }
        };
        let qk_activation = match (f >> flag::ACT_SHIFT) & 3 {
            0 => QkActivation::Silu,
            1 => QkActivation::Relu,
            2 => QkActivation::EluPlusOne,
            _ => QkActivation::Identity,
        };
        let qk_norm = match (f >> flag::NORM_SHIFT) & 3 {
            0 => QkNorm::L2,
            1 => QkNorm::Sum,
            2 => QkNorm::None,
            _ => {
                return Err(Error::BadConfig {
                    layer,
                    reason: "unknown gdn qk_norm",
                })
            }
        };
        let state = match StateFormat::from_code(w[STATE_WORD]) {
            Some(s) => s,
            None => {
                return Err(Error::BadConfig {
                    layer,
                    reason: "unknown state format",
                })
            }
        };
        let c = GdnConfig {
            state,
            num_heads: w[0],
            num_v_heads: w[1],
            head_k_dim: w[2],
            head_v_dim: w[3],
            conv_size: w[4],
            use_gate: f & flag::USE_GATE != 0,
            allow_neg_eigval: f & flag::NEG_EIGVAL != 0,
            decay,
            delta_rule: f & flag::ADDITIVE == 0,
            use_beta: f & flag::NO_BETA == 0,
            qk_activation,
            qk_norm,
        };
        ensure!(
            dim_ok(c.num_heads) && dim_ok(c.num_v_heads),
            layer,
            "gdn head counts out of range"
        );
        ensure!(
            dim_ok(c.head_k_dim) && dim_ok(c.head_v_dim),
            layer,
            "gdn head dims out of range"
        );
        ensure!(
            c.num_v_heads % c.num_heads == 0,
            layer,
            "num_v_heads must be a multiple of num_heads"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_k_dim),
            layer,
            "gdn num_heads * head_k_dim exceeds 2^20"
        );
        ensure_size!(
            width_ok(c.num_v_heads, c.head_v_dim),
            layer,
            "gdn num_v_heads * head_v_dim exceeds 2^20"
        );
        ensure!(c.conv_size <= 64, layer, "gdn conv_size must be 0..=64");
        ensure!(
            !c.delta_rule || !matches!(c.qk_norm, QkNorm::None),
            layer,
            "the delta rule needs normalised keys (qk_norm l2 or sum)"
        );
        ensure!(
            matches!(c.state, StateFormat::F32) || !matches!(c.qk_norm, QkNorm::None),
            layer,
            "an int16 gdn state needs normalised keys (qk_norm l2 or sum)"
        );
        ensure!(
            !matches!(c.state, StateFormat::Int8Kv | StateFormat::Int8KvLog),
            layer,
            "this mixer has no step for that state format"
        );
        Ok(c)
    }

    /// Encodes the layer record words (the state format in word 15).
    pub fn to_words(&self) -> LayerWords {
        let mut w = record_words(&[
            self.num_heads,
            self.num_v_heads,
            self.head_k_dim,
            self.head_v_dim,
            self.conv_size,
            self.flags(),
        ]);
        w[STATE_WORD] = self.state as u32;
        w
    }

    /// The record's flag word (zero beyond bit 1 for Gated DeltaNet).
    const fn flags(&self) -> u32 {
        self.use_gate as u32
            | (self.allow_neg_eigval as u32) << 1
            | (self.decay as u32) << flag::DECAY_SHIFT
            | (!self.delta_rule as u32) << 4
            | (!self.use_beta as u32) << 5
            | (self.qk_activation as u32) << flag::ACT_SHIFT
            | (self.qk_norm as u32) << flag::NORM_SHIFT
    }

    /// Whether this is Gated DeltaNet itself (every family option at its
    /// Gated DeltaNet value): the configurations format 1 could hold.
    pub const fn is_gated_deltanet(&self) -> bool {
        self.flags() >> 2 == 0
    }

    /// The family member's name, for reports: `gated_deltanet`, `delta_net`,
    /// `linear_attention`, `retention`, or `gdn_variant` for other mixes.
    pub const fn family_name(&self) -> &'static str {
        match (self.decay, self.delta_rule) {
            (GdnDecay::Gated, true) if self.is_gated_deltanet() => "gated_deltanet",
            (GdnDecay::None, true) => "delta_net",
            (GdnDecay::None, false) => "linear_attention",
            (GdnDecay::Retention, false) => "retention",
            _ => "gdn_variant",
        }
    }

    pub(crate) const fn dims(&self) -> (usize, usize, usize, usize) {
        (
            self.num_heads as usize,
            self.num_v_heads as usize,
            self.head_k_dim as usize,
            self.head_v_dim as usize,
        )
    }

    pub(crate) const fn dims64(&self) -> (u64, u64, u64, u64) {
        let (h, hv, k, v) = (
            self.num_heads,
            self.num_v_heads,
            self.head_k_dim,
            self.head_v_dim,
        );
        (h as u64, hv as u64, k as u64, v as u64)
    }

    /// State words. f32: `HV*V*K` for S plus `(2*H*K + HV*V) * (W - 1)`
    /// for the convolutions. int16: the layout of `mixers/gdn_int.rs` (per
    /// head 3 words of scale, S in 16-bit mantissas, the convolution windows
    /// in 16-bit mantissas with an exponent per window slot): about half.
    pub const fn state_len(&self) -> u64 {
        let (h, hv, k, v) = self.dims64();
        match self.state {
            StateFormat::F32 => {
                let channels = sum(&[product(&[2, h, k]), product(&[hv, v])]);
                sum(&[
                    product(&[hv, v, k]),
                    conv::state_words(channels, self.conv_size),
                ])
            }
            StateFormat::Int16 => int16_state_words(h, hv, k, v, self.conv_size),
            // Refused by `from_words`: a size no buffer has.
            StateFormat::Int8Kv | StateFormat::Int8KvLog => u64::MAX,
        }
    }

    /// Scratch words: q, k (`H*K` each), v, g, o (`HV*V` each), a, b (`HV` each).
    pub const fn scratch_len(&self) -> u64 {
        let (h, hv, k, v) = self.dims64();
        sum(&[product(&[2, h, k]), product(&[3, hv, v]), 2 * hv])
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words with a pinned prefix of up to `pinned_max` tokens
    /// ([`GdnConfig::state_len`]; `pinned_max` is for SWA only).
    pub(crate) const fn layer_state_len(&self, _pinned_max: usize) -> u64 {
        self.state_len()
    }

    /// Input width of the output projection (`o_proj` columns): `HV * V`.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        self.num_v_heads as u64 * self.head_v_dim as u64
    }

    /// The oldest image format version whose layer record holds this
    /// configuration: format 6 for an integer state, format 4 for the GDN
    /// family members other than Gated DeltaNet and for Gated DeltaNet
    /// without a short convolution, else format 1.
    pub(crate) const fn min_format_version(&self) -> u32 {
        if !matches!(self.state, StateFormat::F32) {
            INTEGER_PATH_FORMAT_VERSION
        } else if !self.is_gated_deltanet() || self.conv_size == 0 {
            MIXER_OPTIONS_FORMAT_VERSION
        } else {
            MIN_FORMAT_VERSION
        }
    }

    /// How the layer keeps its state (record word 15).
    pub(crate) const fn state_format(&self) -> StateFormat {
        self.state
    }
}

/// Words of one head's scale record in an int16 state: `E_j`, `f_j`, `M_j`
/// (`mixers/gdn_int.rs`).
pub(crate) const HEAD_WORDS: u64 = 3;

/// State words of an int16 GDN layer (the layout of `mixers/gdn_int.rs`).
pub(crate) const fn int16_state_words(h: u64, hv: u64, k: u64, v: u64, conv_size: u32) -> u64 {
    let heads = product(&[hv, HEAD_WORDS]);
    let s = product(&[hv, v, k]).div_ceil(2);
    let conv = if conv_size == 0 {
        0
    } else {
        let qk = conv_int::state_words(product(&[h, k]), conv_size);
        sum(&[qk, qk, conv_int::state_words(product(&[hv, v]), conv_size)])
    };
    sum(&[heads, s, conv])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gdn() -> GdnConfig {
        GdnConfig {
            num_heads: 2,
            num_v_heads: 4,
            head_k_dim: 8,
            head_v_dim: 16,
            conv_size: 4,
            use_gate: true,
            allow_neg_eigval: true,
            decay: GdnDecay::Gated,
            delta_rule: true,
            use_beta: true,
            qk_activation: QkActivation::Silu,
            qk_norm: QkNorm::L2,
            state: StateFormat::F32,
        }
    }

    #[test]
    fn gated_deltanet_records_keep_their_format_1_words() {
        let w = gdn().to_words();
        assert_eq!(&w[..6], &[2, 4, 8, 16, 4, 3]);
        assert!(w[6..].iter().all(|&x| x == 0));
        assert!(gdn().is_gated_deltanet());
        assert_eq!(gdn().family_name(), "gated_deltanet");
    }

    #[test]
    fn every_family_option_round_trips_through_the_record() {
        let decays = [GdnDecay::Gated, GdnDecay::None, GdnDecay::Retention];
        let acts = [
            QkActivation::Silu,
            QkActivation::Relu,
            QkActivation::EluPlusOne,
            QkActivation::Identity,
        ];
        let norms = [QkNorm::L2, QkNorm::Sum, QkNorm::None];
        let mut seen = 0;
        for decay in decays {
            for act in acts {
                for norm in norms {
                    for (delta_rule, use_beta, conv_size) in
                        [(true, true, 4), (false, false, 0), (false, true, 2)]
                    {
                        let c = GdnConfig {
                            decay,
                            qk_activation: act,
                            qk_norm: norm,
                            delta_rule,
                            use_beta,
                            conv_size,
                            ..gdn()
                        };
                        let parsed = GdnConfig::from_words(&c.to_words(), Some(0));
                        if delta_rule && norm == QkNorm::None {
                            assert!(matches!(parsed, Err(Error::BadConfig { .. })), "{c:?}");
                            continue;
                        }
                        assert_eq!(parsed, Ok(c));
                        seen += 1;
                    }
                }
            }
        }
        assert_eq!(seen, 3 * 4 * (3 * 3 - 1));
    }

    #[test]
    fn unknown_codes_are_refused_not_misread() {
        let mut w = gdn().to_words();
        w[5] = 3 << 2; // decay code 3
        assert!(matches!(
            GdnConfig::from_words(&w, None),
            Err(Error::BadConfig {
                reason: "unknown gdn decay",
                ..
            })
        ));
        w[5] = 3 << 8; // qk_norm code 3
        assert!(GdnConfig::from_words(&w, None).is_err());
        w[5] = 1 << 10;
        assert!(GdnConfig::from_words(&w, None).is_err());
        w[5] = 0;
        w[4] = 65;
        assert!(GdnConfig::from_words(&w, None).is_err());
    }

    #[test]
    fn retention_decays_are_retnets_exactly() {
        for j in 0..200 {
            let want = 1.0 - 2f64.powi(-5 - j as i32);
            assert_eq!(retention_gamma(j), want as f32, "head {j}");
        }
        assert_eq!(retention_gamma(0), 0.96875);
        assert_eq!(retention_gamma(19), 1.0 - 2f32.powi(-24));
        assert_eq!(retention_gamma(20), 1.0);
        assert_eq!(retention_gamma(usize::MAX - 4), 1.0);
    }

    #[test]
    fn family_names_follow_the_options() {
        let none = GdnConfig {
            decay: GdnDecay::None,
            ..gdn()
        };
        assert_eq!(none.family_name(), "delta_net");
        let additive = GdnConfig {
            delta_rule: false,
            ..none
        };
        assert_eq!(additive.family_name(), "linear_attention");
        let retention = GdnConfig {
            decay: GdnDecay::Retention,
            ..additive
        };
        assert_eq!(retention.family_name(), "retention");
        assert_eq!(
            GdnConfig {
                qk_norm: QkNorm::Sum,
                ..gdn()
            }
            .family_name(),
            "gdn_variant"
        );
    }
}
