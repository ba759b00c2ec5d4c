//! The lowest layer of the crate: the pieces of the image format that the
//! error type, the image parser and the mixers' config records all need,
//! with no dependency on any other module of the crate.
//!
//! - little-endian readers that answer `None` past the end, never panic;
//! - [`Role`], what a tensor is (the error type names tensors by role);
//! - the layout of the config section's records (sizes and limits), which
//!   each mixer's record parser reads.
//!
//! The public items are re-exported where they have always been:
//! `image::Role` and `config::{MODEL_RECORD_WORDS, LAYER_RECORD_WORDS,
//! LayerWords, MAX_DIM}`. The module order of the whole crate is in
//! `docs/adding-a-mixer.md` (and checked by `tests/tests/module_order.rs`).

/// Reads a little-endian `u32` at `off`, or `None` past the end.
pub(crate) const fn read_u32(bytes: &[u8], off: usize) -> Option<u32> {
    if off > bytes.len() || bytes.len() - off < 4 {
        return None;
    }
    Some(u32::from_le_bytes([
        bytes[off],
        bytes[off + 1],
        bytes[off + 2],
        bytes[off + 3],
    ]))
}

/// Reads a little-endian `u16` at `off`, or `None` past the end.
pub(crate) const fn read_u16(bytes: &[u8], off: usize) -> Option<u16> {
    if off > bytes.len() || bytes.len() - off < 2 {
        return None;
    }
    Some(u16::from_le_bytes([bytes[off], bytes[off + 1]]))
}

/// Words in the model record.
pub const MODEL_RECORD_WORDS: usize = 8;
/// Words in one layer record.
pub const LAYER_RECORD_WORDS: usize = 16;
/// Largest single dimension accepted: every config field that is a size, and
/// every tensor dimension derived from two of them (heads times head size,
/// kv heads times slots). Keeps every size computation far from overflow:
/// a layer's state is at most a product of two such dimensions (u64), and
/// the session total is checked against the target's address space.
pub const MAX_DIM: u32 = 1 << 20;

/// A layer record's kind-specific words (the record without its kind word).
pub type LayerWords = [u32; LAYER_RECORD_WORDS - 1];

/// Whether `v` is a usable dimension (1..=MAX_DIM).
pub(crate) const fn dim_ok(v: u32) -> bool {
    v >= 1 && v <= MAX_DIM
}

/// Whether the tensor dimension `a * b` is at most [`MAX_DIM`] (computed in
/// u64: two u32 factors cannot overflow it).
pub(crate) const fn width_ok(a: u32, b: u32) -> bool {
    a as u64 * b as u64 <= MAX_DIM as u64
}

/// The layer record words `head`, zero after them (a mixer's `to_words`).
pub(crate) fn record_words(head: &[u32]) -> LayerWords {
    let mut w: LayerWords = [0; LAYER_RECORD_WORDS - 1];
    w[..head.len()].copy_from_slice(head);
    w
}

/// Index in [`LayerWords`] (the record's word 15, the last) of the layer's
/// state format, the same word for every mixer (format 6; 0 = f32 before).
pub const STATE_WORD: usize = LAYER_RECORD_WORDS - 2;

/// How a layer keeps its state (layer-record word 15, image format 6).
///
/// In an image on the integer token path, a layer whose state format is
/// not [`StateFormat::F32`] runs its mixer's integer step; a layer with an
/// f32 state runs the f32 step, its input and output converted at the
/// mixer's boundary (docs/integer-path.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StateFormat {
    /// f32 words (every image before format 6).
    F32 = 0,
    /// 16-bit mantissas with power-of-two block exponents that the runtime
    /// keeps (per head for recurrent states, per slot for convolution
    /// windows); the integer step's own layout (e.g. `mixers::gdn`).
    Int16 = 1,
    /// An int8 KV cache (`swa`): per slot (position and kv head) `d` int8
    /// values and one packed scale word (`mixers::swa_int`).
    Int8Kv = 2,
}

impl StateFormat {
    /// Decodes a state-format code (`None` for an unknown one).
    pub const fn from_code(code: u32) -> Option<StateFormat> {
        match code {
            0 => Some(StateFormat::F32),
            1 => Some(StateFormat::Int16),
            2 => Some(StateFormat::Int8Kv),
            _ => None,
        }
    }

    /// Name, as `ferrite inspect` and `ferrite quantize --state` spell it.
    pub const fn name(self) -> &'static str {
        match self {
            StateFormat::F32 => "f32",
            StateFormat::Int16 => "int16",
            StateFormat::Int8Kv => "int8",
        }
    }
}

macro_rules! roles {
    ($($variant:ident = $code:literal, $name:literal, $doc:literal;)*) => {
        /// What a tensor is, independent of its layer. Names are fla's.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[repr(u16)]
        pub enum Role {
            $(#[doc = $doc] $variant = $code,)*
        }

        impl Role {
            /// Decodes a role code.
            pub const fn from_code(code: u16) -> Option<Role> {
                match code {
                    $($code => Some(Role::$variant),)*
                    _ => None,
                }
            }

            /// The tensor's name: full for model-wide tensors, after `model.layers.{i}.` otherwise.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Role::$variant => $name,)*
                }
            }

            /// Every role, in code order.
            pub const ALL: &'static [Role] = &[$(Role::$variant,)*];
        }
    };
}

roles! {
    Embeddings = 1, "model.embeddings.weight", "Token embeddings `[vocab, D]`.";
    FinalNorm = 2, "model.norm.weight", "Final RMSNorm weight `[D]`.";
    LmHead = 3, "lm_head.weight", "Output head `[vocab, D]` (absent when tied).";
    AttnNorm = 10, "attn_norm.weight", "Pre-mixer RMSNorm weight `[D]`.";
    MlpNorm = 11, "mlp_norm.weight", "Pre-MLP RMSNorm weight `[D]`.";
    MlpGate = 12, "mlp.gate_proj.weight", "SwiGLU gate projection `[I, D]`.";
    MlpUp = 13, "mlp.up_proj.weight", "SwiGLU up projection `[I, D]`.";
    MlpDown = 14, "mlp.down_proj.weight", "SwiGLU down projection `[D, I]`.";
    QProj = 20, "attn.q_proj.weight", "Query projection.";
    KProj = 21, "attn.k_proj.weight", "Key projection.";
    VProj = 22, "attn.v_proj.weight", "Value projection.";
    OProj = 23, "attn.o_proj.weight", "Output projection.";
    AProj = 24, "attn.a_proj.weight", "GDN decay input projection `[HV, D]`.";
    BProj = 25, "attn.b_proj.weight", "GDN beta projection `[HV, D]`.";
    ALog = 26, "attn.A_log", "GDN log decay rate `[HV]`.";
    DtBias = 27, "attn.dt_bias", "GDN decay bias `[HV]`.";
    QConv = 28, "attn.q_conv1d.weight", "Short convolution on q `[C, 1, W]`.";
    KConv = 29, "attn.k_conv1d.weight", "Short convolution on k `[C, 1, W]`.";
    VConv = 30, "attn.v_conv1d.weight", "Short convolution on v `[C, 1, W]`.";
    GProj = 31, "attn.g_proj.weight", "GDN output gate projection `[HV*V, D]`.";
    ONorm = 32, "attn.o_norm.weight", "GDN per-head output norm `[V]`.";
    FProj = 33, "attn.f_proj.weight", "GSA forget-gate projection `[Hkv*M, D]`.";
    GNorm = 34, "attn.g_norm.weight", "GSA output norm `[H*V]`.";
    Sinks = 35, "attn.sinks", "SWA learned sink logits `[H]`.";
    BlaPhi = 36, "attn.phi", "BLA write-weight table `[P, N]`, computed by the tools (absent where the runtime computes phi, format 5).";
    KvAProj = 37, "attn.kv_a_proj.weight", "MLA latent and shared RoPE key projection `[R + dr, D]`.";
    KvBProj = 38, "attn.kv_b_proj.weight", "MLA up-projections of the latent `[H*(d+dv), R]` (absorbed at decode).";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_end_are_none_even_at_usize_max() {
        let b = [1u8, 2, 3, 4, 5];
        assert_eq!(read_u32(&b, 1), Some(u32::from_le_bytes([2, 3, 4, 5])));
        assert_eq!(read_u16(&b, 3), Some(u16::from_le_bytes([4, 5])));
        for off in [2, 5, 6, usize::MAX - 3, usize::MAX] {
            assert_eq!(read_u32(&b, off), None, "{off}");
        }
        for off in [4, 5, usize::MAX - 1, usize::MAX] {
            assert_eq!(read_u16(&b, off), None, "{off}");
        }
    }

    #[test]
    fn state_formats_decode_their_codes_and_keep_their_cli_names() {
        let expected = [
            (0, StateFormat::F32, "f32"),
            (1, StateFormat::Int16, "int16"),
            (2, StateFormat::Int8Kv, "int8"),
        ];
        for (code, format, name) in expected {
            assert_eq!(StateFormat::from_code(code), Some(format));
            assert_eq!(format.name(), name);
        }
        assert_eq!(StateFormat::from_code(3), None);
    }
}
