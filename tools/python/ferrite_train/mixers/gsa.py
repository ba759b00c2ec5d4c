"""Gated Slot Attention (docs/spec.md §3.2), parallel over time.

The slot recurrences are diagonal and linear, so
Hk_t = sum_s exp(F_t - F_s) s_s k_s (F the running sum of log alpha); scores
and outputs are contracted without materialising Hk_t.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ferrite_ref.config import GsaConfig

from ..ops import RMSNorm, conv_modules, linear


class GatedSlotAttention(nn.Module):
    """The Gated Slot Attention layer (GQA, swish or relu feature map, optional short convolution)."""

    def __init__(self, cfg: GsaConfig, d: int, chunk: int = 64):
        super().__init__()
        self.cfg, self.chunk = cfg, chunk
        h, hkv, k, v, m = cfg.num_heads, cfg.num_kv_heads, cfg.head_k_dim, cfg.head_v_dim, cfg.num_slots
        self.q_proj, self.k_proj, self.v_proj = linear(d, h * k), linear(d, hkv * k), linear(d, hkv * v)
        self.f_proj = linear(d, hkv * m)
        if cfg.use_short_conv:
            conv_modules(self, h * k, hkv * k, hkv * v, cfg.conv_size)
        self.g_norm = RMSNorm(h * v, 1e-5)
        self.o_proj = linear(h * v, d)

    def _fm(self, x):
        return F.silu(x) if self.cfg.feature_map == "swish" else F.relu(x)

    def forward(self, x, pinned: int = 0):
        cfg = self.cfg
        b, t, _ = x.shape
        h, hkv, kd, vd, m = cfg.num_heads, cfg.num_kv_heads, cfg.head_k_dim, cfg.head_v_dim, cfg.num_slots
        grp = h // hkv
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if cfg.use_short_conv:  # fla: the conv's SiLU, then the feature map / SiLU as well
            q, k, v = self.q_conv1d(q), self.k_conv1d(k), self.v_conv1d(v)
        q = self._fm(q).view(b, t, hkv, grp, kd).permute(0, 2, 3, 1, 4)  # [B, J, G, T, K]
        k = self._fm(k).view(b, t, hkv, kd).transpose(1, 2)  # [B, J, T, K]
        v = F.silu(v).view(b, t, hkv, vd).transpose(1, 2)  # [B, J, T, V]
        f = F.logsigmoid(self.f_proj(x)).view(b, t, hkv, m).transpose(1, 2) / cfg.gate_logit_normalizer
        o = gated_slot_attention(q, k, v, f, self.chunk)  # [B, J, G, T, V]
        o = o.permute(0, 3, 1, 2, 4).reshape(b, t, h * vd)
        return self.o_proj(self.g_norm(F.silu(o)))


def gated_slot_attention(q, k, v, f, chunk: int = 64):
    """GSA's two slot recurrences and softmax read-out, chunked over time.

    q [B, J, G, T, K] (feature-mapped), k [B, J, T, K], v [B, J, T, V] (silu), f [B, J, T, M]
    = log alpha. Inside a chunk with start memories Hk0 [K, M], Hv0 [M, V] and Fl the
    running sum of f from the chunk start:
    Hk_t[:, m] = e^{Fl_t[m]} Hk0[:, m] + sum_{s<=t} e^{Fl_t[m]-Fl_s[m]} (1-alpha_s[m]) k_s (Hv alike),
    so scores and outputs contract over s without materialising Hk_t.
    """
    b, j, g, t, kd = q.shape
    m, vd = f.shape[-1], v.shape[-1]
    hk = q.new_zeros(b, j, kd, m)
    hv = q.new_zeros(b, j, m, vd)
    outs = []
    for start in range(0, t, chunk):
        sl = slice(start, min(start + chunk, t))
        qc, kc, vc, fc = q[:, :, :, sl], k[:, :, sl], v[:, :, sl], f[:, :, sl]
        c = kc.shape[2]
        s = -torch.expm1(fc)  # 1 - alpha, [B, J, C, M]
        fl = torch.cumsum(fc, dim=2)
        diff = fl[:, :, :, None, :] - fl[:, :, None, :, :]  # [B, J, C(t), C(s), M]
        mask = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()[:, :, None]
        ds = torch.exp(diff.masked_fill(~mask, float("-inf"))) * s[:, :, None, :, :]
        efl = torch.exp(fl)  # [B, J, C, M]
        qk = qc @ kc[:, :, None].transpose(-1, -2)  # [B, J, G, C, C]
        scores = torch.einsum("bjtsm,bjgts->bjgtm", ds, qk) + efl[:, :, None] * (qc @ hk[:, :, None])
        p = torch.softmax(scores, dim=-1)  # [B, J, G, C, M]
        w = torch.einsum("bjgtm,bjtsm->bjgts", p, ds)
        o = w @ vc[:, :, None] + (p * efl[:, :, None]) @ hv[:, :, None]  # [B, J, G, C, V]
        outs.append(o)
        last = fl[:, :, -1]  # [B, J, M]
        wl = torch.exp(last[:, :, None, :] - fl) * s  # [B, J, C, M]
        hk = torch.exp(last)[:, :, None, :] * hk + kc.transpose(-1, -2) @ wl
        hv = torch.exp(last)[..., None] * hv + wl.transpose(-1, -2) @ vc
    return torch.cat(outs, dim=3)


def build(cfg: GsaConfig, d: int, norm_eps: float) -> GatedSlotAttention:
    """The layer of ``cfg`` in a model of width ``d`` (g_norm's eps is fixed, not ``norm_eps``)."""
    return GatedSlotAttention(cfg, d)


def state_floats(cfg: GsaConfig) -> int:
    """Recurrent state words, as the runtime sizes it (runtime/src/mixers/gsa.rs)."""
    hkv, k, v = cfg.num_kv_heads, cfg.head_k_dim, cfg.head_v_dim
    conv = (cfg.num_heads * k + hkv * (k + v)) * (cfg.conv_size - 1) if cfg.use_short_conv else 0
    return hkv * cfg.num_slots * (k + v) + conv


def core_state_floats(cfg: GsaConfig) -> int:
    """The memory proper, without the short-convolution caches."""
    return cfg.num_kv_heads * cfg.num_slots * (cfg.head_k_dim + cfg.head_v_dim)
