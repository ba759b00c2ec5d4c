"""``gla`` — linear attention with a decay per key channel (docs/spec.md §3.9), as fla's
``GatedLinearAttention`` (variant "gla"), ``HGRN2Attention`` ("hgrn2") and
``MultiScaleRetention`` ("retention", RetNet) compute it one token at a time:
per head ``S = diag(a) S + k v^T`` (here ``S [K, V]``), ``o = K^-1/2 q S``, then the
output norm (per head, or over all heads for HGRN2) and the optional swish gate."""

from __future__ import annotations

import numpy as np

from .config import GlaConfig
from .ops import logsigmoid, rmsnorm, rope, sigmoid, silu


def tensor_shapes(cfg: GlaConfig, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    hk, hv = cfg.num_heads * cfg.head_k_dim, cfg.num_heads * cfg.head_v_dim
    shapes = {"q_proj.weight": (hk, hidden), "v_proj.weight": (hv, hidden), "o_proj.weight": (hidden, hv)}
    if cfg.variant == "hgrn2":
        shapes.update({"f_proj.weight": (hk, hidden), "lower_bound": (hk,), "g_norm.weight": (hv,)})
    else:
        shapes.update({"k_proj.weight": (hk, hidden), "g_norm.weight": (cfg.head_v_dim,)})
    if cfg.variant == "gla":
        r = cfg.gate_low_rank_dim
        shapes.update({"gk_proj.0.weight": (r, hidden), "gk_proj.1.weight": (hk, r), "gk_proj.1.bias": (hk,)})
    if cfg.output_gate:
        shapes["g_proj.weight"] = (hv, hidden)
    return shapes


def retention_decay(h: int) -> float:
    """RetNet's fixed decay of head h: 1 - 2^(-5 - h)."""
    return 1.0 - 2.0 ** (-5 - h)


class GatedLinearAttention:
    """Per-token GLA / HGRN2 / retention; state S [H, K, V] and the token position (RoPE)."""

    def __init__(self, cfg: GlaConfig, weights: dict, norm_eps: float):
        self.cfg, self.w = cfg, weights
        self.eps = cfg.o_norm_eps if cfg.o_norm_eps is not None else norm_eps
        self.state = np.zeros((cfg.num_heads, cfg.head_k_dim, cfg.head_v_dim))
        self.position = 0

    def reset(self) -> None:
        self.state[:] = 0.0
        self.position = 0

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        h_count, kd, vd = cfg.num_heads, cfg.head_k_dim, cfg.head_v_dim
        q = (w["q_proj.weight"] @ x).reshape(h_count, kd)
        v = (w["v_proj.weight"] @ x).reshape(h_count, vd)
        if cfg.variant == "hgrn2":
            q = silu(q)
            lb = w["lower_bound"].reshape(h_count, kd)
            # fla: g = logaddexp(log lb, log1p(-lb) + logsigmoid(f)), k = 1 - exp(g).
            a = lb + (1.0 - lb) * sigmoid((w["f_proj.weight"] @ x).reshape(h_count, kd))
            k = 1.0 - a
        else:
            k = (w["k_proj.weight"] @ x).reshape(h_count, kd)
            if cfg.variant == "gla":
                gk = w["gk_proj.1.weight"] @ (w["gk_proj.0.weight"] @ x) + w["gk_proj.1.bias"]
                a = np.exp(logsigmoid(gk) / cfg.gate_logit_normalizer).reshape(h_count, kd)
            else:
                q, k = rope(q, self.position, cfg.rope_theta), rope(k, self.position, cfg.rope_theta)
                a = np.array([[retention_decay(h)] * kd for h in range(h_count)])
        self.position += 1
        self.state = a[:, :, None] * self.state + k[:, :, None] * v[:, None, :]
        o = np.einsum("hk,hkv->hv", q, self.state) * kd ** -0.5
        if cfg.variant == "hgrn2":
            o = rmsnorm(o.reshape(-1), w["g_norm.weight"], self.eps)
        else:
            o = rmsnorm(o, w["g_norm.weight"], self.eps).reshape(-1)
            if cfg.output_gate:
                o = o * silu(w["g_proj.weight"] @ x)
        return w["o_proj.weight"] @ o
