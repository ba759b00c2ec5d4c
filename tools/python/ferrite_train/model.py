"""PyTorch modules of docs/spec.md (§1 block, §3 mixers), parallel over time for training.

Parameter names are docs/spec.md §2's (fla's), so ``model.state_dict()`` is a model
directory's tensor set as it is (see ``export.py``). Configs are parsed with
``ferrite_ref.config`` (same defaults and rejections as the runtime).

Forms used (all exact, not approximations of the per-token recurrences):

* ``gdn``: chunked gated delta rule (WY / UT form, chunk 64): inside a chunk
  the pseudo-values U solve (I + A) U = diag(beta) (V - decayed S0 k), A
  strictly lower-triangular; across chunks the state is carried. The family
  options of §3.1.1 change its inputs (decay none: g = 0; retention:
  g = log gamma_j); the additive update (linear attention, retention) is
  masked decayed attention o_t = sum_{s<=t} e^{G_t-G_s} beta_s (q_t.k_s) v_s.
* ``gsa``: the slot recurrences are diagonal and linear, so
  Hk_t = sum_s exp(F_t - F_s) s_s k_s (F the running sum of log alpha); scores
  and outputs are contracted without materialising Hk_t.
* ``swa``: masked softmax attention (window + sinks, RoPE absolute or cache,
  optional sink logits, dilation); ``pinned`` adds pinned-prefix tokens as
  extra sinks.
* ``bla``: the closed form of the gated recurrence (docs/spec.md §3.4):
  Ks(t) = sum_s A[t,s,n] k_s with A[t,s,n] = phi_n(s) prod_{s<tau<=t} (1 - phi_n(tau)),
  data-independent, computed once per length in float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ferrite_ref import bla as ref_bla
from ferrite_ref.config import (
    BlaConfig,
    GdnConfig,
    GsaConfig,
    MlaConfig,
    ModelConfig,
    SwaConfig,
    parse_config,
)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ShortConv(nn.Module):
    """Depthwise causal conv over time + SiLU (or none); weight [C, 1, W] (docs/spec.md §3.5)."""

    def __init__(self, channels: int, width: int, activation: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, width) / math.sqrt(width))
        self.width = width
        self.activation = activation

    def forward(self, x):  # [B, T, C]
        y = F.conv1d(F.pad(x.transpose(1, 2), (self.width - 1, 0)), self.weight, groups=x.shape[-1])
        y = y.transpose(1, 2)
        return F.silu(y) if self.activation else y


def _linear(d_in: int, d_out: int) -> nn.Linear:
    return nn.Linear(d_in, d_out, bias=False)


def _conv_modules(module: nn.Module, q: int, k: int, v: int, width: int, qk_silu: bool = True) -> None:
    module.q_conv1d = ShortConv(q, width, qk_silu)
    module.k_conv1d = ShortConv(k, width, qk_silu)
    module.v_conv1d = ShortConv(v, width)


# ---------------------------------------------------------------------------- gdn


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: GdnConfig, d: int, norm_eps: float, chunk: int = 64):
        super().__init__()
        self.cfg, self.chunk = cfg, chunk
        h, hv, k, v = cfg.num_heads, cfg.num_v_heads, cfg.head_dim, cfg.head_v_dim
        self.q_proj, self.k_proj, self.v_proj = _linear(d, h * k), _linear(d, h * k), _linear(d, hv * v)
        if cfg.decay == "gated":
            self.a_proj = _linear(d, hv)
            # fla's initialisation: A in U(1, 16), dt log-uniform in [1e-3, 1e-1].
            self.A_log = nn.Parameter(torch.log(torch.empty(hv).uniform_(1, 16)))
            dt = torch.exp(torch.empty(hv).uniform_(math.log(1e-3), math.log(1e-1)))
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        if cfg.use_beta:
            self.b_proj = _linear(d, hv)
        if cfg.conv_size > 0:
            _conv_modules(self, h * k, h * k, hv * v, cfg.conv_size, cfg.qk_activation == "silu")
        if cfg.use_gate:
            self.g_proj = _linear(d, hv * v)
        self.o_norm = RMSNorm(v, norm_eps)
        self.o_proj = _linear(hv * v, d)

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


# ---------------------------------------------------------------------------- gsa


class GatedSlotAttention(nn.Module):
    def __init__(self, cfg: GsaConfig, d: int, chunk: int = 64):
        super().__init__()
        self.cfg, self.chunk = cfg, chunk
        h, hkv, k, v, m = cfg.num_heads, cfg.num_kv_heads, cfg.head_k_dim, cfg.head_v_dim, cfg.num_slots
        self.q_proj, self.k_proj, self.v_proj = _linear(d, h * k), _linear(d, hkv * k), _linear(d, hkv * v)
        self.f_proj = _linear(d, hkv * m)
        if cfg.use_short_conv:
            _conv_modules(self, h * k, hkv * k, hkv * v, cfg.conv_size)
        self.g_norm = RMSNorm(h * v, 1e-5)
        self.o_proj = _linear(h * v, d)

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


# ---------------------------------------------------------------------------- swa


def _rope_tables(positions, d: int, theta: float, dtype, device):
    half = d // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=torch.float64, device=device) / d)
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def _rope(x, cos, sin):  # x [..., T, d]; cos/sin [T, d/2]
    half = x.shape[-1] // 2
    lo, hi = x[..., :half], x[..., half:]
    return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1)


class SlidingWindowAttention(nn.Module):
    def __init__(self, cfg: SwaConfig, d: int):
        super().__init__()
        self.cfg = cfg
        h, hkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj, self.k_proj, self.v_proj = _linear(d, h * hd), _linear(d, hkv * hd), _linear(d, hkv * hd)
        self.o_proj = _linear(h * hd, d)
        if cfg.sink_logits:
            self.sinks = nn.Parameter(torch.zeros(h))
        if cfg.use_short_conv:
            _conv_modules(self, h * hd, hkv * hd, hkv * hd, cfg.conv_size)

    def forward(self, x, pinned: int = 0):
        cfg = self.cfg
        b, t, _ = x.shape
        h, hkv, hd, w = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.window
        s_eff = cfg.sinks + pinned
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if cfg.use_short_conv:
            q, k, v = self.q_conv1d(q), self.k_conv1d(k), self.v_conv1d(v)
        q = q.view(b, t, h, hd).transpose(1, 2)
        k = k.view(b, t, hkv, hd).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
        v = v.view(b, t, hkv, hd).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
        pos = torch.arange(t, device=x.device)
        ti, si = pos[:, None], pos[None, :]
        r = cfg.dilation
        in_window = (si <= ti) & (si > ti - ((w - 1) * r + 1)) & ((ti - si) % r == 0)
        is_sink = (si < s_eff) & (si <= ti) & ~in_window
        visible = in_window | is_sink
        if cfg.rope_theta is not None:
            cos, sin = _rope_tables(pos, hd, cfg.rope_theta, x.dtype, x.device)
            kr = _rope(k, cos, sin)
            scores = _rope(q, cos, sin) @ kr.transpose(-1, -2)
            if cfg.rope_positions == "cache" and s_eff > 0:
                # Window keys sit at relative distance t - s in the cache too; sink keys
                # are scored with the query at cache position min(t, S_eff + W - 1).
                qpos = torch.clamp(pos, max=s_eff + w - 1)
                cq, sq = _rope_tables(qpos, hd, cfg.rope_theta, x.dtype, x.device)
                sink_scores = _rope(q, cq, sq) @ kr.transpose(-1, -2)
                scores = torch.where(is_sink, sink_scores, scores)
        else:
            scores = q @ k.transpose(-1, -2)
        scores = scores / math.sqrt(hd)
        scores = scores.masked_fill(~visible, float("-inf"))
        if cfg.sink_logits:
            extra = self.sinks.to(scores.dtype)[None, :, None, None].expand(b, h, t, 1)
            p = torch.softmax(torch.cat([scores, extra], dim=-1), dim=-1)[..., :t]
        else:
            p = torch.softmax(scores, dim=-1)
        o = (p @ v).transpose(1, 2).reshape(b, t, h * hd)
        return self.o_proj(o)


# ---------------------------------------------------------------------------- bla


def bla_write_matrix(cfg: BlaConfig, t: int) -> np.ndarray:
    """A[t, s, n]: the weight of token s in slot n after token t (float64, [T, T, N])."""
    phi = ref_bla.phi_table(cfg)  # [P, N]
    n = cfg.slots
    a = np.zeros((t, t, n))
    for i in range(t):
        p = phi[i % cfg.period]
        if i > 0:
            if cfg.decay == "gated":
                a[i, :i] = a[i - 1, :i] * (1.0 - p)[None, :]
            elif cfg.decay == "scalar":
                a[i, :i] = a[i - 1, :i] * cfg.gamma
            else:
                a[i, :i] = a[i - 1, :i]
        a[i, i] = p
    return a


def bla_live_mask(cfg: BlaConfig, t: int) -> np.ndarray:
    """[T, N] slots in the softmax at position t (docs/spec.md §3.4 warm-up rule)."""
    return np.stack([ref_bla.live_slots(min(i, cfg.period), cfg) for i in range(t)])


class BlurryWindowAttention(nn.Module):
    def __init__(self, cfg: BlaConfig, d: int):
        super().__init__()
        self.cfg = cfg
        dim = cfg.num_heads * cfg.head_dim
        self.q_proj, self.k_proj, self.v_proj = _linear(d, dim), _linear(d, dim), _linear(d, dim)
        self.o_proj = _linear(dim, d)
        if cfg.use_short_conv:
            _conv_modules(self, dim, dim, dim, cfg.conv_size)
        self._cache = {}

    def _tables(self, t: int, dtype, device):
        key = (t, dtype, device)
        if key not in self._cache:
            a = torch.tensor(bla_write_matrix(self.cfg, t), dtype=dtype, device=device)
            live = torch.tensor(bla_live_mask(self.cfg, t), device=device)
            # Every length is kept: a captured CUDA graph step reads these tensors, so
            # an evaluation at another length must not free them.
            self._cache[key] = (a, live)
        return self._cache[key]

    def forward(self, x, pinned: int = 0):
        cfg = self.cfg
        b, t, _ = x.shape
        h, hd = cfg.num_heads, cfg.head_dim
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if cfg.use_short_conv:
            q, k, v = self.q_conv1d(q), self.k_conv1d(k), self.v_conv1d(v)
        q, k, v = (u.view(b, t, h, hd).transpose(1, 2) for u in (q, k, v))
        a, live = self._tables(t, x.dtype, x.device)
        qk = q @ k.transpose(-1, -2) / math.sqrt(hd)  # [B, H, T, S]
        scores = torch.einsum("tsn,bhts->bhtn", a, qk).masked_fill(~live, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        w = torch.einsum("bhtn,tsn->bhts", p, a)
        o = (w @ v).transpose(1, 2).reshape(b, t, h * hd)
        return self.o_proj(o)


# ---------------------------------------------------------------------------- model


# ---------------------------------------------------------------------------- mla


class LatentWindowAttention(nn.Module):
    """MLA-style window (docs/spec.md §3.6), trained in its explicit form: keys
    [Wuk_h c ; RoPE(kr)] and values Wuv_h c from the latent c, masked window attention."""

    def __init__(self, cfg: MlaConfig, d: int):
        super().__init__()
        self.cfg = cfg
        h, hd, dv, dr, r = cfg.num_heads, cfg.head_dim, cfg.v_head_dim, cfg.rope_dim, cfg.kv_lora_rank
        self.q_proj = _linear(d, h * (hd + dr))
        self.kv_a_proj = _linear(d, r + dr)
        self.kv_b_proj = _linear(r, h * (hd + dv))
        self.o_proj = _linear(h * dv, d)

    def forward(self, x, pinned: int = 0):
        cfg = self.cfg
        b, t, _ = x.shape
        h, hd, dv, dr, r = cfg.num_heads, cfg.head_dim, cfg.v_head_dim, cfg.rope_dim, cfg.kv_lora_rank
        q = self.q_proj(x).view(b, t, h, hd + dr).transpose(1, 2)  # [B, H, T, d+dr]
        a = self.kv_a_proj(x)
        c, kr = a[..., :r], a[..., r:]
        kv = self.kv_b_proj(c).view(b, t, h, hd + dv).transpose(1, 2)
        k_nope, v = kv[..., :hd], kv[..., hd:]
        q_nope, q_rope = q[..., :hd], q[..., hd:]
        pos = torch.arange(t, device=x.device)
        scores = q_nope @ k_nope.transpose(-1, -2)
        if dr > 0:
            cos, sin = _rope_tables(pos, dr, cfg.rope_theta, x.dtype, x.device)
            scores = scores + _rope(q_rope, cos, sin) @ _rope(kr, cos, sin)[:, None].transpose(-1, -2)
        ti, si = pos[:, None], pos[None, :]
        visible = (si <= ti) & (si > ti - cfg.window)
        scores = (scores / math.sqrt(hd + dr)).masked_fill(~visible, float("-inf"))
        o = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, h * dv)
        return self.o_proj(o)


def build_mixer(layer, d: int, norm_eps: float) -> nn.Module:
    if isinstance(layer, GdnConfig):
        return GatedDeltaNet(layer, d, norm_eps)
    if isinstance(layer, GsaConfig):
        return GatedSlotAttention(layer, d)
    if isinstance(layer, SwaConfig):
        return SlidingWindowAttention(layer, d)
    if isinstance(layer, MlaConfig):
        return LatentWindowAttention(layer, d)
    return BlurryWindowAttention(layer, d)


class Block(nn.Module):
    def __init__(self, layer, cfg: ModelConfig):
        super().__init__()
        d, i = cfg.hidden_size, cfg.intermediate_size
        self.attn_norm = RMSNorm(d, cfg.norm_eps)
        self.attn = build_mixer(layer, d, cfg.norm_eps)
        self.mlp_norm = RMSNorm(d, cfg.norm_eps)
        self.mlp = nn.Module()
        self.mlp.gate_proj, self.mlp.up_proj, self.mlp.down_proj = _linear(d, i), _linear(d, i), _linear(i, d)

    def forward(self, h, pinned: int = 0):
        h = h + self.attn(self.attn_norm(h), pinned)
        x = self.mlp_norm(h)
        return h + self.mlp.down_proj(F.silu(self.mlp.gate_proj(x)) * self.mlp.up_proj(x))


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([Block(layer, cfg) for layer in cfg.layers])
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)


class FerriteLM(nn.Module):
    """docs/spec.md §1: tokens [B, T] -> logits [B, T, vocab]."""

    def __init__(self, config: dict):
        super().__init__()
        self.raw_config = config
        self.cfg = parse_config(config)
        self.model = Backbone(self.cfg)
        if not self.cfg.tie_word_embeddings:
            self.lm_head = _linear(self.cfg.hidden_size, self.cfg.vocab_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        d = self.cfg.hidden_size
        nn.init.normal_(self.model.embeddings.weight, std=d**-0.5 if self.cfg.tie_word_embeddings else 1.0)
        for name, p in self.named_parameters():
            if p.dim() == 2 and "embeddings" not in name:
                nn.init.normal_(p, std=p.shape[1] ** -0.5)
        # Residual branches start small (GPT-2 style), so a deep stack starts near identity.
        scale = (2 * len(self.cfg.layers)) ** -0.5
        for block in self.model.layers:
            with torch.no_grad():
                block.attn.o_proj.weight.mul_(scale)
                block.mlp.down_proj.weight.mul_(scale)

    def head_weight(self):
        return self.model.embeddings.weight if self.cfg.tie_word_embeddings else self.lm_head.weight

    def forward(self, tokens, pinned: int = 0):
        h = self.model.embeddings(tokens)
        for block in self.model.layers:
            h = block(h, pinned)
        return self.model.norm(h) @ self.head_weight().t()
