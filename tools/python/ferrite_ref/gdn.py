"""``gdn`` — Gated DeltaNet, fla GatedDeltaNet semantics (docs/spec.md §3.1),
and its family as options of the same kernel (§3.1.1): DeltaNet (fla
``DeltaNet``: no decay), linear attention (additive update, no decay) and
RetNet-style retention (additive update, gamma_j = 1 - 2^(-5-j))."""

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
        "o_norm.weight": (cfg.head_v_dim,),
        "o_proj.weight": (hidden, v),
    }
    if cfg.decay == "gated":
        shapes["a_proj.weight"] = (cfg.num_v_heads, hidden)
        shapes["A_log"] = (cfg.num_v_heads,)
        shapes["dt_bias"] = (cfg.num_v_heads,)
    if cfg.use_beta:
        shapes["b_proj.weight"] = (cfg.num_v_heads, hidden)
    if cfg.conv_size > 0:
        shapes.update(qkv_conv_shapes(qk, qk, v, cfg.conv_size))
    if cfg.use_gate:
        shapes["g_proj.weight"] = (v, hidden)
    return shapes


def retention_gamma(j: int) -> float:
    """RetNet's fixed decay of value head j, 1 - 2^(-5-j)."""
    return 1.0 - 2.0 ** (-5 - j)


def _activation(name: str, x: np.ndarray) -> np.ndarray:
    """q/k activation applied after the convolution (silu is inside it)."""
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "elu":
        return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))
    return x


def _norm(name: str, u: np.ndarray) -> np.ndarray:
    if name == "l2":
        return l2norm(u)
    if name == "sum":
        return u / np.maximum(np.sum(np.abs(u), axis=-1, keepdims=True), 1e-6)
    return u


class GatedDeltaNet:
    """Per-token recurrent Gated DeltaNet (or family member); state S [HV, V, K] plus conv caches."""

    def __init__(self, cfg: GdnConfig, weights: dict, norm_eps: float):
        self.cfg = cfg
        self.w = weights
        self.norm_eps = norm_eps
        qk_silu = cfg.qk_activation == "silu"
        self.conv = QkvShortConv(weights, qk_silu) if cfg.conv_size > 0 else None
        self.state = np.zeros((cfg.num_v_heads, cfg.head_v_dim, cfg.head_dim))

    def reset(self) -> None:
        self.state[:] = 0.0
        if self.conv is not None:
            self.conv.reset()

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        q, k, v = w["q_proj.weight"] @ x, w["k_proj.weight"] @ x, w["v_proj.weight"] @ x
        if self.conv is not None:
            q, k, v = self.conv.step(q, k, v)
        else:
            if cfg.qk_activation == "silu":
                q, k = silu(q), silu(k)
            v = silu(v)
        q = _activation(cfg.qk_activation, q.reshape(cfg.num_heads, cfg.head_dim))
        k = _activation(cfg.qk_activation, k.reshape(cfg.num_heads, cfg.head_dim))
        v = v.reshape(cfg.num_v_heads, cfg.head_v_dim)
        q = _norm(cfg.qk_norm, q) * cfg.head_dim**-0.5
        k = _norm(cfg.qk_norm, k)
        beta = sigmoid(w["b_proj.weight"] @ x) if cfg.use_beta else np.ones(cfg.num_v_heads)
        if cfg.allow_neg_eigval:
            beta = beta * 2.0
        if cfg.decay == "gated":
            decay = np.exp(-np.exp(w["A_log"]) * softplus(w["a_proj.weight"] @ x + w["dt_bias"]))
        elif cfg.decay == "retention":
            decay = np.array([retention_gamma(j) for j in range(cfg.num_v_heads)])
        else:
            decay = np.ones(cfg.num_v_heads)

        group = cfg.num_v_heads // cfg.num_heads
        o = np.empty((cfg.num_v_heads, cfg.head_v_dim))
        for j in range(cfg.num_v_heads):
            h = j // group
            s = decay[j] * self.state[j]
            if cfg.update == "delta":
                s = s + beta[j] * np.outer(v[j] - s @ k[h], k[h])
            else:
                s = s + beta[j] * np.outer(v[j], k[h])
            self.state[j] = s
            o[j] = s @ q[h]

        z = rmsnorm(o, w["o_norm.weight"], self.norm_eps)
        if cfg.use_gate:
            gate = (w["g_proj.weight"] @ x).reshape(cfg.num_v_heads, cfg.head_v_dim)
            z = z * silu(gate)
        return w["o_proj.weight"] @ z.reshape(-1)
