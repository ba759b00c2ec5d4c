"""Sliding-window attention with sinks (docs/spec.md §3.3), parallel over time.

Masked softmax attention (window + sinks, RoPE absolute or cache, optional
sink logits, dilation); ``pinned`` adds pinned-prefix tokens as extra sinks.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ferrite_ref.config import SwaConfig

from ..ops import conv_modules, linear, rope, rope_tables


class SlidingWindowAttention(nn.Module):
    """The sliding-window attention layer (GQA, sinks, RoPE positions, sink logits, dilation)."""

    def __init__(self, cfg: SwaConfig, d: int):
        super().__init__()
        self.cfg = cfg
        h, hkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj, self.k_proj, self.v_proj = linear(d, h * hd), linear(d, hkv * hd), linear(d, hkv * hd)
        self.o_proj = linear(h * hd, d)
        if cfg.sink_logits:
            self.sinks = nn.Parameter(torch.zeros(h))
        if cfg.use_short_conv:
            conv_modules(self, h * hd, hkv * hd, hkv * hd, cfg.conv_size)

    def forward(self, x, pinned: int = 0):
        cfg = self.cfg
        b, t, _ = x.shape
        h, hkv, hd, w = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.window
        s_eff = cfg.sinks + pinned
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if cfg.use_short_conv:
            q, k, v = self.q_conv1d(q), self.k_conv1d(k), self.v_conv1d(v)
        q = q.view(b, t, h, hd).transpose(1, 2)
        k = k.view(b, t, hkv, hd).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
        v = v.view(b, t, hkv, hd).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
        pos = torch.arange(t, device=x.device)
        ti, si = pos[:, None], pos[None, :]
        r = cfg.dilation
        in_window = (si <= ti) & (si > ti - ((w - 1) * r + 1)) & ((ti - si) % r == 0)
        is_sink = (si < s_eff) & (si <= ti) & ~in_window
        visible = in_window | is_sink
        if cfg.rope_theta is not None:
            cos, sin = rope_tables(pos, hd, cfg.rope_theta, x.dtype, x.device)
            kr = rope(k, cos, sin)
            scores = rope(q, cos, sin) @ kr.transpose(-1, -2)
            if cfg.rope_positions == "cache" and s_eff > 0:
                # Window keys sit at relative distance t - s in the cache too; sink keys
                # are scored with the query at cache position min(t, S_eff + W - 1).
                qpos = torch.clamp(pos, max=s_eff + w - 1)
                cq, sq = rope_tables(qpos, hd, cfg.rope_theta, x.dtype, x.device)
                sink_scores = rope(q, cq, sq) @ kr.transpose(-1, -2)
                scores = torch.where(is_sink, sink_scores, scores)
        else:
            scores = q @ k.transpose(-1, -2)
        scores = scores / math.sqrt(hd)
        scores = scores.masked_fill(~visible, float("-inf"))
        if cfg.sink_logits:
            extra = self.sinks.to(scores.dtype)[None, :, None, None].expand(b, h, t, 1)
            p = torch.softmax(torch.cat([scores, extra], dim=-1), dim=-1)[..., :t]
        else:
            p = torch.softmax(scores, dim=-1)
        o = (p @ v).transpose(1, 2).reshape(b, t, h * hd)
        return self.o_proj(o)


def build(cfg: SwaConfig, d: int, norm_eps: float) -> SlidingWindowAttention:
    """The layer of ``cfg`` in a model of width ``d``."""
    return SlidingWindowAttention(cfg, d)


def _window_floats(cfg: SwaConfig) -> int:
    span = (cfg.window - 1) * cfg.dilation + 1
    return (cfg.sinks + span) * cfg.num_kv_heads * 2 * cfg.head_dim


def state_floats(cfg: SwaConfig) -> int:
    """Recurrent state words, as the runtime sizes it (runtime/src/mixers/swa.rs)."""
    h, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    conv = (h * d + 2 * hkv * d) * (cfg.conv_size - 1) if cfg.use_short_conv else 0
    return _window_floats(cfg) + conv


def core_state_floats(cfg: SwaConfig) -> int:
    """The memory proper (the key/value cache), without the short-convolution caches."""
    return _window_floats(cfg)
