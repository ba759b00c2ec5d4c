"""The memory-lookup task of issue 32 (torch-free, so CPU tests cover it): every sequence
has its own memory, so a model cannot memorise one, and must read it through a ``cross``
layer (docs/cross-attention.md).

Tokens are bytes (vocabulary 256, the byte tokenizer), so a memory is a file that
``ferrite quantize --memory`` reads as it is:

- a **memory** of ``slots`` tokens holds ``slots // 3`` key-value pairs, each three tokens
  ``k1 k2 v`` (``k1`` in [0, 64), ``k2`` in [64, 128), ``v`` in [128, 192)), keys distinct
  within a memory (4,096 possible), values uniform; the slots left over are ``PAD`` (192).
  The memory encoder is causal (docs/spec.md §3.10), so the value's slot can carry its key
  only through the encoder's layers: the config below gives the cross layer a one-layer
  encoder (a short sliding window that sees ``k1 k2 v``).
- the **stream** is ``queries`` lookups ``k1 k2 v`` of keys of that memory (uniform, with
  repeats); the model is scored at each ``k2`` on predicting ``v`` (``targets``: -1 where
  not scored).

``accuracy`` is the share of scored positions whose argmax is the value; chance is 1/64.
Held-out memories come from seeds no training batch uses (``HELDOUT_SEED``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

KEY1, KEY2, VALUE = (0, 64), (64, 128), (128, 192)
PAD = 192
TOKENS_PER_PAIR = 3
#: Seeds of held-out memories start here; training batches use seeds below it.
HELDOUT_SEED = 1 << 48
#: The memory sizes of the round (issue 32: m = 16 ... 1,024 slots).
SLOTS = (16, 64, 256, 1024)


def pairs_for(slots: int) -> int:
    """Key-value pairs in a memory of ``slots`` slots (at least one; at most 4,096 keys)."""
    pairs = slots // TOKENS_PER_PAIR
    if pairs < 1:
        raise ValueError(f"a memory of {slots} slots holds no pair (3 tokens each)")
    if pairs > (KEY1[1] - KEY1[0]) * (KEY2[1] - KEY2[0]):
        raise ValueError(f"{pairs} pairs exceed the {64 * 64} distinct keys")
    return pairs


def make_memory(rng: np.random.Generator, slots: int, pairs: int | None = None):
    """One memory: (tokens [slots] int64, keys [P, 2], values [P]); ``pairs`` (at most what
    ``slots`` holds, default all of it) leaves the rest ``PAD``, as a curriculum's early
    batches do."""
    full = pairs_for(slots)
    pairs = full if pairs is None else pairs
    if not 1 <= pairs <= full:
        raise ValueError(f"{pairs} pairs: a memory of {slots} slots holds 1 to {full}")
    flat = rng.choice(64 * 64, size=pairs, replace=False)
    keys = np.stack([KEY1[0] + flat // 64, KEY2[0] + flat % 64], axis=1).astype(np.int64)
    values = rng.integers(VALUE[0], VALUE[1], size=pairs).astype(np.int64)
    tokens = np.full(slots, PAD, dtype=np.int64)
    tokens[: TOKENS_PER_PAIR * pairs] = np.stack([keys[:, 0], keys[:, 1], values], axis=1).reshape(-1)
    return tokens, keys, values


def make_batch(seed: int, batch: int, slots: int, queries: int, pairs: int | None = None) -> dict:
    """``batch`` sequences, each with its own memory (seed ``seed``): ``memory`` [B, slots],
    ``stream`` [B, 3 * queries], ``targets`` [B, 3 * queries] (the value at each ``k2``
    position, -1 elsewhere). ``pairs``: as ``make_memory``'s (default: the memory full)."""
    if queries < 1:
        raise ValueError("a stream needs at least one query")
    rng = np.random.default_rng(seed)
    t = TOKENS_PER_PAIR * queries
    memory = np.empty((batch, slots), dtype=np.int64)
    stream = np.empty((batch, t), dtype=np.int64)
    targets = np.full((batch, t), -1, dtype=np.int64)
    for b in range(batch):
        tokens, keys, values = make_memory(rng, slots, pairs)
        pick = rng.integers(0, len(values), size=queries)
        memory[b] = tokens
        stream[b] = np.stack([keys[pick, 0], keys[pick, 1], values[pick]], axis=1).reshape(-1)
        targets[b, 1::TOKENS_PER_PAIR] = values[pick]
    return {"memory": memory, "stream": stream, "targets": targets}


def curriculum_pairs(slots: int, start: int, progress: float, ramp: float) -> int:
    """Pairs a training batch holds under the pair curriculum: ``start`` pairs at the
    beginning, growing geometrically to the full memory (``pairs_for(slots)``) when
    ``progress`` (the share of the run done, 0 to 1) reaches ``ramp``, full after that.
    Large memories do not leave the loss plateau when trained full from the start
    (docs/cross-attention.md, round 21); a lookup learned among few pairs carries over."""
    full = pairs_for(slots)
    if not 0 < ramp <= 1:
        raise ValueError(f"ramp {ramp}: a share of the run in (0, 1]")
    if start < 1:
        raise ValueError(f"start {start}: at least one pair")
    start = min(start, full)
    done = min(1.0, max(0.0, progress) / ramp)
    return min(full, max(start, round(start * (full / start) ** done)))


def heldout_batch(index: int, batch: int, slots: int, queries: int) -> dict:
    """Held-out batch ``index``: memories of seeds no training batch draws."""
    return make_batch(HELDOUT_SEED + index, batch, slots, queries)


def accuracy(logits: np.ndarray, targets: np.ndarray) -> float:
    """Share of scored positions (``targets >= 0``) whose argmax is the target."""
    scored = targets >= 0
    if not scored.any():
        raise ValueError("no scored position")
    return float((logits.argmax(-1)[scored] == targets[scored]).mean())


def lookup_config(slots: int, hidden: int = 128, heads: int = 4, window: int = 4) -> dict:
    """config.json of the lookup model: a short sliding window (the memory encoder's layer and
    the stream's local mixing), then a ``cross`` layer reading a memory of ``slots`` slots
    through a one-layer encoder, byte vocabulary, tied embeddings."""
    head_dim = hidden // heads
    return {
        "model_type": "ferrite", "vocab_size": 256, "hidden_size": hidden, "intermediate_size": 2 * hidden,
        "norm_eps": 1e-6, "tie_word_embeddings": True, "tokenizer": "bytes",
        "layers": [
            {"mixer": "swa", "num_heads": heads, "num_kv_heads": heads, "head_dim": head_dim, "window": window},
            {"mixer": "cross", "num_heads": heads, "num_kv_heads": heads, "head_dim": head_dim,
             "memory_slots": slots, "memories": 1, "output_gate": True, "memory_encoder_layers": 1},
        ],
    }


def write_memories(out: Path, batch: dict, count: int) -> list:
    """The first ``count`` memories of ``batch`` as files ``memory_{n}.bin`` (their bytes: what
    ``ferrite quantize --memory`` reads) and ``queries.json`` (each one's stream and targets,
    to check an image baked from them); returns the memory paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(count):
        path = out / f"memory_{n}.bin"
        path.write_bytes(bytes(int(t) for t in batch["memory"][n]))
        paths.append(path)
    queries = [{"memory": f"memory_{n}.bin", "stream": batch["stream"][n].tolist(),
                "targets": batch["targets"][n].tolist()} for n in range(count)]
    (out / "queries.json").write_text(json.dumps(queries) + "\n", encoding="utf-8")
    return paths
