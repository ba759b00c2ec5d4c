//! The `mla` layer's configuration: its record, checks and state sizes
//! (both state formats), shared by the f32 step (`mixers/mla.rs`) and the
//! integer step (`mixers/mla_int.rs`).

use super::{product, rope, sum};
use crate::error::{ensure, ensure_size, Error, Result};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, StateFormat, STATE_WORD};
use crate::image::{INTEGER_PATH_FORMAT_VERSION, MIXER_OPTIONS_FORMAT_VERSION};

/// Latent-compressed window layer configuration.
///
/// Record words: `H | d (q/k head size without RoPE) | dv | dr (RoPE size,
/// even, may be 0) | R (kv_lora_rank) | W (window) | rope_theta (f32 bits)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlaConfig {
    /// Heads H.
    pub num_heads: u32,
    /// Per-head q/k size of the part without RoPE, `d`.
    pub head_dim: u32,
    /// Per-head value size `dv`.
    pub v_head_dim: u32,
    /// Size of the RoPE part of q and of the shared RoPE key, `dr` (even).
    pub rope_dim: u32,
    /// Latent size `R` (`kv_lora_rank`).
    pub kv_lora_rank: u32,
    /// Window W: the query sees itself and the W - 1 previous tokens.
    pub window: u32,
    /// RoPE base.
    pub rope_theta: f32,
    /// How the window is kept (record word 15, format 6): f32, or int8
    /// latents and RoPE keys with per-entry scales for the integer step
    /// (`mixers/mla_int.rs`).
    pub state: StateFormat,
}

impl MlaConfig {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<MlaConfig> {
        let c = MlaConfig {
            num_heads: w[0],
            head_dim: w[1],
            v_head_dim: w[2],
            rope_dim: w[3],
            kv_lora_rank: w[4],
            window: w[5],
            rope_theta: f32::from_bits(w[6]),
            state: match StateFormat::from_code(w[STATE_WORD]) {
                Some(s @ (StateFormat::F32 | StateFormat::Int8Kv)) => s,
                Some(_) => {
                    return Err(Error::BadConfig {
                        layer,
                        reason: "this mixer has no step for that state format",
                    })
                }
                None => {
                    return Err(Error::BadConfig {
                        layer,
                        reason: "unknown state format",
                    })
                }
            },
        };
        ensure!(dim_ok(c.num_heads), layer, "mla num_heads out of range");
        ensure!(
            dim_ok(c.head_dim) && dim_ok(c.v_head_dim),
            layer,
            "mla head dims out of range"
        );
        ensure!(
            c.rope_dim <= 1 << 16 && c.rope_dim % 2 == 0,
            layer,
            "mla rope_dim must be even (0 for none) and at most 65536"
        );
        ensure!(
            dim_ok(c.kv_lora_rank),
            layer,
            "mla kv_lora_rank out of range"
        );
        ensure!(dim_ok(c.window), layer, "mla window must be >= 1");
        ensure!(
            c.rope_dim == 0 || (c.rope_theta.is_finite() && c.rope_theta > 0.0),
            layer,
            "rope_theta must be finite and > 0"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_dim + c.rope_dim)
                && width_ok(c.num_heads, c.head_dim + c.v_head_dim),
            layer,
            "mla num_heads * head sizes exceeds 2^20"
        );
        ensure_size!(
            width_ok(c.num_heads, c.kv_lora_rank) && c.kv_lora_rank + c.rope_dim <= 1 << 20,
            layer,
            "mla num_heads * kv_lora_rank exceeds 2^20"
        );
        Ok(c)
    }

    /// Encodes the layer record words (the state format in word 15).
    pub fn to_words(&self) -> LayerWords {
        let mut w = record_words(&[
            self.num_heads,
            self.head_dim,
            self.v_head_dim,
            self.rope_dim,
            self.kv_lora_rank,
            self.window,
            self.rope_theta.to_bits(),
        ]);
        w[STATE_WORD] = self.state as u32;
        w
    }

    pub(super) const fn dims(&self) -> (usize, usize, usize, usize, usize) {
        (
            self.num_heads as usize,
            self.head_dim as usize,
            self.v_head_dim as usize,
            self.rope_dim as usize,
            self.kv_lora_rank as usize,
        )
    }

    /// Floats per window slot: `R + dr`.
    pub const fn slot_len(&self) -> u64 {
        self.kv_lora_rank as u64 + self.rope_dim as u64
    }

    /// State words: `W * (R + dr)` with an f32 window; with an int8 one
    /// (`mla_int.rs`) two scale words per slot, then the latents `[W][R]`
    /// as int8 and the RoPE keys `[W][dr]` as i16, each padded to a word.
    pub const fn state_len(&self) -> u64 {
        let (w, r, dr) = (
            self.window as u64,
            self.kv_lora_rank as u64,
            self.rope_dim as u64,
        );
        if let StateFormat::Int8Kv = self.state {
            return sum(&[
                product(&[2, w]),
                product(&[w, r]).div_ceil(4),
                product(&[w, dr]).div_ceil(2),
            ]);
        }
        product(&[w, self.slot_len()])
    }

    /// Scratch words: q `[H*(d+dr)]`, the new slot `[R+dr]`, the absorbed
    /// query and the latent accumulator (`R` each), o `[H*dv]`, RoPE table `[dr]`.
    pub const fn scratch_len(&self) -> u64 {
        let (h, d, dv, dr, r) = (
            self.num_heads as u64,
            self.head_dim as u64,
            self.v_head_dim as u64,
            self.rope_dim as u64,
            self.kv_lora_rank as u64,
        );
        if let StateFormat::Int8Kv = self.state {
            // The integer step (`mla_int.rs`): q, the new slot, the latent
            // query, an i64 accumulator `[max(R, dv)]` (+1 word to align
            // it), o, the RoPE table, and `[R + dr]` to normalize in and
            // for the query's 15-bit views.
            let big = if r > dv { r } else { dv };
            return sum(&[
                product(&[h, d + dr]),
                r + dr,
                r,
                product(&[2, big]),
                1,
                product(&[h, dv]),
                dr,
                r + dr,
            ]);
        }
        sum(&[product(&[h, d + dr]), r + dr, 2 * r, product(&[h, dv]), dr])
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words with a pinned prefix of up to `pinned_max` tokens
    /// ([`MlaConfig::state_len`]; `pinned_max` is for SWA only).
    pub(crate) const fn layer_state_len(&self, _pinned_max: usize) -> u64 {
        self.state_len()
    }

    /// Input width of the output projection (`o_proj` columns): `H * dv`.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        self.num_heads as u64 * self.v_head_dim as u64
    }

    /// How the layer keeps its window: f32, or int8 for the integer step.
    pub(crate) const fn state_format(&self) -> StateFormat {
        self.state
    }

    /// The oldest image format version whose layer record holds this
    /// configuration: format 6 for an int8 window, else format 4.
    pub(crate) const fn min_format_version(&self) -> u32 {
        match self.state {
            StateFormat::F32 => MIXER_OPTIONS_FORMAT_VERSION,
            _ => INTEGER_PATH_FORMAT_VERSION,
        }
    }

    /// Fills `cs` (`[dr]`: cosines then sines) for position `pos`
    /// ([`rope::table`]).
    pub(super) fn rope_table(&self, pos: u64, cs: &mut [f32]) {
        rope::table(self.rope_theta, self.rope_dim, pos, cs);
    }
}
