"""``bla`` — Blurry Window Attention (docs/spec.md §3.4).

N slots at phases u_n = n P / N hold a kernel-blurred window of the last
period; token t writes slot n with weight phi_n(t) = kernel(2 pi (u_n - r)/P)/P,
r = t mod P. BLA is an ABC method and, with decay "gated", a GSA whose
forget gate alpha = 1 - phi is given by the kernel instead of learned.
"""

from __future__ import annotations

import numpy as np

from .config import BlaConfig
from .ops import QkvShortConv, qkv_conv_shapes, softmax


def tensor_shapes(cfg: BlaConfig, hidden: int) -> dict:
    """Tensor names (under ``model.layers.{i}.attn.``) and shapes."""
    dim = cfg.num_heads * cfg.head_dim
    kv_dim = cfg.num_kv_heads * cfg.head_dim
    shapes = {
        "q_proj.weight": (dim, hidden),
        "k_proj.weight": (kv_dim, hidden),
        "v_proj.weight": (kv_dim, hidden),
        "o_proj.weight": (hidden, dim),
    }
    if cfg.use_short_conv:
        shapes.update(qkv_conv_shapes(dim, kv_dim, kv_dim, cfg.conv_size))
    return shapes


def dirichlet(x: np.ndarray, modes: int, period: int) -> np.ndarray:
    """D_M(x) = 1 + 2 sum_{m=1..M} cos(m x); the term with 2m = P has weight 1."""
    total = np.ones_like(x)
    for m in range(1, modes + 1):
        weight = 1.0 if 2 * m == period else 2.0
        total = total + weight * np.cos(m * x)
    return total


def fejer(x: np.ndarray, modes: int, period: int) -> np.ndarray:
    """F_M(x) = (1/(M+1)) sum_{j=0..M} D_j(x), each D_j with the Nyquist rule."""
    return sum(dirichlet(x, j, period) for j in range(modes + 1)) / (modes + 1)


KERNELS = {"dirichlet": dirichlet, "fejer": fejer}


def phi_table(cfg: BlaConfig) -> np.ndarray:
    """Write weights phi[r, n] = kernel(2 pi (u_n - r) / P) / P, shape [P, N]."""
    r = np.arange(cfg.period, dtype=np.float64)[:, None]
    u = np.arange(cfg.slots, dtype=np.float64)[None, :] * cfg.period / cfg.slots
    x = 2.0 * np.pi * (u - r) / cfg.period
    return KERNELS[cfg.kernel](x, cfg.modes, cfg.period) / cfg.period


def live_slots(count: int, cfg: BlaConfig) -> np.ndarray:
    """Mask [N] of the slots in the softmax at stream position ``count`` (capped at P):
    during the first period only slots with u_n <= t, i.e. n P <= t N."""
    if count >= cfg.period:
        return np.ones(cfg.slots, dtype=bool)
    return np.arange(cfg.slots) * cfg.period <= count * cfg.slots


class BlurryWindowAttention:
    """Per-token BLA: slot memories Ks [Hkv, N, K], Vs [Hkv, N, V] (query head h
    reads key/value head h // (H / Hkv)), the phase r = t mod P and a warm-up
    count capped at P."""

    def __init__(self, cfg: BlaConfig, weights: dict):
        self.cfg = cfg
        self.w = weights
        self.phi = phi_table(cfg)
        self.conv = QkvShortConv(weights) if cfg.use_short_conv else None
        self.ks = np.zeros((cfg.num_kv_heads, cfg.slots, cfg.head_dim))
        self.vs = np.zeros((cfg.num_kv_heads, cfg.slots, cfg.head_dim))
        self.phase = 0
        self.count = 0

    def reset(self) -> None:
        self.ks[:] = 0.0
        self.vs[:] = 0.0
        self.phase = 0
        self.count = 0
        if self.conv is not None:
            self.conv.reset()

    def _write(self, memory: np.ndarray, x: np.ndarray, phi: np.ndarray) -> np.ndarray:
        """One decay step of a slot memory [H, N, C] with the new token x [H, C]."""
        write = phi[None, :, None] * x[:, None, :]
        if self.cfg.decay == "gated":
            return (1.0 - phi)[None, :, None] * memory + write
        if self.cfg.decay == "scalar":
            return self.cfg.gamma * memory + write
        return memory + write

    def step(self, x: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        q, k, v = w["q_proj.weight"] @ x, w["k_proj.weight"] @ x, w["v_proj.weight"] @ x
        if self.conv is not None:
            q, k, v = self.conv.step(q, k, v)
        q = q.reshape(cfg.num_heads, cfg.head_dim)
        k, v = (a.reshape(cfg.num_kv_heads, cfg.head_dim) for a in (k, v))

        phi = self.phi[self.phase]
        self.ks = self._write(self.ks, k, phi)
        self.vs = self._write(self.vs, v, phi)

        live = live_slots(self.count, cfg)
        group = cfg.num_heads // cfg.num_kv_heads
        ks = np.repeat(self.ks[:, live], group, axis=0)  # query head h: kv head h // group
        vs = np.repeat(self.vs[:, live], group, axis=0)
        scores = np.einsum("hnk,hk->hn", ks, q) / np.sqrt(cfg.head_dim)
        o = np.einsum("hn,hnv->hv", softmax(scores), vs)

        self.phase = (self.phase + 1) % cfg.period
        self.count = min(self.count + 1, cfg.period)
        return w["o_proj.weight"] @ o.reshape(-1)
