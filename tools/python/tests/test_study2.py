"""The state study's second edition (issue 28): the report's arithmetic (ferrite_dev/reports/study2.py)
and, once its rounds ran, models/mqar-zoology/runs.csv against docs/state-study.md."""

from __future__ import annotations

import math
import re

import pytest

from ferrite_dev import REPO_ROOT as ROOT
from ferrite_dev.reports import study2


def test_state_needed_interpolates_log_state_between_the_points_either_side():
    curve = [(1000, 0.1), (2000, 0.3), (4000, 0.7), (8000, 0.95)]
    s, how = study2.state_needed(curve, 0.5)
    assert how == "=" and s == pytest.approx(math.sqrt(2000 * 4000))  # halfway in log state
    s, how = study2.state_needed(curve, 0.7)
    assert how == "=" and s == pytest.approx(4000)
    assert study2.state_needed(curve, 0.05) == (1000, "<=")
    assert study2.state_needed(curve, 0.99) is None
    # The first crossing counts, even where the curve dips later.
    s, _ = study2.state_needed([(1, 0.0), (2, 0.6), (4, 0.4), (8, 0.9)], 0.5)
    assert 1 < s < 2


def test_ratios_are_numbers_or_the_bounds_the_grid_allows():
    assert study2.fmt_ratio((8000.0, "="), (2000.0, "="), 64e3, 64e3) == "4.0"
    assert study2.fmt_ratio(None, (2000.0, "="), 64e3, 64e3) == ">= 32.0"  # a needs more than its grid
    assert study2.fmt_ratio((8000.0, "="), None, 64e3, 64e3) == "<= 0.1"
    assert study2.fmt_ratio((1000.0, "<="), (2000.0, "="), 64e3, 64e3) == "<= 0.5"
    assert study2.fmt_ratio((8000.0, "="), (1000.0, "<="), 64e3, 64e3) == ">= 8.0"
    assert study2.fmt_ratio(None, None, 64e3, 64e3) == "-"
    assert study2.fmt_ratio((1000.0, "<="), (1000.0, "<="), 64e3, 64e3) == "-"


def test_slots_and_width_count_what_each_family_keeps():
    swa = {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1, "head_dim": 32, "window": 64}
    assert study2.slots_and_width(swa) == (64, 64)
    assert study2.slots_and_width(dict(swa, window=60, sinks=4)) == (64, 64)
    bla = {"mixer": "bla", "num_heads": 2, "head_dim": 32, "modes": 15}
    assert study2.slots_and_width(bla) == (31, 128)
    gdn = {"mixer": "gdn", "num_heads": 2, "head_dim": 32, "expand_v": 2.0}
    assert study2.slots_and_width(gdn) == (64, 64)  # H x K rows of V floats: 2 x 32 x 64


def test_gsa_and_mla_slots_hold_the_state_their_size_names():
    from research.study_runs import study_layer

    for family in ("gsa", "mla"):
        for kb in (1, 2, 4, 8, 16, 32, 64):
            slots, width = study2.slots_and_width(study_layer(family, kb))
            assert 0.95 * kb * 256 <= slots * width <= kb * 256, (family, kb, slots, width)


def _rows(table):
    return [dict(zip(study2.FIELDS, r)) for r in table]


def test_selection_takes_the_best_validation_and_seeds_follow_it():
    base = ["", "gdn", 4, 5000, 4096, 32, 32]
    rows = _rows([
        [f"z2-gdn-4k-lr{lr}-s{seed}", *base[1:], lr, seed, "r12", 2400, "cap", loss, val, val]
        for lr, seed, loss, val in ((0.001, 1, 1.0, 0.4), (0.003, 1, 0.5, 0.7), (0.01, 1, 0.6, 0.7),
                                    (0.003, 2, 0.5, 0.6), (0.003, 3, 0.5, 0.8))])
    for r in rows:
        r["run"] = study2.run_name("gdn", 4, float(r["lr"]), int(r["seed"]))
    p = study2.points(rows)[("gdn", 4)]
    assert p["selected"] == 0.003 and not p["edge"]  # the tie at 0.7 goes to the lower training loss
    assert [r["seed"] for r in p["seeds"]] == [1, 2, 3] and p["median"] == 0.7
    assert study2.next_runs({("gdn", 4): p}) == []
    rows[1]["val_accuracy"] = 0.69
    p = study2.points(rows)[("gdn", 4)]
    assert p["selected"] == 0.01 and p["edge"] and p["seeds_lr"] == 0.003
    assert study2.next_runs({("gdn", 4): p}) == ["z2-gdn-4k-lr1e-2-s2", "z2-gdn-4k-lr1e-2-s3", "z2-gdn-4k-lr3e-2-s1"]
    # A seed-1 run that stopped before the task's phase is run again, and the point waits for it.
    rows[2]["steps"], rows[2]["end"] = 9, "time"
    p = study2.points(rows)[("gdn", 4)]
    assert study2.next_runs({("gdn", 4): p}) == ["z2-gdn-4k-lr1e-2-s1"]


def test_state_study_doc_and_readme_have_the_tables_runs_csv_gives():
    doc = (ROOT / "docs/state-study.md").read_text()
    assert study2.tables() in doc
    assert study2.readme_tables() in (ROOT / "README.md").read_text()


# The protocol's dated note of 2026-12-07 (docs/state-study.md): round 19 ran Mamba-2 at lr 1e-2
# for every size (3e-3 too at 16 and 64 KB); the rest of its grid waits for a later round.
# Round 22 (docs/state-study.md, 2026-12-07) ran bla-p128 at lr 3e-3 and 1e-2 only (the device
# time left); its 1e-3 runs are in `--next`.
GRID_CUT = {"mamba2": {0.01}, "bla-p128": {0.003, 0.01}}


def test_second_edition_runs_follow_the_protocol():
    rows = study2.runs()
    assert {r["family"] for r in rows} <= set(study2.FAMILIES)
    for (family, kb), p in study2.points(rows).items():
        grid = GRID_CUT.get(family, set(study2.GRID))
        assert grid <= set(p["sweep"]), (family, kb, "seed 1 at every lr of the grid")
        for r in p["by_lr"][p["seeds_lr"]].values():
            assert int(r["steps"]) <= 2400
            assert r["end"] in ("solved", "cap", "time")


def test_fla_families_hold_the_state_their_size_names():
    """fla's RWKV-7 and Mamba-2 in the study (item 5): each size's core state is exactly its KB,
    counted both ways, and an fla config.json as save_pretrained writes it (RWKV-7's value_dim
    a list per layer) counts the same."""
    from ferrite_train import fla_shapes
    from research.study_runs import Z2_FLA_FAMILIES, z2_config, z2_sizes

    for family in Z2_FLA_FAMILIES:
        for kb in z2_sizes(family):
            config = z2_config(family, kb)
            assert fla_shapes.is_fla(config) and config["vocab_size"] == 8192
            total, core = fla_shapes.state_floats(config)
            assert core == kb * 256 < total, (family, kb)
            slots, width = fla_shapes.slots_and_width(config)
            assert slots * width == core, (family, kb)
            if family == "rwkv7":
                saved = dict(config, value_dim=[config["value_dim"]] * 2)
                assert fla_shapes.state_floats(saved) == (total, core)
    assert z2_sizes("rwkv7") == (4, 8, 16, 32, 64) and z2_sizes("mamba2")[0] == 1


def test_fla_state_sizes_are_the_runtimes_on_the_shipped_models():
    """The counts the study reports for RWKV-7 and Mamba-2 are the bytes the runtime keeps:
    models/lm/{rwkv7,mamba2}-m3's metrics (from `ferrite inspect`) against their config.json."""
    import json

    from ferrite_train import fla_shapes

    for name in ("rwkv7-m3", "mamba2-m3"):
        folder = study2.ROOT / "models" / "lm" / name
        config = json.loads((folder / "config.json").read_text())
        runtime = json.loads((folder / "metrics.json").read_text())["runtime"]["state_bytes_per_layer"]
        total, _ = fla_shapes.state_floats(config)
        assert runtime == [4 * total] * config["num_hidden_layers"], name


def test_fla_shapes_refuse_what_fla_cannot_build():
    from ferrite_train import fla_shapes

    with pytest.raises(ValueError, match="value_dim >= hidden_size"):
        fla_shapes.study_config("rwkv7", 2, 8192)
    with pytest.raises(ValueError, match="unknown fla family"):
        fla_shapes.study_config("gla", 4, 8192)
    with pytest.raises(ValueError, match="not an fla configuration"):
        fla_shapes.state_floats({"model_type": "ferrite", "hidden_size": 64})


def test_bla_variants_share_kv_heads_and_set_the_period_apart_from_the_length():
    """Issue 28 item 3: ``z2-bla-kv1-...`` shares one key/value head (64 floats a slot, SWA's
    width), ``z2-bla-p128-...`` / ``-p512-`` train period 128 / 512 at 256 tokens; plain ``bla``
    keeps the layer it had (the period the sequence length, no num_kv_heads field)."""
    from research.study_runs import (STUDY_TASK, Z2_BLA_VARIANTS, Z2_TASK, bla_variant, study_layer, z2_name,
                                     z2_runs)

    assert bla_variant("bla") == (None, None) and bla_variant("bla-kv1-p128") == (1, 128)
    assert bla_variant("swa") is None and bla_variant("bla-p") is None
    plain = study_layer("bla", 8)
    assert plain == {"mixer": "bla", "num_heads": 2, "head_dim": 32, "period": STUDY_TASK["seq_len"], "modes": 7,
                     "kernel": "dirichlet", "decay": "gated", "use_short_conv": True}
    runs = z2_runs()
    assert set(Z2_BLA_VARIANTS) <= set(study2.FAMILIES)
    for family in Z2_BLA_VARIANTS:
        kv, period = bla_variant(family)
        for kb in (1, 4, 16, 64):
            run = runs[z2_name(family, kb, 3e-3, 1)]
            assert run["family"] == family and run["seq_len"] == Z2_TASK["seq_len"] == 256
            layer = run["config"]["layers"][0]
            assert layer["period"] == (256 if period is None else period)
            assert layer.get("num_kv_heads", 2) == (2 if kv is None else kv)
            assert 2 * layer["modes"] <= layer["period"]
            slots, width = study2.slots_and_width(layer)
            assert width == (64 if kv == 1 else 128)
            assert slots * width <= kb * 256, (family, kb)
    # Equal width with SWA: at 4 KB the shared-head BLA keeps twice the plain one's slots (15 against 7).
    assert study2.slots_and_width(study_layer("bla-kv1", 4))[0] == 15
    assert study2.slots_and_width(study_layer("bla", 4))[0] == 7
    # A short period caps the modes at P/2: at 64 KB, period 128 has 129 slots, not 255.
    assert study_layer("bla-kv1-p128", 64)["modes"] == 64
    # The report reads the size from the name whatever the variant.
    assert int(re.search(r"-(\d+)k-", z2_name("bla-kv1-p512", 16, 1e-2, 2)).group(1)) == 16


def test_more_pairs_and_the_longer_setting_follow_the_dated_note():
    """The issue's (c): 64 pairs at 256 tokens (``z2p64-``) and 1,024 tokens with 64 pairs
    (``z2l1k-``) for swa, bla and gdn, the (a) recipe with curricula of the same shape; at 1,024
    tokens the grid reaches 256 KB, where SWA's window is the whole sequence, and BLA's period is
    the sequence length. Every layer keeps at most the bytes its size names."""
    from research.study_runs import (GDN_SHAPES, Z2_GRID, Z2C_FAMILIES, Z2C_SETTINGS, study_layer, z2c_name,
                                     z2c_runs)

    runs = z2c_runs()
    assert set(Z2C_SETTINGS) == {"p64", "l1k"} and Z2C_FAMILIES == ("swa", "bla", "gdn")
    for setting, (task, sizes, curriculum) in Z2C_SETTINGS.items():
        assert task["pairs"] == 64 and task["queries"] == "zoology"
        assert sum(share for share, _, _ in curriculum) == 0.5
        assert all(length < task["seq_len"] and 2 * pairs <= length // 2 for _, pairs, length in curriculum)
        for family in Z2C_FAMILIES:
            for kb in sizes:
                names = [z2c_name(setting, family, kb, lr, seed) for lr in Z2_GRID for seed in (1, 2, 3)]
                if family == "gdn" and kb not in GDN_SHAPES:
                    assert not any(n in runs for n in names)
                    continue
                for n in names:
                    run = runs[n]
                    assert run["seq_len"] == task["seq_len"] and run["pairs"] == 64
                    assert run["config"]["vocab_size"] == 8192 and run["curriculum"] == curriculum
                layer = runs[names[0]]["config"]["layers"][0]
                assert layer == study_layer(family, kb, task["seq_len"])
                if family == "bla":
                    assert layer["period"] == task["seq_len"]
                slots, width = study2.slots_and_width(layer)
                assert slots * width <= kb * 256, (setting, family, kb)
    assert Z2C_SETTINGS["l1k"][1][-1] == 256
    assert runs[z2c_name("l1k", "swa", 256, 3e-3, 1)]["config"]["layers"][0]["window"] == 1024
    assert runs[z2c_name("p64", "swa", 64, 3e-3, 1)]["config"]["layers"][0]["window"] == 256


def test_the_c_settings_import_into_their_own_files_and_name_their_next_runs(tmp_path, monkeypatch):
    """(c)'s runs (``z2p64-``, ``z2l1k-``) go to runs-p64.csv / runs-l1k.csv, never into (a)'s
    runs.csv, and ``--next`` names their runs with their prefix."""
    import json

    from research.study_runs import study_layer

    out = tmp_path / "out"
    monkeypatch.setattr(study2, "OUT", out)
    base = tmp_path / "round" / "calls" / "mqar"

    def run(name, family, kb, lr, seed, val):
        d = base / name
        d.mkdir(parents=True)
        layer = study_layer(family, kb, 1024 if name.startswith("z2l1k") else 256)
        (d / "config.json").write_text(json.dumps({"layers": [layer, layer]}))
        (d / "metrics.json").write_text(json.dumps({
            "name": name, "family": family, "state_bytes_per_layer": [kb * 1024],
            "core_state_bytes_per_layer": [kb * 1024], "pytorch": {"val_accuracy": val, "accuracy": val},
            "training": {"steps_run": 2400, "steps_planned": 2400, "lr_max": lr, "torch_seed": seed,
                         "final_train_loss": 1.0 - val}}))

    run("z2-swa-4k-lr3e-3-s1", "swa", 4, 3e-3, 1, 0.5)
    run("z2p64-swa-4k-lr3e-3-s1", "swa", 4, 3e-3, 1, 0.4)
    run("z2p64-swa-4k-lr1e-2-s1", "swa", 4, 1e-2, 1, 0.3)
    run("z2l1k-gdn-4k-lr1e-3-s1", "gdn", 4, 1e-3, 1, 0.2)
    study2.do_import([("r24", tmp_path / "round")])
    assert [r["run"] for r in study2.runs()] == ["z2-swa-4k-lr3e-3-s1"]
    assert [r["run"] for r in study2.runs("p64")] == ["z2p64-swa-4k-lr3e-3-s1", "z2p64-swa-4k-lr1e-2-s1"]
    assert [r["run"] for r in study2.runs("l1k")] == ["z2l1k-gdn-4k-lr1e-3-s1"]
    assert study2.next_runs(study2.points(study2.runs("p64")), "p64") == [
        "z2p64-swa-4k-lr3e-3-s2", "z2p64-swa-4k-lr3e-3-s3", "z2p64-swa-4k-lr1e-3-s1"]
    assert study2.next_runs(study2.points(study2.runs("l1k")), "l1k")[:2] == [
        "z2l1k-gdn-4k-lr1e-3-s2", "z2l1k-gdn-4k-lr1e-3-s3"]
    with pytest.raises(ValueError, match="not a run of the second edition"):
        study2.setting_of("st-swa-4k-lr3e-3-s1")
