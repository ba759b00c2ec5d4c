//! One token on the integer token path (image format 6,
//! docs/integer-path.md): the block equations of docs/spec.md §1.1 with
//! every vector a block ([`crate::fixed::block`]) and every step integer
//! code, so that the host and every board compute the same bits whatever
//! their FPU and `fast-math` module.
//!
//! ```text
//! h = embeddings[token]                          (row_int: a normal block)
//! per layer:  x = rmsnorm(h) w                   (integer RMS scale, weights by their bits)
//!             out = mixer.step_int(x)            (or, for an f32 state, the f32 step on
//!             h += out                            x and out converted at its boundary)
//!             x = rmsnorm(h) w;  h += down(silu(gate x) * (up x))   (a block without an
//!                                                 MLP, format 8, skips this line)
//! logits = head(rmsnorm(h) w)                    (written as f32, by integer code)
//! ```
//!
//! Blocks with LayerNorms, a pre-norm or RWKV-7's channel mixing are not on
//! this path: `Model::load` refuses them in an integer-path image.

use crate::block::MlpKind;
use crate::config::LayerConfig;
use crate::error::Result;
use crate::fixed::activation::silu15;
use crate::fixed::block::{
    add_into, f32_parts, normalize_with_max, rms_inv, shr_round, to_f32_bits, Block, F32Bits, TO_15,
};
use crate::fixed::Fx;
use crate::format::{Role, StateFormat};
use crate::memory::Memory;
use crate::mixers::StepCtx;
use crate::model::Model;
use crate::tensor::{ActBuf, Tensor};

/// The per-token vectors of the session buffer (its f32 words, used as
/// i32 mantissas here).
pub(crate) struct Vectors<'s> {
    /// The residual stream `[D]`.
    pub h: &'s mut [f32],
    /// A normed input `[D]`.
    pub x: &'s mut [f32],
    /// A mixer's or the MLP's output `[D]`.
    pub out: &'s mut [f32],
    /// The MLP's gate and up projections `[I]`.
    pub gate: &'s mut [f32],
    /// See `gate`.
    pub up: &'s mut [f32],
    /// The logits `[vocab]` (f32 on return).
    pub logits: &'s mut [f32],
    /// The value carried across layers (f32; zeroed by the session).
    pub carry: &'s mut [f32],
    /// The mixers' scratch.
    pub scratch: &'s mut [f32],
}

/// The words as i32 mantissas.
fn ints(w: &mut [f32]) -> &mut [i32] {
    bytemuck::cast_slice_mut(w)
}

/// The words as a block with exponent `e`.
fn hb(m: &[f32], e: i32) -> Block<'_> {
    Block {
        m: bytemuck::cast_slice(m),
        e,
    }
}

/// Splits `n` words off the front of `buf`.
fn take<'s>(buf: &mut &'s mut [f32], n: usize) -> &'s mut [f32] {
    let all = core::mem::take(buf);
    let (head, tail) = all.split_at_mut(n.min(all.len()));
    *buf = tail;
    head
}

/// `x = rmsnorm(h) × weight` as a normal block; returns its exponent.
pub(crate) fn norm_into(h: Block<'_>, weight: &Tensor<'_>, eps: Fx, x: &mut [i32]) -> Result<i32> {
    let w = weight.stored_vector()?;
    let inv = rms_inv(h, eps);
    if inv.is_zero() {
        x.fill(0);
        return Ok(0);
    }
    let f = (inv.mantissa() >> 16) as i32; // [2^15, 2^16)
                                           // 15 x 15 bits, its 15-bit view times 16 bits: below 2^31.
    let one = |hc: i32, w15: i32| (((hc >> TO_15) * w15) >> 15) * f;
    let mut max = 0u32;
    let (bits, base) = w.raw();
    if base >= F32Bits::WIDE_BASE && bits.len() >= x.len() {
        // Every norm weight of a trained model (the largest at least
        // 2^-110): `decode_wide`, `at15`'s bits in fewer instructions.
        // Four values a step (`update_max3`).
        max = crate::fixed::wide::update_max3(x, h.m, bits, |xc, hc, b| {
            *xc = one(hc, F32Bits::decode_wide(b, base));
            xc.unsigned_abs()
        });
    } else {
        for (c, (xc, &hc)) in x.iter_mut().zip(h.m).enumerate() {
            *xc = one(hc, w.at15(c));
            max = max.max(xc.unsigned_abs());
        }
    }
    // h15 w15 inv = (x / f 2^15) 2^(eh + 15 + wexp) f 2^(inv.e + 16)
    let e = h.e + TO_15 as i32 + w.exp15() + 15 + inv.exponent() + 16;
    Ok(normalize_with_max(x, e, max))
}

/// `gate = silu(gate) × up` (normal blocks, in place); returns its exponent.
fn swiglu(gate: &mut [i32], eg: i32, up: &[i32], eu: i32) -> i32 {
    // Four values a step (`update_max`).
    let max = crate::fixed::wide::update_max(gate, up, |g, u| {
        // silu15 2^(eg + 15) times (u >> 15) 2^(eu + 15): 30 bits.
        *g = silu15(*g, eg) * (u >> TO_15);
        g.unsigned_abs()
    });
    normalize_with_max(gate, eg + eu + 30, max)
}

/// Writes the block `(m, e)` back as f32 values in place (by their bits).
fn to_f32_in_place(words: &mut [f32], e: i32) {
    let ints: &mut [i32] = bytemuck::cast_slice_mut(words);
    for w in ints.iter_mut() {
        *w = to_f32_bits(*w, e) as i32;
    }
}

/// Reads f32 values in place as a normal block; returns its exponent.
fn from_f32_in_place(words: &mut [f32]) -> i32 {
    let emax = words
        .iter()
        .filter(|v| v.to_bits() & 0x7fff_ffff != 0)
        .map(|v| f32_parts(v.to_bits()).1)
        .max();
    let Some(emax) = emax else {
        words.fill(0.0);
        return 0;
    };
    let ints: &mut [i32] = bytemuck::cast_slice_mut(words);
    let mut max = 0u32;
    for w in ints.iter_mut() {
        let (m, e) = f32_parts(*w as u32);
        *w = shr_round(m << 6, (emax - e).clamp(0, 32) as u32);
        max = max.max(w.unsigned_abs());
    }
    normalize_with_max(ints, emax - 6, max)
}

/// What [`feed`] calls before each layer when it runs the memory encoder
/// ([`crate::encoder`]): the layer's index, the activation scratch, the
/// hidden state, and two vectors it may write (a `D`-wide one and the
/// mixers' scratch). Returns whether the encoder is done (`feed` then
/// stops: no later layer and no logits).
pub(crate) type BeforeLayer<'f> =
    &'f mut dyn FnMut(usize, &mut ActBuf<'_>, Block<'_>, &mut [i32], &mut [i32]) -> Result<bool>;

/// Runs one token: `state` is the whole state region, `clamps` the
/// per-layer clamp counters; writes the logits into `v.logits`. With
/// `before_layer` (the memory encoder), calls it before each layer and
/// stops where it says the encoder is done.
#[allow(clippy::too_many_arguments)]
pub(crate) fn feed(
    model: &Model<'_>,
    ctx: &StepCtx<'_>,
    memory: Option<&Memory<'_>>,
    token: u32,
    mut state: &mut [f32],
    v: Vectors<'_>,
    act: &mut ActBuf<'_>,
    clamps: &mut [u32],
    mut before_layer: Option<BeforeLayer<'_>>,
) -> Result<()> {
    let cfg = *model.config();
    let eps = Fx::from_f32_bits(cfg.norm_eps.to_bits());
    let Vectors {
        h,
        x,
        out,
        gate,
        up,
        logits,
        carry,
        scratch,
    } = v;
    let mut eh = model
        .global(Role::Embeddings)?
        .row_int(token as usize, ints(h))?;
    let mut ctx = *ctx;
    // Where the next cross layer's part of a caller memory starts.
    let mut memory_at = crate::mixers::MemoryAt::default();
    for layer in 0..cfg.num_layers as usize {
        if let Some(hook) = before_layer.as_mut() {
            if hook(layer, act, hb(h, eh), ints(x), ints(scratch))? {
                return Ok(());
            }
        }
        let lc: LayerConfig = model.layer(layer)?;
        ctx.memory = Memory::part_for(memory, &lc, &mut memory_at)?;
        // RMSNorm, no pre-norm, SwiGLU or no MLP (checked at load): no
        // block state.
        let block = model.block(layer)?;
        let w = model.layer_weights(layer);
        let words = usize::try_from(lc.state_len(ctx.pinned_max)).unwrap_or(usize::MAX);
        let layer_state = take(&mut state, words);

        let ex = norm_into(hb(h, eh), &w.get(Role::AttnNorm)?, eps, ints(x))?;
        let integer = lc.state_format() != StateFormat::F32
            && lc.mixer().takes_integer_step(&ctx, &w, layer_state);
        let eo = if integer {
            let mut count = clamps.get(layer).copied().unwrap_or(0);
            let e = lc.mixer().step_int(
                &ctx,
                &w,
                layer_state,
                scratch,
                act,
                hb(x, ex),
                ints(out),
                &mut count,
            )?;
            if let Some(c) = clamps.get_mut(layer) {
                *c = count;
            }
            e
        } else {
            // A mixer on the f32 path: its input and output converted here.
            to_f32_in_place(x, ex);
            lc.step(&ctx, &w, layer_state, scratch, act, carry, x, out)?;
            from_f32_in_place(out)
        };
        eh = add_into(ints(h), eh, hb(out, eo));
        if block.mlp == MlpKind::None {
            continue;
        }

        let ex = norm_into(hb(h, eh), &w.get(Role::MlpNorm)?, eps, ints(x))?;
        let (eg, eu) = {
            let xin = act.input_int(hb(x, ex))?;
            (
                w.get(Role::MlpGate)?.matvec_int(&xin, ints(gate))?,
                w.get(Role::MlpUp)?.matvec_int(&xin, ints(up))?,
            )
        };
        let ep = swiglu(ints(gate), eg, bytemuck::cast_slice(up), eu);
        let ed = {
            let din = act.input_int(hb(gate, ep))?;
            w.get(Role::MlpDown)?.matvec_int(&din, ints(out))?
        };
        eh = add_into(ints(h), eh, hb(out, ed));
    }
    let hb = Block {
        m: bytemuck::cast_slice(h),
        e: eh,
    };
    let ex = norm_into(hb, &model.global(Role::FinalNorm)?, eps, ints(x))?;
    let el = {
        let xin = act.input_int(Block {
            m: bytemuck::cast_slice(x),
            e: ex,
        })?;
        model.global(Role::LmHead)?.matvec_int(&xin, ints(logits))?
    };
    to_f32_in_place(logits, el);
    Ok(())
}
