"""The Rust runtime (through the `ferrite` CLI) against this reference on
random configurations that are not committed anywhere: any model dir
must match to 1e-4 (docs/spec.md §5).

Needs the CLI: set FERRITE_BIN to the built binary (`.ci/run` and the README's
test command do). Without it these tests are skipped, never silently passed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ferrite_ref.kinds import MIXER_KINDS
from ferrite_ref.modeldir import write_model_dir
from ferrite_ref.reference import Reference

FERRITE_BIN = os.environ.get("FERRITE_BIN")
pytestmark = pytest.mark.skipif(not FERRITE_BIN, reason="FERRITE_BIN is not set")

TOLERANCE = 1e-4


def _random_layer(rng: random.Random, hidden: int) -> dict:
    """One mixer with randomly drawn options (all valid per docs/spec.md)."""
    heads = rng.choice([1, 2, 4])
    kind = rng.choice(MIXER_KINDS)
    if kind == "mla":
        return {"mixer": "mla", "num_heads": heads, "head_dim": rng.choice([4, 8]), "v_head_dim": rng.choice([4, 6]),
                "rope_dim": rng.choice([0, 2, 4]), "kv_lora_rank": rng.choice([1, 5, 12]),
                "window": rng.choice([1, 3, 16]), "rope_theta": rng.choice([100.0, 10000.0])}
    if kind == "gdn":
        layer = {"mixer": "gdn", "num_heads": heads, "head_dim": rng.choice([4, 8]),
                 "num_v_heads": heads * rng.choice([1, 2]), "expand_v": rng.choice([1.0, 2.0]),
                 "conv_size": rng.choice([2, 3, 4]), "use_gate": rng.random() < 0.5,
                 "allow_neg_eigval": rng.random() < 0.5}
        if rng.random() < 0.5:  # a GDN family member (docs/spec.md §3.1.1)
            layer.update(decay=rng.choice(["gated", "none", "retention"]), update=rng.choice(["delta", "additive"]),
                         use_beta=rng.random() < 0.5, qk_activation=rng.choice(["silu", "relu", "elu", "identity"]),
                         qk_norm=rng.choice(["l2", "sum", "none"]), use_short_conv=rng.random() < 0.7)
            if layer["update"] == "delta" and layer["qk_norm"] == "none":
                layer["qk_norm"] = "l2"  # refused: the delta rule diverges without normalised keys
        return layer
    if kind == "gsa":
        layer = {"mixer": "gsa", "num_heads": heads, "num_kv_heads": rng.choice([h for h in (1, 2, 4) if heads % h == 0]),
                 "num_slots": rng.choice([3, 8, 16]), "feature_map": rng.choice(["swish", "relu"]),
                 "gate_logit_normalizer": rng.choice([4, 8, 16])}
        if rng.random() < 0.5:
            layer.update(use_short_conv=True, conv_size=rng.choice([2, 4]))
        return layer
    if kind == "swa":
        layer = {"mixer": "swa", "num_heads": heads, "num_kv_heads": rng.choice([h for h in (1, 2, 4) if heads % h == 0]),
                 "window": rng.choice([1, 3, 8, 16]), "sinks": rng.choice([0, 1, 3]),
                 "rope_positions": rng.choice(["absolute", "cache"]), "sink_logits": rng.random() < 0.5,
                 "rope_theta": rng.choice([100.0, 10000.0])}
        if rng.random() < 0.5:
            layer.update(use_short_conv=True, conv_size=rng.choice([2, 4]))
        if layer["rope_positions"] == "absolute" and rng.random() < 0.5:
            layer.update(dilation=rng.choice([2, 3]))
        return layer
    if kind == "mamba2":
        groups = rng.choice([g for g in (1, 2, 4) if heads % g == 0])
        gated = rng.random() < 0.7
        return {"mixer": "mamba2", "num_heads": heads, "head_dim": rng.choice([4, 8, 16]),
                "state_size": rng.choice([2, 8, 16]), "n_groups": groups,
                "group_heads": rng.choice(["blocked", "interleaved"]), "conv_size": rng.choice([1, 2, 4]),
                "conv_bias": rng.random() < 0.5, "gated_norm": gated,
                "norm_before_gate": gated and rng.random() < 0.5, "d_per_channel": rng.random() < 0.5,
                "mlp": rng.choice(["swiglu", "none", "channel_mix"])}
    if kind == "rwkv7":
        return {"mixer": "rwkv7", "num_heads": heads, "head_v_dim": rng.choice([4, 8]),
                "decay_low_rank_dim": rng.choice([4, 8]), "a_low_rank_dim": rng.choice([4, 8]),
                "v_low_rank_dim": rng.choice([4, 8]), "gate_low_rank_dim": rng.choice([8, 16]),
                "kk_norm": rng.choice(["l2", "normalize"]), "mlp": rng.choice(["channel_mix", "swiglu", "none"]),
                "pre_norm": rng.random() < 0.3}
    if kind == "gla":
        variant = rng.choice(["gla", "hgrn2", "retention"])
        layer = {"mixer": "gla", "variant": variant, "num_heads": heads, "head_k_dim": rng.choice([4, 8]),
                 "head_v_dim": rng.choice([4, 8])}
        if variant == "gla":
            layer.update(gate_low_rank_dim=rng.choice([8, 16]), gate_logit_normalizer=rng.choice([4, 16]),
                         output_gate=rng.random() < 0.5)
        elif variant == "retention":
            layer.update(rope_theta=rng.choice([100.0, 10000.0]), output_gate=rng.random() < 0.5)
        else:
            layer.update(o_norm_eps=rng.choice([1e-5, 1e-6]))
        return layer
    if kind == "cross":
        return {"mixer": "cross", "num_heads": heads,
                "num_kv_heads": rng.choice([h for h in (1, 2, 4) if heads % h == 0]),
                "head_dim": rng.choice([4, 8]), "memory_slots": rng.choice([1, 5, 16]),
                "memories": rng.choice([1, 2, 3]), "output_gate": rng.random() < 0.5}
    if kind != "bla":
        raise ValueError(f"no random {kind} layer: add one here (docs/adding-a-mixer.md)")
    period = rng.choice([4, 7, 10, 16])
    modes = rng.randint(0, period // 2)
    layer = {"mixer": "bla", "num_heads": heads, "period": period, "modes": modes,
             "slots": rng.choice([2 * modes + 1, max(1, modes), period]),
             "kernel": rng.choice(["dirichlet", "fejer"]), "decay": rng.choice(["gated", "scalar", "none"]),
             "gamma": rng.choice([0.8, 0.95, 1.0])}
    if rng.random() < 0.5:
        layer.update(use_short_conv=True, conv_size=rng.choice([2, 4]))
    return layer


def _random_config(seed: int) -> dict:
    rng = random.Random(seed)
    hidden = rng.choice([16, 32])
    return {"model_type": "ferrite", "vocab_size": 256, "hidden_size": hidden,
            "intermediate_size": rng.choice([24, 48]), "norm_eps": rng.choice([1e-6, 1e-5]),
            "norm": rng.choice(["rmsnorm", "layernorm"]), "tie_word_embeddings": rng.random() < 0.5,
            "layers": [_random_layer(rng, hidden) for _ in range(rng.randint(1, 3))]}


def _ferrite(*args: str) -> str:
    done = subprocess.run([FERRITE_BIN, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"ferrite {' '.join(args)} failed: {done.stderr.strip()}"
    return done.stdout


@pytest.mark.parametrize("seed", range(24))
def test_random_config_matches_reference(tmp_path: Path, seed: int) -> None:
    config = _random_config(1000 + seed)
    model_dir = write_model_dir(tmp_path / "model", config, seed=seed)
    image = tmp_path / "model.fer"
    _ferrite("quantize", str(model_dir), "-o", str(image))
    tokens = np.random.default_rng(seed).integers(0, 256, size=64).tolist()
    got = np.array(json.loads(_ferrite("logits", str(image), "--tokens", ",".join(map(str, tokens)))))
    want = Reference(model_dir).logits(tokens)
    diff = float(np.max(np.abs(got - want)))
    assert got.shape == want.shape
    assert diff <= TOLERANCE, f"config {json.dumps(config)}: max|diff| = {diff:.3e}"


def test_every_baked_memory_matches_the_reference_through_the_cli(tmp_path: Path) -> None:
    """`ferrite logits --memory n` against ``Reference.logits(tokens, memory=n)``: a cross
    layer of 3 memories between a gdn and an swa layer (docs/spec.md §3.10); --memory 3
    is refused with one line."""
    config = {"model_type": "ferrite", "vocab_size": 256, "hidden_size": 16, "intermediate_size": 24,
              "layers": [{"mixer": "gdn", "num_heads": 2, "head_dim": 8},
                         {"mixer": "cross", "num_heads": 4, "num_kv_heads": 2, "head_dim": 4, "memory_slots": 6,
                          "memories": 3, "output_gate": True},
                         {"mixer": "swa", "num_heads": 2, "window": 4}]}
    model_dir = write_model_dir(tmp_path / "model", config, seed=5)
    image = tmp_path / "model.fer"
    _ferrite("quantize", str(model_dir), "-o", str(image))
    tokens = np.random.default_rng(5).integers(0, 256, size=32).tolist()
    reference = Reference(model_dir)
    for n in range(3):
        got = np.array(json.loads(_ferrite("logits", str(image), "--tokens", ",".join(map(str, tokens)),
                                           "--memory", str(n))))
        diff = float(np.max(np.abs(got - reference.logits(tokens, memory=n))))
        assert diff <= TOLERANCE, f"memory {n}: max|diff| = {diff:.3e}"
    done = subprocess.run([FERRITE_BIN, "logits", str(image), "--tokens", "1", "--memory", "3"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and done.stderr.strip() == "error: no memory 3: a cross layer has 3 (0..=2)", \
        done.stderr


def test_the_lookup_round_export_bakes_its_memory_files_like_the_reference(tmp_path: Path) -> None:
    """What research/rounds/r21-cross.sh brings back, with random weights in place of trained
    ones: the lookup model's directory and its held-out memory files (ferrite_train.memory_task)
    through `ferrite quantize --memory ...` (the runtime's encoder), against the f64
    reference's encoder and logits for every memory (docs/spec.md §3.10)."""
    from ferrite_train import memory_task as task

    model_dir = write_model_dir(tmp_path / "model", task.lookup_config(64, hidden=32), seed=3)
    held = task.heldout_batch(0, 4, 64, 8)
    paths = task.write_memories(tmp_path / "heldout", held, 4)
    image = tmp_path / "lookup.fer"
    args = [arg for path in paths for arg in ("--memory", str(path))]
    _ferrite("quantize", str(model_dir), "-o", str(image), *args)
    reference = Reference(model_dir)
    reference.use_memories([reference.encode_memory(held["memory"][n]) for n in range(4)])
    for n in range(4):
        stream = held["stream"][n].tolist()
        got = np.array(json.loads(_ferrite("logits", str(image), "--tokens", ",".join(map(str, stream)),
                                           "--memory", str(n))))
        diff = float(np.max(np.abs(got - reference.logits(stream, memory=n))))
        assert diff <= TOLERANCE, f"memory {n}: max|diff| = {diff:.3e}"


def test_bad_inputs_exit_nonzero_with_one_line(tmp_path: Path) -> None:
    model_dir = write_model_dir(tmp_path / "model", _random_config(7), seed=7)
    image = tmp_path / "m.fer"
    _ferrite("quantize", str(model_dir), "-o", str(image))
    (tmp_path / "garbage.fer").write_bytes(b"not an image at all" * 10)
    cases = [
        ["logits", str(image), "--tokens", "1,2,999"],
        ["logits", str(image), "--tokens", "1,x"],
        ["logits", str(tmp_path / "garbage.fer"), "--tokens", "1"],
        ["logits", str(tmp_path / "missing.fer"), "--tokens", "1"],
        ["generate", str(image), "--prompt", ""],
        ["generate", str(image), "--prompt", "hi", "--top-p", "0"],
        ["quantize", str(tmp_path), "-o", str(tmp_path / "x.fer")],
        ["quantize", str(model_dir), "-o", str(tmp_path / "x.fer"), "--dtype", "int3"],
        ["inspect", str(tmp_path / "garbage.fer")],
    ]
    for args in cases:
        done = subprocess.run([FERRITE_BIN, *args], capture_output=True, text=True, timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0, f"{args} exited 0"
        assert len(lines) == 1 and "panicked" not in done.stderr, f"{args}: {done.stderr!r}"
