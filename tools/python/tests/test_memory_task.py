"""The memory-lookup task of issue 32 (ferrite_train.memory_task) and what the round exports:
torch-free, so these run on every machine; the PyTorch module's parity with the f64 reference
runs where torch is installed (the last test)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ferrite_ref import Reference, write_model_dir
from ferrite_ref.config import parse_config
from ferrite_train import memory_task as task

ROUND = Path(__file__).resolve().parents[1] / "research" / "rounds" / "r21-cross.sh"
ROUND23 = ROUND.with_name("r23-cross-curriculum.sh")


@pytest.mark.parametrize("slots", task.SLOTS)
def test_a_memory_holds_distinct_keys_and_pads_the_rest(slots):
    tokens, keys, values = task.make_memory(np.random.default_rng(3), slots)
    pairs = task.pairs_for(slots)
    assert tokens.shape == (slots,) and keys.shape == (pairs, 2) and values.shape == (pairs,)
    assert len({tuple(k) for k in keys}) == pairs
    assert ((keys[:, 0] >= 0) & (keys[:, 0] < 64)).all() and ((keys[:, 1] >= 64) & (keys[:, 1] < 128)).all()
    assert ((values >= 128) & (values < 192)).all()
    triples = tokens[: 3 * pairs].reshape(pairs, 3)
    np.testing.assert_array_equal(triples[:, :2], keys)
    np.testing.assert_array_equal(triples[:, 2], values)
    assert (tokens[3 * pairs:] == task.PAD).all() and len(tokens) - 3 * pairs == slots % 3


def test_every_query_asks_a_key_of_its_own_memory_and_scores_its_value():
    b = task.make_batch(7, 8, 64, 20)
    assert b["memory"].shape == (8, 64) and b["stream"].shape == (8, 60) == b["targets"].shape
    for memory, stream, targets in zip(b["memory"], b["stream"], b["targets"]):
        table = {(int(memory[i]), int(memory[i + 1])): int(memory[i + 2]) for i in range(0, 63, 3)}
        for q in range(20):
            k1, k2, v = stream[3 * q: 3 * q + 3]
            assert table[(int(k1), int(k2))] == v
            assert targets[3 * q + 1] == v and targets[3 * q] == -1 and targets[3 * q + 2] == -1
    # Every sequence its own memory: no two of the batch alike.
    assert len({m.tobytes() for m in b["memory"]}) == 8


def test_batches_are_reproducible_and_held_out_ones_differ():
    a, b = task.make_batch(5, 4, 16, 8), task.make_batch(5, 4, 16, 8)
    assert all((a[k] == b[k]).all() for k in a)
    held = task.heldout_batch(0, 4, 16, 8)
    assert not (held["memory"] == a["memory"]).all()
    assert task.HELDOUT_SEED > (1 << 32) * 1001  # training seeds: seed * 2^32 + step (seed <= 1000)


def test_accuracy_counts_scored_positions_only():
    targets = np.array([[-1, 130, -1, -1, 140, -1]])
    logits = np.zeros((1, 6, 256))
    logits[0, 1, 130] = 1.0
    logits[0, 4, 3] = 1.0
    logits[0, 0, 7] = 9.0
    assert task.accuracy(logits, targets) == 0.5
    with pytest.raises(ValueError, match="no scored"):
        task.accuracy(logits, np.full((1, 6), -1))


def test_refusals():
    with pytest.raises(ValueError, match="holds no pair"):
        task.pairs_for(2)
    with pytest.raises(ValueError, match="distinct keys"):
        task.pairs_for(3 * 4097)
    with pytest.raises(ValueError, match="at least one query"):
        task.make_batch(0, 1, 16, 0)


@pytest.mark.parametrize("slots", task.SLOTS)
def test_the_config_is_a_valid_model_whose_encoder_runs_the_window(slots, tmp_path):
    config = task.lookup_config(slots)
    cfg = parse_config(config)
    assert [layer.kind for layer in cfg.layers] == ["swa", "cross"]
    assert cfg.layers[1].memory_slots == slots and cfg.layers[1].memory_encoder_layers == 1
    if slots == 64:
        # With random weights, the f64 reference encodes a task memory into [m, Hkv*d] slots,
        # and a value's slot depends on its key (the window of layer 0 sees k1 k2 v).
        ref = Reference(write_model_dir(tmp_path / "m", config, 1))
        memory = task.make_batch(1, 1, slots, 4)["memory"][0]
        (keys, values), = ref.encode_memory(memory)
        assert keys.shape == values.shape == (slots, 128)
        other = memory.copy()
        other[0] = (other[0] + 1) % 64
        (keys2, _), = ref.encode_memory(other)
        # Token 0 reaches slots 0..3 (a window of 4), not beyond.
        assert not np.allclose(keys[3], keys2[3]) and np.allclose(keys[4:], keys2[4:])


def test_memory_files_are_the_tokens_as_bytes(tmp_path):
    b = task.heldout_batch(0, 4, 16, 5)
    paths = task.write_memories(tmp_path, b, 4)
    assert [p.name for p in paths] == [f"memory_{n}.bin" for n in range(4)]
    for n, p in enumerate(paths):
        assert list(p.read_bytes()) == b["memory"][n].tolist()
    queries = json.loads((tmp_path / "queries.json").read_text())
    assert queries[2]["stream"] == b["stream"][2].tolist() and queries[2]["memory"] == "memory_2.bin"


def test_the_round_script_is_one_call_with_a_budget():
    text = ROUND.read_text()
    assert subprocess.run(["bash", "-n", str(ROUND)]).returncode == 0
    for m in task.SLOTS:
        assert str(m) in text.split("for m in ")[1].split(";")[0]
    assert "ferrite_train.memory_lookup" in text and '$OUT/r21-cross.tar' in text
    budget = int(text.split("budget=${1:-")[1].split("}")[0])
    assert budget + 90 <= 8 * 60  # training, then scoring and export, in one 8-minute call


def test_a_curriculum_memory_holds_fewer_pairs_and_pads_the_rest():
    full = task.make_batch(7, 3, 256, 8)
    # The default is the full memory, drawn exactly as before the curriculum existed.
    assert np.array_equal(task.make_batch(7, 3, 256, 8, pairs=None)["memory"], full["memory"])
    b = task.make_batch(7, 3, 256, 8, pairs=5)
    for n in range(3):
        memory = b["memory"][n]
        assert (memory[15:] == task.PAD).all() and (memory[:15] != task.PAD).all()
        pairs = {tuple(memory[i:i + 2]): memory[i + 2] for i in range(0, 15, 3)}
        assert len(pairs) == 5
        # Every query asks one of the five keys and scores its value.
        for q in range(8):
            k1, k2, v = b["stream"][n][3 * q:3 * q + 3]
            assert pairs[(k1, k2)] == v == b["targets"][n][3 * q + 1]
    with pytest.raises(ValueError, match="holds 1 to 85"):
        task.make_batch(7, 1, 256, 8, pairs=86)
    with pytest.raises(ValueError, match="holds 1 to 85"):
        task.make_batch(7, 1, 256, 8, pairs=0)


def test_curriculum_pairs_grow_geometrically_to_the_full_memory():
    grow = [task.curriculum_pairs(256, 5, p, 0.5) for p in (0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0)]
    assert grow[0] == 5 and grow[4:] == [85, 85, 85]
    assert grow == sorted(grow) and len(set(grow)) == 5
    # Halfway through the ramp: the geometric mean of 5 and 85.
    assert grow[2] == round((5 * 85) ** 0.5)
    assert task.curriculum_pairs(16, 9, 0.0, 0.5) == 5  # a start above the memory is the memory
    for bad, match in (((256, 5, 0.1, 0.0), "ramp"), ((256, 0, 0.1, 0.5), "at least one pair")):
        with pytest.raises(ValueError, match=match):
            task.curriculum_pairs(*bad)


def test_the_curriculum_round_is_one_call_for_the_large_memories():
    text = ROUND23.read_text()
    assert subprocess.run(["bash", "-n", str(ROUND23)]).returncode == 0
    runs = text.split('runs="')[1].split('"')[0].split()
    assert {r.split("-")[0] for r in runs} == {"m256", "m1024"} and len(runs) == 4
    assert "--curriculum-start 5" in text and '$OUT/r23-cross.tar' in text
    budget = int(text.split("budget=${1:-")[1].split("}")[0])
    assert budget + 90 <= 8 * 60


def test_the_pytorch_module_matches_the_f64_reference(tmp_path):
    """ferrite_train's cross layer and encoder (float64) against ferrite_ref on the exported model."""
    torch = pytest.importorskip("torch")
    from ferrite_train.export import export_model_dir
    from ferrite_train.model import FerriteLM

    torch.manual_seed(0)
    model = FerriteLM(task.lookup_config(16, hidden=32)).double()
    b = task.make_batch(2, 1, 16, 4)
    with torch.no_grad():
        model.encode_memory(torch.from_numpy(b["memory"]))
        got = model(torch.from_numpy(b["stream"]))[0].numpy()
        model.encode_memory(None)
    path = export_model_dir(model.float(), tmp_path / "m")
    ref = Reference(path)
    ref.use_memories([ref.encode_memory(b["memory"][0])])
    np.testing.assert_allclose(got, ref.logits(b["stream"][0], memory=0), rtol=1e-4, atol=1e-4)
