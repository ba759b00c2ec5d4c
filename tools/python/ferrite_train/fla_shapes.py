"""fla model configurations for MQAR runs, and their state sizes (torch-free, so CI tests it).

The state study (issue 28, item 5) trains fla's own RWKV-7 and Mamba-2 classes on MQAR
beside ferrite's families: a run's ``config`` is then an fla configuration (a dict with
``model_type`` ``rwkv7`` or ``mamba2``, the keyword arguments of fla's ``RWKV7Config`` /
``Mamba2Config``) instead of a ferrite one, and ``ferrite_train.train`` builds the model
with fla (``ferrite_train.fla_lm.FlaLM``). The state sizes below are what the runtime
keeps per layer in f32 (docs/spec.md, the ``rwkv7`` and ``mamba2`` sections):

- RWKV-7: ``H`` heads of ``K x V/H`` (``K`` = head_dim, ``V`` = value_dim, ``H K`` =
  hidden_size), so ``K V`` floats of core state, plus the time-mix and channel-mix token
  shifts (``2 d``).
- Mamba-2: ``H`` heads of ``P x N`` (``P`` = head_dim, ``N`` = state_size, ``H P`` =
  expand x hidden_size), so ``expand d N`` floats of core state, plus the convolution's
  ``conv_kernel - 1`` past inputs of x, B and C (``expand d + 2 groups N`` each).
"""

from __future__ import annotations

FLA_TYPES = ("rwkv7", "mamba2")

# RWKV-7 (head_dim K, value_dim V) per KB of core state at d = 64: K V = KB x 256 floats. fla
# asserts value_dim >= hidden_size (a multiple of it), so the smallest is K = 16 (fla's chunk
# kernels' smallest tile) at V = 64: 4 KB. 1 and 2 KB are not run.
RWKV7_KV = {4: (16, 64), 8: (32, 64), 16: (64, 64), 32: (64, 128), 64: (64, 256)}


def is_fla(config: dict) -> bool:
    """Whether a run's config is an fla configuration (RWKV-7 or Mamba-2)."""
    return config.get("model_type") in FLA_TYPES


def study_config(family: str, kb: int, vocab: int, d: int = 64, layers: int = 2) -> dict:
    """An fla configuration of ``layers`` layers at d = ``d`` whose core state per layer is
    ``kb`` KB of f32: RWKV-7 by its key and value widths (``RWKV7_KV``, low-rank sizes and
    channel mix as models/lm/rwkv7-m3), Mamba-2 by its state size (expand 2, heads of 16,
    one group; fla's block has no MLP)."""
    common = {"hidden_size": d, "num_hidden_layers": layers, "vocab_size": vocab, "tie_word_embeddings": True,
              "fuse_cross_entropy": False}
    if family == "rwkv7":
        if d != 64:
            raise ValueError("RWKV7_KV is laid out for d = 64")
        if kb not in RWKV7_KV:
            raise ValueError(f"RWKV-7 has no {kb} KB layer at d = 64 (fla: value_dim >= hidden_size; sizes {sorted(RWKV7_KV)})")
        k, v = RWKV7_KV[kb]
        return {"model_type": "rwkv7", **common, "head_dim": k, "value_dim": v, "decay_low_rank_dim": 16,
                "gate_low_rank_dim": 32, "a_low_rank_dim": 16, "v_low_rank_dim": 8, "intermediate_size": 2 * d}
    if family == "mamba2":
        floats, inner = kb * 256, 2 * d
        if floats % inner:
            raise ValueError(f"{kb} KB is not a whole state size at d = {d}")
        return {"model_type": "mamba2", **common, "head_dim": 16, "expand": 2, "state_size": floats // inner,
                "n_groups": 1, "conv_kernel": 4, "chunk_size": 64}
    raise ValueError(f"unknown fla family {family!r} (one of {FLA_TYPES})")


def _value_dim(config: dict) -> int:
    """RWKV-7's value width of the first layer (fla saves one per layer)."""
    v = config.get("value_dim") or config["hidden_size"]
    return v[0] if isinstance(v, list) else v


def state_floats(config: dict) -> tuple:
    """(all, core) f32 state floats per layer of an fla configuration, as the runtime keeps
    them: core = the recurrent state; all = core plus token shifts or convolution inputs."""
    d = config["hidden_size"]
    if config["model_type"] == "rwkv7":
        k = config.get("head_dim", 64)
        v = _value_dim(config)
        if d % k or v % (d // k):
            raise ValueError(f"RWKV-7 with hidden_size {d}, head_dim {k}, value_dim {v}: heads do not divide")
        core = k * v
        return core + 2 * d, core
    if config["model_type"] == "mamba2":
        inner, n = config.get("expand", 2) * d, config["state_size"]
        core = inner * n
        conv = (config.get("conv_kernel", 4) - 1) * (inner + 2 * config.get("n_groups", 1) * n)
        return core + conv, core
    raise ValueError(f"not an fla configuration: model_type {config.get('model_type')!r}")


def slots_and_width(config: dict) -> tuple:
    """(rows, floats per row) of one layer's core state, as the state study counts GDN's:
    RWKV-7 H x K key rows of V/H values, Mamba-2 H x N rows (one per state dimension and
    head) of head_dim values."""
    d = config["hidden_size"]
    if config["model_type"] == "rwkv7":
        k = config.get("head_dim", 64)
        heads = d // k
        return heads * k, _value_dim(config) // heads
    if config["model_type"] == "mamba2":
        p = config["head_dim"]
        return config.get("expand", 2) * d // p * config["state_size"], p
    raise ValueError(f"not an fla configuration: model_type {config.get('model_type')!r}")
