"""Cross-attention over a fixed memory (docs/spec.md §3.10), parallel over time.

The memory's keys and values come from the model's memory encoder
(``FerriteLM.encode_memory``: the embedding and the first ``memory_encoder_layers``
layers over the memory tokens, then this layer's norm, ``k_proj`` and ``v_proj``), set on
the layer as ``self.memory`` before the forward pass, one memory per sequence; without one
the layer reads its baked ``memory_k``/``memory_v`` (memory 0), which a trained model
exports as zeros for ``ferrite quantize --memory`` to fill.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ferrite_ref.config import CrossConfig

from ..ops import linear


class CrossAttention(nn.Module):
    """Softmax attention from the stream to a memory of slots (GQA, optional sigmoid gate)."""

    def __init__(self, cfg: CrossConfig, d: int):
        super().__init__()
        self.cfg = cfg
        h, hkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj, self.k_proj, self.v_proj = linear(d, h * hd), linear(d, hkv * hd), linear(d, hkv * hd)
        if cfg.output_gate:
            self.g_proj = linear(d, h * hd)
        self.o_proj = linear(h * hd, d)
        shape = (cfg.memories, cfg.memory_slots, hkv * hd)
        self.register_buffer("memory_k", torch.zeros(shape))
        self.register_buffer("memory_v", torch.zeros(shape))
        #: (keys, values) [B, m, Hkv*d] of the current batch's memories, or None.
        self.memory = None

    def encode(self, x):
        """Keys and values [B, m, Hkv*d] of the encoder's normed hidden states x [B, m, D]."""
        return self.k_proj(x), self.v_proj(x)

    def forward(self, x, pinned: int = 0):
        cfg = self.cfg
        b, t, _ = x.shape
        h, hkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        if self.memory is None:
            k, v = self.memory_k[0].expand(b, -1, -1), self.memory_v[0].expand(b, -1, -1)
        else:
            k, v = self.memory
        m = k.shape[1]
        q = self.q_proj(x).view(b, t, h, hd).transpose(1, 2)
        k = k.reshape(b, m, hkv, hd).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
        v = v.reshape(b, m, hkv, hd).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
        o = (p @ v).transpose(1, 2).reshape(b, t, h * hd)
        if cfg.output_gate:
            o = o * torch.sigmoid(self.g_proj(x))
        return self.o_proj(o)


def build(cfg: CrossConfig, d: int, norm_eps: float) -> CrossAttention:
    """The layer of ``cfg`` in a model of width ``d``."""
    return CrossAttention(cfg, d)


def state_floats(cfg: CrossConfig) -> int:
    """Recurrent state words, as the runtime sizes it (runtime/src/mixers/cross_config.rs):
    the selected memory's index."""
    return 1


def core_state_floats(cfg: CrossConfig) -> int:
    """The layer's state proper: the index (its memory lives in flash)."""
    return 1
