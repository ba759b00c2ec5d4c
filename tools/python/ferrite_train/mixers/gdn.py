"""Gated DeltaNet and its family (docs/spec.md §3.1), parallel over time.

The chunked gated delta rule (WY / UT form, chunk 64): inside a chunk the
pseudo-values U solve (I + A) U = diag(beta) (V - decayed S0 k), A strictly
lower-triangular; across chunks the state is carried. The family options of
§3.1.1 change its inputs (decay none: g = 0; retention: g = log gamma_j); the
additive update (linear attention, retention) is masked decayed attention
o_t = sum_{s<=t} e^{G_t-G_s} beta_s (q_t.k_s) v_s.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ferrite_ref.config import GdnConfig

from ..ops import RMSNorm, conv_modules, linear


class GatedDeltaNet(nn.Module):
    """The Gated DeltaNet layer and its family (decay, update, beta, q/k options of §3.1.1)."""

    def __init__(self, cfg: GdnConfig, d: int, norm_eps: float, chunk: int = 64):
        super().__init__()
        self.cfg, self.chunk = cfg, chunk
        h, hv, k, v = cfg.num_heads, cfg.num_v_heads, cfg.head_dim, cfg.head_v_dim
        self.q_proj, self.k_proj, self.v_proj = linear(d, h * k), linear(d, h * k), linear(d, hv * v)
        if cfg.decay == "gated":
            self.a_proj = linear(d, hv)
            # fla's initialisation: A in U(1, 16), dt log-uniform in [1e-3, 1e-1].
            self.A_log = nn.Parameter(torch.log(torch.empty(hv).uniform_(1, 16)))
            dt = torch.exp(torch.empty(hv).uniform_(math.log(1e-3), math.log(1e-1)))
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        if cfg.use_beta:
            self.b_proj = linear(d, hv)
        if cfg.conv_size > 0:
            conv_modules(self, h * k, h * k, hv * v, cfg.conv_size, cfg.qk_activation == "silu")
        if cfg.use_gate:
            self.g_proj = linear(d, hv * v)
        self.o_norm = RMSNorm(v, norm_eps)
        self.o_proj = linear(hv * v, d)

    def forward(self, x, pinned: int = 0):
        cfg = self.cfg
        b, t, _ = x.shape
        h, hv, kd, vd = cfg.num_heads, cfg.num_v_heads, cfg.head_dim, cfg.head_v_dim
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if cfg.conv_size > 0:
            q, k, v = self.q_conv1d(q), self.k_conv1d(k), self.v_conv1d(v)
        else:
            if cfg.qk_activation == "silu":
                q, k = F.silu(q), F.silu(k)
            v = F.silu(v)
        if cfg.qk_activation == "relu":
            q, k = F.relu(q), F.relu(k)
        elif cfg.qk_activation == "elu":
            q, k = F.elu(q) + 1.0, F.elu(k) + 1.0
        q, k, v = q.view(b, t, h, kd), k.view(b, t, h, kd), v.view(b, t, hv, vd)
        if cfg.qk_norm == "l2":
            q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)
            k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        elif cfg.qk_norm == "sum":
            q, k = F.normalize(q, p=1, dim=-1, eps=1e-6), F.normalize(k, p=1, dim=-1, eps=1e-6)
        q = q * kd**-0.5
        group = hv // h
        q = q.repeat_interleave(group, dim=2).transpose(1, 2)  # [B, HV, T, K]
        k = k.repeat_interleave(group, dim=2).transpose(1, 2)
        v = v.transpose(1, 2)  # [B, HV, T, V]
        if cfg.use_beta:
            beta = torch.sigmoid(self.b_proj(x)).transpose(1, 2)  # [B, HV, T]
        else:
            beta = x.new_ones(b, hv, t)
        if cfg.allow_neg_eigval:
            beta = beta * 2.0
        if cfg.decay == "gated":
            g = (-torch.exp(self.A_log) * F.softplus(self.a_proj(x) + self.dt_bias)).transpose(1, 2)
        elif cfg.decay == "retention":
            gamma = 1.0 - 2.0 ** (-5.0 - torch.arange(hv, dtype=torch.float64, device=x.device))
            g = torch.log(gamma).to(x.dtype)[None, :, None].expand(b, hv, t)
        else:
            g = x.new_zeros(b, hv, t)
        if cfg.update == "delta":
            o = gated_delta_rule(q, k, v, beta, g, self.chunk)  # [B, HV, T, V]
        else:
            o = decayed_linear_attention(q, k, v, beta, g)
        o = o.transpose(1, 2)  # [B, T, HV, V]
        z = self.o_norm(o)
        if cfg.use_gate:
            z = z * F.silu(self.g_proj(x).view(b, t, hv, vd))
        return self.o_proj(z.reshape(b, t, hv * vd))


def decayed_linear_attention(q, k, v, beta, g):
    """S_t = e^{g_t} S_{t-1} + beta_t v_t k_t^T; o_t = S_t q_t, in parallel form:
    o_t = sum_{s<=t} e^{G_t-G_s} beta_s (q_t.k_s) v_s (G the running sum of g).

    q, k [B, H, T, K]; v [B, H, T, V]; beta, g [B, H, T].
    """
    t = q.shape[2]
    G = torch.cumsum(g, dim=-1)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    decay = torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")))
    return (decay * (q @ k.transpose(-1, -2))) @ (beta[..., None] * v)


def gated_delta_rule(q, k, v, beta, g, chunk: int = 64):
    """S_t = e^{g_t} S_{t-1}; S_t += beta_t (v_t - S_t k_t) k_t^T; o_t = S_t q_t.

    q, k [B, H, T, K]; v [B, H, T, V]; beta, g [B, H, T]. Chunked UT form: within a
    chunk with start state S0 and G the running sum of g (relative to the chunk),
    S_t = e^{G_t} S0 + sum_{s<=t} e^{G_t-G_s} u_s k_s^T where
    u_t = beta_t (v_t - e^{G_t} S0 k_t - sum_{s<t} e^{G_t-G_s} (k_s.k_t) u_s).
    """
    b, h, t, kd = q.shape
    vd = v.shape[-1]
    state = q.new_zeros(b, h, vd, kd)
    outs = []
    for start in range(0, t, chunk):
        sl = slice(start, min(start + chunk, t))
        qc, kc, vc, bc, gc = q[:, :, sl], k[:, :, sl], v[:, :, sl], beta[:, :, sl], g[:, :, sl]
        c = qc.shape[2]
        G = torch.cumsum(gc, dim=-1)  # [B, H, C]
        diff = G[..., :, None] - G[..., None, :]  # [B, H, C, C] (t, s)
        incl = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
        strict = torch.ones(c, c, dtype=torch.bool, device=q.device).tril(-1)
        decay_incl = torch.exp(diff.masked_fill(~incl, float("-inf")))
        decay_strict = torch.exp(diff.masked_fill(~strict, float("-inf")))
        kk = kc @ kc.transpose(-1, -2)  # [B, H, C, C]
        a = bc[..., :, None] * decay_strict * kk
        eye = torch.eye(c, dtype=q.dtype, device=q.device)
        eg = torch.exp(G)[..., None]  # [B, H, C, 1]
        rhs = bc[..., None] * (vc - eg * (kc @ state.transpose(-1, -2)))  # [B, H, C, V]
        u = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)
        qk = qc @ kc.transpose(-1, -2)
        o = eg * (qc @ state.transpose(-1, -2)) + (decay_incl * qk) @ u
        outs.append(o)
        last = G[..., -1:]  # [B, H, 1]
        w = torch.exp(last - G)[..., None] * u  # [B, H, C, V]
        state = torch.exp(last)[..., None] * state + w.transpose(-1, -2) @ kc
    return torch.cat(outs, dim=2)


def build(cfg: GdnConfig, d: int, norm_eps: float) -> GatedDeltaNet:
    """The layer of ``cfg`` in a model of width ``d``."""
    return GatedDeltaNet(cfg, d, norm_eps)


def state_floats(cfg: GdnConfig) -> int:
    """Recurrent state words, as the runtime sizes it (runtime/src/mixers/gdn.rs)."""
    h, hv, k, v = cfg.num_heads, cfg.num_v_heads, cfg.head_dim, cfg.head_v_dim
    return hv * v * k + (2 * h * k + hv * v) * max(cfg.conv_size - 1, 0)


def core_state_floats(cfg: GdnConfig) -> int:
    """The memory proper, without the short-convolution caches."""
    return cfg.num_v_heads * cfg.head_v_dim * cfg.head_dim
