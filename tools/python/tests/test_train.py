"""The PyTorch training modules (ferrite_train), where torch is installed (CI has
none: these skip there): parity with the committed fixtures, one layer of each
mixer kind exported and read back by the reference, and the state sizes the
training side records against the runtime's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ferrite_dev.fixtures import reference as fixtures  # noqa: E402
from ferrite_ref.config import load_config  # noqa: E402
from ferrite_ref.kinds import MIXER_KINDS  # noqa: E402
from ferrite_ref.reference import Reference  # noqa: E402
from ferrite_ref.safetensors_io import load_safetensors  # noqa: E402
from ferrite_train.export import export_model_dir, load_model_dir  # noqa: E402
from ferrite_train.mixers import layer_state_floats  # noqa: E402
from ferrite_train.model import FerriteLM  # noqa: E402
from test_kinds import NOT_TRAINABLE_YET  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _trainable(config: dict) -> bool:
    """Whether every layer of a config is of a kind ferrite_train has a module for (the
    others, test_kinds.NOT_TRAINABLE_YET, are trained with fla's own classes)."""
    return all(layer["mixer"] not in NOT_TRAINABLE_YET for layer in config["layers"])


NAMES = [name for name, _, _, config, _ in fixtures.FIXTURES if _trainable(config)]
TRAINABLE_KINDS = [kind for kind in MIXER_KINDS if kind not in NOT_TRAINABLE_YET]


def test_the_fixtures_left_out_are_exactly_those_of_untrainable_kinds():
    """No fixture is left out of the parity test except for a kind named in NOT_TRAINABLE_YET,
    and every trainable kind has a fixture in it."""
    left_out = {name for name, *_ in fixtures.FIXTURES} - set(NAMES)
    for name, _, _, config, _ in fixtures.FIXTURES:
        kinds = {layer["mixer"] for layer in config["layers"]}
        assert (name in left_out) == bool(kinds & NOT_TRAINABLE_YET), name
    covered = {layer["mixer"] for name, _, _, c, _ in fixtures.FIXTURES if name in NAMES for layer in c["layers"]}
    assert covered == set(TRAINABLE_KINDS)


@pytest.mark.parametrize("name", NAMES)
def test_float64_modules_match_the_fixture_logits(name):
    """docs/spec.md §5's 1e-4, in one parallel forward pass (ferrite_train.check's figure)."""
    path = fixtures.FIXTURES_DIR / name
    expected, meta = load_safetensors(path / "expected.safetensors")
    model = load_model_dir(path, "cpu", torch.float64)
    with torch.no_grad():
        got = model(torch.tensor(expected["tokens"].astype(np.int64))[None], pinned=int(meta["pinned"]))[0]
    assert np.max(np.abs(got.numpy() - expected["logits"])) <= 1e-4


@pytest.mark.parametrize("kind", TRAINABLE_KINDS)
def test_each_kind_exports_a_model_dir_the_reference_reads(kind, tmp_path):
    """A fresh model of the first fixture that has a layer of ``kind``: exported,
    read back by ferrite_ref, the same logits as the modules (both f64)."""
    config = next(c for _, _, _, c, _ in fixtures.FIXTURES
                  if _trainable(c) and any(layer["mixer"] == kind for layer in c["layers"]))
    torch.manual_seed(0)
    model = FerriteLM(config).double()
    export_model_dir(model, tmp_path / kind)
    tokens = list(range(0, 250, 7))
    with torch.no_grad():
        got = model(torch.tensor([tokens]))[0].numpy()
    # The weights were made in f32, so the f32 export is exact: only the order of the
    # f64 sums differs (parallel form against the per-token recurrence).
    want = Reference(tmp_path / kind).logits(tokens)
    assert np.max(np.abs(got - want)) <= 1e-9


def test_recorded_state_sizes_are_the_runtimes():
    """The state bytes the training side computes (metrics.json's state_bytes_per_layer)
    equal what `ferrite inspect` reported for the same model (runtime.state_bytes_per_layer).
    Models of a kind ferrite_train has no module for (fla's RWKV-7 and Mamba-2 LMs, whose
    config.json is fla's) are left out: ferrite_train.fla_shapes and test_study2 check theirs."""
    checked = 0
    for m in sorted((ROOT / "models").glob("*/*/metrics.json")):
        metrics = json.loads(m.read_text())
        runtime = metrics.get("runtime", {}).get("state_bytes_per_layer")
        config = json.loads((m.parent / "config.json").read_text())
        if runtime is None or config.get("model_type") != "ferrite" or not _trainable(config):
            continue
        cfg = load_config(m.parent / "config.json")
        assert [4 * layer_state_floats(layer) for layer in cfg.layers] == runtime, m.parent.name
        checked += 1
    assert checked >= 20


def test_bla_shared_kv_heads_state_is_the_runtimes():
    """bla_gqa (4 query heads on 2 with a convolution, 2 on 1): the state bytes the training
    side computes, as `ferrite inspect` reports them for the fixture's image (2026-12-07), and
    the unshared layer's twice the slots."""
    cfg = load_config(fixtures.FIXTURES_DIR / "bla_gqa" / "config.json")
    assert [4 * layer_state_floats(layer) for layer in cfg.layers] == [1408, 768]
    from dataclasses import replace

    from ferrite_train.mixers.bla import core_state_floats
    for layer in cfg.layers:
        assert core_state_floats(replace(layer, num_kv_heads=layer.num_heads)) == \
            layer.num_heads // layer.num_kv_heads * core_state_floats(layer)
