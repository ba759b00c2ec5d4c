"""The training mixers, one module per kind of the runtime's mixer table
(``ferrite_ref.kinds``), named by the kind as ferrite_ref's are.

Each module holds the ``nn.Module`` (parallel over time, docs/spec.md §3 names),
``build(cfg, d, norm_eps)`` and the state sizes the runtime gives the layer
(``state_floats``, ``core_state_floats`` without the convolution caches).
"""

from __future__ import annotations

from torch import nn

from . import bla, cross, gdn, gsa, mla, swa

# Every mixer kind of the runtime's table (tests/test_kinds.py checks it).
MIXERS = {"gdn": gdn, "gsa": gsa, "swa": swa, "bla": bla, "mla": mla, "cross": cross}


def build_mixer(layer, d: int, norm_eps: float) -> nn.Module:
    """The training module of one layer config (``ferrite_ref.config``)."""
    return MIXERS[layer.kind].build(layer, d, norm_eps)


def layer_state_floats(layer) -> int:
    """Recurrent state words of one layer, as the runtime sizes it (runtime/src/mixers/*.rs)."""
    return MIXERS[layer.kind].state_floats(layer)


def layer_core_state_floats(layer) -> int:
    """The mixer's memory proper, without the short-convolution caches."""
    return MIXERS[layer.kind].core_state_floats(layer)
