"""``gsa`` — Gated Slot Attention, fla GSA semantics (docs/spec.md §3.2)."""

from __future__ import annotations

import numpy as np

from .config import GsaConfig
from .ops import QkvShortConv, logsigmoid, qkv_conv_shapes, rmsnorm, silu, softmax

GSA_NORM_EPS = 1e-5  # g_norm's eps is fixed (docs/spec.md §3.2), not norm_eps


def tensor_shapes(cfg: GsaConfig, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    q, k, v = (cfg.num_heads * cfg.head_k_dim, cfg.num_kv_heads * cfg.head_k_dim,
               cfg.num_kv_heads * cfg.head_v_dim)
    shapes = {
        "q_proj.weight": (q, hidden),
        "k_proj.weight": (k, hidden),
        "v_proj.weight": (v, hidden),
        "f_proj.weight": (cfg.num_kv_heads * cfg.num_slots, hidden),  # head-major
        "g_norm.weight": (cfg.num_heads * cfg.head_v_dim,),
        "o_proj.weight": (hidden, cfg.num_heads * cfg.head_v_dim),
    }
    if cfg.use_short_conv:
        shapes.update(qkv_conv_shapes(q, k, v, cfg.conv_size))
    return shapes


def _feature_map(name: str, x: np.ndarray) -> np.ndarray:
    return silu(x) if name == "swish" else np.maximum(x, 0.0)


class GatedSlotAttention:
    """Per-token recurrent GSA.

    The slot memories Hk [Hkv, K, M] and Hv [Hkv, M, V] do not depend on the
    query, so they are kept once per kv head; query head i reads kv head i // G.
    The softmax scale is 1.0 (not K^-0.5). With ``use_short_conv`` q, k, v
    first go through the short convolution with its SiLU, and then through
    the feature map (q, k) or SiLU (v) all the same, as fla does.
    """

    def __init__(self, cfg: GsaConfig, weights: dict):
        self.cfg = cfg
        self.w = weights
        self.hk = np.zeros((cfg.num_kv_heads, cfg.head_k_dim, cfg.num_slots))
        self.hv = np.zeros((cfg.num_kv_heads, cfg.num_slots, cfg.head_v_dim))
        self.conv = QkvShortConv(weights) if cfg.use_short_conv else None

    def reset(self) -> None:
        self.hk[:] = 0.0
        self.hv[:] = 0.0
        if self.conv is not None:
            self.conv.reset()

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        hkv = cfg.num_kv_heads
        q, k, v = w["q_proj.weight"] @ x, w["k_proj.weight"] @ x, w["v_proj.weight"] @ x
        if self.conv is not None:
            q, k, v = self.conv.step(q, k, v)
        q = _feature_map(cfg.feature_map, q).reshape(cfg.num_heads, cfg.head_k_dim)
        k = _feature_map(cfg.feature_map, k).reshape(hkv, cfg.head_k_dim)
        v = silu(v).reshape(hkv, cfg.head_v_dim)
        f = logsigmoid(w["f_proj.weight"] @ x).reshape(hkv, cfg.num_slots) / cfg.gate_logit_normalizer
        alpha = np.exp(f)
        s = 1.0 - alpha

        self.hk = alpha[:, None, :] * self.hk + k[:, :, None] * s[:, None, :]
        self.hv = alpha[:, :, None] * self.hv + s[:, :, None] * v[:, None, :]

        group = cfg.num_heads // hkv
        o = np.empty((cfg.num_heads, cfg.head_v_dim))
        for i in range(cfg.num_heads):
            kv = i // group
            p = softmax(q[i] @ self.hk[kv])
            o[i] = p @ self.hv[kv]

        o = rmsnorm(silu(o.reshape(-1)), w["g_norm.weight"], GSA_NORM_EPS)
        return w["o_proj.weight"] @ o
