"""``mla`` — latent-compressed sliding window, MLA-style (docs/spec.md §3.6).

The reference forms every key and value explicitly from the cached latents
(k_h = [Wuk_h c ; kr], v_h = Wuv_h c) and attends over the window like
``swa``; the runtime never forms them (it absorbs the up-projections), so the
two are independent computations of the same function.
"""

from __future__ import annotations

import numpy as np

from .config import MlaConfig
from .ops import rope, softmax


def tensor_shapes(cfg: MlaConfig, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    h, d, dv, dr, r = cfg.num_heads, cfg.head_dim, cfg.v_head_dim, cfg.rope_dim, cfg.kv_lora_rank
    return {
        "q_proj.weight": (h * (d + dr), hidden),
        "kv_a_proj.weight": (r + dr, hidden),
        "kv_b_proj.weight": (h * (d + dv), r),  # per head: d rows of Wuk_h, then dv rows of Wuv_h
        "o_proj.weight": (hidden, h * dv),
    }


class LatentWindowAttention:
    """Per-token MLA-style window; keeps every latent of the stream for clarity
    (the runtime keeps only the last W)."""

    def __init__(self, cfg: MlaConfig, weights: dict):
        self.cfg = cfg
        self.w = weights
        self.latents: list = []  # each [R]
        self.rope_keys: list = []  # each [dr], before RoPE

    def reset(self) -> None:
        self.latents.clear()
        self.rope_keys.clear()

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        h, d, dv, dr, r = cfg.num_heads, cfg.head_dim, cfg.v_head_dim, cfg.rope_dim, cfg.kv_lora_rank
        a = w["kv_a_proj.weight"] @ x
        self.latents.append(a[:r])
        self.rope_keys.append(a[r:])
        t = len(self.latents) - 1
        visible = list(range(max(0, t - cfg.window + 1), t + 1))
        theta = cfg.rope_theta if dr > 0 else None
        kv_b = w["kv_b_proj.weight"].reshape(h, d + dv, r)
        q = (w["q_proj.weight"] @ x).reshape(h, d + dr)
        c = np.stack([self.latents[s] for s in visible])  # [n, R]
        kr = np.stack([rope(self.rope_keys[s], s, theta) for s in visible])  # [n, dr]
        o = np.empty((h, dv))
        for head in range(h):
            k_nope = c @ kv_b[head, :d].T  # [n, d]
            v = c @ kv_b[head, d:].T  # [n, dv]
            keys = np.concatenate([k_nope, kr], axis=1)  # [n, d + dr]
            qh = np.concatenate([q[head, :d], rope(q[head, d:], t, theta)])
            p = softmax(keys @ qh / np.sqrt(d + dr))
            o[head] = p @ v
        return w["o_proj.weight"] @ o.reshape(-1)
