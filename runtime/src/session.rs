//! A running stream: the model plus its state, in a buffer the caller owns.
//!
//! Buffer layout (f32 words):
//! ```text
//! [ state of layer 0 | ... | state of layer L-1 ]                       (reset to 0)
//! [ h: D | x: D | out: D | gate: I | up: I | logits: vocab | carry | mixer scratch | act ]
//! ```
//! A layer's state is its mixer's, then its block's (RWKV-7's channel
//! mixing keeps the previous input). `carry` is the value a mixer passes
//! to later layers (RWKV-7's first-layer value; empty in most models),
//! zeroed before each token.
//! `act` holds the int8 activations of the integer path (only when the model
//! has tiled tensors). On the integer token path (format 6) the vectors hold
//! i32 block mantissas instead of f32 values (`crate::int_token`), and one
//! word per layer before `act` counts the values its integer step clamped.
//! Its size is known before the first token ([`crate::session_len`]) and
//! never changes.

use crate::block::{norm, NormKind};
use crate::config::LayerConfig;
use crate::error::{Error, Result, StepError, StepResult};
use crate::image::Role;
use crate::memory::Memory;
use crate::mixers::StepCtx;
use crate::model::Model;
use crate::sampler::Sampler;
use crate::tensor::ActBuf;
use half::f16;

use crate::encoder::{Encode, EncodeOut};

/// One token stream over a model. Owns no memory: state and scratch live in
/// the caller's buffer.
pub struct Session<'a, 'b> {
    model: Model<'a>,
    buf: &'b mut [f32],
    state_len: usize,
    /// Words of the carried value (after the logits).
    carry_len: usize,
    /// Words of `act` at the end of the used buffer (0 without tiled tensors).
    act_len: usize,
    /// Clamp counters before `act`: one per layer on the integer token path, else none.
    clamp_len: usize,
    /// End of the used buffer (`session_len` words).
    used: usize,
    /// Absolute position of the next token.
    pos: u64,
    /// Absolute position of the stream's first token.
    start: u64,
    pinned: usize,
    pinned_max: usize,
}

/// Splits `n` words off the front of `buf`.
/// Copies `src` into `dst` when their lengths are equal (`None` when not):
/// `copy_from_slice` without its panic.
fn copy_exact<T: Copy>(dst: &mut [T], src: &[T]) -> Option<()> {
    if dst.len() != src.len() {
        return None;
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d = *s;
    }
    Some(())
}

fn take<'s>(buf: &mut &'s mut [f32], n: usize) -> &'s mut [f32] {
    let all = core::mem::take(buf);
    let (head, tail) = all.split_at_mut(n.min(all.len()));
    *buf = tail;
    head
}

impl<'a, 'b> Session<'a, 'b> {
    /// A session with no pinned prefix. `buf` needs
    /// [`Model::session_len`]`(0)` words; a larger one is fine.
    pub fn new(model: Model<'a>, buf: &'b mut [f32]) -> Result<Session<'a, 'b>> {
        Self::with_pinned_capacity(model, buf, 0)
    }

    /// A session that can pin up to `pinned_max` tokens after the sinks of
    /// its SWA layers (see [`Session::reset_pinned`]).
    pub fn with_pinned_capacity(
        model: Model<'a>,
        buf: &'b mut [f32],
        pinned_max: usize,
    ) -> Result<Session<'a, 'b>> {
        let len = crate::sizes::buffer_len(model.image(), pinned_max)?;
        if buf.len() < len.total {
            // Both sizes are at most isize::MAX bytes (an f32 slice; session_len).
            return Err(Error::BufferTooSmall {
                needed: 4 * len.total,
                got: 4 * buf.len(),
            });
        }
        let state_len = len.state;
        let carry_len = len.carry;
        let act_len = crate::sizes::act_words(model.image(), model.header(), model.config())?;
        let clamp_len = crate::sizes::clamp_words(model.config());
        let mut s = Session {
            model,
            buf,
            state_len,
            carry_len,
            act_len,
            clamp_len,
            used: len.total,
            pos: 0,
            start: 0,
            pinned: 0,
            pinned_max,
        };
        s.reset();
        let clamps = s.used - s.act_len - s.clamp_len;
        s.buf
            .get_mut(clamps..s.used - s.act_len)
            .ok_or(Error::Internal("clamps"))?
            .fill(0.0);
        Ok(s)
    }

    /// The model.
    pub fn model(&self) -> &Model<'a> {
        &self.model
    }

    /// Absolute position of the next token: the tokens fed since the last
    /// reset, plus the position given to [`Session::seek`].
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Tokens fed since the stream started (the last reset or seek).
    pub fn stream_len(&self) -> u64 {
        self.pos - self.start
    }

    /// Returns to the initial state: zero state, position 0. The pinned
    /// count set by [`Session::reset_pinned`] stays.
    pub fn reset(&mut self) {
        self.seek(0);
    }

    /// Resets the state and starts a new stream whose first token sits at
    /// absolute position `pos`.
    ///
    /// Only RoPE angles see absolute positions, and they are computed from
    /// 64-bit fixed-point phases (docs/spec.md, "Positions"), so a stream
    /// behaves the same at every start position up to angle rounding (below
    /// 1e-6 rad); windows, sinks and BLA phases count from the stream's
    /// start. This is how tests run past 2^24 and 2^32 without feeding the
    /// tokens before, and how a device can resume a clock.
    pub fn seek(&mut self, pos: u64) {
        // The state is inside the buffer (checked when the session was made).
        if let Some(state) = self.buf.get_mut(..self.state_len) {
            state.fill(0.0);
        }
        self.pos = pos;
        self.start = pos;
    }

    /// Resets and pins the first `pinned` tokens of the next stream (after
    /// the model's sinks) in every SWA layer.
    pub fn reset_pinned(&mut self, pinned: usize) -> Result<()> {
        if pinned > self.pinned_max {
            return Err(Error::TooManyPinned {
                asked: pinned,
                max: self.pinned_max,
            });
        }
        self.reset();
        self.pinned = pinned;
        Ok(())
    }

    /// Selects baked memory `index` in every `cross` layer (docs/
    /// cross-attention.md): the next tokens attend to it. The choice is
    /// part of the state (one word per `cross` layer), so snapshots keep
    /// it and [`Session::reset`] and [`Session::seek`] return to memory 0.
    ///
    /// Errors with [`Error::NoSuchMemory`] (`layer: None`) when the model
    /// has no `cross` layer or one has `index` memories or fewer; the
    /// session is then unchanged.
    pub fn select_memory(&mut self, index: u32) -> Result<()> {
        let mut any = false;
        for layer in 0..self.model.config().num_layers as usize {
            if let LayerConfig::Cross(c) = self.model.layer(layer)? {
                any = true;
                if index >= c.memories {
                    return Err(Error::NoSuchMemory {
                        layer: None,
                        index,
                        count: c.memories,
                    });
                }
            }
        }
        if !any {
            return Err(Error::NoSuchMemory {
                layer: None,
                index,
                count: 0,
            });
        }
        for layer in 0..self.model.config().num_layers as usize {
            if matches!(self.model.layer(layer)?, LayerConfig::Cross(_)) {
                self.select_layer_memory(layer, index)?;
            }
        }
        Ok(())
    }

    /// Selects baked memory `index` in layer `layer` alone (see
    /// [`Session::select_memory`]). Errors with [`Error::NoSuchMemory`]
    /// when the layer is not a `cross` layer (`count` 0) or has `index`
    /// memories or fewer, and with the model's error for a layer past the
    /// last; the session is then unchanged.
    pub fn select_layer_memory(&mut self, layer: usize, index: u32) -> Result<()> {
        let l = u16::try_from(layer).unwrap_or(u16::MAX);
        let count = match self.model.layer(layer)? {
            LayerConfig::Cross(c) => c.memories,
            _ => 0,
        };
        if index >= count {
            return Err(Error::NoSuchMemory {
                layer: Some(l),
                index,
                count,
            });
        }
        let start = self.layer_state_start(layer)?;
        let word = self
            .buf
            .get_mut(start)
            .ok_or(Error::Internal("cross state"))?;
        // index < 8: exact in an f32.
        *word = index as f32;
        Ok(())
    }

    /// The baked memory layer `layer` attends to (`None` for a layer that
    /// is not a `cross` layer).
    pub fn selected_memory(&self, layer: usize) -> Result<Option<u32>> {
        let LayerConfig::Cross(c) = self.model.layer(layer)? else {
            return Ok(None);
        };
        let start = self.layer_state_start(layer)?;
        let word = self.buf.get(start).copied().unwrap_or(f32::NAN);
        crate::mixers::cross_memory_index(word, c.memories)
            .map(|i| Some(i as u32))
            .ok_or(Error::Internal("cross state holds no memory index"))
    }

    /// Word offset in the buffer of layer `layer`'s state.
    fn layer_state_start(&self, layer: usize) -> Result<usize> {
        let mut start = 0usize;
        for i in 0..layer {
            start += self.model.layer_state_len(i, self.pinned_max)?;
        }
        if start >= self.state_len {
            return Err(Error::Internal("layer state"));
        }
        Ok(start)
    }

    /// The recurrent state (what stays between tokens) as bytes, for
    /// inspection: each layer's state in order, f32 words for an f32 state
    /// format, the integer step's own layout otherwise (for instance
    /// `mixers::gdn_int`'s); [`Session::layer_state`] splits it.
    pub fn state(&self) -> &[u8] {
        // The state is inside the buffer (checked when the session was made).
        bytemuck::cast_slice(self.buf.get(..self.state_len).unwrap_or_default())
    }

    /// Layer `layer`'s part of [`Session::state`], with its format.
    pub fn layer_state(&self, layer: usize) -> Result<(crate::format::StateFormat, &[u8])> {
        let mut start = 0usize;
        for i in 0..=layer {
            let lc = self.model.layer(i)?;
            let words = self.model.layer_state_len(i, self.pinned_max)?;
            if i == layer {
                let bytes = self
                    .state()
                    .get(4 * start..4 * (start + words))
                    .ok_or(Error::Internal("layer state"))?;
                return Ok((lc.state_format(), bytes));
            }
            start += words;
        }
        Err(Error::Internal("layer state"))
    }

    /// The largest magnitude any layer's state holds (its values, whatever
    /// its format), for inspection: a long stream stays bounded. Uses f32
    /// arithmetic; not part of a token.
    pub fn state_max_abs(&self) -> Result<f32> {
        let mut top = 0f32;
        for layer in 0..self.model.config().num_layers as usize {
            let (format, bytes) = self.layer_state(layer)?;
            let m = match (format, self.model.layer(layer)?) {
                (crate::format::StateFormat::Int16, LayerConfig::Gdn(c)) => {
                    crate::mixers::gdn_state_max_abs(&c, bytemuck::cast_slice(bytes))
                }
                (crate::format::StateFormat::Int16, LayerConfig::Gsa(c)) => {
                    crate::mixers::gsa_state_max_abs(&c, bytemuck::cast_slice(bytes))
                }
                (crate::format::StateFormat::Int16, LayerConfig::Bla(c)) => {
                    crate::mixers::bla_state_max_abs(&c, bytemuck::cast_slice(bytes))
                }
                (crate::format::StateFormat::Int8Kv, LayerConfig::Swa(c)) => {
                    let slots = c.sinks as usize + self.pinned_max + c.span() as usize;
                    crate::mixers::swa_state_max_abs(&c, slots, bytemuck::cast_slice(bytes))
                }
                (crate::format::StateFormat::Int8KvLog, LayerConfig::Swa(c)) => {
                    let slots = c.sinks as usize + self.pinned_max + c.span() as usize;
                    crate::mixers::swa_log_state_max_abs(&c, slots, bytemuck::cast_slice(bytes))
                }
                (crate::format::StateFormat::Int8Kv, LayerConfig::Mla(c)) => {
                    crate::mixers::mla_state_max_abs(&c, bytemuck::cast_slice(bytes))
                }
                _ => bytemuck::cast_slice::<u8, f32>(bytes)
                    .iter()
                    .fold(0f32, |a, v| {
                        if v.is_nan() || a.is_nan() {
                            f32::NAN
                        } else {
                            a.max(v.abs())
                        }
                    }),
            };
            top = if m.is_nan() || top.is_nan() {
                f32::NAN
            } else {
                top.max(m)
            };
        }
        Ok(top)
    }

    /// Per layer, the values its integer step clamped since the session
    /// was made (a state mantissa out of its range; docs/integer-path.md,
    /// "Saturation"): resets and seeks keep them, so an evaluation that
    /// resets per chunk reads the whole run's. Empty unless the image is
    /// on the integer token path; 0 for layers on the f32 step.
    pub fn clamps(&self) -> &[u32] {
        let start = self.used - self.act_len - self.clamp_len;
        bytemuck::cast_slice(&self.buf[start..start + self.clamp_len])
    }

    /// Feeds one token and returns the logits for the next one.
    ///
    /// Errors on a token outside the vocabulary
    /// ([`StepError::TokenOutOfRange`]) and at position `u64::MAX`
    /// ([`StepError::PositionOverflow`]); the state is unchanged then. The
    /// image and the buffer were checked when the model was loaded and the
    /// session made, so nothing else is expected (a failed invariant is a
    /// [`StepError::Internal`]).
    pub fn feed(&mut self, token: u32) -> StepResult<&[f32]> {
        self.feed_inner(token, None)
    }

    /// [`Session::feed`] with a caller-owned memory: every `cross` layer
    /// attends to its part of `memory` instead of its selected baked memory
    /// (docs/cross-attention.md, "Caller-owned memories"). The memory is
    /// borrowed for this call only, so the session keeps no reference to
    /// it: pass it to every token that should see it (a token fed without
    /// it attends to the baked memory the state selects). Errors as `feed`
    /// does, and with [`StepError::BadMemory`] when `memory` does not fit
    /// this session's model; the state is unchanged then.
    pub fn feed_with_memory(&mut self, token: u32, memory: &Memory<'_>) -> StepResult<&[f32]> {
        self.check_memory(memory)?;
        self.feed_inner(token, Some(memory))
    }

    /// [`StepError::BadMemory`] unless `memory` has this model's length
    /// for its slots.
    fn check_memory(&self, memory: &Memory<'_>) -> StepResult<()> {
        match crate::memory::memory_len(self.model.image(), memory.slots()) {
            Ok(n) if n == memory.words().len() => Ok(()),
            _ => Err(StepError::BadMemory(
                "the memory does not fit this session's model",
            )),
        }
    }

    /// [`Session::feed`] attending to `memory` (checked by the caller).
    fn feed_inner(&mut self, token: u32, memory: Option<&Memory<'_>>) -> StepResult<&[f32]> {
        let cfg = *self.model.config();
        if token >= cfg.vocab_size {
            return Err(StepError::TokenOutOfRange {
                token,
                vocab: cfg.vocab_size,
            });
        }
        let next = self.pos.checked_add(1).ok_or(StepError::PositionOverflow)?;
        self.run(token, next, memory, None)
            .map_err(Error::at_step)?;
        self.buf
            .get(self.logits_range())
            .ok_or(StepError::Internal("logits"))
    }

    /// The model's memory encoder, run on the device
    /// (docs/cross-attention.md, "The memory encoder"): the memory text's
    /// `tokens` are fed from a reset stream through the first
    /// `memory_encoder_layers` layers of the stack, and each `cross` layer
    /// turns every token's hidden state into one key and one value slot
    /// (its pre-norm, then `k_proj` and `v_proj`). Writes them into `out`,
    /// which must hold exactly [`crate::memory_len`]`(image,
    /// tokens.len())` words (the layout of [`Memory`]); returns the
    /// [`Memory`] over it, ready for [`Session::feed_with_memory`]. `ferrite
    /// quantize --memory` bakes the same keys and values (from the f32
    /// weights) into an image. On the integer token path the encoder is
    /// that path's integer code (its norm and products), each value written
    /// as its nearest f32: within 3% of the largest word of the f32
    /// encoder's (docs/cross-attention.md).
    ///
    /// The session's state is the encoder's workspace: the stream is reset
    /// before and after (position 0, baked memory 0 selected, the pinned
    /// count kept). Errors with [`Error::BadMemory`] (no `cross` layer, no
    /// tokens, `out` of another length), [`Error::TokenOutOfRange`];
    /// `out` may be partly written then, and the stream is reset.
    pub fn encode_memory<'m>(&mut self, tokens: &[u32], out: &'m mut [f32]) -> Result<Memory<'m>> {
        self.encode_into(tokens, EncodeOut::F32(&mut *out))?;
        Memory::new(&self.model, tokens.len(), out)
    }

    /// [`Session::encode_memory`] into f16 words: half the RAM. Each key and
    /// value row is computed in f32 (in the session's scratch) and rounded
    /// to the nearest f16, so the words are those of `encode_memory`
    /// rounded; [`Memory::new_f16`]'s step reads them back exactly.
    pub fn encode_memory_f16<'m>(
        &mut self,
        tokens: &[u32],
        out: &'m mut [f16],
    ) -> Result<Memory<'m>> {
        self.encode_into(tokens, EncodeOut::F16(&mut *out))?;
        Memory::new_f16(&self.model, tokens.len(), out)
    }

    /// [`Session::encode_memory`] into int8 words and a scale a row (each
    /// key and value row computed as for `encode_memory`, then quantized:
    /// its scale the row's largest magnitude / 127, each word rounded to
    /// nearest): a quarter of the RAM and 4 bytes a row. `q` holds
    /// [`crate::memory_len`] words, `scales` [`crate::memory_rows`];
    /// [`Memory::new_i8`]'s step reads them in place.
    pub fn encode_memory_i8<'m>(
        &mut self,
        tokens: &[u32],
        q: &'m mut [i8],
        scales: &'m mut [f32],
    ) -> Result<Memory<'m>> {
        // No tokens: encode_into's error.
        if !tokens.is_empty()
            && scales.len() != crate::memory::memory_rows(self.model.image(), tokens.len())?
        {
            return Err(Error::BadMemory(
                "the scales' length is not memory_rows(image, tokens)",
            ));
        }
        self.encode_into(
            tokens,
            EncodeOut::I8 {
                q: &mut *q,
                scales: &mut *scales,
            },
        )?;
        Memory::new_i8(&self.model, tokens.len(), q, scales)
    }

    fn encode_into(&mut self, tokens: &[u32], mut out: EncodeOut<'_>) -> Result<()> {
        let cfg = *self.model.config();
        if tokens.is_empty() {
            return Err(Error::BadMemory("a memory needs at least one token"));
        }
        let want = crate::memory::memory_len(self.model.image(), tokens.len())?;
        if out.len() != want {
            return Err(Error::BadMemory(
                "the output's length is not memory_len(image, tokens)",
            ));
        }
        if let Some(&token) = tokens.iter().find(|&&t| t >= cfg.vocab_size) {
            return Err(Error::TokenOutOfRange {
                token,
                vocab: cfg.vocab_size,
            });
        }
        self.reset();
        let mut result = Ok(());
        for (slot, &token) in tokens.iter().enumerate() {
            let enc = Encode {
                slot,
                slots: tokens.len(),
                out: out.reborrow(),
            };
            if let Err(e) = self.run(token, self.pos + 1, None, Some(enc)) {
                result = Err(e);
                break;
            }
        }
        self.reset();
        result
    }

    /// [`Session::feed`]'s layers on `token` (in the vocabulary), moving to
    /// position `next`: the whole stack and the logits, attending to
    /// `memory` in `cross` layers when given; or, with `encode`, the memory
    /// encoder's layers only, writing slot `encode.slot` of each `cross`
    /// layer's keys and values. Its errors are the load-time type,
    /// converted once by `feed`: everything here was checked at load, so
    /// any error is a bug.
    fn run(
        &mut self,
        token: u32,
        next: u64,
        memory: Option<&Memory<'_>>,
        mut encode: Option<Encode<'_>>,
    ) -> Result<()> {
        let cfg = *self.model.config();
        let (d, i, vocab) = (
            cfg.hidden_size as usize,
            cfg.intermediate_size as usize,
            cfg.vocab_size as usize,
        );
        let used = self
            .buf
            .get_mut(..self.used)
            .ok_or(Error::Internal("session buffer"))?;
        let act_start = self
            .used
            .checked_sub(self.act_len)
            .ok_or(Error::Internal("act"))?;
        let (used, act_words) = used
            .split_at_mut_checked(act_start)
            .ok_or(Error::Internal("act"))?;
        let mut act = ActBuf::new(act_words, self.act_len > 0);
        let clamp_start = act_start
            .checked_sub(self.clamp_len)
            .ok_or(Error::Internal("clamps"))?;
        #[allow(unused_variables)] // read by the integer token path only
        let (used, clamp_words) = used
            .split_at_mut_checked(clamp_start)
            .ok_or(Error::Internal("clamps"))?;
        let (mut state, mut scratch) = used
            .split_at_mut_checked(self.state_len)
            .ok_or(Error::Internal("state"))?;
        let h = take(&mut scratch, d);
        let x = take(&mut scratch, d);
        let out = take(&mut scratch, d);
        let gate = take(&mut scratch, i);
        let up = take(&mut scratch, i);
        let logits = take(&mut scratch, vocab);
        let carry = take(&mut scratch, self.carry_len);
        carry.fill(0.0);
        let mut ctx = StepCtx {
            pos: self.pos - self.start,
            abs_pos: self.pos,
            pinned: self.pinned,
            pinned_max: self.pinned_max,
            norm_eps: cfg.norm_eps,
            memory: None,
        };
        #[cfg(feature = "int-path")]
        if cfg.token_path == crate::config::TokenPath::Int {
            let vectors = crate::int_token::Vectors {
                h,
                x,
                out,
                gate,
                up,
                logits: &mut *logits,
                carry,
                scratch,
            };
            let clamps: &mut [u32] = bytemuck::cast_slice_mut(clamp_words);
            let model = &self.model;
            let encoding = encode.is_some() && cfg!(feature = "cross");
            let eps = crate::fixed::Fx::from_f32_bits(cfg.norm_eps.to_bits());
            let mut write = |layer: usize,
                             act: &mut ActBuf<'_>,
                             h: crate::fixed::block::Block<'_>,
                             x: &mut [i32],
                             tmp: &mut [i32]| match encode.as_mut() {
                Some(enc) => enc.write_int(model, eps, layer, act, h, x, tmp),
                None => Ok(true),
            };
            crate::int_token::feed(
                model,
                &ctx,
                memory,
                token,
                state,
                vectors,
                &mut act,
                clamps,
                encoding.then_some(&mut write as crate::int_token::BeforeLayer<'_>),
            )?;
            self.pos = next;
            return Ok(());
        }

        self.model
            .global(Role::Embeddings)?
            .row_into(token as usize, h);
        // Where the next cross layer's part of a memory starts.
        let mut memory_at = crate::mixers::MemoryAt::default();
        for layer in 0..cfg.num_layers as usize {
            let lc: LayerConfig = self.model.layer(layer)?;
            let block = self.model.block(layer)?;
            let w = self.model.layer_weights(layer);
            // Without the `cross` feature no model has a cross layer: no
            // encoder or caller memory code is linked.
            if let Some(enc) = encode.as_mut().filter(|_| cfg!(feature = "cross")) {
                // Every cross layer whose encoder ends here takes this
                // token's keys and values; past the last such depth (at
                // most the first cross layer) the encoder is done.
                if enc.write(&self.model, layer, &mut act, h, x, out, scratch)? {
                    break;
                }
            }
            // At most the whole state (checked when the session was made).
            let mixer_words = usize::try_from(lc.state_len(self.pinned_max)).unwrap_or(usize::MAX);
            let layer_state = take(&mut state, mixer_words);
            let block_words =
                usize::try_from(block.state_len(cfg.hidden_size)).unwrap_or(usize::MAX);
            let block_state = take(&mut state, block_words);

            ctx.memory = Memory::part_for(memory, &lc, &mut memory_at)?;
            block.pre_mixer(&w, cfg.norm_eps, h, x)?;
            lc.step(&ctx, &w, layer_state, scratch, &mut act, carry, x, out)?;
            h.iter_mut().zip(out.iter()).for_each(|(a, b)| *a += b);
            block.mlp(&w, cfg.norm_eps, block_state, &mut act, h, x, out, gate, up)?;
        }
        if encode.is_some() {
            self.pos = next;
            return Ok(());
        }
        let bias = match cfg.final_norm {
            NormKind::Layer if cfg!(feature = "block-options") => {
                Some(self.model.global(Role::FinalNormBias)?)
            }
            _ => None,
        };
        norm(
            &self.model.global(Role::FinalNorm)?,
            bias.as_ref(),
            cfg.norm_eps,
            h,
            x,
        );
        self.model
            .global(Role::LmHead)?
            .matvec(&act.input(x)?, logits)?;
        self.pos = next;
        Ok(())
    }

    /// Where the logits sit in the buffer (after the state and `h, x, out,
    /// gate, up`).
    fn logits_range(&self) -> core::ops::Range<usize> {
        let cfg = self.model.config();
        let start =
            self.state_len + 3 * cfg.hidden_size as usize + 2 * cfg.intermediate_size as usize;
        start..start + cfg.vocab_size as usize
    }

    /// The logits the last [`Session::feed`] returned (or a restored
    /// snapshot carried), what the next token is sampled from; `None` when
    /// nothing was fed since the stream started (a reset, seek or new
    /// session).
    pub fn last_logits(&self) -> Option<&[f32]> {
        if self.stream_len() == 0 {
            return None;
        }
        self.buf.get(self.logits_range())
    }

    /// Bytes of a snapshot of this session ([`Session::snapshot`], version
    /// 1, no sampler): [`crate::snapshot_len`] of its image and pinned
    /// capacity.
    pub fn snapshot_len(&self) -> usize {
        // The state and logits are words of the buffer, so this fits.
        crate::snapshot::HEADER_LEN + 4 * (self.state_len + self.model.config().vocab_size as usize)
    }

    /// Bytes of a snapshot of this session with a sampler
    /// ([`Session::snapshot_with_sampler`], version 2):
    /// [`Session::snapshot_len`] plus [`crate::snapshot::SAMPLER_LEN`], what
    /// [`crate::snapshot::snapshot_with_sampler_len`] gives for its image
    /// and pinned capacity.
    pub fn snapshot_with_sampler_len(&self) -> usize {
        self.snapshot_len()
            .saturating_add(crate::snapshot::SAMPLER_LEN)
    }

    /// Writes a snapshot of the stream into `out` (at least
    /// [`Session::snapshot_len`] bytes; more is fine) and returns its
    /// length: what the model is (a hash of its content), the math module,
    /// the pinned capacity and count, position and stream length, the state
    /// as stored and the last logits (docs/snapshot-format.md, version 1).
    /// Reads the whole image once (the model hash). The session is not
    /// changed; the clamp counters ([`Session::clamps`]) are not part of a
    /// snapshot, nor is a sampler: [`Session::snapshot_with_sampler`] adds
    /// one, so that a sampled stream goes on as it would have.
    pub fn snapshot(&self, out: &mut [u8]) -> Result<usize> {
        self.write_snapshot(None, out)
    }

    /// [`Session::snapshot`] and `sampler`'s state ([`Sampler::state`]:
    /// its options, seed and draw count) in a sampler section, format
    /// version 2: `out` needs [`Session::snapshot_with_sampler_len`] bytes.
    /// [`Session::restore_with_sampler`] gives both back, so a sampled
    /// stream cut here goes on with exactly the tokens and logit bits of
    /// the uninterrupted one. Neither the session nor the sampler is
    /// changed.
    pub fn snapshot_with_sampler(&self, sampler: &Sampler, out: &mut [u8]) -> Result<usize> {
        self.write_snapshot(Some(sampler), out)
    }

    fn write_snapshot(&self, sampler: Option<&Sampler>, out: &mut [u8]) -> Result<usize> {
        use crate::snapshot::{SnapshotError, HEADER_LEN};
        let total = match sampler {
            Some(_) => self.snapshot_with_sampler_len(),
            None => self.snapshot_len(),
        };
        if out.len() < total {
            return Err(SnapshotError::OutTooSmall {
                needed: total,
                got: out.len(),
            }
            .into());
        }
        let header = self.snapshot_header(sampler.is_some())?;
        // The pieces' lengths add up to `total` (snapshot_len); a mismatch
        // is a bug, refused rather than a panic.
        let internal = || Error::Internal("snapshot layout");
        let out = out.get_mut(..total).ok_or_else(internal)?;
        header.encode(out);
        let (_, body) = out.split_at_mut_checked(HEADER_LEN).ok_or_else(internal)?;
        let (state_out, rest) = body
            .split_at_mut_checked(4 * self.state_len)
            .ok_or_else(internal)?;
        copy_exact(state_out, self.state()).ok_or_else(internal)?;
        let (logits_out, sampler_out) = rest
            .split_at_mut_checked(4 * self.model.config().vocab_size as usize)
            .ok_or_else(internal)?;
        match self.last_logits() {
            Some(l) => copy_exact(logits_out, bytemuck::cast_slice(l)).ok_or_else(internal)?,
            None => logits_out.fill(0),
        }
        if let Some(s) = sampler {
            copy_exact(sampler_out, &s.state().to_bytes()).ok_or_else(internal)?;
        }
        crate::snapshot::seal(out, total);
        Ok(total)
    }

    /// [`Session::snapshot`] without a buffer of its size: hands the same
    /// bytes to `write` in pieces, in order (the header, the state, the
    /// logits), and returns their total length, [`Session::snapshot_len`].
    /// For a device that sends a snapshot out (a UART, a radio, flash written
    /// as it comes) with less free RAM than a snapshot: the state and
    /// logits are read from the session twice, once for the CRC and once
    /// to write them. The session is not changed.
    pub fn snapshot_to(&self, write: impl FnMut(&[u8])) -> Result<usize> {
        self.stream_snapshot(None, write)
    }

    /// [`Session::snapshot_with_sampler`] without a buffer of its size, as
    /// [`Session::snapshot_to`] streams [`Session::snapshot`]: the pieces
    /// end with the sampler section. Returns
    /// [`Session::snapshot_with_sampler_len`].
    pub fn snapshot_with_sampler_to(
        &self,
        sampler: &Sampler,
        write: impl FnMut(&[u8]),
    ) -> Result<usize> {
        self.stream_snapshot(Some(sampler), write)
    }

    fn stream_snapshot(
        &self,
        sampler: Option<&Sampler>,
        mut write: impl FnMut(&[u8]),
    ) -> Result<usize> {
        use crate::snapshot::{CRC_FIELD, CRC_START, HEADER_LEN};
        let header = self.snapshot_header(sampler.is_some())?;
        let mut head = [0u8; HEADER_LEN];
        header.encode(&mut head);
        const ZEROS: [u8; 64] = [0; 64];
        let logits_bytes = 4 * self.model.config().vocab_size as usize;
        let logits = self.last_logits();
        let tail = sampler.map(|s| s.state().to_bytes());
        // The logits section as it is written: the logits' bytes, or zeros.
        let section = |f: &mut dyn FnMut(&[u8])| match logits {
            Some(l) => f(bytemuck::cast_slice(l)),
            None => {
                let mut left = logits_bytes;
                while left > 0 {
                    let n = left.min(ZEROS.len());
                    f(&ZEROS[..n]);
                    left -= n;
                }
            }
        };
        let mut crc = crate::image::CRC.digest();
        crc.update(&head[CRC_START..]);
        crc.update(self.state());
        section(&mut |b| crc.update(b));
        if let Some(t) = &tail {
            crc.update(t);
        }
        head[CRC_FIELD..CRC_FIELD + 4].copy_from_slice(&crc.finalize().to_le_bytes());
        write(&head);
        write(self.state());
        section(&mut write);
        if let Some(t) = &tail {
            write(t);
        }
        Ok(header.total_len as usize)
    }

    /// The header of this session's snapshot (version 2 with a sampler
    /// section when `with_sampler`), its CRC not yet computed.
    fn snapshot_header(&self, with_sampler: bool) -> Result<crate::snapshot::SnapshotHeader> {
        use crate::snapshot::{SnapshotHeader, FLAG_LOGITS, FLAG_SAMPLER, MIN_VERSION, VERSION};
        let too_large = Error::SizeOverflow {
            layer: None,
            what: "a snapshot field exceeds 32 bits",
        };
        let (version, len, sampler_flag) = if with_sampler {
            (VERSION, self.snapshot_with_sampler_len(), FLAG_SAMPLER)
        } else {
            (MIN_VERSION, self.snapshot_len(), 0)
        };
        Ok(SnapshotHeader {
            version,
            total_len: u32::try_from(len).map_err(|_| too_large)?,
            crc32: 0,
            model_hash: crate::snapshot::model_hash(&self.model)?,
            math: crate::snapshot::math_code(),
            flags: sampler_flag
                | if self.stream_len() > 0 {
                    FLAG_LOGITS
                } else {
                    0
                },
            pinned_max: u32::try_from(self.pinned_max).map_err(|_| too_large)?,
            pinned: u32::try_from(self.pinned).map_err(|_| too_large)?,
            position: self.pos,
            stream_len: self.stream_len(),
        })
    }

    /// Restores a snapshot made by [`Session::snapshot`] of a session of
    /// the same model (its content hash), the same math module and the same
    /// pinned capacity: the state, position, stream length, pinned count and
    /// last logits, so the stream goes on exactly as the snapshotted one
    /// would ([`Session::resume_with`] generates from the logits without
    /// feeding anything). Everything is checked before anything is written:
    /// a refused snapshot ([`Error::BadSnapshot`]: another model, math
    /// module or pinned capacity, truncated, corrupted, an unknown version,
    /// a position at which no token can follow, a field that contradicts
    /// the model) leaves the session untouched. Reads the whole image once
    /// (the model hash). Snapshots are not authenticated.
    ///
    /// A version 2 snapshot ([`Session::snapshot_with_sampler`]) is
    /// restored too: its sampler section is checked like the rest (a bad
    /// one refuses the snapshot) and then ignored, so the stream goes on
    /// with whatever sampler the caller has;
    /// [`Session::restore_with_sampler`] restores the sampler as well.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        let checked = crate::snapshot::check(bytes, &self.model, self.pinned_max, self.state_len)?;
        self.apply(checked)
    }

    /// [`Session::restore`] and, from a version 2 snapshot
    /// ([`Session::snapshot_with_sampler`]), `sampler`'s state: its options,
    /// seed and draw count, so a sampled stream goes on with exactly the
    /// tokens the uninterrupted one would have drawn. Returns `true` when
    /// the snapshot carried a sampler. A version 1 snapshot (no sampler
    /// section: [`Session::snapshot`], `ferrite bake`) restores the stream
    /// and leaves `sampler` as it is, and returns `false`, so a caller can
    /// tell a stream that goes on with its own sampler. A refused snapshot
    /// leaves the session and the sampler untouched.
    pub fn restore_with_sampler(&mut self, bytes: &[u8], sampler: &mut Sampler) -> Result<bool> {
        let mut checked =
            crate::snapshot::check(bytes, &self.model, self.pinned_max, self.state_len)?;
        let restored = checked.sampler.take();
        self.apply(checked)?;
        Ok(match restored {
            Some(s) => {
                *sampler = s;
                true
            }
            None => false,
        })
    }

    /// Writes a checked snapshot's stream into the session. `check` made
    /// the lengths this session's and the stream length at most the
    /// position; should either not hold (a bug), the session is left as it
    /// was and the error is [`Error::Internal`], never a panic.
    fn apply(&mut self, checked: crate::snapshot::Checked<'_>) -> Result<()> {
        let internal = || Error::Internal("snapshot restore");
        let h = checked.header;
        let start = h.position.checked_sub(h.stream_len).ok_or_else(internal)?;
        let logits = self.logits_range();
        let (state, rest) = self
            .buf
            .split_at_mut_checked(self.state_len)
            .ok_or_else(internal)?;
        let state: &mut [u8] = bytemuck::cast_slice_mut(state);
        let logits_out = rest
            .get_mut(logits.start.saturating_sub(self.state_len)..)
            .and_then(|r| r.get_mut(..logits.len()))
            .ok_or_else(internal)?;
        let logits_out: &mut [u8] = bytemuck::cast_slice_mut(logits_out);
        if state.len() != checked.state.len()
            || checked.logits.is_some_and(|l| l.len() != logits_out.len())
        {
            return Err(internal());
        }
        copy_exact(state, checked.state).ok_or_else(internal)?;
        if let Some(l) = checked.logits {
            copy_exact(logits_out, l).ok_or_else(internal)?;
        }
        self.pos = h.position;
        self.start = start;
        self.pinned = h.pinned as usize;
        Ok(())
    }

    /// Generates `n` tokens from [`Session::last_logits`] without feeding
    /// anything first: samples a token from them, shows it to `on_step`,
    /// feeds it, samples the next, and so on (`n` samples, `n - 1` feeds).
    /// After a snapshot taken right after a feed and restored, this goes on
    /// with exactly the tokens and logits of the uninterrupted stream (with
    /// a sampler in the same state: greedy, or one restored with the stream
    /// by [`Session::restore_with_sampler`]).
    /// Errors with [`StepError::NoLogits`] when nothing was fed since the
    /// stream started, and with what `feed` returns.
    pub fn resume_with(
        &mut self,
        n: usize,
        sampler: &mut Sampler,
        mut on_step: impl FnMut(Step<'_>) -> bool,
    ) -> StepResult<usize> {
        if n == 0 {
            return Ok(0);
        }
        let logits = self.last_logits().ok_or(StepError::NoLogits)?;
        let mut token = sampler.sample(logits);
        if !on_step(Step {
            index: 0,
            logits,
            token,
        }) {
            return Ok(1);
        }
        for index in 1..n {
            let logits = self.feed(token)?;
            token = sampler.sample(logits);
            if !on_step(Step {
                index,
                logits,
                token,
            }) {
                return Ok(index + 1);
            }
        }
        Ok(n)
    }

    /// Feeds `prompt`, then samples `n` tokens, calling `on_token` with each
    /// generated token as soon as it exists; `on_token` returns `false` to stop
    /// early. Returns the number of tokens generated. The same steps as
    /// [`Session::generate_with`], whose hook also sees the logits.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
        mut on_token: impl FnMut(u32) -> bool,
    ) -> StepResult<usize> {
        self.generate_with(prompt, n, sampler, |step| on_token(step.token))
    }

    /// [`Session::generate`] with a hook that sees every generated step: its
    /// index, the logits the token was sampled from and the token
    /// ([`Step`]).
    ///
    /// Feeds `prompt` except its last token, then `n` times feeds the last
    /// token (the prompt's, then the one just sampled) and samples the next
    /// one from the logits [`Session::feed`] returned, calling `on_step`
    /// before the next feed. `on_step` returns `false` to stop early.
    /// Returns the number of tokens generated (at most `n`). Errors on an
    /// empty prompt ([`StepError::EmptyPrompt`]) and with what `feed` returns; the
    /// tokens generated before an error were shown to `on_step`.
    ///
    /// What a firmware that reports the final step's logits writes (the
    /// timing wraps the call; `on_step` runs between the feeds):
    /// ```
    /// # use ferrite::{Sampler, Session};
    /// /// FNV-1a over the last step's logits (their f32 bits).
    /// fn generate_and_checksum(
    ///     session: &mut Session<'_, '_>,
    ///     prompt: &[u32],
    ///     n: usize,
    ///     sampler: &mut Sampler,
    /// ) -> ferrite::Result<u32> {
    ///     let mut fnv = 0x811c_9dc5u32;
    ///     session.generate_with(prompt, n, sampler, |step| {
    ///         if step.index + 1 == n {
    ///             for l in step.logits {
    ///                 for b in l.to_bits().to_le_bytes() {
    ///                     fnv = (fnv ^ u32::from(b)).wrapping_mul(0x0100_0193);
    ///                 }
    ///             }
    ///         }
    ///         true
    ///     })?;
    ///     Ok(fnv)
    /// }
    /// ```
    pub fn generate_with(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
        on_step: impl FnMut(Step<'_>) -> bool,
    ) -> StepResult<usize> {
        self.generate_steps(prompt, n, sampler, None, on_step)
    }

    /// [`Session::generate`] with a caller-owned memory: every token, the
    /// prompt's and the generated ones, is fed with
    /// [`Session::feed_with_memory`].
    pub fn generate_with_memory(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
        memory: &Memory<'_>,
        mut on_token: impl FnMut(u32) -> bool,
    ) -> StepResult<usize> {
        self.check_memory(memory)?;
        self.generate_steps(prompt, n, sampler, Some(memory), |step| {
            on_token(step.token)
        })
    }

    fn generate_steps(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
        memory: Option<&Memory<'_>>,
        mut on_step: impl FnMut(Step<'_>) -> bool,
    ) -> StepResult<usize> {
        let (&last, head) = prompt.split_last().ok_or(StepError::EmptyPrompt)?;
        for &t in head {
            self.feed_inner(t, memory)?;
        }
        let mut token = last;
        for index in 0..n {
            let logits = self.feed_inner(token, memory)?;
            token = sampler.sample(logits);
            if !on_step(Step {
                index,
                logits,
                token,
            }) {
                return Ok(index + 1);
            }
        }
        Ok(n)
    }
}

/// One generated token, as [`Session::generate_with`] shows it.
#[derive(Clone, Copy, Debug)]
pub struct Step<'l> {
    /// Which token of the generation this is: 0 for the first, `n - 1` for
    /// the last of `n`.
    pub index: usize,
    /// The logits `token` was sampled from: exactly what [`Session::feed`]
    /// returned for the token before it (borrowed from the session's buffer,
    /// valid until the next feed).
    pub logits: &'l [f32],
    /// The sampled token.
    pub token: u32,
}
