"""Shared numerics (docs/spec.md §1 and §3), float64, written to be read next to it."""

from __future__ import annotations

import numpy as np


def logsigmoid(x: np.ndarray) -> np.ndarray:
    """log(sigmoid(x)), stable for large |x|."""
    return -np.logaddexp(0.0, -x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(logsigmoid(x))


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def softplus(z: np.ndarray) -> np.ndarray:
    """softplus(z) = z if z > 20 else ln(1 + e^z)  (torch's threshold, docs/spec.md conventions)."""
    return np.where(z > 20.0, z, np.log1p(np.exp(np.minimum(z, 20.0))))


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x * rsqrt(mean(x^2) + eps) * weight, over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def layernorm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (biased variance)."""
    centred = x - np.mean(x, axis=-1, keepdims=True)
    return centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps) * weight + bias


def l2norm(u: np.ndarray) -> np.ndarray:
    """u / sqrt(sum u^2 + 1e-6), over the last axis (docs/spec.md conventions)."""
    return u / np.sqrt(np.sum(u * u, axis=-1, keepdims=True) + 1e-6)


def softmax(z: np.ndarray, extra_logit: float | None = None) -> np.ndarray:
    """Softmax over the last axis; ``extra_logit`` (a learned sink) only adds
    exp(extra_logit) to the denominator."""
    top = np.max(z, axis=-1, keepdims=True)
    if extra_logit is not None:
        top = np.maximum(top, extra_logit)
    e = np.exp(z - top)
    denominator = np.sum(e, axis=-1, keepdims=True)
    if extra_logit is not None:
        denominator = denominator + np.exp(extra_logit - top)
    return e / denominator


def swiglu_mlp(x: np.ndarray, gate: np.ndarray, up: np.ndarray, down: np.ndarray) -> np.ndarray:
    """down_proj( silu(gate_proj x) * up_proj x ), no biases."""
    return down @ (silu(gate @ x) * (up @ x))


class ShortConv:
    """Per-channel causal convolution followed by SiLU (GDN's, docs/spec.md §3.5).

    The cache holds the last W raw inputs, newest at index W-1, zeros at reset:
    y_c = silu( sum_j w[c, 0, j] * cache_c[j] ).
    """

    def __init__(self, weight: np.ndarray, activation: bool = True):
        channels, one, width = weight.shape
        assert one == 1, weight.shape
        self.weight = weight[:, 0, :]  # [C, W]
        self.cache = np.zeros((channels, width))  # [C, W]
        self.activation = activation  # False: no SiLU (DeltaNet's q/k with qk_activation != silu)

    def reset(self) -> None:
        self.cache[:] = 0.0

    def step(self, x: np.ndarray) -> np.ndarray:
        self.cache = np.roll(self.cache, -1, axis=1)
        self.cache[:, -1] = x
        y = np.sum(self.weight * self.cache, axis=1)
        return silu(y) if self.activation else y


def rope(x: np.ndarray, position: int, theta: float | None) -> np.ndarray:
    """GPT-NeoX half-split RoPE of x [..., d] at ``position``; identity if theta is None.

    inv_freq_i = theta^(-2i/d), i in 0..d/2;
    x'[i] = x[i] cos - x[i+d/2] sin ; x'[i+d/2] = x[i+d/2] cos + x[i] sin.
    """
    if theta is None:
        return x
    half = x.shape[-1] // 2
    inv_freq = theta ** (-2.0 * np.arange(half) / x.shape[-1])
    angle = position * inv_freq
    cos, sin = np.cos(angle), np.sin(angle)
    lo, hi = x[..., :half], x[..., half:]
    return np.concatenate([lo * cos - hi * sin, hi * cos + lo * sin], axis=-1)


def qkv_conv_shapes(q_channels: int, k_channels: int, v_channels: int, width: int) -> dict:
    """Names and shapes of the q/k/v short-convolution weights [C, 1, W]."""
    return {
        "q_conv1d.weight": (q_channels, 1, width),
        "k_conv1d.weight": (k_channels, 1, width),
        "v_conv1d.weight": (v_channels, 1, width),
    }


class QkvShortConv:
    """The three short convolutions applied to the raw q, k and v projections."""

    def __init__(self, weights: dict, qk_silu: bool = True):
        self.convs = [ShortConv(weights[f"{name}_conv1d.weight"], name == "v" or qk_silu) for name in "qkv"]

    def reset(self) -> None:
        for conv in self.convs:
            conv.reset()

    def step(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple:
        return tuple(conv.step(x) for conv, x in zip(self.convs, (q, k, v)))
