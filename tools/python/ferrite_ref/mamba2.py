"""``mamba2`` — Mamba-2's mixer as fla's ``Mamba2`` layer computes it (docs/spec.md §3.7):
the in-projection split into the gate z, x, B, C and dt; the causal convolution
over x, B and C with its bias and SiLU; dt through softplus with its bias; the
scalar-decay state update per head (A = -exp(A_log)) with G groups of B and C;
the D skip; the gated RMSNorm; the out-projection."""

from __future__ import annotations

import numpy as np

from .config import Mamba2Config
from .ops import rmsnorm, silu, softplus


def tensor_shapes(cfg: Mamba2Config, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    inner = cfg.num_heads * cfg.head_dim
    channels = inner + 2 * cfg.n_groups * cfg.state_size
    shapes = {
        "in_proj.weight": (inner + channels + cfg.num_heads, hidden),
        "conv1d.weight": (channels, 1, cfg.conv_size),
        "A_log": (cfg.num_heads,),
        "dt_bias": (cfg.num_heads,),
        "D": (inner,) if cfg.d_per_channel else (cfg.num_heads,),
        "out_proj.weight": (hidden, inner),
    }
    if cfg.conv_bias:
        shapes["conv1d.bias"] = (channels,)
    if cfg.gated_norm:
        shapes["norm.weight"] = (inner,)
    return shapes


def group_of(cfg: Mamba2Config, h: int) -> int:
    """The group of B and C that head h reads."""
    if cfg.group_heads == "interleaved":
        return h % cfg.n_groups
    return h // (cfg.num_heads // cfg.n_groups)


class Mamba2:
    """Per-token Mamba-2; state: the convolution window [C, W] and S [H, P, N]."""

    def __init__(self, cfg: Mamba2Config, weights: dict, norm_eps: float):
        self.cfg, self.w, self.norm_eps = cfg, weights, norm_eps
        self.inner = cfg.num_heads * cfg.head_dim
        self.channels = self.inner + 2 * cfg.n_groups * cfg.state_size
        self.window = np.zeros((self.channels, cfg.conv_size))  # newest input last
        self.state = np.zeros((cfg.num_heads, cfg.head_dim, cfg.state_size))

    def reset(self) -> None:
        self.window[:] = 0.0
        self.state[:] = 0.0

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w, inner = self.cfg, self.w, self.inner
        h_count, p, n, g_count = cfg.num_heads, cfg.head_dim, cfg.state_size, cfg.n_groups
        proj = w["in_proj.weight"] @ x
        z, xbc, dt = proj[:inner], proj[inner:inner + self.channels], proj[inner + self.channels:]
        self.window = np.roll(self.window, -1, axis=1)
        self.window[:, -1] = xbc
        conv = np.sum(w["conv1d.weight"][:, 0, :] * self.window, axis=1)
        if cfg.conv_bias:
            conv = conv + w["conv1d.bias"]
        xbc = silu(conv)
        xs = xbc[:inner].reshape(h_count, p)
        b = xbc[inner:inner + g_count * n].reshape(g_count, n)
        c = xbc[inner + g_count * n:].reshape(g_count, n)
        dt = softplus(dt + w["dt_bias"])
        decay = np.exp(-np.exp(w["A_log"]) * dt)
        d = w["D"].reshape(h_count, p) if cfg.d_per_channel else w["D"][:, None] * np.ones((1, p))
        y = np.empty((h_count, p))
        for h in range(h_count):
            g = group_of(cfg, h)
            self.state[h] = decay[h] * self.state[h] + dt[h] * np.outer(xs[h], b[g])
            y[h] = self.state[h] @ c[g] + d[h] * xs[h]
        y = y.reshape(-1)
        gate = silu(z)
        if not cfg.gated_norm:
            y = y * gate
        else:
            if not cfg.norm_before_gate:
                y = y * gate
            groups = y.reshape(g_count, -1)
            y = rmsnorm(groups, 1.0, self.norm_eps).reshape(-1) * w["norm.weight"]
            if cfg.norm_before_gate:
                y = y * gate
        return w["out_proj.weight"] @ y
