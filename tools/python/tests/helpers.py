"""Small builders shared by the tests."""

import numpy as np

from ferrite_ref import bla
from ferrite_ref.config import BlaConfig, SwaConfig


def random_mixer_weights(shapes: dict, rng: np.random.Generator) -> dict:
    """Weights for one mixer at the scales ferrite_ref.modeldir uses."""
    weights = {}
    for name, shape in shapes.items():
        if name.endswith("conv1d.weight"):
            weights[name] = rng.standard_normal(shape) / np.sqrt(shape[-1])
        elif len(shape) == 2:
            weights[name] = rng.standard_normal(shape) / np.sqrt(shape[1])
        else:
            weights[name] = rng.standard_normal(shape)
    return weights


def bla_config(period, modes, slots=None, kernel="dirichlet", decay="gated", gamma=1.0,
               heads=2, head_dim=8, use_short_conv=False, kv_heads=0) -> BlaConfig:
    return BlaConfig(num_heads=heads, head_dim=head_dim, period=period, modes=modes,
                     slots=2 * modes + 1 if slots is None else slots, kernel=kernel, decay=decay,
                     gamma=gamma, use_short_conv=use_short_conv, conv_size=4, num_kv_heads=kv_heads)


def swa_config(window, heads=2, kv_heads=2, head_dim=8, sinks=0, rope_theta=10000.0,
               rope_positions="absolute", sink_logits=False) -> SwaConfig:
    return SwaConfig(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, window=window, sinks=sinks,
                     rope_theta=rope_theta, rope_positions=rope_positions, sink_logits=sink_logits,
                     use_short_conv=False, conv_size=4)


def random_bla(cfg: BlaConfig, hidden: int, rng: np.random.Generator) -> "bla.BlurryWindowAttention":
    return bla.BlurryWindowAttention(cfg, random_mixer_weights(bla.tensor_shapes(cfg, hidden), rng))


def run(mixer, xs: np.ndarray) -> np.ndarray:
    """Outputs [T, D] of a mixer fed the rows of xs from its reset state."""
    mixer.reset()
    return np.stack([mixer.step(x) for x in xs])

