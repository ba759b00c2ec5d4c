"""The f64 reference model (docs/spec.md §1): a model directory in, logits out, per token."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, NamedTuple, Union

import numpy as np

from . import bla, cross, gdn, gla, gsa, mamba2, mla, rwkv7, swa
from .config import BlockConfig, ModelConfig, load_config
from .ops import layernorm, rmsnorm, swiglu_mlp
from .safetensors_io import load_safetensors

class MixerEntry(NamedTuple):
    """One mixer kind's module: its tensors and its per-token state machine."""

    tensor_shapes: Callable  # (cfg, D) -> {name: shape}
    build: Callable  # (cfg, weights, norm_eps, pinned) -> an object with reset() and step(x)
    carries: bool = False  # step(x, carry): reads or writes the value passed across layers


# Every mixer kind of the runtime's table (ferrite_ref.kinds; tests/test_kinds.py checks it).
MIXERS = {
    "gdn": MixerEntry(gdn.tensor_shapes, lambda cfg, w, eps, pinned: gdn.GatedDeltaNet(cfg, w, eps)),
    "gsa": MixerEntry(gsa.tensor_shapes, lambda cfg, w, eps, pinned: gsa.GatedSlotAttention(cfg, w)),
    "swa": MixerEntry(swa.tensor_shapes, lambda cfg, w, eps, pinned: swa.SlidingWindowAttention(cfg, w, pinned)),
    "bla": MixerEntry(bla.tensor_shapes, lambda cfg, w, eps, pinned: bla.BlurryWindowAttention(cfg, w)),
    "mla": MixerEntry(mla.tensor_shapes, lambda cfg, w, eps, pinned: mla.LatentWindowAttention(cfg, w)),
    "mamba2": MixerEntry(mamba2.tensor_shapes, lambda cfg, w, eps, pinned: mamba2.Mamba2(cfg, w, eps)),
    "rwkv7": MixerEntry(rwkv7.tensor_shapes, lambda cfg, w, eps, pinned: rwkv7.Rwkv7TimeMix(cfg, w), carries=True),
    "gla": MixerEntry(gla.tensor_shapes, lambda cfg, w, eps, pinned: gla.GatedLinearAttention(cfg, w, eps)),
    "cross": MixerEntry(cross.tensor_shapes, lambda cfg, w, eps, pinned: cross.CrossAttention(cfg, w)),
}


def _norm_shapes(prefix: str, d: int, layernorm_kind: bool) -> dict:
    """A norm's weight (and bias, for a LayerNorm)."""
    shapes = {prefix + ".weight": (d,)}
    if layernorm_kind:
        shapes[prefix + ".bias"] = (d,)
    return shapes


def model_tensor_shapes(cfg: ModelConfig) -> dict:
    """Every tensor of a model directory (docs/spec.md §2 names) and its shape."""
    d, i = cfg.hidden_size, cfg.intermediate_size
    ln = cfg.norm == "layernorm"
    shapes = {"model.embeddings.weight": (cfg.vocab_size, d)}
    for n, layer in enumerate(cfg.layers):
        prefix = f"model.layers.{n}."
        block = cfg.block(n)
        if block.pre_norm:
            shapes.update(_norm_shapes(prefix + "pre_norm", d, ln))
        shapes.update(_norm_shapes(prefix + "attn_norm", d, ln))
        for name, shape in MIXERS[layer.kind].tensor_shapes(layer, d).items():
            shapes[prefix + "attn." + name] = shape
        if block.mlp == "swiglu":
            shapes.update(_norm_shapes(prefix + "mlp_norm", d, ln))
            shapes[prefix + "mlp.gate_proj.weight"] = (i, d)
            shapes[prefix + "mlp.up_proj.weight"] = (i, d)
            shapes[prefix + "mlp.down_proj.weight"] = (d, i)
        elif block.mlp == "channel_mix":
            shapes.update(_norm_shapes(prefix + "mlp_norm", d, ln))
            shapes[prefix + "mlp.x_k"] = (d,)
            shapes[prefix + "mlp.key.weight"] = (i, d)
            shapes[prefix + "mlp.value.weight"] = (d, i)
    shapes.update(_norm_shapes("model.norm", d, ln))
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, d)
    return shapes


class Block:
    """The block around one layer's mixer (docs/spec.md §1.1): its norms, MLP and,
    for RWKV-7's channel mixing, the previous token's normed input."""

    def __init__(self, cfg: BlockConfig, weights: dict, mixer, carries: bool, norm: str, eps: float):
        self.cfg, self.w, self.mixer, self.carries = cfg, weights, mixer, carries
        self.layernorm, self.eps = norm == "layernorm", eps
        self.prev = np.zeros(weights["attn_norm.weight"].shape)

    def reset(self) -> None:
        self.mixer.reset()
        self.prev[:] = 0.0

    def norm(self, u: np.ndarray, name: str) -> np.ndarray:
        if self.layernorm:
            return layernorm(u, self.w[name + ".weight"], self.w[name + ".bias"], self.eps)
        return rmsnorm(u, self.w[name + ".weight"], self.eps)

    def step(self, h: np.ndarray, carry: dict) -> np.ndarray:
        """The residual stream after this layer."""
        w = self.w
        if self.cfg.pre_norm:
            h = self.norm(h, "pre_norm")
        x = self.norm(h, "attn_norm")
        h = h + (self.mixer.step(x, carry) if self.carries else self.mixer.step(x))
        if self.cfg.mlp == "swiglu":
            x = self.norm(h, "mlp_norm")
            h = h + swiglu_mlp(x, w["mlp.gate_proj.weight"], w["mlp.up_proj.weight"], w["mlp.down_proj.weight"])
        elif self.cfg.mlp == "channel_mix":
            x = self.norm(h, "mlp_norm")
            mixed = x + (self.prev - x) * w["mlp.x_k"]
            self.prev = x
            h = h + w["mlp.value.weight"] @ np.maximum(w["mlp.key.weight"] @ mixed, 0.0) ** 2
        return h


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
        self.norm = {"weight": t["model.norm.weight"], "bias": t.get("model.norm.bias")}
        self.layers = []
        for n, layer in enumerate(self.config.layers):
            w = _sub_dict(t, f"model.layers.{n}.")
            entry = MIXERS[layer.kind]
            mixer = entry.build(layer, _sub_dict(w, "attn."), self.config.norm_eps, pinned)
            block = self.config.block(n)
            self.layers.append(Block(block, w, mixer, entry.carries, self.config.norm, self.config.norm_eps))

    def reset(self) -> None:
        """Forget the stream: every mixer (and channel mixing) back to its zero state."""
        for block in self.layers:
            block.reset()

    def step(self, token: int) -> np.ndarray:
        """Feed one token; return the logits [vocab] for the next one."""
        if not 0 <= token < self.config.vocab_size:
            raise ValueError(f"token {token} outside [0, {self.config.vocab_size})")
        eps = self.config.norm_eps
        h = self.embeddings[token].copy()
        carry = {}  # the value passed across layers (RWKV-7's v_first), per token
        for block in self.layers:
            h = block.step(h, carry)
        if self.config.norm == "layernorm":
            return self.lm_head @ layernorm(h, self.norm["weight"], self.norm["bias"], eps)
        return self.lm_head @ rmsnorm(h, self.norm["weight"], eps)

    def select_memory(self, index: int) -> None:
        """Attend to baked memory ``index`` in every ``cross`` layer (docs/spec.md §3.10);
        ValueError when the model has none or a layer has ``index`` memories or fewer."""
        layers = [block.mixer for block in self.layers if isinstance(block.mixer, cross.CrossAttention)]
        if not layers:
            raise ValueError(f"no memory {index}: the model has no cross layer")
        for mixer in layers:
            if not 0 <= index < mixer.cfg.memories:
                raise ValueError(f"no memory {index}: a cross layer has {mixer.cfg.memories}")
        for mixer in layers:
            mixer.select(index)

    def encode_memory(self, tokens) -> list:
        """The memory encoder (docs/cross-attention.md, "The memory encoder"): from a reset
        stream, feed ``tokens`` through the first ``memory_encoder_layers`` layers; each
        ``cross`` layer's pre-norm, ``k_proj`` and ``v_proj`` turn every token's hidden state
        into one key and one value slot. Returns ``[(keys [m, Hkv*d], values [m, Hkv*d])]``,
        one pair per cross layer in stack order; the stream is reset after."""
        cross_blocks = [(n, b) for n, b in enumerate(self.layers) if isinstance(b.mixer, cross.CrossAttention)]
        if not cross_blocks:
            raise ValueError("the model has no cross layer")
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise ValueError("a memory needs at least one token")
        depth = max(b.mixer.cfg.memory_encoder_layers for _, b in cross_blocks)
        out = [([], []) for _ in cross_blocks]
        self.reset()
        for token in tokens:
            if not 0 <= token < self.config.vocab_size:
                raise ValueError(f"token {token} outside [0, {self.config.vocab_size})")
            h = self.embeddings[token].copy()
            carry = {}
            for layer in range(depth + 1):
                for (_, block), (keys, values) in zip(cross_blocks, out):
                    if block.mixer.cfg.memory_encoder_layers == layer:
                        u = block.norm(h, "pre_norm") if block.cfg.pre_norm else h
                        x = block.norm(u, "attn_norm")
                        keys.append(block.mixer.w["k_proj.weight"] @ x)
                        values.append(block.mixer.w["v_proj.weight"] @ x)
                if layer < depth:
                    h = self.layers[layer].step(h, carry)
        self.reset()
        return [(np.stack(k), np.stack(v)) for k, v in out]

    def use_memories(self, encoded: list) -> None:
        """Replace every cross layer's baked memories: ``encoded[n]`` is memory n, as
        :meth:`encode_memory` returns it (one (keys, values) pair per cross layer)."""
        mixers = [b.mixer for b in self.layers if isinstance(b.mixer, cross.CrossAttention)]
        for i, mixer in enumerate(mixers):
            keys = np.stack([memory[i][0] for memory in encoded])
            values = np.stack([memory[i][1] for memory in encoded])
            mixer.w = {**mixer.w, "memory_k": keys, "memory_v": values}
            mixer.cfg = dataclasses.replace(mixer.cfg, memories=len(encoded), memory_slots=keys.shape[1])
        self.reset()

    def logits(self, tokens, memory: int | None = None) -> np.ndarray:
        """Reset, then feed ``tokens``; return the logits of every position [T, vocab].
        ``memory``: the baked memory every ``cross`` layer attends to (after the reset)."""
        self.reset()
        if memory is not None:
            self.select_memory(memory)
        rows = [self.step(int(token)) for token in tokens]
        return np.stack(rows) if rows else np.zeros((0, self.config.vocab_size))
