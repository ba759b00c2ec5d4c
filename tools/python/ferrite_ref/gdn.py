"""``gdn`` — Gated DeltaNet, fla GatedDeltaNet semantics (docs/spec.md §3.1)."""

from __future__ import annotations

import numpy as np

from .config import GdnConfig
from .ops import QkvShortConv, l2norm, qkv_conv_shapes, rmsnorm, sigmoid, silu, softplus


def tensor_shapes(cfg: GdnConfig, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    qk = cfg.num_heads * cfg.head_dim
    v = cfg.num_v_heads * cfg.head_v_dim
    shapes = {
        "q_proj.weight": (qk, hidden),
        "k_proj.weight": (qk, hidden),
        "v_proj.weight": (v, hidden),
        "a_proj.weight": (cfg.num_v_heads, hidden),
        "b_proj.weight": (cfg.num_v_heads, hidden),
        "A_log": (cfg.num_v_heads,),
        "dt_bias": (cfg.num_v_heads,),
        **qkv_conv_shapes(qk, qk, v, cfg.conv_size),
        "o_norm.weight": (cfg.head_v_dim,),
        "o_proj.weight": (hidden, v),
    }
    if cfg.use_gate:
        shapes["g_proj.weight"] = (v, hidden)
    return shapes


class GatedDeltaNet:
    """Per-token recurrent Gated DeltaNet; state S [HV, V, K] plus conv caches."""

    def __init__(self, cfg: GdnConfig, weights: dict, norm_eps: float):
        self.cfg = cfg
        self.w = weights
        self.norm_eps = norm_eps
        self.conv = QkvShortConv(weights)
        self.state = np.zeros((cfg.num_v_heads, cfg.head_v_dim, cfg.head_dim))

    def reset(self) -> None:
        self.state[:] = 0.0
        self.conv.reset()

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        q, k, v = self.conv.step(w["q_proj.weight"] @ x, w["k_proj.weight"] @ x, w["v_proj.weight"] @ x)
        q = q.reshape(cfg.num_heads, cfg.head_dim)
        k = k.reshape(cfg.num_heads, cfg.head_dim)
        v = v.reshape(cfg.num_v_heads, cfg.head_v_dim)
        q = l2norm(q) * cfg.head_dim**-0.5
        k = l2norm(k)
        beta = sigmoid(w["b_proj.weight"] @ x)
        if cfg.allow_neg_eigval:
            beta = beta * 2.0
        g = -np.exp(w["A_log"]) * softplus(w["a_proj.weight"] @ x + w["dt_bias"])

        group = cfg.num_v_heads // cfg.num_heads
        o = np.empty((cfg.num_v_heads, cfg.head_v_dim))
        for j in range(cfg.num_v_heads):
            h = j // group
            s = np.exp(g[j]) * self.state[j]
            s = s + beta[j] * np.outer(v[j] - s @ k[h], k[h])
            self.state[j] = s
            o[j] = s @ q[h]

        z = rmsnorm(o, w["o_norm.weight"], self.norm_eps)
        if cfg.use_gate:
            gate = (w["g_proj.weight"] @ x).reshape(cfg.num_v_heads, cfg.head_v_dim)
            z = z * silu(gate)
        return w["o_proj.weight"] @ z.reshape(-1)
