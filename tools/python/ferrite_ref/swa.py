"""``swa`` — sliding-window softmax attention with sinks and pinned prefix (docs/spec.md §3.3).

Visible keys for the query at stream position t (S_eff = sinks + pinned):
    {s : max(0, t-W+1) <= s <= t}  ∪  {s : s < S_eff, s <= t},  each key once;
with dilation r the window part is {t - i r : 0 <= i < W, t - i r >= 0}.
RoPE positions: "absolute" rotates q and k at their true stream positions;
"cache" (StreamingLLM) gives a sink/pinned key s its index s, a window key s
the index S_eff + (s - max(S_eff, t-W+1)), and the query min(t, S_eff+W-1).
"""

from __future__ import annotations

import numpy as np

from .config import SwaConfig
from .ops import QkvShortConv, qkv_conv_shapes, rope, softmax


def tensor_shapes(cfg: SwaConfig, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    q_dim = cfg.num_heads * cfg.head_dim
    kv_dim = cfg.num_kv_heads * cfg.head_dim
    shapes = {
        "q_proj.weight": (q_dim, hidden),
        "k_proj.weight": (kv_dim, hidden),
        "v_proj.weight": (kv_dim, hidden),
        "o_proj.weight": (hidden, q_dim),
    }
    if cfg.sink_logits:
        shapes["sinks"] = (cfg.num_heads,)
    if cfg.use_short_conv:
        shapes.update(qkv_conv_shapes(q_dim, kv_dim, kv_dim, cfg.conv_size))
    return shapes


def visible_keys(t: int, window: int, s_eff: int, dilation: int = 1) -> list:
    """Stream positions the query at t attends to, oldest first, each once.

    Window keys are t - i*dilation for i < window (those >= 0); sinks are the
    s < s_eff that are not window keys. With dilation 1 this is
    [0, min(s_eff, start)) + [start, t].
    """
    window_keys = sorted(s for s in (t - i * dilation for i in range(window)) if s >= 0)
    sinks = [s for s in range(min(s_eff, t + 1)) if s not in window_keys]
    return sinks + window_keys


def rope_positions(t: int, keys: list, window: int, s_eff: int, mode: str) -> tuple:
    """(query position, [key positions]) for RoPE under ``mode``."""
    if mode == "absolute":
        return t, list(keys)
    window_start = max(s_eff, t - window + 1)
    key_positions = [s if s < s_eff else s_eff + (s - window_start) for s in keys]
    return min(t, s_eff + window - 1), key_positions


class SlidingWindowAttention:
    """Per-token sliding-window attention.

    For clarity the reference keeps every (un-rotated) key and value of the
    stream and selects the visible ones each step; the runtime keeps only the
    sink/pinned slots and a rolling buffer of W.
    """

    def __init__(self, cfg: SwaConfig, weights: dict, pinned: int = 0):
        self.cfg = cfg
        self.w = weights
        self.s_eff = cfg.sinks + pinned
        self.conv = QkvShortConv(weights) if cfg.use_short_conv else None
        self.keys: list = []  # each [Hkv, d], before RoPE
        self.values: list = []  # each [Hkv, d]

    def reset(self) -> None:
        self.keys.clear()
        self.values.clear()
        if self.conv is not None:
            self.conv.reset()

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        q, k, v = w["q_proj.weight"] @ x, w["k_proj.weight"] @ x, w["v_proj.weight"] @ x
        if self.conv is not None:
            q, k, v = self.conv.step(q, k, v)
        self.keys.append(k.reshape(cfg.num_kv_heads, cfg.head_dim))
        self.values.append(v.reshape(cfg.num_kv_heads, cfg.head_dim))
        t = len(self.keys) - 1

        visible = visible_keys(t, cfg.window, self.s_eff, cfg.dilation)
        q_pos, k_pos = rope_positions(t, visible, cfg.window, self.s_eff, cfg.rope_positions)
        q = rope(q.reshape(cfg.num_heads, cfg.head_dim), q_pos, cfg.rope_theta)
        keys = np.stack([rope(self.keys[s], p, cfg.rope_theta) for s, p in zip(visible, k_pos)])
        values = np.stack([self.values[s] for s in visible])  # [n, Hkv, d]

        group = cfg.num_heads // cfg.num_kv_heads
        o = np.empty((cfg.num_heads, cfg.head_dim))
        for h in range(cfg.num_heads):
            kv = h // group
            scores = keys[:, kv] @ q[h] / np.sqrt(cfg.head_dim)
            sink = w["sinks"][h] if cfg.sink_logits else None
            o[h] = softmax(scores, sink) @ values[:, kv]
        return w["o_proj.weight"] @ o.reshape(-1)
