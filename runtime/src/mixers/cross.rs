//! `cross` — cross-attention over a fixed memory stored in the image
//! (docs/spec.md §3.10, docs/cross-attention.md). `H` query heads, `Hkv`
//! key/value heads, `d` channels per head, memories of `m` slots:
//!
//! ```text
//! q = Wq x                                          [H*d]
//! per head h (kv head g = h / (H / Hkv)), memory n (the state's index):
//!   s_j = q_h . K[n][j][g] / sqrt(d)                j < m
//!   o_h = sum_j softmax(s)_j V[n][j][g]
//! with the output gate: o = o * sigmoid(Wg x)
//! out = Wo o
//! ```
//!
//! `K` and `V` are the layer's `memory_k` and `memory_v` tensors
//! `[N, m, Hkv*d]`, read in place from the image (f32, f16, int8 or int4
//! row-major); the memory has no positions. The softmax streams over the
//! slots (a running maximum and sum, rescaled when the maximum grows), so
//! the scratch is three `[H*d]` vectors whatever `m` is.
//!
//! State layout: one word, the selected memory's index as an f32 whole
//! number ([`crate::Session::select_memory`]; 0 when zeroed). The layer's
//! `k_proj` and `v_proj` are stored but not run per token: they turn the
//! memory encoder's hidden states into keys and values
//! ([`crate::Session::encode_memory`], `ferrite quantize --memory`). With a
//! caller-owned memory (`StepCtx::memory`,
//! [`crate::Session::feed_with_memory`]) the step reads its f32 words with
//! the same loops instead of the selected baked memory.

pub use super::cross_config::CrossConfig;
use super::MemoryWords;
use super::{push, width, Mixer, SpecSink, StepCtx};
use crate::error::{Error, Result, Rows, StepResult};
use crate::format::Role;
use crate::math::{exp, sigmoid};
use crate::tensor::{ActBuf, Tensor, TensorData};
use crate::weights::LayerWeights;

impl Mixer for CrossConfig {
    fn push_specs(&self, layer: u16, d: u32, s: &mut dyn SpecSink) {
        let (h, kv, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let (q, k) = (width(h, hd), width(kv, hd));
        push(s, layer, Role::QProj, [q, d, 0], true);
        push(s, layer, Role::KProj, [k, d, 0], true);
        push(s, layer, Role::VProj, [k, d, 0], true);
        if self.output_gate {
            push(s, layer, Role::GProj, [q, d, 0], true);
        }
        let mem = [self.memories, self.memory_slots, k];
        push(s, layer, Role::MemoryK, mem, true);
        push(s, layer, Role::MemoryV, mem, true);
        push(s, layer, Role::OProj, [d, q, 0], true);
    }

    fn step(
        &self,
        ctx: &StepCtx<'_>,
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
    fn takes_integer_step(&self, ctx: &StepCtx, w: &LayerWeights<'_>, state: &[f32]) -> bool {
        super::cross_int::takes_integer_step(self, ctx, w, state)
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
        super::cross_int::step(self, ctx, w, state, scratch, act, x, out, clamps)
            .map_err(Error::at_step)
    }
}

/// Splits `n` words off the front of `rest`, or fails (scratch sized by
/// [`CrossConfig::scratch_len`] never does).
fn take<'a>(rest: &mut &'a mut [f32], n: usize) -> Result<&'a mut [f32]> {
    if rest.len() < n {
        return Err(Error::Internal("cross scratch too small"));
    }
    let (head, tail) = core::mem::take(rest).split_at_mut(n);
    *rest = tail;
    Ok(head)
}

/// The memory index a state word holds, if it is a whole number below
/// `memories` (the session writes only such: `Session::select_memory`).
/// Read by its bits, with no float arithmetic (the integer token path
/// reads it too): ±0 is 0; NaN, infinities, fractions and negative numbers
/// are none.
pub(crate) fn memory_index(word: f32, memories: u32) -> Option<usize> {
    let bits = word.to_bits();
    if bits & 0x7fff_ffff == 0 {
        return (memories > 0).then_some(0);
    }
    // value = m × 2^e, m in [2^23, 2^24) (or a subnormal's fraction).
    let (m, e) = crate::fixed::block::f32_parts(bits);
    // Negative, or 2^23 and more (e >= 0; memories are at most 8), or
    // below 1 (a fraction: e < -23 leaves m < 2^-e).
    if m < 0 || !(-24..0).contains(&e) {
        return None;
    }
    let (whole, shift) = (m as u32, (-e) as u32);
    let fraction = whole & ((1u32 << shift) - 1);
    let v = whole >> shift;
    (fraction == 0 && v < memories).then_some(v as usize)
}

/// `sum_i q[i] * t[start + i]` over the flattened tensor `t` (its payload
/// read in place; 0 past its end, which a loaded memory never reaches).
fn dot(t: &Tensor<'_>, start: usize, q: &[f32]) -> f32 {
    let n = q.len();
    match *t.data() {
        TensorData::F32(v) => match v.get(start..start + n) {
            Some(row) => row.iter().zip(q).map(|(a, b)| a * b).sum(),
            None => 0.0,
        },
        TensorData::F16(v) => match v.get(start..start + n) {
            Some(row) => row.iter().zip(q).map(|(a, b)| a.to_f32() * b).sum(),
            None => 0.0,
        },
        TensorData::I8 {
            q: v,
            scales,
            group,
        } => {
            // Runs of one scale: the part of each group inside the range.
            let group = group.max(1);
            let mut acc = 0.0f32;
            let mut i = 0;
            while i < n {
                let at = start + i;
                let run = (group - at % group).min(n - i);
                let scale = scales.get(at / group).copied().unwrap_or(0.0);
                let (Some(vals), Some(qs)) = (v.get(at..at + run), q.get(i..i + run)) else {
                    return 0.0;
                };
                let s: f32 = vals.iter().zip(qs).map(|(&a, b)| a as f32 * b).sum();
                acc += s * scale;
                i += run;
            }
            acc
        }
        _ => q.iter().enumerate().map(|(i, b)| t.at(start + i) * b).sum(),
    }
}

/// `o[i] += p * t[start + i]` (see [`dot`]).
fn axpy(t: &Tensor<'_>, start: usize, p: f32, o: &mut [f32]) {
    let n = o.len();
    match *t.data() {
        TensorData::F32(v) => {
            if let Some(row) = v.get(start..start + n) {
                o.iter_mut().zip(row).for_each(|(e, a)| *e += p * a);
            }
        }
        TensorData::F16(v) => {
            if let Some(row) = v.get(start..start + n) {
                o.iter_mut()
                    .zip(row)
                    .for_each(|(e, a)| *e += p * a.to_f32());
            }
        }
        TensorData::I8 {
            q: v,
            scales,
            group,
        } => {
            let group = group.max(1);
            let mut i = 0;
            while i < n {
                let at = start + i;
                let run = (group - at % group).min(n - i);
                let ps = p * scales.get(at / group).copied().unwrap_or(0.0);
                let (Some(vals), Some(os)) = (v.get(at..at + run), o.get_mut(i..i + run)) else {
                    return;
                };
                os.iter_mut()
                    .zip(vals)
                    .for_each(|(e, &a)| *e += ps * a as f32);
                i += run;
            }
        }
        _ => {
            for (i, e) in o.iter_mut().enumerate() {
                *e += p * t.at(start + i);
            }
        }
    }
}

impl CrossConfig {
    /// The memory the step reads: the caller's (keys then values, `[m,
    /// Hkv*d]` each, as tensors over its words) or the baked one the state
    /// word selects; with its slot count `m` and its index `n` among the
    /// tensors' memories (0 for the caller's).
    pub(super) fn memory<'w>(
        &self,
        ctx: &StepCtx<'w>,
        w: &LayerWeights<'w>,
        state: &[f32],
    ) -> Result<(Tensor<'w>, Tensor<'w>, usize, usize)> {
        Ok(match ctx.memory {
            Some(mem) => {
                let half = mem.words.len() / 2;
                let rows = mem.slots;
                let cols = half / rows.max(1);
                let (keys, values) = match mem.words {
                    MemoryWords::F32(w) => {
                        let (k, v) = w
                            .split_at_checked(half)
                            .ok_or(Error::Internal("cross memory"))?;
                        (TensorData::F32(k), TensorData::F32(v))
                    }
                    MemoryWords::F16(w) => {
                        let (k, v) = w
                            .split_at_checked(half)
                            .ok_or(Error::Internal("cross memory"))?;
                        (TensorData::F16(k), TensorData::F16(v))
                    }
                    // One scale a row: groups of a row's words.
                    MemoryWords::I8 { q, scales } => {
                        let (k, v) = q
                            .split_at_checked(half)
                            .ok_or(Error::Internal("cross memory"))?;
                        let (ks, vs) = scales
                            .split_at_checked(rows)
                            .ok_or(Error::Internal("cross memory"))?;
                        (
                            TensorData::I8 {
                                q: k,
                                scales: ks,
                                group: cols,
                            },
                            TensorData::I8 {
                                q: v,
                                scales: vs,
                                group: cols,
                            },
                        )
                    }
                };
                (
                    Tensor::new(rows, cols, keys)?,
                    Tensor::new(rows, cols, values)?,
                    rows,
                    0,
                )
            }
            None => {
                let word = state.first().copied().unwrap_or(0.0);
                let n = memory_index(word, self.memories).ok_or(Error::Internal(
                    "cross: the selected memory is not in the image",
                ))?;
                (
                    w.get(Role::MemoryK)?,
                    w.get(Role::MemoryV)?,
                    self.memory_slots as usize,
                    n,
                )
            }
        })
    }

    /// [`Mixer::step`] with the load-time error type, converted once by
    /// `step` (everything here was checked at load: an error is a bug or a
    /// state word no session wrote).
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        ctx: &StepCtx<'_>,
        w: &LayerWeights<'_>,
        state: &mut [f32],
        scratch: &mut [f32],
        act: &mut ActBuf<'_>,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        // At least 1 (a parsed config's are), so that no chunk size is 0.
        let (h, kv, d) = (
            (self.num_heads as usize).max(1),
            (self.num_kv_heads as usize).max(1),
            (self.head_dim as usize).max(1),
        );
        let (mk, mv, m, n) = self.memory(ctx, w, state)?;
        let hd = h * d;
        let mut rest = scratch;
        let q = take(&mut rest, hd)?;
        let g = take(&mut rest, hd)?;
        let o = take(&mut rest, hd)?;
        {
            let xin = act.input(x)?;
            w.get(Role::QProj)?.matvec(&xin, q)?;
            if self.output_gate {
                w.get(Role::GProj)?.matvec(&xin, g)?;
            }
        }
        let per_group = (h / kv).max(1);
        let scale = 1.0 / libm::sqrtf(d as f32);
        let memory = n * m * kv * d;
        for (hh, (q_h, o_h)) in Rows(q.chunks_exact(d))
            .zip(o.chunks_exact_mut(d))
            .enumerate()
        {
            let g_off = (hh / per_group) * d;
            o_h.fill(0.0);
            // The streaming softmax: `top` the largest score so far, `sum`
            // the sum of exp(s - top), `o_h` the weighted sum at that scale.
            let mut top = f32::NEG_INFINITY;
            let mut sum = 0.0f32;
            for j in 0..m {
                let at = memory + j * kv * d + g_off;
                let s = dot(&mk, at, q_h) * scale;
                let p = if s > top {
                    let c = exp(top - s);
                    sum *= c;
                    o_h.iter_mut().for_each(|e| *e *= c);
                    top = s;
                    1.0
                } else {
                    exp(s - top)
                };
                sum += p;
                axpy(&mv, at, p, o_h);
            }
            if sum > 0.0 {
                let inv = 1.0 / sum;
                o_h.iter_mut().for_each(|e| *e *= inv);
            }
        }
        if self.output_gate {
            o.iter_mut()
                .zip(g.iter())
                .for_each(|(e, &gi)| *e *= sigmoid(gi));
        }
        w.get(Role::OProj)?.matvec(&act.input(o)?, out)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_index_takes_whole_numbers_below_the_count() {
        assert_eq!(memory_index(0.0, 1), Some(0));
        assert_eq!(memory_index(7.0, 8), Some(7));
        assert_eq!(memory_index(-0.0, 1), Some(0));
        assert_eq!(memory_index(1.0, 8), Some(1));
        assert_eq!(memory_index(3.0, 8), Some(3));
        assert_eq!(memory_index(3.0, 3), None);
        let tiny = f32::from_bits(1); // the smallest subnormal
        for bad in [8.0, -1.0, 0.5, 2.5, 7.75, tiny, f32::NAN, f32::INFINITY] {
            assert_eq!(memory_index(bad, 8), None, "{bad}");
        }
        for bad in [f32::MAX, -0.5, 16_777_216.0, -f32::NAN] {
            assert_eq!(memory_index(bad, u32::MAX), None, "{bad}");
        }
        // Every whole number below the count, and no other word, by the
        // bits of the f32 whole numbers 0..=64 and their neighbours.
        for v in 0..=64u32 {
            let bits = (v as f32).to_bits();
            assert_eq!(memory_index(v as f32, 8), (v < 8).then_some(v as usize));
            if v > 0 {
                for near in [bits - 1, bits + 1] {
                    assert_eq!(memory_index(f32::from_bits(near), 64), None, "{v}");
                }
            }
        }
    }

    #[test]
    fn int8_runs_of_one_scale_match_the_decoded_values() {
        // 12 values in groups of 4, read from offsets that cut groups.
        let q: [i8; 12] = [1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12];
        let scales = [0.5f32, 0.25, 2.0];
        let t = Tensor::new(
            1,
            12,
            TensorData::I8 {
                q: &q,
                scales: &scales,
                group: 4,
            },
        )
        .unwrap();
        let x = [1.0f32, 2.0, -1.0, 0.5, 3.0];
        for start in 0..=7 {
            let want: f32 = x.iter().enumerate().map(|(i, b)| t.at(start + i) * b).sum();
            assert!((dot(&t, start, &x) - want).abs() < 1e-5, "{start}");
            let mut o = [1.0f32; 5];
            axpy(&t, start, 2.0, &mut o);
            for (i, e) in o.iter().enumerate() {
                assert!(
                    (e - (1.0 + 2.0 * t.at(start + i))).abs() < 1e-5,
                    "{start} {i}"
                );
            }
        }
    }
}
