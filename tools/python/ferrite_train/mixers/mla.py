"""Latent-compressed (MLA-style) sliding window (docs/spec.md §3.6), parallel over time."""

from __future__ import annotations

import math

import torch
from torch import nn

from ferrite_ref.config import MlaConfig

from ..ops import linear, rope, rope_tables


class LatentWindowAttention(nn.Module):
    """MLA-style window (docs/spec.md §3.6), trained in its explicit form: keys
    [Wuk_h c ; RoPE(kr)] and values Wuv_h c from the latent c, masked window attention."""

    def __init__(self, cfg: MlaConfig, d: int):
        super().__init__()
        self.cfg = cfg
        h, hd, dv, dr, r = cfg.num_heads, cfg.head_dim, cfg.v_head_dim, cfg.rope_dim, cfg.kv_lora_rank
        self.q_proj = linear(d, h * (hd + dr))
        self.kv_a_proj = linear(d, r + dr)
        self.kv_b_proj = linear(r, h * (hd + dv))
        self.o_proj = linear(h * dv, d)

    def forward(self, x, pinned: int = 0):
        cfg = self.cfg
        b, t, _ = x.shape
        h, hd, dv, dr, r = cfg.num_heads, cfg.head_dim, cfg.v_head_dim, cfg.rope_dim, cfg.kv_lora_rank
        q = self.q_proj(x).view(b, t, h, hd + dr).transpose(1, 2)  # [B, H, T, d+dr]
        a = self.kv_a_proj(x)
        c, kr = a[..., :r], a[..., r:]
        kv = self.kv_b_proj(c).view(b, t, h, hd + dv).transpose(1, 2)
        k_nope, v = kv[..., :hd], kv[..., hd:]
        q_nope, q_rope = q[..., :hd], q[..., hd:]
        pos = torch.arange(t, device=x.device)
        scores = q_nope @ k_nope.transpose(-1, -2)
        if dr > 0:
            cos, sin = rope_tables(pos, dr, cfg.rope_theta, x.dtype, x.device)
            scores = scores + rope(q_rope, cos, sin) @ rope(kr, cos, sin)[:, None].transpose(-1, -2)
        ti, si = pos[:, None], pos[None, :]
        visible = (si <= ti) & (si > ti - cfg.window)
        scores = (scores / math.sqrt(hd + dr)).masked_fill(~visible, float("-inf"))
        o = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, h * dv)
        return self.o_proj(o)


def build(cfg: MlaConfig, d: int, norm_eps: float) -> LatentWindowAttention:
    """The layer of ``cfg`` in a model of width ``d``."""
    return LatentWindowAttention(cfg, d)


def state_floats(cfg: MlaConfig) -> int:
    """Recurrent state words, as the runtime sizes it (runtime/src/mixers/mla.rs): the
    window's latents and shared RoPE keys."""
    return cfg.window * (cfg.kv_lora_rank + cfg.rope_dim)


def core_state_floats(cfg: MlaConfig) -> int:
    """The memory proper (mla has no short convolution): ``state_floats``."""
    return state_floats(cfg)
