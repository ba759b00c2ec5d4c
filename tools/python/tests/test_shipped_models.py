"""The trained models in models/: well-formed, consistent with their recorded
metrics, and (with FERRITE_BIN set) still measured at the recorded figures by
the runtime on the host."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ferrite_ref import mqar
from ferrite_ref.reference import Reference

ROOT = Path(__file__).resolve().parents[3]
MQAR_DIRS = sorted(p.parent for p in (ROOT / "models/mqar").glob("*/metrics.json"))
LM_DIRS = [ROOT / "models/lm/small", ROOT / "models/lm/large"]
FERRITE_BIN = os.environ.get("FERRITE_BIN")


def metrics(model_dir: Path) -> dict:
    return json.loads((model_dir / "metrics.json").read_text())


def test_every_family_is_shipped_at_three_or_more_state_sizes():
    sizes = {}
    for d in MQAR_DIRS:
        m = metrics(d)
        sizes.setdefault(m["family"], set()).add(m["runtime"]["state_bytes_per_layer"][0])
    assert set(sizes) == {"bla", "gdn", "gsa", "swa", "swa-sinks"}
    assert all(len(s) >= 3 for s in sizes.values()), sizes


@pytest.mark.parametrize("model_dir", MQAR_DIRS + LM_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_runtime_figures_match_pytorch(model_dir):
    m = metrics(model_dir)
    assert (model_dir / "loss.csv").exists() and (model_dir / "model.safetensors").stat().st_size < 3_000_000
    if m["task"] == "mqar":
        assert abs(m["runtime"]["f32"]["accuracy"] - m["pytorch"]["accuracy"]) <= 0.01
        assert abs(m["runtime"]["int8"]["accuracy"] - m["pytorch"]["accuracy"]) <= 0.01
    else:
        assert abs(m["runtime"]["f32"]["bits_per_byte"] - m["pytorch"]["bits_per_byte"]) <= 1e-3
        assert abs(m["runtime"]["int8"]["bits_per_byte"] - m["pytorch"]["bits_per_byte"]) <= 0.02


@pytest.mark.parametrize("model_dir", MQAR_DIRS + LM_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_integer_path_figures_meet_the_targets(model_dir):
    """docs/quantization.md's targets for int8 on the integer path (tiled layout, int8
    activations), on the recorded figures: MQAR accuracy within 0.005 of f32 on the
    1,000 sequences, bits per byte at most 0.01 above f32 on the held-out text."""
    rt = metrics(model_dir)["runtime"]
    if "accuracy" in rt["f32"]:
        assert abs(rt["int8_tiled"]["accuracy"] - rt["f32"]["accuracy"]) <= 0.005
    else:
        assert rt["int8_tiled"]["bits_per_byte"] - rt["f32"]["bits_per_byte"] <= 0.01


@pytest.mark.parametrize("name", ["swa-w64", "bla-m15", "gdn-8k-lr3e-3"])
def test_numpy_reference_recalls_like_the_recorded_accuracy(name):
    """The f64 reference on the first 16 held-out sequences: the same predictions as a
    well-trained model makes (these three record >= 0.98 accuracy)."""
    model_dir = ROOT / "models/mqar" / name
    recorded = metrics(model_dir)["runtime"]["f32"]["accuracy"]
    ref = Reference(model_dir)
    tokens, positions, answers = mqar.generate_batch(0, 16)
    predicted = np.array([np.argmax(ref.logits(t)[positions], axis=-1) for t in tokens])
    assert np.mean(predicted == answers) >= recorded - 0.05


def _last_value(out: str) -> float:
    return float(out.strip().splitlines()[-1].split("=")[1])


# metrics.json key -> layout: "int8" is the row-major figure recorded before the
# integer path, "int8_tiled" the integer path's (tools/python/eval_models.py).
INT8_LAYOUTS = {"int8": "rows", "int8_tiled": "tiled"}


@pytest.mark.skipif(not FERRITE_BIN, reason="FERRITE_BIN is not set")
@pytest.mark.parametrize("variant", INT8_LAYOUTS)
@pytest.mark.parametrize("model_dir", MQAR_DIRS, ids=lambda p: p.name)
def test_runtime_int8_mqar_accuracy_is_the_recorded_one(model_dir, variant, tmp_path):
    image = tmp_path / "m.fer"
    subprocess.run([FERRITE_BIN, "quantize", str(model_dir), "-o", str(image), "--dtype", "int8",
                    "--layout", INT8_LAYOUTS[variant]],
                   check=True, capture_output=True)
    out = subprocess.run([FERRITE_BIN, "eval", str(image), "--mqar", "--seed", "0", "--n", "1000"],
                         check=True, capture_output=True, text=True).stdout
    assert abs(_last_value(out) - metrics(model_dir)["runtime"][variant]["accuracy"]) <= 0.002


@pytest.mark.skipif(not FERRITE_BIN, reason="FERRITE_BIN is not set")
@pytest.mark.parametrize("variant", INT8_LAYOUTS)
def test_runtime_int8_small_lm_bits_per_byte_is_the_recorded_one(variant, tmp_path):
    model_dir = ROOT / "models/lm/small"
    image = tmp_path / "lm.fer"
    subprocess.run([FERRITE_BIN, "quantize", str(model_dir), "-o", str(image), "--dtype", "int8",
                    "--layout", INT8_LAYOUTS[variant]],
                   check=True, capture_output=True)
    out = subprocess.run([FERRITE_BIN, "eval", str(image), "--text", str(ROOT / "models/lm/heldout.txt")],
                         check=True, capture_output=True, text=True).stdout
    assert abs(_last_value(out) - metrics(model_dir)["runtime"][variant]["bits_per_byte"]) <= 1e-3
