"""Random model directories (config.json + f32 model.safetensors) for tests and fixtures.

Scales are chosen so that every path matters and logits stay O(1)-O(10):
linear weights N(0, 1/fan_in), embeddings N(0, 1), norm weights 1 + 0.1 N(0, 1),
A_log = log U(1, 16), dt_bias = softplus^-1(dt) with dt log-uniform in
[1e-3, 1e-1] (fla's initialisation), conv weights N(0, 1/W), sinks N(0, 1);
biases (norms, Mamba-2's convolution) 0.1 N(0, 1), Mamba-2's D 1 + 0.1 N(0, 1);
RWKV-7's token-shift interpolations U(0, 1), k_k U(0.6, 0.8), k_a U(0.9, 1.1),
r_k 0.1 N(0, 1), and its low-rank biases in the ranges of fla's initialisation
(decay U(-4, 2), learning rate U(-0.5, 0.5), value residual U(0.3, 1)); HGRN2's
forget-gate lower bounds (``gla`` layers) U(0, 0.9), in fla's range [0, 1); the
baked memories of ``cross`` layers (``memory_k``, ``memory_v``) N(0, 1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Union

import numpy as np

from .config import parse_config
from .reference import model_tensor_shapes
from .safetensors_io import save_safetensors


def random_tensor(name: str, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """One tensor drawn at the scale its role needs (see the module docstring)."""
    if name == "model.embeddings.weight":
        return rng.standard_normal(shape)
    if name.endswith("norm.weight"):
        return 1.0 + 0.1 * rng.standard_normal(shape)
    if name.endswith("A_log"):
        return np.log(rng.uniform(1.0, 16.0, shape))
    if name.endswith("dt_bias"):
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), shape))
        return np.log(np.expm1(dt))
    if name.endswith("conv1d.weight"):
        return rng.standard_normal(shape) / np.sqrt(shape[-1])
    if name.endswith("sinks"):
        return rng.standard_normal(shape)
    if name.endswith(("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")):
        return rng.uniform(0.0, 1.0, shape)
    if name.endswith("attn.k_k"):
        return rng.uniform(0.6, 0.8, shape)
    if name.endswith("attn.k_a"):
        return rng.uniform(0.9, 1.1, shape)
    if name.endswith("attn.r_k"):
        return 0.1 * rng.standard_normal(shape)
    if name.endswith("w_lora.lora.2.bias"):
        return rng.uniform(-4.0, 2.0, shape)
    if name.endswith("a_lora.lora.2.bias"):
        return rng.uniform(-0.5, 0.5, shape)
    if name.endswith("v_lora.lora.2.bias"):
        return rng.uniform(0.3, 1.0, shape)
    if name.endswith("attn.lower_bound"):
        return rng.uniform(0.0, 0.9, shape)
    if name.endswith("attn.D"):
        return 1.0 + 0.1 * rng.standard_normal(shape)
    if name.endswith(".bias"):
        return 0.1 * rng.standard_normal(shape)
    if name.endswith(("attn.memory_k", "attn.memory_v")):
        return rng.standard_normal(shape)
    if len(shape) == 2:
        return rng.standard_normal(shape) / np.sqrt(shape[1])
    raise ValueError(f"no initialisation rule for tensor {name!r}")


def random_weights(config: dict, seed: int) -> dict:
    """name -> float32 array for every tensor the config needs, drawn in name order."""
    shapes = model_tensor_shapes(parse_config(config))
    rng = np.random.default_rng(seed)
    return {name: random_tensor(name, shapes[name], rng).astype(np.float32) for name in sorted(shapes)}


def write_model_dir(path: Union[str, Path], config: dict, seed: int) -> Path:
    """Write ``config.json`` and a random f32 ``model.safetensors`` into ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    weights = random_weights(config, seed)
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_safetensors(path / "model.safetensors", weights)
    return path
