"""The f64 reference model (docs/spec.md §1): a model directory in, logits out, per token."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple, Union

import numpy as np

from . import bla, gdn, gsa, mla, swa
from .config import ModelConfig, load_config
from .ops import rmsnorm, swiglu_mlp
from .safetensors_io import load_safetensors

class MixerEntry(NamedTuple):
    """One mixer kind's module: its tensors and its per-token state machine."""

    tensor_shapes: Callable  # (cfg, D) -> {name: shape}
    build: Callable  # (cfg, weights, norm_eps, pinned) -> an object with reset() and step(x)


# Every mixer kind of the runtime's table (ferrite_ref.kinds; tests/test_kinds.py checks it).
MIXERS = {
    "gdn": MixerEntry(gdn.tensor_shapes, lambda cfg, w, eps, pinned: gdn.GatedDeltaNet(cfg, w, eps)),
    "gsa": MixerEntry(gsa.tensor_shapes, lambda cfg, w, eps, pinned: gsa.GatedSlotAttention(cfg, w)),
    "swa": MixerEntry(swa.tensor_shapes, lambda cfg, w, eps, pinned: swa.SlidingWindowAttention(cfg, w, pinned)),
    "bla": MixerEntry(bla.tensor_shapes, lambda cfg, w, eps, pinned: bla.BlurryWindowAttention(cfg, w)),
    "mla": MixerEntry(mla.tensor_shapes, lambda cfg, w, eps, pinned: mla.LatentWindowAttention(cfg, w)),
}


def model_tensor_shapes(cfg: ModelConfig) -> dict:
    """Every tensor of a model directory (docs/spec.md §2 names) and its shape."""
    d, i = cfg.hidden_size, cfg.intermediate_size
    shapes = {"model.embeddings.weight": (cfg.vocab_size, d)}
    for n, layer in enumerate(cfg.layers):
        prefix = f"model.layers.{n}."
        shapes[prefix + "attn_norm.weight"] = (d,)
        for name, shape in MIXERS[layer.kind].tensor_shapes(layer, d).items():
            shapes[prefix + "attn." + name] = shape
        shapes[prefix + "mlp_norm.weight"] = (d,)
        shapes[prefix + "mlp.gate_proj.weight"] = (i, d)
        shapes[prefix + "mlp.up_proj.weight"] = (i, d)
        shapes[prefix + "mlp.down_proj.weight"] = (d, i)
    shapes["model.norm.weight"] = (d,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, d)
    return shapes


def check_tensors(tensors: dict, shapes: dict) -> None:
    """Raise ValueError unless ``tensors`` has exactly the expected names and shapes."""
    missing = sorted(set(shapes) - set(tensors))
    unexpected = sorted(set(tensors) - set(shapes))
    if missing or unexpected:
        raise ValueError(f"tensor names differ from the config: missing {missing}, unexpected {unexpected}")
    for name, shape in shapes.items():
        if tuple(tensors[name].shape) != tuple(shape):
            raise ValueError(f"tensor {name!r} has shape {list(tensors[name].shape)}, expected {list(shape)}")


def _sub_dict(tensors: dict, prefix: str) -> dict:
    return {name[len(prefix):]: value for name, value in tensors.items() if name.startswith(prefix)}


class Reference:
    """A model directory (config.json + model.safetensors) run token by token in f64.

    ``pinned`` is the session option of docs/spec.md §3.3: the first ``pinned`` tokens
    after the model's sinks stay visible in every ``swa`` layer.
    """

    def __init__(self, model_dir: Union[str, Path], pinned: int = 0):
        if isinstance(pinned, bool) or not isinstance(pinned, int) or pinned < 0:
            raise ValueError(f"pinned must be a non-negative integer, got {pinned!r}")
        model_dir = Path(model_dir)
        self.config = load_config(model_dir / "config.json")
        raw, _ = load_safetensors(model_dir / "model.safetensors")
        check_tensors(raw, model_tensor_shapes(self.config))
        t = {name: value.astype(np.float64) for name, value in raw.items()}
        self.embeddings = t["model.embeddings.weight"]
        self.lm_head = self.embeddings if self.config.tie_word_embeddings else t["lm_head.weight"]
        self.norm = t["model.norm.weight"]
        self.layers = []
        for n, layer in enumerate(self.config.layers):
            w = _sub_dict(t, f"model.layers.{n}.")
            mixer = MIXERS[layer.kind].build(layer, _sub_dict(w, "attn."), self.config.norm_eps, pinned)
            self.layers.append((w, mixer))

    def reset(self) -> None:
        """Forget the stream: every mixer back to its zero state."""
        for _, mixer in self.layers:
            mixer.reset()

    def step(self, token: int) -> np.ndarray:
        """Feed one token; return the logits [vocab] for the next one."""
        if not 0 <= token < self.config.vocab_size:
            raise ValueError(f"token {token} outside [0, {self.config.vocab_size})")
        eps = self.config.norm_eps
        h = self.embeddings[token].copy()
        for w, mixer in self.layers:
            h = h + mixer.step(rmsnorm(h, w["attn_norm.weight"], eps))
            x = rmsnorm(h, w["mlp_norm.weight"], eps)
            h = h + swiglu_mlp(x, w["mlp.gate_proj.weight"], w["mlp.up_proj.weight"], w["mlp.down_proj.weight"])
        return self.lm_head @ rmsnorm(h, self.norm, eps)

    def logits(self, tokens) -> np.ndarray:
        """Reset, then feed ``tokens``; return the logits of every position [T, vocab]."""
        self.reset()
        rows = [self.step(int(token)) for token in tokens]
        return np.stack(rows) if rows else np.zeros((0, self.config.vocab_size))
