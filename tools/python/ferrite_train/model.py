"""PyTorch model of docs/spec.md §1 (the block and the stack), parallel over time for training.

Parameter names are docs/spec.md §2's (fla's), so ``model.state_dict()`` is a model
directory's tensor set as it is (see ``export.py``). Configs are parsed with
``ferrite_ref.config`` (same defaults and rejections as the runtime). The token
mixers are in ``ferrite_train.mixers``, one module per kind; the forms they use
are exact, not approximations of the per-token recurrences.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ferrite_ref.config import ModelConfig, parse_config

from .mixers import build_mixer
from .ops import RMSNorm, linear


class Block(nn.Module):
    """One layer (docs/spec.md §1): h + mixer(norm(h)), then h + SwiGLU MLP(norm(h))."""

    def __init__(self, layer, cfg: ModelConfig):
        super().__init__()
        d, i = cfg.hidden_size, cfg.intermediate_size
        self.attn_norm = RMSNorm(d, cfg.norm_eps)
        self.attn = build_mixer(layer, d, cfg.norm_eps)
        self.mlp_norm = RMSNorm(d, cfg.norm_eps)
        self.mlp = nn.Module()
        self.mlp.gate_proj, self.mlp.up_proj, self.mlp.down_proj = linear(d, i), linear(d, i), linear(i, d)

    def forward(self, h, pinned: int = 0):
        h = h + self.attn(self.attn_norm(h), pinned)
        x = self.mlp_norm(h)
        return h + self.mlp.down_proj(F.silu(self.mlp.gate_proj(x)) * self.mlp.up_proj(x))


class Backbone(nn.Module):
    """The embeddings, the layers and the final norm (the ``model.`` tensors of §2)."""

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
            self.lm_head = linear(self.cfg.hidden_size, self.cfg.vocab_size)
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

    def hidden(self, tokens, pinned: int = 0):
        """The final norm's output [B, T, hidden]: the logits before the head."""
        h = self.model.embeddings(tokens)
        for block in self.model.layers:
            h = block(h, pinned)
        return self.model.norm(h)

    def forward(self, tokens, pinned: int = 0):
        return self.hidden(tokens, pinned) @ self.head_weight().t()

    def encode_memory(self, memory_tokens) -> None:
        """The memory encoder of docs/spec.md §3.10 over ``memory_tokens`` [B, m] (one memory per
        sequence): the embedding and the first ``memory_encoder_layers`` layers (causal, as the
        stream runs them), then each ``cross`` layer's own norm, ``k_proj`` and ``v_proj``. Sets
        every cross layer's memory for the next forward passes (gradients flow through it);
        ``None`` returns them to their baked memory 0."""
        cross = [(i, block) for i, block in enumerate(self.model.layers) if self.cfg.layers[i].kind == "cross"]
        if memory_tokens is None:
            for _, block in cross:
                block.attn.memory = None
            return
        if not cross:
            raise ValueError("the model has no cross layer")
        depth = max(self.cfg.layers[i].memory_encoder_layers for i, _ in cross)
        h = self.model.embeddings(memory_tokens)
        for layer in range(depth + 1):
            for i, block in cross:
                if self.cfg.layers[i].memory_encoder_layers == layer:
                    block.attn.memory = block.attn.encode(block.attn_norm(h))
            if layer < depth:
                h = self.model.layers[layer](h)

    def logits_at(self, tokens, positions):
        """The logits at ``positions`` only ([P] shared, or [B, P] per sequence): [B, P, vocab].
        The same numbers as ``forward(tokens)`` there, without the head's cost at every
        position (MQAR scores a few positions of a large vocabulary)."""
        h = self.hidden(tokens)
        if positions.dim() == 1:
            h = h[:, positions]
        else:
            h = h.gather(1, positions[..., None].expand(-1, -1, h.shape[-1]))
        return h @ self.head_weight().t()
