//! The `cross` layer's configuration: its record, checks and sizes
//! (docs/spec.md §3.10), below its step (`mixers/cross.rs`).

use super::{product, sum};
use crate::error::{ensure, ensure_size, Result};
use crate::format::{dim_ok, record_words, width_ok, LayerWords, StateFormat, STATE_WORD};
use crate::image::BLOCK_FORMAT_VERSION;

/// Record flag bits (word 5) of a `cross` layer.
mod flag {
    /// A sigmoid output gate: `o = o * sigmoid(g_proj x)` before `o_proj`.
    pub const OUTPUT_GATE: u32 = 1;
    pub const KNOWN: u32 = 1;
}

/// Most baked memories one `cross` layer may hold (issue 32: "up to 8").
pub const MAX_MEMORIES: u32 = 8;

/// f32 words of a caller-owned memory of `slots` slots for one `cross`
/// layer of `kv_heads` key/value heads of `head_dim` channels: its keys
/// then its values, `[slots, kv_heads * head_dim]` each (the layout of one
/// baked memory of `attn.memory_k` and `attn.memory_v`). Saturates at
/// `usize::MAX`. [`crate::memory_len`] sums it over a model's cross layers.
pub const fn cross_memory_len(slots: usize, kv_heads: usize, head_dim: usize) -> usize {
    match 2usize.checked_mul(slots) {
        Some(a) => match a.checked_mul(kv_heads) {
            Some(b) => match b.checked_mul(head_dim) {
                Some(c) => c,
                None => usize::MAX,
            },
            None => usize::MAX,
        },
        None => usize::MAX,
    }
}

/// Words of scratch the integer step (`mixers/cross_int.rs`) takes beyond q, the gate and the
/// output (`[H*d]` each): the weighted sums, i64 and their i32 partial
/// sums (`[H*d]` each), each head's i64 sum of weights, its largest logit,
/// its query's multiplier and its logits' shift, and two words for the
/// i64 alignment.
pub(crate) const fn int_step_scratch(heads: u64, head_dim: u64) -> u64 {
    3 * heads * head_dim + 5 * heads + 2
}

/// Cross-attention over a fixed memory stored in the image (docs/spec.md
/// §3.10, docs/cross-attention.md).
///
/// Record words: `H | Hkv | d (head_dim) | m (memory_slots) | N (memories,
/// 1..=8) | flags | E (memory_encoder_layers)`, flags bit 0 the sigmoid
/// output gate; word 15 the state format: f32, or `Int8Kv` for the integer
/// step over int8 memories (`mixers/cross_int.rs`, format 6 images). The
/// state is one word either way: the selected memory's index. `E` (0 in stage-1 images) is how many
/// layers of the stack the memory encoder runs before this layer's norm and
/// `k_proj`/`v_proj` (docs/cross-attention.md, "The memory encoder").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossConfig {
    /// Query heads H.
    pub num_heads: u32,
    /// Key/value heads Hkv of the memory (divides H: query head `h` reads
    /// kv head `h / (H / Hkv)`).
    pub num_kv_heads: u32,
    /// Channels per head d (queries, keys and values).
    pub head_dim: u32,
    /// Slots m of each memory.
    pub memory_slots: u32,
    /// Baked memories N in the image (1..=[`MAX_MEMORIES`]).
    pub memories: u32,
    /// Whether the output is gated by `sigmoid(g_proj x)`.
    pub output_gate: bool,
    /// Layers of the stack (`0..E`) the memory encoder runs on a memory's
    /// tokens before this layer's pre-norm and `k_proj`/`v_proj`
    /// ([`crate::Session::encode_memory`]); none of them may be a `cross`
    /// layer (checked at load), so `E` is at most the first one's index.
    pub encoder_layers: u32,
    /// Which step the layer takes on the integer token path (record word
    /// 15): [`StateFormat::F32`], its f32 step inside the integer block,
    /// or [`StateFormat::Int8Kv`], the integer step over int8 memories
    /// (`mixers/cross_int.rs`; a memory of another dtype still takes the
    /// f32 step). The state is one word either way.
    pub state: StateFormat,
}

impl CrossConfig {
    /// Parses and validates a layer record.
    pub const fn from_words(w: &LayerWords, layer: Option<u16>) -> Result<CrossConfig> {
        let f = w[5];
        ensure!(f & !flag::KNOWN == 0, layer, "unknown cross flags");
        // f32 (0) or the integer step over int8 memories (2).
        let int8 = w[STATE_WORD] == StateFormat::Int8Kv as u32;
        ensure!(
            int8 || w[STATE_WORD] == StateFormat::F32 as u32,
            layer,
            "this mixer has no step for that state format"
        );
        let state = if int8 {
            StateFormat::Int8Kv
        } else {
            StateFormat::F32
        };
        let c = CrossConfig {
            num_heads: w[0],
            num_kv_heads: w[1],
            head_dim: w[2],
            memory_slots: w[3],
            memories: w[4],
            output_gate: f & flag::OUTPUT_GATE != 0,
            encoder_layers: w[6],
            state,
        };
        ensure!(
            dim_ok(c.num_heads)
                && dim_ok(c.num_kv_heads)
                && dim_ok(c.head_dim)
                && dim_ok(c.memory_slots),
            layer,
            "cross dims out of range"
        );
        ensure!(
            c.num_heads % c.num_kv_heads == 0,
            layer,
            "cross num_kv_heads must divide num_heads"
        );
        ensure!(
            c.memories >= 1 && c.memories <= MAX_MEMORIES,
            layer,
            "cross memories must be 1..=8"
        );
        // The encoder runs layers before this one (and before the first
        // cross layer: `Model::load` checks that across layers).
        ensure!(
            match layer {
                Some(l) => c.encoder_layers <= l as u32,
                None => true,
            },
            layer,
            "cross memory_encoder_layers must not reach this layer"
        );
        ensure_size!(
            width_ok(c.num_heads, c.head_dim),
            layer,
            "cross num_heads * head_dim exceeds 2^20"
        );
        ensure_size!(
            c.memory_slots as u64 * c.num_kv_heads as u64 * c.head_dim as u64 <= 1 << 20,
            layer,
            "cross memory_slots * num_kv_heads * head_dim exceeds 2^20"
        );
        Ok(c)
    }

    /// Encodes the layer record words.
    pub fn to_words(&self) -> LayerWords {
        let flags = if self.output_gate {
            flag::OUTPUT_GATE
        } else {
            0
        };
        let mut w = record_words(&[
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.memory_slots,
            self.memories,
            flags,
            self.encoder_layers,
        ]);
        w[STATE_WORD] = self.state as u32;
        w
    }

    /// Query width `H * d` (saturating for a hand-built config).
    pub const fn query_width(&self) -> u64 {
        product(&[self.num_heads as u64, self.head_dim as u64])
    }

    /// Key (and value) width of one memory slot, `Hkv * d`.
    pub const fn kv_width(&self) -> u64 {
        product(&[self.num_kv_heads as u64, self.head_dim as u64])
    }

    /// Values in one memory's keys (or values): `m * Hkv * d`.
    pub const fn memory_values(&self) -> u64 {
        product(&[self.memory_slots as u64, self.kv_width()])
    }

    /// f32 words of one caller-owned memory of `slots` slots for this
    /// layer: keys then values, `[slots, Hkv*d]` each
    /// ([`cross_memory_len`]).
    pub const fn memory_len(&self, slots: usize) -> u64 {
        product(&[2, slots as u64, self.kv_width()])
    }

    /// State words: one, the selected memory's index (an f32 holding a
    /// whole number; 0, the first memory, when zeroed).
    pub const fn state_len(&self) -> u64 {
        1
    }

    /// Scratch words: q, the gate and the output, `[H*d]` each; the
    /// integer step adds its i64 weighted sums and a running softmax a head
    /// (`3 H d + 5 H + 2` words, `int_step_scratch`).
    pub const fn scratch_len(&self) -> u64 {
        let qw = self.query_width();
        let int = match self.state {
            StateFormat::F32 => 0,
            _ => int_step_scratch(self.num_heads as u64, self.head_dim as u64),
        };
        sum(&[qw, qw, qw, int])
    }

    // The layer interface: `config::LayerConfig`'s methods dispatch to these
    // (every mixer has them, with the same signatures).

    /// State words ([`CrossConfig::state_len`]; `pinned_max` is for SWA only).
    pub(crate) const fn layer_state_len(&self, _pinned_max: usize) -> u64 {
        self.state_len()
    }

    /// Input width of the output projection (`o_proj` columns): `H * d`.
    pub(crate) const fn out_proj_cols(&self) -> u64 {
        self.query_width()
    }

    /// Which step the layer takes on the integer token path
    /// ([`CrossConfig::state`]; the state is one word either way).
    pub(crate) const fn state_format(&self) -> StateFormat {
        // A firmware without the `cross` feature refuses the layer at
        // load: the constant lets it drop the field's uses (152 bytes of
        // stack on the m4f's GDN eval firmware).
        if cfg!(feature = "cross") {
            self.state
        } else {
            StateFormat::F32
        }
    }

    /// The oldest image format version whose records hold a `cross` layer:
    /// format 8 (a kind added within it, as `gla`; docs/image-format.md).
    pub(crate) const fn min_format_version(&self) -> u32 {
        BLOCK_FORMAT_VERSION
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn fixture() -> CrossConfig {
        CrossConfig {
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 8,
            memory_slots: 16,
            memories: 3,
            output_gate: true,
            encoder_layers: 1,
            state: StateFormat::F32,
        }
    }

    #[test]
    fn record_round_trips_and_sizes_are_the_spec_s() {
        let c = fixture();
        assert_eq!(CrossConfig::from_words(&c.to_words(), None), Ok(c));
        let plain = CrossConfig {
            output_gate: false,
            memories: 8,
            num_kv_heads: 4,
            ..c
        };
        assert_eq!(CrossConfig::from_words(&plain.to_words(), None), Ok(plain));
        assert_eq!(c.state_len(), 1);
        assert_eq!(c.scratch_len(), 3 * 32);
        assert_eq!(c.out_proj_cols(), 32);
        assert_eq!(c.memory_values(), 16 * 16);
        assert_eq!(c.min_format_version(), 8);
        // The integer step: the same record but word 15, one word of
        // state, and the integer step's scratch on top.
        let int = CrossConfig {
            state: StateFormat::Int8Kv,
            ..c
        };
        assert_eq!(CrossConfig::from_words(&int.to_words(), None), Ok(int));
        assert_eq!(int.to_words()[STATE_WORD], 2);
        assert_eq!(int.state_len(), 1);
        assert_eq!(int.scratch_len(), 3 * 32 + 3 * 32 + 5 * 4 + 2);
    }

    #[test]
    fn state_formats_without_a_cross_step_are_refused() {
        for code in [1u32, 3, 4, 99] {
            let mut w = fixture().to_words();
            w[STATE_WORD] = code;
            assert!(
                matches!(
                    CrossConfig::from_words(&w, Some(2)),
                    Err(Error::BadConfig { layer: Some(2), .. })
                ),
                "{code}"
            );
        }
    }

    #[test]
    fn bad_records_are_refused() {
        // Zero dims, kv heads not dividing the heads, 0 or 9 memories,
        // unknown flags, an encoder past the layer.
        let cases: [(usize, u32); 9] = [
            (0, 0),
            (1, 0),
            (1, 3),
            (2, 0),
            (3, 0),
            (4, 0),
            (4, 9),
            (5, 2),
            // An encoder reaching the layer itself (layer 2).
            (6, 3),
        ];
        for (i, v) in cases {
            let mut w = fixture().to_words();
            w[i] = v;
            assert!(
                matches!(
                    CrossConfig::from_words(&w, Some(2)),
                    Err(Error::BadConfig { layer: Some(2), .. })
                ),
                "word {i} = {v}"
            );
        }
        let mut w = fixture().to_words();
        w[STATE_WORD] = StateFormat::Int16 as u32;
        assert!(CrossConfig::from_words(&w, None).is_err());
        // A memory past 2^20 values, and heads past 2^20 channels.
        let mut w = fixture().to_words();
        w[3] = 1 << 17;
        assert!(matches!(
            CrossConfig::from_words(&w, None),
            Err(Error::SizeOverflow { .. })
        ));
        let mut w = fixture().to_words();
        (w[0], w[1], w[2]) = (1 << 11, 1, 1 << 10);
        assert!(matches!(
            CrossConfig::from_words(&w, None),
            Err(Error::SizeOverflow { .. })
        ));
    }
}
