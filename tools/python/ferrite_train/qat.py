"""Quantization-aware training for ``ferrite quantize --dtype int4`` (issue 11).

The forward pass sees every weight matrix exactly as the tiled int4 image
will store it (docs/quantization.md, "Scheme"; ``encode_tiled`` in
tools/src/quant.rs, absmax scales): per output row ``d = max_g s_g / 255``
with ``s_g = max|w_g| / 7`` over groups of ``group`` inputs, a per-group
multiplier ``m_g = clamp(ceil(s_g / d), 1, 255)``, values
``clamp(round(w / (d m_g)), -8, 7)``. Gradients pass straight through
(straight-through estimator), so the f32 weights learn to sit where int4
loses little.

At export the parametrizations are removed with the quantized values kept:
the exported f32 model *is* the int4 model, and ``ferrite quantize``'s
scale search finds the same grid (its candidates include absmax's
multiplier), so the f32 and int4 images agree up to the activation
rounding of the integer path.
"""

from __future__ import annotations

import operator

import torch
import torch.nn as nn
from torch.nn.utils import parametrize


def fake_quant_tiled(w: torch.Tensor, bits: int, group: int) -> torch.Tensor:
    """``w`` [rows, cols] through the tiled format's absmax quantizer and back."""
    qmax = 7.0 if bits == 4 else 127.0
    lo = -8.0 if bits == 4 else -127.0
    rows, cols = w.shape
    wg = w.detach().reshape(rows, cols // group, group)
    s = wg.abs().amax(-1) / qmax  # [rows, groups]
    d = s.amax(-1, keepdim=True) / 255.0  # [rows, 1]
    d = torch.where(d > 0, d, torch.ones_like(d))
    m = torch.ceil(s / d).clamp(1.0, 255.0)
    step = (d * m)[..., None]  # [rows, groups, 1]
    q = torch.clamp(torch.round(wg / step), lo, qmax) * step
    return w + (q.reshape(rows, cols) - w).detach()


class FakeQuant(nn.Module):
    """A parametrization: the weight as the int4 (or int8) image stores it."""

    def __init__(self, bits: int, group: int):
        super().__init__()
        self.bits, self.group = bits, group

    def forward(self, w):
        return fake_quant_tiled(w, self.bits, self.group)


def group_for(cols: int, group: int) -> int:
    """The tools' default: ``group`` where it divides the row, else 16."""
    return group if cols % group == 0 else 16


def attach(model: nn.Module, bits: int = 4, group: int = 32, embedding_bits: int | None = 4) -> list:
    """Fake-quantizes every Linear weight (int ``bits``) and the embedding table
    (``embedding_bits``; ``None`` leaves it f32, as the int8 default of ``lm/large``
    nearly is). Returns the names of the parametrized weights."""
    names = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            parametrize.register_parametrization(module, "weight", FakeQuant(bits, group_for(module.in_features, group)))
            names.append(f"{name}.weight")
        elif isinstance(module, nn.Embedding) and embedding_bits:
            parametrize.register_parametrization(module, "weight",
                                                 FakeQuant(embedding_bits, group_for(module.embedding_dim, group)))
            names.append(f"{name}.weight")
    return names


def frozen_copy(model: nn.Module) -> nn.Module:
    """A fresh, unparametrized copy whose weights are the quantized values (what
    is exported). Built anew rather than with ``remove_parametrizations`` on a
    deep copy: that deletes the property from the parametrized class, which the
    deep copy shares with the model still training."""
    fresh = type(model)(model.raw_config).to(next(model.parameters()).device)
    with torch.no_grad():
        for name, p in fresh.named_parameters():
            p.copy_(operator.attrgetter(name)(model))
    return fresh
