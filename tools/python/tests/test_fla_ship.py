"""ferrite_train.fla_ship: an fla_lm output directory becomes a shipped LM in the
schema ferrite-eval-models and the reports read (no torch needed)."""

from __future__ import annotations

import json

import pytest

from ferrite_dev.reports import evaluate
from ferrite_train import fla_ship

TRAINED = {"family": "mamba2", "parameters": 151688, "steps": 7917, "lr": 0.003,
           "pytorch_bits_per_byte": 2.0034, "pytorch_bits_per_byte_fortunes": 2.117,
           "eval_precision": "f32 (no TF32)"}


def test_shipped_metrics_keep_both_texts_and_the_training_record():
    m = fla_ship.shipped_metrics("mamba2-m3", TRAINED)
    assert (m["name"], m["task"], m["family"], m["params"]) == ("mamba2-m3", "lm", "mamba2-english", 151688)
    assert m["pytorch"]["bits_per_byte"] == 2.0034 and m["pytorch"]["bits_per_byte_fortunes"] == 2.117
    assert m["training"]["steps"] == 7917 and "pytorch_bits_per_byte" not in m["training"]
    # ferrite-eval-models scores it on both held-out texts, as the other English LMs.
    assert set(evaluate.heldout_texts(m)) == {"bits_per_byte", "bits_per_byte_fortunes"}


def test_a_file_that_is_not_fla_lm_s_is_refused_by_name():
    with pytest.raises(ValueError, match="pytorch_bits_per_byte_fortunes"):
        fla_ship.shipped_metrics("x", {k: v for k, v in TRAINED.items() if k != "pytorch_bits_per_byte_fortunes"})


def test_ship_copies_the_checkpoint_and_writes_metrics(tmp_path):
    trained, out = tmp_path / "trained", tmp_path / "lm" / "mamba2-m3"
    trained.mkdir()
    for name in fla_ship.COPIED:
        (trained / name).write_bytes(name.encode())
    (trained / "metrics.json").write_text(json.dumps(TRAINED))
    fla_ship.ship(trained, out)
    assert all((out / n).read_bytes() == n.encode() for n in fla_ship.COPIED)
    assert json.loads((out / "metrics.json").read_text())["name"] == "mamba2-m3"


def test_the_cli_fails_in_one_line(tmp_path):
    with pytest.raises(SystemExit) as e:
        fla_ship.main([str(tmp_path / "missing"), str(tmp_path / "out")])
    assert str(e.value).startswith("fla_ship: ") and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()
