"""``gsa`` — Gated Slot Attention, fla GSA semantics (docs/spec.md §3.2)."""

from __future__ import annotations

import numpy as np

from .config import GsaConfig
from .ops import logsigmoid, rmsnorm, silu, softmax

GSA_NORM_EPS = 1e-5  # g_norm's eps is fixed (docs/spec.md §3.2), not norm_eps


def tensor_shapes(cfg: GsaConfig, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    return {
        "q_proj.weight": (cfg.num_heads * cfg.head_k_dim, hidden),
        "k_proj.weight": (cfg.num_kv_heads * cfg.head_k_dim, hidden),
        "v_proj.weight": (cfg.num_kv_heads * cfg.head_v_dim, hidden),
        "f_proj.weight": (cfg.num_kv_heads * cfg.num_slots, hidden),  # head-major
        "g_norm.weight": (cfg.num_heads * cfg.head_v_dim,),
        "o_proj.weight": (hidden, cfg.num_heads * cfg.head_v_dim),
    }


def _feature_map(name: str, x: np.ndarray) -> np.ndarray:
    return silu(x) if name == "swish" else np.maximum(x, 0.0)


class GatedSlotAttention:
    """Per-token recurrent GSA.

    The slot memories Hk [Hkv, K, M] and Hv [Hkv, M, V] do not depend on the
    query, so they are kept once per kv head; query head i reads kv head i // G.
    The softmax scale is 1.0 (not K^-0.5).
    """

    def __init__(self, cfg: GsaConfig, weights: dict):
        self.cfg = cfg
        self.w = weights
        self.hk = np.zeros((cfg.num_kv_heads, cfg.head_k_dim, cfg.num_slots))
        self.hv = np.zeros((cfg.num_kv_heads, cfg.num_slots, cfg.head_v_dim))

    def reset(self) -> None:
        self.hk[:] = 0.0
        self.hv[:] = 0.0

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        hkv = cfg.num_kv_heads
        q = _feature_map(cfg.feature_map, w["q_proj.weight"] @ x).reshape(cfg.num_heads, cfg.head_k_dim)
        k = _feature_map(cfg.feature_map, w["k_proj.weight"] @ x).reshape(hkv, cfg.head_k_dim)
        v = silu(w["v_proj.weight"] @ x).reshape(hkv, cfg.head_v_dim)
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
