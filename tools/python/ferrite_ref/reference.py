"""The f64 reference model (docs/spec.md §1): a model directory in, logits out, per token."""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np

from . import bla, gdn, gsa, mla, swa
from .config import BlaConfig, GdnConfig, GsaConfig, MlaConfig, ModelConfig, SwaConfig, load_config
from .ops import rmsnorm, swiglu_mlp
from .safetensors_io import load_safetensors

_SHAPES = {GdnConfig: gdn.tensor_shapes, GsaConfig: gsa.tensor_shapes, SwaConfig: swa.tensor_shapes, BlaConfig: bla.tensor_shapes,
           MlaConfig: mla.tensor_shapes}


def model_tensor_shapes(cfg: ModelConfig) -> dict:
    """Every tensor of a model directory (docs/spec.md §2 names) and its shape."""
    d, i = cfg.hidden_size, cfg.intermediate_size
    shapes = {"model.embeddings.weight": (cfg.vocab_size, d)}
    for n, layer in enumerate(cfg.layers):
        prefix = f"model.layers.{n}."
        shapes[prefix + "attn_norm.weight"] = (d,)
        for name, shape in _SHAPES[type(layer)](layer, d).items():
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


def _build_mixer(layer, weights: dict, cfg: ModelConfig, pinned: int):
    if isinstance(layer, GdnConfig):
        return gdn.GatedDeltaNet(layer, weights, cfg.norm_eps)
    if isinstance(layer, GsaConfig):
        return gsa.GatedSlotAttention(layer, weights)
    if isinstance(layer, SwaConfig):
        return swa.SlidingWindowAttention(layer, weights, pinned)
    if isinstance(layer, MlaConfig):
        return mla.LatentWindowAttention(layer, weights)
    return bla.BlurryWindowAttention(layer, weights)


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
            mixer = _build_mixer(layer, _sub_dict(w, "attn."), self.config, pinned)
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
