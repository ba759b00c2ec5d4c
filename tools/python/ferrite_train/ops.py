"""Shared PyTorch pieces of the training mixers and the block (docs/spec.md §1, §3.5):
the RMSNorm, the short convolution, bias-free projections and GPT-NeoX RoPE."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """x / rms(x) * weight over the last axis (docs/spec.md §1)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ShortConv(nn.Module):
    """Depthwise causal conv over time + SiLU (or none); weight [C, 1, W] (docs/spec.md §3.5)."""

    def __init__(self, channels: int, width: int, activation: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, width) / math.sqrt(width))
        self.width = width
        self.activation = activation

    def forward(self, x):  # [B, T, C]
        y = F.conv1d(F.pad(x.transpose(1, 2), (self.width - 1, 0)), self.weight, groups=x.shape[-1])
        y = y.transpose(1, 2)
        return F.silu(y) if self.activation else y


def linear(d_in: int, d_out: int) -> nn.Linear:
    """A projection without bias (every projection of docs/spec.md §2)."""
    return nn.Linear(d_in, d_out, bias=False)


def conv_modules(module: nn.Module, q: int, k: int, v: int, width: int, qk_silu: bool = True) -> None:
    """Give ``module`` the q/k/v short convolutions (§2 names ``{q,k,v}_conv1d``) of q, k, v channels."""
    module.q_conv1d = ShortConv(q, width, qk_silu)
    module.k_conv1d = ShortConv(k, width, qk_silu)
    module.v_conv1d = ShortConv(v, width)


def rope_tables(positions, d: int, theta: float, dtype, device):
    """cos, sin [T, d/2] of GPT-NeoX RoPE at ``positions`` (angles in float64)."""
    half = d // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=torch.float64, device=device) / d)
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def rope(x, cos, sin):
    """Rotate x [..., T, d] by the tables of ``rope_tables`` (halves, GPT-NeoX)."""
    half = x.shape[-1] // 2
    lo, hi = x[..., :half], x[..., half:]
    return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1)
