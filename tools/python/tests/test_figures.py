"""Every generated block and every quoted figure of README.md and docs/*.md equals its recorded
source (issue 29, item 8; ``ferrite_dev.reports.figures``, docs/testing.md "Figures and their sources")."""

import re

import pytest

from ferrite_dev import REPO_ROOT
from ferrite_dev.reports import figures


@pytest.mark.parametrize("block", figures.BLOCKS, ids=lambda b: f"{b.path}:{b.name}")
def test_every_generated_block_is_what_its_generator_writes(block):
    assert figures.check_block(block) == []


@pytest.mark.parametrize("claim", figures.CLAIMS, ids=lambda c: f"{c.path}:{c.pattern[:40]}")
def test_every_quoted_figure_is_its_sources(claim):
    assert figures.check_claim(claim) == []


def _changed(figure: str) -> str:
    """``figure`` with its last digit moved by one (or a number word by one)."""
    if figure in figures.NUMBER_WORDS:
        return figures.NUMBER_WORDS[(figures.NUMBER_WORDS.index(figure) + 1) % len(figures.NUMBER_WORDS)]
    i = max(i for i, ch in enumerate(figure) if ch.isdigit())
    return figure[:i] + str((int(figure[i]) + 1) % 10) + figure[i + 1:]


@pytest.mark.parametrize("claim", figures.CLAIMS, ids=lambda c: f"{c.path}:{c.pattern[:40]}")
def test_a_changed_figure_fails_its_claim(claim):
    text = " ".join((REPO_ROOT / claim.path).read_text().split())
    m = re.search(claim.pattern, text)
    assert m, claim.pattern
    for g in range(1, len(m.groups()) + 1):
        edited = text[:m.start(g)] + _changed(m.group(g)) + text[m.end(g):]
        assert figures.check_claim(claim, edited), (claim.pattern, g)


@pytest.mark.parametrize("block", figures.BLOCKS, ids=lambda b: f"{b.path}:{b.name}")
def test_a_changed_number_fails_its_block(block):
    text = block.text()
    digit = re.search(r"\| [^|]*?(\d)[^|]*\|\s*$", text, re.M) or re.search(r"\d", text)
    i = digit.start(1) if digit.re.groups else digit.start()
    edited = text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:]
    assert figures.check_block(block, edited)


@pytest.mark.parametrize("table", figures.TABLES, ids=lambda t: f"{t.path}:{t.command}")
def test_every_pasted_table_is_what_its_generator_prints(table):
    assert figures.check_table(table) == []


@pytest.mark.parametrize("table", figures.TABLES, ids=lambda t: f"{t.path}:{t.command}")
def test_a_changed_number_fails_its_table(table):
    text = (REPO_ROOT / table.path).read_text()
    body = table.body()
    at = text.index(body) + len(body) // 2
    i = next(j for j in range(at, len(text)) if text[j].isdigit())
    edited = text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:]
    assert figures.check_table(table, edited)


def test_the_board_table_rows_are_the_recorded_stats():
    """Each board-table row carries the fields of its boards/expected/*.stats line."""
    block = figures.BLOCKS[0]
    assert block.name == "board-table"
    rows = [line for line in block.text().splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(figures.qemu_boards()) + len(figures.TRAINED_ROWS)
    stems = figures.qemu_boards() + [stem for stem, _ in figures.TRAINED_ROWS]
    for row, stem in zip(rows, stems):
        s = figures.stats(stem)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == s["board"] and cells[3:] == [s[k] for k in (
            "flash_bytes", "ram_bytes", "stack_bytes", "state_bytes", "instructions_per_token")], stem


def test_the_cli_reports_no_difference(capsys):
    assert figures.main([]) == 0
    assert "0 differences" in capsys.readouterr().out


def test_the_lm_side_figure_is_what_its_generator_writes(tmp_path):
    """docs/lm-side.svg is ``ferrite-lm-side-report``'s plot of models/lm-side (byte for byte)."""
    from ferrite_dev.reports import lm_side
    lm_side.plot(tmp_path / "lm-side.svg")
    assert (tmp_path / "lm-side.svg").read_bytes() == lm_side.SVG.read_bytes()


def test_the_lm_side_models_on_the_integer_path_stay_within_0_01_bits_per_byte():
    """Issue 24's bar for a shipped LM: every models/lm-side model's int8 image on the integer
    token path within +0.01 bits per byte of its f32 image (``ferrite-lm-side-report --eval``),
    with less state."""
    from ferrite_dev.reports import lm_side
    for d in lm_side.runs():
        rt = d["runtime"]
        assert rt["int8_int"]["bits_per_byte"] - rt["f32"]["bits_per_byte"] <= 0.01, d["dir"]
        assert sum(rt["int8_int"]["state_bytes_per_layer"]) < sum(rt["state_bytes_per_layer"]), d["dir"]


def test_the_lm_side_choice_is_the_lowest_runtime_bits_per_byte_that_fits():
    """Every row of README's "Choosing a family" names the model of models/lm-side with the lowest
    runtime bits per byte among those whose state (all layers) fits the row's budget."""
    from ferrite_dev.reports import lm_side
    runs = {d["dir"]: d for d in lm_side.runs()}
    assert len(runs) == 13 and all("runtime" in d for d in runs.values())
    block = next(b for b in figures.BLOCKS if b.path == figures.README and b.name == "lm-side").text()
    rows = re.findall(r"^\| (\d+) KiB \| (\S+)", block, re.M)
    assert len(rows) == 5
    for kib, name in rows:
        fits = {n: d["runtime"]["f32"]["bits_per_byte"] for n, d in runs.items()
                if sum(d["runtime"]["state_bytes_per_layer"]) <= int(kib) * 1024}
        if name == "none":
            assert not fits, kib
        else:
            assert name in fits and fits[name] == min(fits.values()), (kib, name)


def test_the_lm_side_runtime_matches_pytorch():
    """The runtime's f32 bits per byte of every models/lm-side model is PyTorch's within 1e-3
    (the f32 paths agree; the shipped LMs agree to the 4th decimal)."""
    from ferrite_dev.reports import lm_side
    for d in lm_side.runs():
        assert abs(d["runtime"]["f32"]["bits_per_byte"] - d["pytorch"]["bits_per_byte"]) < 1e-3, d["dir"]
