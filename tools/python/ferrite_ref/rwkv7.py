"""``rwkv7`` — RWKV-7's time mixing as fla's ``RWKV7Attention`` computes it
(docs/spec.md §3.8): the token shift with its six learned interpolations; the
receptance, key and value projections; the low-rank decay, in-context learning
rate, value-residual and gate projections; the generalized delta rule per head
(``S = S diag(e^w) + (S (-kk)) (kk a)^T + v k^T``); the per-head group norm; the
bonus ``(r . k . r_k) v``; the gate; the output projection. Layer 0's value is
passed to later layers (``value_first``), which mix theirs toward it."""

from __future__ import annotations

import numpy as np

from .config import Rwkv7Config
from .ops import sigmoid

#: fla's bound of the log decay, -e^-0.5.
W_SCALE = -0.6065306597126334
MIXES = ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")


def tensor_shapes(cfg: Rwkv7Config, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    hk, hv = cfg.num_heads * cfg.head_dim, cfg.num_heads * cfg.head_v_dim
    shapes = {name: (hidden,) for name in MIXES}
    shapes.update({
        "k_k": (hk,),
        "k_a": (hk,),
        "r_k": (cfg.num_heads, cfg.head_dim),
        "r_proj.weight": (hk, hidden),
        "k_proj.weight": (hk, hidden),
        "v_proj.weight": (hv, hidden),
        "w_lora.lora.0.weight": (cfg.decay_low_rank_dim, hidden),
        "w_lora.lora.2.weight": (hk, cfg.decay_low_rank_dim),
        "w_lora.lora.2.bias": (hk,),
        "a_lora.lora.0.weight": (cfg.a_low_rank_dim, hidden),
        "a_lora.lora.2.weight": (hk, cfg.a_low_rank_dim),
        "a_lora.lora.2.bias": (hk,),
        "g_lora.lora.0.weight": (cfg.gate_low_rank_dim, hidden),
        "g_lora.lora.2.weight": (hv, cfg.gate_low_rank_dim),
        "g_norm.weight": (hv,),
        "g_norm.bias": (hv,),
        "o_proj.weight": (hidden, hv),
    })
    if not cfg.value_first:
        shapes["v_lora.lora.0.weight"] = (cfg.v_low_rank_dim, hidden)
        shapes["v_lora.lora.2.weight"] = (hv, cfg.v_low_rank_dim)
        shapes["v_lora.lora.2.bias"] = (hv,)
    return shapes


def _lora(w: dict, name: str, u: np.ndarray, activation) -> np.ndarray:
    """``lora.2(activation(lora.0 u)) (+ lora.2.bias)``: fla's LoRA."""
    out = w[f"{name}.lora.2.weight"] @ activation(w[f"{name}.lora.0.weight"] @ u)
    bias = w.get(f"{name}.lora.2.bias")
    return out if bias is None else out + bias


class Rwkv7TimeMix:
    """Per-token RWKV-7 time mixing; state: the previous input [D] and S [H, V, K].

    ``step(x, carry)`` takes the per-token dict of the block (docs/spec.md §1.1):
    the first layer stores its value under "v_first", later layers read it (zeros
    if no layer wrote one this token)."""

    def __init__(self, cfg: Rwkv7Config, weights: dict):
        self.cfg, self.w = cfg, weights
        self.prev = np.zeros(cfg.num_heads * cfg.head_dim)
        self.state = np.zeros((cfg.num_heads, cfg.head_v_dim, cfg.head_dim))

    def reset(self) -> None:
        self.prev[:] = 0.0
        self.state[:] = 0.0

    def step(self, x: np.ndarray, carry: dict) -> np.ndarray:
        cfg, w = self.cfg, self.w
        h_count, k_dim, v_dim = cfg.num_heads, cfg.head_dim, cfg.head_v_dim
        delta = self.prev - x
        self.prev = x.copy()
        xr, xw, xk, xv, xa, xg = (x + delta * w[name] for name in MIXES)
        r = w["r_proj.weight"] @ xr
        decay = np.exp(W_SCALE * sigmoid(_lora(w, "w_lora", xw, np.tanh)))
        k = w["k_proj.weight"] @ xk
        v = w["v_proj.weight"] @ xv
        if cfg.value_first:
            carry["v_first"] = v
        else:
            first = carry.get("v_first", np.zeros_like(v))
            v = v + (first - v) * sigmoid(_lora(w, "v_lora", xv, lambda u: u))
        a = sigmoid(_lora(w, "a_lora", xa, lambda u: u))
        g = _lora(w, "g_lora", xg, sigmoid)
        kk = (k * w["k_k"]).reshape(h_count, k_dim)
        norm = np.sqrt(np.sum(kk * kk, axis=-1, keepdims=True))
        kk = kk / (np.sqrt(norm * norm + 1e-6) if cfg.kk_norm == "l2" else np.maximum(norm, 1e-12))
        k = k + k * (a - 1.0) * w["k_a"]
        r, decay, k, a = (t.reshape(h_count, k_dim) for t in (r, decay, k, a))
        v = v.reshape(h_count, v_dim)
        o = np.empty((h_count, v_dim))
        for h in range(h_count):
            s = self.state[h]
            sa = s @ (-kk[h])
            s = s * decay[h][None, :] + np.outer(sa, kk[h] * a[h]) + np.outer(v[h], k[h])
            self.state[h] = s
            o[h] = s @ r[h]
        centred = o - o.mean(axis=-1, keepdims=True)
        o = centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + cfg.g_norm_eps)
        o = o.reshape(-1) * w["g_norm.weight"] + w["g_norm.bias"]
        bonus = np.sum(r * k * w["r_k"], axis=-1, keepdims=True) * v
        o = (o + bonus.reshape(-1)) * g
        return w["o_proj.weight"] @ o
