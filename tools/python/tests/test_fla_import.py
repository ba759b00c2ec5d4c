"""`ferrite quantize` on fla-style checkpoint directories (docs/fla.md):
fla config.json fields, sharded safetensors with an index, bf16 weights.

The fla directory is derived from a ferrite model dir with the same maths, so
the numpy reference on the (bf16-rounded) weights is the expected output. This
checks the import mapping and loading; parity with the real fla library needs
fixtures made where fla runs (see docs/fla.md). Needs FERRITE_BIN.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ferrite_ref.modeldir import write_model_dir
from ferrite_ref.reference import Reference
from ferrite_ref.safetensors_io import load_safetensors, save_safetensors

FERRITE_BIN = os.environ.get("FERRITE_BIN")
pytestmark = pytest.mark.skipif(not FERRITE_BIN, reason="FERRITE_BIN is not set")

HIDDEN = 32


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round f32 to bf16 (nearest even), returning the 16-bit patterns."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def _bf16_round(values: np.ndarray) -> np.ndarray:
    return (_bf16_bits(values).astype(np.uint32) << 16).view(np.float32)


def _write_raw_safetensors(path: Path, tensors: dict, dtype: str) -> None:
    """A safetensors file of already-encoded little-endian arrays (`dtype`: BF16 or F32)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        array = tensors[name]
        blob = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def _ferrite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FERRITE_BIN, *args], capture_output=True, text=True, timeout=120)


def _logits(image: Path, tokens: list) -> np.ndarray:
    done = _ferrite("logits", str(image), "--tokens", ",".join(map(str, tokens)))
    assert done.returncode == 0, done.stderr
    return np.array(json.loads(done.stdout))


GDN_HYBRID = {
    "ferrite": {"model_type": "ferrite", "vocab_size": 256, "hidden_size": HIDDEN, "intermediate_size": 256,
                "norm_eps": 1e-6, "tie_word_embeddings": False,
                "layers": [{"mixer": "gdn", "num_heads": 2, "head_dim": 8, "num_v_heads": 4, "expand_v": 2.0},
                           {"mixer": "swa", "num_heads": 4, "num_kv_heads": 2, "window": 16},
                           {"mixer": "gdn", "num_heads": 2, "head_dim": 8, "num_v_heads": 4, "expand_v": 2.0}]},
    # What fla's save_pretrained writes for the same model (intermediate_size null:
    # int(32 * 4 * 2/3) = 85, rounded up to 256).
    "fla": {"model_type": "gated_deltanet", "architectures": ["GatedDeltaNetForCausalLM"], "attn_mode": "chunk",
            "hidden_size": HIDDEN, "num_hidden_layers": 3, "num_heads": 2, "head_dim": 8, "num_v_heads": 4,
            "expand_v": 2.0, "use_gate": True, "use_short_conv": True, "allow_neg_eigval": False, "conv_size": 4,
            "hidden_ratio": 4, "intermediate_size": None, "hidden_act": "swish", "norm_eps": 1e-6,
            "max_position_embeddings": 2048, "vocab_size": 256, "tie_word_embeddings": False,
            "fuse_norm": True, "fuse_swiglu": True, "fuse_cross_entropy": True, "fuse_linear_cross_entropy": False,
            "use_l2warp": False, "use_cache": True, "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2,
            "attn": {"layers": [1], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": False, "window_size": 16,
                     "rope_theta": 10000.0},
            "torch_dtype": "bfloat16", "transformers_version": "4.53.0"},
}

GSA_TIED = {
    "ferrite": {"model_type": "ferrite", "vocab_size": 256, "hidden_size": HIDDEN, "intermediate_size": 64,
                "norm_eps": 1e-6, "tie_word_embeddings": True,
                "layers": [{"mixer": "gsa", "num_heads": 4, "num_kv_heads": 2, "num_slots": 8,
                            "feature_map": "swish", "gate_logit_normalizer": 8}] * 2},
    # tie_word_embeddings absent: save_pretrained omits it when it is the transformers default (true).
    "fla": {"model_type": "gsa", "hidden_size": HIDDEN, "num_hidden_layers": 2, "num_heads": 4, "num_kv_heads": 2,
            "num_slots": 8, "expand_k": 1, "expand_v": 1, "feature_map": "swish", "gate_logit_normalizer": 8,
            "use_short_conv": False, "conv_size": 4, "use_output_gate": False, "use_norm": True,
            "elementwise_affine": True, "clamp_min": None, "clamp_max": None, "hidden_ratio": 4,
            "intermediate_size": 64, "hidden_act": "swish", "norm_eps": 1e-6, "vocab_size": 256},
}


DELTA_NET = {
    "ferrite": {"model_type": "ferrite", "vocab_size": 256, "hidden_size": HIDDEN, "intermediate_size": 64,
                "norm_eps": 1e-6, "tie_word_embeddings": False,
                "layers": [{"mixer": "gdn", "num_heads": 4, "head_dim": 8, "expand_v": 2.0, "decay": "none",
                            "use_gate": True, "use_beta": False, "qk_activation": "relu", "qk_norm": "sum",
                            "conv_size": 3}] * 2},
    # What fla's save_pretrained writes for a DeltaNet (docs/fla.md).
    "fla": {"model_type": "delta_net", "architectures": ["DeltaNetForCausalLM"], "attn_mode": "chunk",
            "hidden_size": HIDDEN, "num_hidden_layers": 2, "num_heads": 4, "expand_k": 1.0, "expand_v": 2.0,
            "use_gate": True, "use_beta": False, "use_short_conv": True, "conv_size": 3, "allow_neg_eigval": False,
            "use_output_norm": True, "qk_norm": "sum", "qk_activation": "relu", "hidden_ratio": 4,
            "intermediate_size": 64, "hidden_act": "swish", "norm_eps": 1e-6, "vocab_size": 256,
            "tie_word_embeddings": False, "attn": None, "attnres_block_size": None},
}


def _make_fla_dir(tmp: Path, case: dict, bf16: bool, shards: int) -> tuple:
    """(fla dir, ferrite dir with the same — rounded — weights)."""
    source = write_model_dir(tmp / "source", case["ferrite"], seed=5)
    tensors, _ = load_safetensors(source / "model.safetensors")
    if case["ferrite"]["tie_word_embeddings"]:
        tensors.pop("lm_head.weight", None)
    if bf16:
        tensors = {name: _bf16_round(t) for name, t in tensors.items()}
    same = tmp / "ferrite"
    same.mkdir()
    (same / "config.json").write_text(json.dumps(case["ferrite"]))
    save_safetensors(same / "model.safetensors", tensors)

    fla = tmp / "fla"
    fla.mkdir()
    (fla / "config.json").write_text(json.dumps(case["fla"]))
    names = sorted(tensors)
    encode = (lambda t: _bf16_bits(t)) if bf16 else (lambda t: t.astype("<f4"))
    dtype = "BF16" if bf16 else "F32"
    if shards == 1:
        _write_raw_safetensors(fla / "model.safetensors", {n: encode(tensors[n]) for n in names}, dtype)
    else:
        weight_map = {}
        for s in range(shards):
            part = names[s::shards]
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            _write_raw_safetensors(fla / file, {n: encode(tensors[n]) for n in part}, dtype)
            weight_map.update({n: file for n in part})
        (fla / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return fla, same


@pytest.mark.parametrize("case,bf16,shards", [(GDN_HYBRID, True, 2), (GDN_HYBRID, False, 1), (GSA_TIED, True, 3),
                                               (DELTA_NET, True, 2)])
def test_fla_checkpoint_matches_the_reference(tmp_path: Path, case: dict, bf16: bool, shards: int) -> None:
    fla, same = _make_fla_dir(tmp_path, case, bf16, shards)
    image = tmp_path / "fla.fer"
    done = _ferrite("quantize", str(fla), "-o", str(image))
    assert done.returncode == 0, done.stderr
    tokens = list(np.random.default_rng(3).integers(0, 256, size=64))
    got = _logits(image, tokens)
    want = Reference(same).logits(tokens)
    assert float(np.max(np.abs(got - want))) <= 1e-4
    inspect = _ferrite("inspect", str(image)).stdout
    assert f"model_type {case['fla']['model_type']}" in inspect
    assert ("weights bf16" if bf16 else "weights f32") in inspect


def test_unsupported_fla_fields_are_refused_by_name(tmp_path: Path) -> None:
    fla, _ = _make_fla_dir(tmp_path, GDN_HYBRID, bf16=False, shards=1)
    base = json.loads((fla / "config.json").read_text())
    cases = {"attnres_block_size": 4, "use_short_conv": False, "hidden_act": "gelu", "qkv_bias": True}
    for field, value in cases.items():
        config = json.loads(json.dumps(base))
        if field == "qkv_bias":
            config["attn"][field] = value
        else:
            config[field] = value
        (fla / "config.json").write_text(json.dumps(config))
        done = _ferrite("quantize", str(fla), "-o", str(tmp_path / "x.fer"))
        assert done.returncode != 0 and field in done.stderr, (field, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1


def test_attention_without_window_needs_window_flag(tmp_path: Path) -> None:
    fla, _ = _make_fla_dir(tmp_path, GDN_HYBRID, bf16=False, shards=1)
    config = json.loads((fla / "config.json").read_text())
    config["attn"]["window_size"] = None
    (fla / "config.json").write_text(json.dumps(config))
    refused = _ferrite("quantize", str(fla), "-o", str(tmp_path / "x.fer"))
    assert refused.returncode != 0 and "--window" in refused.stderr
    accepted = _ferrite("quantize", str(fla), "-o", str(tmp_path / "x.fer"), "--window", "16")
    assert accepted.returncode == 0 and "warning:" in accepted.stderr
