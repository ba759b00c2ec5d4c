"""``cross`` — cross-attention over a fixed memory baked into the image (docs/spec.md §3.10).

Per head h (kv head g = h // (H / Hkv)) over memory n (the session's choice, 0 after a reset):
    s_j = q_h . K[n, j, g] / sqrt(d),   o_h = sum_j softmax(s)_j V[n, j, g]
with the optional output gate o = o * sigmoid(Wg x), then out = Wo o. The memory has no
positions. ``k_proj`` and ``v_proj`` are not run per token: they are the memory encoder's
(``Reference.encode_memory``, docs/spec.md §3.10).
"""

from __future__ import annotations

import numpy as np

from .config import CrossConfig
from .ops import sigmoid, softmax


def tensor_shapes(cfg: CrossConfig, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    q_dim = cfg.num_heads * cfg.head_dim
    kv_dim = cfg.num_kv_heads * cfg.head_dim
    memory = (cfg.memories, cfg.memory_slots, kv_dim)
    shapes = {
        "q_proj.weight": (q_dim, hidden),
        "k_proj.weight": (kv_dim, hidden),
        "v_proj.weight": (kv_dim, hidden),
        "memory_k": memory,
        "memory_v": memory,
        "o_proj.weight": (hidden, q_dim),
    }
    if cfg.output_gate:
        shapes["g_proj.weight"] = (q_dim, hidden)
    return shapes


class CrossAttention:
    """Per-token cross-attention; the state is the selected memory's index."""

    def __init__(self, cfg: CrossConfig, weights: dict):
        self.cfg, self.w = cfg, weights
        self.memory = 0

    def reset(self) -> None:
        """Back to memory 0 (the runtime's zeroed state word)."""
        self.memory = 0

    def select(self, index: int) -> None:
        """Attend to baked memory ``index`` from the next token on."""
        if not 0 <= index < self.cfg.memories:
            raise ValueError(f"no memory {index}: the layer has {self.cfg.memories}")
        self.memory = index

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        h_count, kv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        q = (w["q_proj.weight"] @ x).reshape(h_count, d)
        keys = w["memory_k"][self.memory].reshape(cfg.memory_slots, kv, d)
        values = w["memory_v"][self.memory].reshape(cfg.memory_slots, kv, d)
        group = h_count // kv
        o = np.zeros((h_count, d))
        for h in range(h_count):
            g = h // group
            p = softmax(keys[:, g, :] @ q[h] / np.sqrt(d))
            o[h] = p @ values[:, g, :]
        o = o.reshape(-1)
        if cfg.output_gate:
            o = o * sigmoid(w["g_proj.weight"] @ x)
        return w["o_proj.weight"] @ o
