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
    // Slice patterns, not indexing: no bounds check left to panic.
    match bytes.split_at_checked(off) {
        Some((_, [a, b, c, d, ..])) => Some(u32::from_le_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Reads a little-endian `u16` at `off`, or `None` past the end.
pub(crate) const fn read_u16(bytes: &[u8], off: usize) -> Option<u16> {
    match bytes.split_at_checked(off) {
        Some((_, [a, b, ..])) => Some(u16::from_le_bytes([*a, *b])),
        _ => None,
    }
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

/// Index in [`LayerWords`] (the record's word 14) of the layer's block
/// options (format 8; 0, the format-1 block, before): the norm kind, the
/// MLP kind and the extra pre-norm, the same word for every mixer
/// (`block::BlockConfig`, docs/spec.md §1.1).
pub const BLOCK_WORD: usize = LAYER_RECORD_WORDS - 3;

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
    /// An int8 KV cache (`swa`, `mla`): per slot (position and kv head) `d`
    /// int8 values and one packed scale word (`mixers::swa_int`).
    Int8Kv = 2,
    /// An int8 KV cache with one-byte logarithmic scales (`swa` only): per
    /// slot `d` int8 values and one scale code, `2^(code/8 - 20)`, scored
    /// in fixed point once per key (`mixers::swa_logkv`).
    Int8KvLog = 3,
}

impl StateFormat {
    /// Decodes a state-format code (`None` for an unknown one).
    pub const fn from_code(code: u32) -> Option<StateFormat> {
        match code {
            0 => Some(StateFormat::F32),
            1 => Some(StateFormat::Int16),
            2 => Some(StateFormat::Int8Kv),
            3 => Some(StateFormat::Int8KvLog),
            _ => None,
        }
    }

    /// Name, as `ferrite inspect` and `ferrite quantize --state` spell it.
    pub const fn name(self) -> &'static str {
        match self {
            StateFormat::F32 => "f32",
            StateFormat::Int16 => "int16",
            StateFormat::Int8Kv => "int8",
            StateFormat::Int8KvLog => "int8-log",
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
    FinalNorm = 2, "model.norm.weight", "Final norm weight `[D]` (RMSNorm, or LayerNorm: format 8).";
    LmHead = 3, "lm_head.weight", "Output head `[vocab, D]` (absent when tied).";
    AttnNorm = 10, "attn_norm.weight", "Pre-mixer norm weight `[D]`.";
    MlpNorm = 11, "mlp_norm.weight", "Pre-MLP norm weight `[D]` (SwiGLU and channel-mixing blocks).";
    MlpGate = 12, "mlp.gate_proj.weight", "SwiGLU gate projection `[I, D]`.";
    MlpUp = 13, "mlp.up_proj.weight", "SwiGLU up projection `[I, D]`.";
    MlpDown = 14, "mlp.down_proj.weight", "SwiGLU down projection `[D, I]`.";
    QProj = 20, "attn.q_proj.weight", "Query projection.";
    KProj = 21, "attn.k_proj.weight", "Key projection.";
    VProj = 22, "attn.v_proj.weight", "Value projection.";
    OProj = 23, "attn.o_proj.weight", "Output projection.";
    AProj = 24, "attn.a_proj.weight", "GDN decay input projection `[HV, D]`.";
    BProj = 25, "attn.b_proj.weight", "GDN beta projection `[HV, D]`.";
    ALog = 26, "attn.A_log", "GDN log decay rate `[HV]` (Mamba-2: `[H]`).";
    DtBias = 27, "attn.dt_bias", "GDN decay bias `[HV]` (Mamba-2: `[H]`).";
    QConv = 28, "attn.q_conv1d.weight", "Short convolution on q `[C, 1, W]`.";
    KConv = 29, "attn.k_conv1d.weight", "Short convolution on k `[C, 1, W]`.";
    VConv = 30, "attn.v_conv1d.weight", "Short convolution on v `[C, 1, W]`.";
    GProj = 31, "attn.g_proj.weight", "GDN output gate projection `[HV*V, D]`.";
    ONorm = 32, "attn.o_norm.weight", "GDN per-head output norm `[V]`.";
    FProj = 33, "attn.f_proj.weight", "GSA forget-gate projection `[Hkv*M, D]`.";
    GNorm = 34, "attn.g_norm.weight", "GSA output norm `[H*V]` (RWKV-7: its per-head group norm).";
    Sinks = 35, "attn.sinks", "SWA learned sink logits `[H]`.";
    BlaPhi = 36, "attn.phi", "BLA write-weight table `[P, N]`, computed by the tools (absent where the runtime computes phi, format 5).";
    KvAProj = 37, "attn.kv_a_proj.weight", "MLA latent and shared RoPE key projection `[R + dr, D]`.";
    KvBProj = 38, "attn.kv_b_proj.weight", "MLA up-projections of the latent `[H*(d+dv), R]` (absorbed at decode).";
    // The generalized block (format 8, docs/spec.md §1.1).
    AttnNormBias = 39, "attn_norm.bias", "Pre-mixer LayerNorm bias `[D]` (LayerNorm blocks).";
    MlpNormBias = 40, "mlp_norm.bias", "Pre-MLP LayerNorm bias `[D]` (LayerNorm blocks).";
    PreNorm = 41, "pre_norm.weight", "Norm of the residual stream before the block `[D]` (RWKV-7's first layer).";
    PreNormBias = 42, "pre_norm.bias", "Bias of the block's pre-norm `[D]` (LayerNorm blocks).";
    FinalNormBias = 43, "model.norm.bias", "Final LayerNorm bias `[D]` (a LayerNorm final norm).";
    MlpShift = 44, "mlp.x_k", "Channel-mixing token-shift interpolation `[D]` (RWKV-7's `ffn.x_k`).";
    MlpKey = 45, "mlp.key.weight", "Channel-mixing key projection `[I, D]`.";
    MlpValue = 46, "mlp.value.weight", "Channel-mixing value projection `[D, I]`.";
    // mamba2 (format 8).
    InProj = 47, "attn.in_proj.weight", "Mamba-2 in-projection `[2*H*P + 2*G*N + H, D]` (gate, x, B, C, dt).";
    Conv1d = 48, "attn.conv1d.weight", "Mamba-2 causal convolution over x, B and C `[H*P + 2*G*N, 1, W]`.";
    Conv1dBias = 49, "attn.conv1d.bias", "Mamba-2 convolution bias `[H*P + 2*G*N]`.";
    DSkip = 50, "attn.D", "Mamba-2 skip `[H]` (or `[H*P]`).";
    MixerNorm = 51, "attn.norm.weight", "Mamba-2 gated RMSNorm weight `[H*P]`.";
    OutProj = 52, "attn.out_proj.weight", "Mamba-2 out-projection `[D, H*P]`.";
    // rwkv7 (format 8).
    XR = 53, "attn.x_r", "RWKV-7 token-shift interpolation of the receptance input `[D]`.";
    XW = 54, "attn.x_w", "RWKV-7 token-shift interpolation of the decay input `[D]`.";
    XK = 55, "attn.x_k", "RWKV-7 token-shift interpolation of the key input `[D]`.";
    XV = 56, "attn.x_v", "RWKV-7 token-shift interpolation of the value input `[D]`.";
    XA = 57, "attn.x_a", "RWKV-7 token-shift interpolation of the learning-rate input `[D]`.";
    XG = 58, "attn.x_g", "RWKV-7 token-shift interpolation of the gate input `[D]`.";
    KK = 59, "attn.k_k", "RWKV-7 key scale of the removal key `[H*K]`.";
    KA = 60, "attn.k_a", "RWKV-7 in-context learning-rate mix of the key `[H*K]`.";
    RK = 61, "attn.r_k", "RWKV-7 per-head bonus `[H, K]`.";
    RProj = 62, "attn.r_proj.weight", "RWKV-7 receptance projection `[H*K, D]`.";
    WLoraA = 63, "attn.w_lora.lora.0.weight", "RWKV-7 decay low-rank down-projection `[dw, D]`.";
    WLoraB = 64, "attn.w_lora.lora.2.weight", "RWKV-7 decay low-rank up-projection `[H*K, dw]`.";
    WLoraBias = 65, "attn.w_lora.lora.2.bias", "RWKV-7 decay bias `[H*K]`.";
    VLoraA = 66, "attn.v_lora.lora.0.weight", "RWKV-7 value-residual low-rank down-projection `[dv, D]`.";
    VLoraB = 67, "attn.v_lora.lora.2.weight", "RWKV-7 value-residual low-rank up-projection `[H*V, dv]`.";
    VLoraBias = 68, "attn.v_lora.lora.2.bias", "RWKV-7 value-residual bias `[H*V]`.";
    ALoraA = 69, "attn.a_lora.lora.0.weight", "RWKV-7 learning-rate low-rank down-projection `[da, D]`.";
    ALoraB = 70, "attn.a_lora.lora.2.weight", "RWKV-7 learning-rate low-rank up-projection `[H*K, da]`.";
    ALoraBias = 71, "attn.a_lora.lora.2.bias", "RWKV-7 learning-rate bias `[H*K]`.";
    GLoraA = 72, "attn.g_lora.lora.0.weight", "RWKV-7 gate low-rank down-projection `[dg, D]`.";
    GLoraB = 73, "attn.g_lora.lora.2.weight", "RWKV-7 gate low-rank up-projection `[H*V, dg]`.";
    GNormBias = 74, "attn.g_norm.bias", "RWKV-7 per-head group-norm bias `[H*V]`.";
    // gla (format 8).
    GkProjA = 75, "attn.gk_proj.0.weight", "GLA decay low-rank down-projection `[R, D]`.";
    GkProjB = 76, "attn.gk_proj.1.weight", "GLA decay low-rank up-projection `[H*K, R]`.";
    GkBias = 77, "attn.gk_proj.1.bias", "GLA decay bias `[H*K]`.";
    LowerBound = 78, "attn.lower_bound", "HGRN2 forget-gate lower bound of the layer `[H*K]`, computed by the tools from fla's `model.lower_bounds`.";
    // cross (format 8).
    MemoryK = 79, "attn.memory_k", "Cross-attention baked memory keys `[N, m, Hkv*d]`, read in place.";
    MemoryV = 80, "attn.memory_v", "Cross-attention baked memory values `[N, m, Hkv*d]`, read in place.";
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
            (3, StateFormat::Int8KvLog, "int8-log"),
        ];
        for (code, format, name) in expected {
            assert_eq!(StateFormat::from_code(code), Some(format));
            assert_eq!(format.name(), name);
        }
        assert_eq!(StateFormat::from_code(4), None);
    }
}
