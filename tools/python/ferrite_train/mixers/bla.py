"""Blurry Window Attention (docs/spec.md §3.4), parallel over time.

The closed form of the gated recurrence:
Ks(t) = sum_s A[t,s,n] k_s with A[t,s,n] = phi_n(s) prod_{s<tau<=t} (1 - phi_n(tau)),
data-independent, computed once per length in float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ferrite_ref import bla as ref_bla
from ferrite_ref.config import BlaConfig

from ..ops import conv_modules, linear


def bla_write_matrix(cfg: BlaConfig, t: int) -> np.ndarray:
    """A[t, s, n]: the weight of token s in slot n after token t (float64, [T, T, N])."""
    phi = ref_bla.phi_table(cfg)  # [P, N]
    n = cfg.slots
    a = np.zeros((t, t, n))
    for i in range(t):
        p = phi[i % cfg.period]
        if i > 0:
            if cfg.decay == "gated":
                a[i, :i] = a[i - 1, :i] * (1.0 - p)[None, :]
            elif cfg.decay == "scalar":
                a[i, :i] = a[i - 1, :i] * cfg.gamma
            else:
                a[i, :i] = a[i - 1, :i]
        a[i, i] = p
    return a


def bla_live_mask(cfg: BlaConfig, t: int) -> np.ndarray:
    """[T, N] slots in the softmax at position t (docs/spec.md §3.4 warm-up rule)."""
    return np.stack([ref_bla.live_slots(min(i, cfg.period), cfg) for i in range(t)])


class BlurryWindowAttention(nn.Module):
    """The Blurry Window Attention layer (kernel, decay, slot and shared key/value head
    options of §3.4: ``num_kv_heads`` heads of k and v, each read by ``H / Hkv`` query heads)."""

    def __init__(self, cfg: BlaConfig, d: int):
        super().__init__()
        self.cfg = cfg
        dim = cfg.num_heads * cfg.head_dim
        kv_dim = cfg.num_kv_heads * cfg.head_dim
        self.q_proj, self.k_proj, self.v_proj = linear(d, dim), linear(d, kv_dim), linear(d, kv_dim)
        self.o_proj = linear(dim, d)
        if cfg.use_short_conv:
            conv_modules(self, dim, kv_dim, kv_dim, cfg.conv_size)
        self._cache = {}

    def _tables(self, t: int, dtype, device):
        key = (t, dtype, device)
        if key not in self._cache:
            a = torch.tensor(bla_write_matrix(self.cfg, t), dtype=dtype, device=device)
            live = torch.tensor(bla_live_mask(self.cfg, t), device=device)
            # Every length is kept: a captured CUDA graph step reads these tensors, so
            # an evaluation at another length must not free them.
            self._cache[key] = (a, live)
        return self._cache[key]

    def forward(self, x, pinned: int = 0):
        cfg = self.cfg
        b, t, _ = x.shape
        h, hkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if cfg.use_short_conv:
            q, k, v = self.q_conv1d(q), self.k_conv1d(k), self.v_conv1d(v)
        q = q.view(b, t, h, hd).transpose(1, 2)
        # Query head h reads key/value head h // (H / Hkv) (the runtime's grouping).
        k, v = (u.view(b, t, hkv, hd).transpose(1, 2).repeat_interleave(h // hkv, dim=1) for u in (k, v))
        a, live = self._tables(t, x.dtype, x.device)
        qk = q @ k.transpose(-1, -2) / math.sqrt(hd)  # [B, H, T, S]
        scores = torch.einsum("tsn,bhts->bhtn", a, qk).masked_fill(~live, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        w = torch.einsum("bhtn,tsn->bhts", p, a)
        o = (w @ v).transpose(1, 2).reshape(b, t, h * hd)
        return self.o_proj(o)


def build(cfg: BlaConfig, d: int, norm_eps: float) -> BlurryWindowAttention:
    """The layer of ``cfg`` in a model of width ``d``."""
    return BlurryWindowAttention(cfg, d)


def state_floats(cfg: BlaConfig) -> int:
    """Recurrent state words, as the runtime sizes it (runtime/src/mixers/bla.rs)."""
    h, hkv, k = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    conv = (h + 2 * hkv) * k * (cfg.conv_size - 1) if cfg.use_short_conv else 0
    return core_state_floats(cfg) + conv


def core_state_floats(cfg: BlaConfig) -> int:
    """The memory proper (the slots of the Hkv key/value heads), without the short-convolution caches."""
    return cfg.num_kv_heads * cfg.slots * 2 * cfg.head_dim
