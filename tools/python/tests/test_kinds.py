"""One source for the list of mixer kinds: the runtime's `mixer_table!`
(runtime/src/config.rs). ferrite_ref/kinds.py is generated from it, and every
Python table of mixers or families is checked against it here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ferrite_dev.codegen import kinds as codegen
from ferrite_dev.fixtures import reference as fixtures
from ferrite_dev.reports import families, study
from ferrite_ref import config, reference
from ferrite_ref.kinds import MIXER_KINDS
from ferrite_train import runs


def test_kinds_module_is_the_runtime_table():
    """ferrite_ref/kinds.py is what `ferrite-kinds` writes from config.rs now."""
    rows = codegen.parse_mixer_table(codegen.CONFIG_RS.read_text(encoding="utf-8"))
    assert codegen.KINDS_PY.read_text(encoding="utf-8") == codegen.module_text(rows), "stale: run ferrite-kinds"
    assert MIXER_KINDS == tuple(name for name, _, _ in rows)
    assert [code for _, code, _ in rows] == sorted(code for _, code, _ in rows)


def test_the_parser_fails_rather_than_drops_a_row():
    table = 'mixer_table! {\n    /// A.\n    Aa(AaConfig) = AA 1, "aa";\n    Bb(BbConfig) = BB 2, "bb";\n}\n'
    assert codegen.parse_mixer_table(table) == [("aa", 1, "A."), ("bb", 2, "")]
    with pytest.raises(ValueError, match="unparsed"):
        codegen.parse_mixer_table(table.replace('BB 2, "bb"', 'BB two, "bb"'))
    with pytest.raises(ValueError, match="repeats"):
        codegen.parse_mixer_table(table.replace('BB 2, "bb"', 'BB 1, "bb"'))
    with pytest.raises(ValueError, match="no `mixer_table!"):
        codegen.parse_mixer_table("macro_rules! mixer_table { () => {} }\n")


def test_reference_tables_cover_exactly_the_runtime_kinds():
    assert set(config._MIXER_PARSERS) == set(MIXER_KINDS)
    assert set(config.MIXER_CONFIGS) == set(MIXER_KINDS)
    assert all(cls.kind == kind for kind, cls in config.MIXER_CONFIGS.items())
    assert set(reference.MIXERS) == set(MIXER_KINDS)
    for kind in MIXER_KINDS:
        assert importlib.util.find_spec(f"ferrite_ref.{kind}") is not None, kind


#: Kinds the runtime runs that ferrite_train cannot train yet (issue 27 item 5: their
#: PyTorch modules, MQAR and LM runs are the next step; cross has its module since issue 32
#: stage 2, trained on the memory-lookup task, ferrite_train/memory_lookup.py).
NOT_TRAINABLE_YET = {"mamba2", "rwkv7", "gla"}


def test_training_mixers_cover_exactly_the_runtime_kinds():
    """One module per kind in ferrite_train/mixers (its files: importing them needs torch),
    except the kinds named in NOT_TRAINABLE_YET; with torch, the registry itself."""
    import ferrite_train

    trainable = set(MIXER_KINDS) - NOT_TRAINABLE_YET
    assert NOT_TRAINABLE_YET <= set(MIXER_KINDS)
    mixers_dir = Path(ferrite_train.__file__).parent / "mixers"
    assert {p.stem for p in mixers_dir.glob("*.py")} - {"__init__"} == trainable
    pytest.importorskip("torch")
    from ferrite_train import mixers

    assert set(mixers.MIXERS) == trainable


def test_run_families_are_the_mixers_of_their_configs():
    """Every single-mixer run of the shipped registry is labelled with a report family
    whose kind is the `mixer` of each of its layers."""
    checked = 0
    for name, spec in runs.all_runs().items():
        mixers = {layer["mixer"] for layer in spec["config"]["layers"]}
        assert mixers <= set(MIXER_KINDS), name
        if spec["family"].startswith("hybrid") or spec.get("qat"):
            continue
        assert mixers == {families.kind_of(spec["family"])}, name
        checked += 1
    assert checked >= len(MIXER_KINDS)


def test_the_fixtures_cover_every_kind():
    covered = {layer["mixer"] for _, _, _, config, _ in fixtures.FIXTURES for layer in config["layers"]}
    assert covered == set(MIXER_KINDS)


def test_report_families_are_kinds_or_their_variants():
    assert families.FAMILIES[:len(MIXER_KINDS)] == MIXER_KINDS
    assert set(families.VARIANTS.values()) <= set(MIXER_KINDS)
    assert set(families.COLORS) == set(families.FAMILIES)
    assert all(families.kind_of(f) for f in study.FAMILIES)
    assert len(set(study.FAMILIES)) == len(study.FAMILIES)
    with pytest.raises(ValueError, match="unknown family"):
        families.kind_of("xyz")
    assert families.present(["swa-sinks", "bla", "gdn", "bla"]) == ["bla", "gdn", "swa-sinks"]
