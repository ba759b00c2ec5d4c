"""Figures in README.md and docs/*.md checked against the files that record them (issue 29, item 8).

    ferrite-figures            # check every generated block, pasted table and quoted figure; exit 1 on a difference
    ferrite-figures --write    # rewrite README.md's board table from boards/expected/*.stats

Three kinds of guard, all data:

- ``BLOCKS``: a marked block ``<!-- NAME:start -->`` ... ``<!-- NAME:end -->`` must equal what its
  generator prints from the recorded files (``models/*/metrics.json``, ``runs.csv``,
  ``boards/expected/``);
- ``TABLES``: a table a generator prints (pasted without markers) must appear verbatim in its doc;
- ``CLAIMS``: a figure quoted in prose, found by a regular expression whose groups are the figures,
  must equal what is computed from its source (a metrics file, a recorded table, the tree).

docs/testing.md ("Figures and their sources") lists every figure and which of the three guards it,
or why none does. (``python -m ferrite_dev.reports.figures``.)
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import REPO_ROOT as ROOT
from . import lm_side, models, study, study2

EXPECTED = ROOT / "boards" / "expected"
TARGETS = ROOT / "common" / "src" / "target.rs"
README = "README.md"

# --- sources -----------------------------------------------------------------------------------


def metrics(group: str) -> dict:
    """``{name: metrics.json}`` of every model directory under ``models/<group>``."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((ROOT / "models" / group).glob("*/metrics.json"))}


def count_dirs(path: str, holding: str) -> int:
    """How many directories under ``path`` hold a file named ``holding``."""
    return sum(1 for p in (ROOT / path).iterdir() if (p / holding).is_file())


def stats(stem: str) -> dict:
    """The ``key=value`` fields of ``boards/expected/<stem>.stats``."""
    line = (EXPECTED / f"{stem}.stats").read_text().strip()
    assert line.startswith("stats: "), f"{stem}.stats: {line!r}"
    return dict(f.split("=", 1) for f in line.split()[1:])


def targets() -> list:
    """``(name, core, model, dtype, qemu)`` of every row of common/src/target.rs's table, in order."""
    text = TARGETS.read_text().split("pub const TARGETS", 1)[1].split("\n];", 1)[0]
    rows = []
    for block in text.split("    Target {")[1:]:
        name = re.search(r'name: "([^"]+)"', block).group(1)
        core = re.search(r'core: "([^"]+)"', block).group(1)
        model = re.search(r'model: \(([^,]+), "([^"]+)"\)', block)  # the chips name CHIP_MODEL
        model = (model.group(1).strip('"'), model.group(2)) if model else ("CHIP_MODEL", "")
        rows.append((name, core, *model, "Kind::Qemu" in block))
    return rows


def default_model() -> str:
    """The fixture every QEMU board runs by default (common/src/target.rs's ``DEFAULT_MODEL``)."""
    return re.search(r'pub const DEFAULT_MODEL: &str = "([^"]+)"', TARGETS.read_text()).group(1)


def qemu_boards() -> list:
    """The QEMU boards' names (``Kind::Qemu`` rows), in the table's order."""
    return [t[0] for t in targets() if t[4]]


def table_rows(path: str, first_cell: str) -> list:
    """The cells of every markdown table row of ``path`` whose first cell is ``first_cell``."""
    rows = []
    for line in (ROOT / path).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            rows.append(cells)
    return rows


def fuzz_targets() -> list:
    """The fuzz targets of fuzz/targets.txt (read by xtask and fuzz/campaign.sh)."""
    lines = (ROOT / "fuzz" / "targets.txt").read_text().splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]


NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def size_text(n: int) -> str:
    """Bytes as the docs write a corpus size: three significant digits, decimal KB / MB."""
    return f"{n / 1e6:.3g} MB" if n >= 1e6 else f"{n / 1e3:.3g} KB"


def corpus(name: str) -> str:
    """``N files, S`` of the committed corpus ``fuzz/corpus/<name>/`` (the sum of its files' bytes)."""
    files = [p for p in (ROOT / "fuzz" / "corpus" / name).iterdir() if p.is_file()]
    return f"{len(files)} files, {size_text(sum(p.stat().st_size for p in files))}"


def change(rt: dict, variant: str, key: str) -> float:
    """``variant``'s change against f32 in ``key``; MQAR accuracy exactly, from the counts of 8,000
    queries (as ferrite-models-report computes it)."""
    if key == "accuracy" and "correct" in rt[variant]:
        return (rt[variant]["correct"] - rt["f32"]["correct"]) / 8000
    return rt[variant][key] - rt["f32"][key]


def max_change(group: str, variant: str, key: str, absolute: bool) -> float:
    """The largest change of ``variant`` against f32 in ``runtime[*][key]`` over a model group."""
    changes = []
    for m in metrics(group).values():
        rt = m["runtime"]
        if variant in rt and key in rt[variant]:
            d = change(rt, variant, key)
            changes.append(abs(d) if absolute else d)
    return max(changes)


def lm_changes(variant: str, fmt: str = "{:.4f}", names=("small", "large")) -> tuple:
    """``variant``'s bits-per-byte change against f32 of each LM in ``names``."""
    return tuple(fmt.format(change(metrics("lm")[n]["runtime"], variant, "bits_per_byte")) for n in names)


def largest_mqar_changes(variant: str, n: int) -> str:
    """The ``n`` largest MQAR accuracy changes of ``variant``, as quantization.md lists them: the first
    with its count of queries, then each with its sign."""
    rows = sorted(((change(m["runtime"], variant, "accuracy"), name) for name, m in metrics("mqar").items()),
                  key=lambda r: (-abs(round(r[0], 4)), r[1]))[:n]
    (d0, name0), rest = rows[0], rows[1:]
    head = f"{abs(d0):.4f} (`{name0}`, {round(abs(d0) * 8000)} of 8,000 queries), then "
    return head + ", ".join(f"`{name}` ({d:+.4f})" for d, name in rest)


def pytorch_bpb(name: str, key: str = "bits_per_byte") -> str:
    """``models/lm/<name>``'s PyTorch bits per byte, three decimals."""
    return f"{metrics('lm')[name]['pytorch'][key]:.3f}"


def lm_bpb_change(variant: str) -> float:
    """The largest bits-per-byte cost of ``variant`` over every LM and both held-out texts."""
    return max(max_change("lm", variant, key, False) for key in ("bits_per_byte", "bits_per_byte_fortunes"))


def qat4_loss(name: str, base: str) -> str:
    """``models/qat4/<name>``'s int4 (tiled) bits per byte over ``models/lm/<base>``'s f32, in percent."""
    q = metrics("qat4")[name]["runtime"]["int4_tiled"]["bits_per_byte"]
    f = metrics("lm")[base]["runtime"]["f32"]["bits_per_byte"]
    return f"{100 * (q / f - 1):.1f}"


def ptq_int4_losses() -> tuple:
    """Post-training int4 (calibrated) against f32 on lm/small and lm/large, in percent."""
    lms = metrics("lm")
    losses = [100 * (lms[n]["runtime"]["int4_calibrated"]["bits_per_byte"] / lms[n]["runtime"]["f32"]["bits_per_byte"] - 1)
              for n in ("small", "large")]
    return f"{min(losses):.0f}", f"{max(losses):.0f}"


def chip_row(chip: str) -> tuple:
    """docs/chips.md's measured row of ``chip``: flash, flash budget, percent, RAM, RAM budget, percent."""
    block = (ROOT / "docs" / "chips.md").read_text().split("<!-- chips-measured:start -->", 1)[1]
    row = next(line for line in block.splitlines() if line.startswith(f"| {chip} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    pattern = r"(\d+) of (\d+) \(([\d.]+)%\)"
    return re.fullmatch(pattern, cells[3]).groups() + re.fullmatch(pattern, cells[4]).groups()


def doc_match(path: str, pattern: str) -> tuple:
    """The groups of ``pattern``'s first match in ``path`` (whitespace in the text normalised)."""
    text = " ".join((ROOT / path).read_text().split())
    m = re.search(pattern, text)
    assert m, f"{path}: {pattern!r} not found"
    return m.groups()


def safetensors_params(path: str) -> int:
    """The number of values in a safetensors file (its header's shapes)."""
    data = (ROOT / path).read_bytes()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    header.pop("__metadata__", None)
    total = 0
    for tensor in header.values():
        n = 1
        for dim in tensor["shape"]:
            n *= dim
        total += n
    return total


def kb(n: int) -> str:
    return f"{n / 1e3:.0f}"


# --- generated blocks --------------------------------------------------------------------------


def note(command: str) -> str:
    return f"\n<!-- generated by {command}; do not edit -->\n\n"


# (stem in boards/expected, image as the table names it): the trained models the suite records
# with `generate` on the board they are made for. The boards' default images come first.
TRAINED_ROWS = [
    ("lm-en-m3-m3", "lm-en-m3 int8 (trained on English text, 151k params)"),
    ("lm-rwkv7-m3-m3", "lm-rwkv7-m3 int8 (fla's RWKV-7, English text, 145k params)"),
    ("lm-mamba2-m3-m3", "lm-mamba2-m3 int8 (fla's Mamba-2, English text, 152k params)"),
    ("lm-small-int-m3-mps2", "lm-small int8, integer token path (trained on English text, 151k params; the lm3s6965's "
                             "256 KB cannot hold it)"),
    ("demo-m4f", "lm-en-m4f int8 (trained on English text, 1.8M params; `cargo xtask demo`: prompt \"A man \", "
                 "200 sampled tokens)"),
]


def board_table() -> str:
    """README.md's board table: the `stats:` lines the QEMU suite records in boards/expected/."""
    rows = []
    cores = {t[0]: t for t in targets()}

    def row(stem: str, image: str) -> str:
        s = stats(stem)
        return (f"| {s['board']} | {cores[s['board']][1]} | {image} | {s['flash_bytes']} | {s['ram_bytes']} "
                f"| {s['stack_bytes']} | {s['state_bytes']} | {s['instructions_per_token']} |")

    for name in qemu_boards():
        _, _, model, dtype, _ = cores[name]
        if model == "DEFAULT_MODEL":
            image = dtype
        else:  # a trained MQAR model (the M0's)
            params = json.loads((ROOT / model / "metrics.json").read_text())["params"]
            image = f"mqar {Path(model).name} {dtype} (trained MQAR recall, {kb(params)}k params; the board's default)"
        rows.append(row(name, image))
    rows += [row(stem, image) for stem, image in TRAINED_ROWS]
    head = ("| board | core | image | flash bytes | RAM bytes | stack bytes | state bytes | instructions/token |\n"
            "|---|---|---|---|---|---|---|---|\n")
    return note("ferrite-figures --write from boards/expected/*.stats") + head + "\n".join(rows) + "\n"


def models_readme() -> str:
    return (note("ferrite-models-report --readme") + models.state_efficiency_table()
            + "\n\nLanguage models, bits per byte on `models/lm/heldout.txt`"
            " (PyTorch, and the runtime at each weight dtype):\n\n" + models.lm_table()
            + "\n\nThe English LMs (models/lm/README.md), bits per byte on both held-out texts "
            "(int8 / int4: the default tiled images):\n\n" + models.english_lm_table() + "\n")


@dataclass
class Block:
    """A marked block of ``path`` that must equal ``body()``."""

    path: str
    name: str
    body: Callable[[], str]
    command: str

    def text(self) -> str:
        start, end = f"<!-- {self.name}:start -->", f"<!-- {self.name}:end -->"
        text = (ROOT / self.path).read_text()
        assert start in text and end in text, f"{self.path} has no {start} ... {end}"
        return text.split(start, 1)[1].split(end, 1)[0]


BLOCKS = [
    Block(README, "board-table", board_table, "ferrite-figures --write"),
    Block(README, "models", models_readme, "ferrite-models-report --readme"),
    Block("docs/models.md", "english-lm", lambda: note("ferrite-models-report --readme") + models.english_lm_table()
          + "\n", "ferrite-models-report --readme"),
    Block(README, "study", lambda: note("ferrite-study-report --readme") + study.thresholds_table() + "\n",
          "ferrite-study-report --readme"),
    Block("docs/state-study.md", "study", lambda: note("ferrite-study-report --readme") + study.tables() + "\n",
          "ferrite-study-report --readme"),
    Block("docs/state-study.md", "study-gdn", lambda: note("ferrite-study-report --readme") + study.gdn_table() + "\n",
          "ferrite-study-report --readme"),
    Block(README, "study2", lambda: note("ferrite-study2-report --readme") + study2.readme_tables() + "\n",
          "ferrite-study2-report --readme"),
    Block("docs/state-study.md", "study2", lambda: note("ferrite-study2-report --readme") + study2.tables() + "\n",
          "ferrite-study2-report --readme"),
    Block(README, "lm-side", lambda: note("ferrite-lm-side-report --readme") + lm_side.choosing_table() + "\n\n",
          "ferrite-lm-side-report --readme"),
    Block("docs/state-study.md", "lm-side", lambda: note("ferrite-lm-side-report --readme") + lm_side.table() + "\n\n",
          "ferrite-lm-side-report --readme"),
]


@dataclass
class Table:
    """Tables that must appear verbatim in ``path`` (generated, printed on stdout, pasted unmarked)."""

    path: str
    body: Callable[[], str]
    command: str


TABLES = [
    Table("docs/models.md", models.mqar_table, "ferrite-models-report (## MQAR (shipped))"),
    Table("docs/models.md", models.runs_table, "ferrite-models-report (## MQAR (all runs))"),
    Table("docs/models.md", models.lm_table, "ferrite-models-report (## LM)"),
    Table("docs/quantization.md", models.integer_tables, "ferrite-models-report --integer"),
    Table("docs/quantization.md", models.int4_tables, "ferrite-models-report --int4"),
    Table("docs/integer-path.md", models.token_path_table, "ferrite-models-report --token-path"),
]


def check_table(table: Table, text: str | None = None) -> list:
    """The difference of one pasted table: ``[]`` when the doc holds its generator's text."""
    text = (ROOT / table.path).read_text() if text is None else text
    return [] if table.body() in text else [f"{table.path}: does not hold what `{table.command}` prints"]


# --- figures quoted in prose -------------------------------------------------------------------


@dataclass
class Claim:
    """Every match of ``pattern`` in ``path`` (whitespace normalised) must have the groups ``value()``."""

    path: str
    pattern: str
    value: Callable[[], tuple]
    source: str


def fixtures() -> tuple:
    """How many fixtures tests/fixtures holds (directories with the reference's expected logits)."""
    return (str(count_dirs("tests/fixtures", "expected.safetensors")),)


def configs() -> tuple:
    """How many random configurations test_runtime_parity.py makes (its seeds)."""
    text = (ROOT / "tools/python/tests/test_runtime_parity.py").read_text()
    return (re.search(r'parametrize\("seed", range\((\d+)\)\)', text).group(1),)


PARITY = "docs/testing.md's tolerance table (cargo test -p ferrite-tests --test parity -- --nocapture prints it)"


def parity_max() -> tuple:
    """The runtime's largest difference from the f64 reference on the fixtures, as docs/testing.md records it."""
    return doc_match("docs/testing.md", r"committed fixtures \| max \\\|logit diff\\\| <= 1e-4 \| ([\d.e-]+) \(")


def _claims() -> list:
    mq, lm = "models/mqar/*/metrics.json", "models/lm/*/metrics.json"
    claims = [
        Claim(README, r"on the (\d+) fixtures", fixtures, "tests/fixtures/ (parity.rs runs each)"),
        Claim(README, r"`tests/fixtures/\*` — (\d+) random-weight", fixtures, "tests/fixtures/"),
        Claim("docs/design.md", r"tokens on the (\d+) committed fixtures", fixtures, "tests/fixtures/"),
        Claim("docs/spec.md", r"runtime vs the f64 numpy reference, (\d+) committed fixtures", fixtures, "tests/fixtures/"),
        Claim(README, r"over 80 tokens is at most ([\d.e-]+) on the", parity_max, PARITY),
        Claim("docs/benchmarks.md", r"f64 reference on the (\d+) committed fixtures", fixtures, "tests/fixtures/"),
        Claim("docs/benchmarks.md", r"against ([\d.e-]+) with `libm`; the bound", parity_max, PARITY),
        Claim("docs/spec.md", r"either module: ([\d.e-]+) integer, ([\d.e-]+) float\)",
              lambda: doc_match("docs/benchmarks.md", r"at most ([\d.e-]+) and ([\d.e-]+), against [\d.e-]+ with `libm`"),
              "docs/benchmarks.md's fast-math parity figures (parity.rs with each module)"),
        Claim("docs/design.md", r"fixtures is at most ([\d.e-]+) \(`tests/tests/parity.rs`\)", parity_max, PARITY),
        Claim("docs/spec.md", r"\(measured <= ([\d.e-]+); the 7 of the GDN family", parity_max, PARITY),
        Claim(README, r"`models/mqar/\*` — (\d+) recall models", lambda: (str(len(metrics("mqar"))),), mq),
        Claim(README, r"`models/mqar-256/\*` — the state study: (\d+) models",
              lambda: (str(len(metrics("mqar-256"))),), "models/mqar-256/*/metrics.json"),
        Claim(README, r"(\d+) shipped models in `models/mqar-256`",
              lambda: (str(len(metrics("mqar-256"))),), "models/mqar-256/*/metrics.json"),
        Claim(README, r"one layer of each family \(random weights, ([\d.]+)k params\)",
              lambda: (f"{safetensors_params(f'tests/fixtures/{default_model()}/model.safetensors') / 1e3:.1f}",),
              "tests/fixtures/<common/src/target.rs's DEFAULT_MODEL>/model.safetensors"),
        Claim(README, r"on all (\w+) boards", lambda: (NUMBER_WORDS[len(qemu_boards())],),
              "common/src/target.rs (Kind::Qemu rows)"),
        Claim(README, r"MQAR accuracy within ([\d.]+) of f32 on all (\d+) models",
              lambda: (f"{max_change('mqar', 'int8_tiled', 'accuracy', True):.4f}", str(len(metrics("mqar")))), mq),
        Claim(README, r"\+([\d.]+) / \+([\d.]+) bits per byte on the LMs",
              lambda: tuple(f"{m['runtime']['int8_tiled']['bits_per_byte'] - m['runtime']['f32']['bits_per_byte']:.4f}"
                            for m in (metrics("lm")["small"], metrics("lm")["large"])),
              "models/lm/{small,large}/metrics.json"),
        Claim("docs/models.md", r"\(these columns\), \+([\d.]+) / \+([\d.]+) on the integer path",
              lambda: tuple(f"{m['runtime']['int8_tiled']['bits_per_byte'] - m['runtime']['f32']['bits_per_byte']:.4f}"
                            for m in (metrics("lm")["small"], metrics("lm")["large"])),
              "models/lm/{small,large}/metrics.json"),
        Claim(README, r"row-major \(`--layout rows`\) costs at most ([\d.]+) accuracy and ([\d.]+) bits per byte",
              lambda: (f"{max_change('mqar', 'int8', 'accuracy', True):.4f}", f"{lm_bpb_change('int8'):.4f}"),
              f"{mq}, {lm} (int8: row-major)"),
        Claim(README, r"int8 on the integer path \(the default tiled layout\) at most ([\d.]+) and ([\d.]+)",
              lambda: (f"{max_change('mqar', 'int8_tiled', 'accuracy', True):.4f}", f"{lm_bpb_change('int8_tiled'):.4f}"),
              f"{mq}, {lm} (int8_tiled)"),
        Claim(README, r"lose ([\d.]+)% \(large\) and ([\d.]+)% \(small\) bits per byte",
              lambda: (qat4_loss("lm-large-qat4", "large"), qat4_loss("lm-small-qat4", "small")),
              "models/qat4/*/metrics.json, models/lm/*/metrics.json"),
        Claim(README, r"post-training int4 loses (\d+)-(\d+)%", ptq_int4_losses, "models/lm/{small,large}/metrics.json"),
        Claim(README, r"`models/lm/en-m4f` — a ([\d.]+)M-param",
              lambda: (f"{metrics('lm')['en-m4f']['params'] / 1e6:.1f}",), "models/lm/en-m4f/metrics.json"),
        Claim(README, r"its int8 image \(([\d.]+) MB\) is the demo",
              lambda: (f"{metrics('lm')['en-m4f']['runtime']['int8_tiled']['image_bytes'] / 1e6:.1f}",),
              "models/lm/en-m4f/metrics.json"),
        Claim(README, r"`models/lm/en-m3` — (\d+)k params, the same data; its int8 image \((\d+) KB\) and (\d+) KB session",
              lambda: (kb(metrics("lm")["en-m3"]["params"]), kb(metrics("lm")["en-m3"]["runtime"]["int8_tiled"]["image_bytes"]),
                       kb(metrics("lm")["en-m3"]["runtime"]["int8_tiled"]["ram_bytes"])), "models/lm/en-m3/metrics.json"),
        Claim(README, r"`en-m4f` \(([\d.]+) bits per byte\)",
              lambda: (f"{metrics('lm')['en-m4f']['runtime']['f32']['bits_per_byte']:.1f}",),
              "models/lm/en-m4f/metrics.json"),
        Claim(README, r"# flash: (\d+) of (\d+) bytes \(([\d.]+)%\) # RAM: (\d+) of (\d+) bytes \(([\d.]+)%",
              lambda: chip_row("rp2350"), "docs/chips.md's measured table (cargo xtask chips --record)"),
        Claim(README, r"\*\*Fuzzing\*\*: (\w+) targets", lambda: (NUMBER_WORDS[len(fuzz_targets())],), "fuzz/targets.txt"),
        Claim(README, r"(\d+ h \d+) worker-minutes of earlier runs",
              lambda: doc_match("docs/fuzzing.md", r"\*\*(\d+ h \d+) worker-minutes\*\* in all"),
              "docs/fuzzing.md (the campaigns' record)"),
        Claim(README, r"one campaign of (\d+) worker-minutes over all (\w+)",
              lambda: (doc_match("docs/fuzzing.md", r"= \*\*(\d+) worker-minutes\*\* \(")[0],
                       doc_match("docs/fuzzing.md", r"worker-hours\s+over all (\w+) targets")[0]),
              "docs/fuzzing.md (campaign 2's record: the targets of its day)"),
        Claim(README, r"measured ([\d.e-]+ - [\d.e-]+)\)",
              lambda: doc_match("docs/testing.md", r"1e-4 relative to the largest logit \| ([\d.e-]+ - [\d.e-]+) \|"),
              "docs/testing.md's tolerance table (tests/tests/fla.rs's printed figures)"),
        Claim("docs/fla.md", r"ferrite's logits agree to ([\d.e-]+ - [\d.e-]+) relative \(bound 1e-4",
              lambda: doc_match("docs/testing.md", r"1e-4 relative to the largest logit \| ([\d.e-]+ - [\d.e-]+) \|"),
              "docs/testing.md's tolerance table (tests/tests/fla.rs's printed figures)"),
        Claim("docs/fla.md", r"host: RWKV-7 ([\d,]+) bytes flash and ([\d,]+) bytes RAM \(([\d,]+) state\), "
                             r"Mamba-2 ([\d,]+) and ([\d,]+) \(([\d,]+) state\)",
              lambda: tuple(f"{int(stats(f'lm-{m}-m3-m3')[k]):,}" for m in ("rwkv7", "mamba2")
                            for k in ("flash_bytes", "ram_bytes", "state_bytes")),
              "boards/expected/lm-rwkv7-m3-m3.stats, lm-mamba2-m3-m3.stats"),
        *(Claim("models/lm/README.md", rf"`{m}/` \| ([\d,]+) \|.*?lm3s6965: int8 image ([\d,]+) B, session RAM "
                                       r"([\d,]+) B \(([\d,]+) state\)",
                lambda m=m: (f"{metrics('lm')[m]['params']:,}",
                             *(f"{metrics('lm')[m]['runtime']['int8_tiled'][k]:,}"
                               for k in ("image_bytes", "ram_bytes", "state_bytes"))),
                f"models/lm/{m}/metrics.json") for m in ("rwkv7-m3", "mamba2-m3")),
        Claim("models/lm/README.md", r"420 s after a (\d+) s warm-up \(kernel compiles outside the clock\), ([\d,]+) "
                                     r"steps\. PyTorch bits per byte \(f32, no TF32\) ([\d.]+) / ([\d.]+):",
              lambda: (f"{metrics('lm')['mamba2-m3']['training']['warmup_seconds']:.0f}",
                       f"{metrics('lm')['mamba2-m3']['training']['steps']:,}",
                       *(f"{metrics('lm')['mamba2-m3']['pytorch'][k]:.4f}" for k in ("bits_per_byte", "bits_per_byte_fortunes"))),
              "models/lm/mamba2-m3/metrics.json"),
        Claim("models/lm/README.md", r"took (\d+) s, so the call's end time left it (\d+) s: ([\d,]+) steps, ([\d.]+) / "
                                     r"([\d.]+) \(PyTorch in bf16; the runtime's f32 ([\d.]+) / ([\d.]+)\)",
              lambda: (f"{metrics('lm')['rwkv7-m3']['training']['warmup_seconds']:.0f}",
                       f"{metrics('lm')['rwkv7-m3']['training']['seconds']:.0f}",
                       f"{metrics('lm')['rwkv7-m3']['training']['steps']:,}",
                       *(f"{figures[k]:.4f}" for figures in (metrics('lm')['rwkv7-m3']['pytorch'],
                                                             metrics('lm')['rwkv7-m3']['runtime']['f32'])
                         for k in ("bits_per_byte", "bits_per_byte_fortunes"))),
              "models/lm/rwkv7-m3/metrics.json"),
        Claim("docs/models.md", r"Mamba-2 \(([\d,]+) steps, f32\) is the best M3-sized LM here: ([\d.]+) on the "
                                r"English text at int8 against `en-m3`'s ([\d.]+),",
              lambda: (f"{metrics('lm')['mamba2-m3']['training']['steps']:,}",
                       *(f"{metrics('lm')[m]['runtime']['int8_tiled']['bits_per_byte']:.3f}" for m in ("mamba2-m3", "en-m3"))),
              "models/lm/{mamba2-m3,en-m3}/metrics.json"),
        Claim("docs/models.md", r"RWKV-7 \(([\d,]+) steps in bf16: fla's kernel compiles took (\d+) of the call's "
                                r"seconds\) reaches ([\d.]+);",
              lambda: (f"{metrics('lm')['rwkv7-m3']['training']['steps']:,}",
                       f"{metrics('lm')['rwkv7-m3']['training']['warmup_seconds']:.0f}",
                       f"{metrics('lm')['rwkv7-m3']['runtime']['int8_tiled']['bits_per_byte']:.3f}"),
              "models/lm/rwkv7-m3/metrics.json"),
        Claim("docs/models.md", r"int8 next to the firmware: ([\d,]+) of 262,144 bytes",
              lambda: (f"{int(stats('lm-en-m3-m3')['flash_bytes']):,}",), "boards/expected/lm-en-m3-m3.stats"),
        Claim("docs/models.md", r"int8 is within ([\d.]+) of it \(the target",
              lambda: (f"{max_change('mqar', 'int8', 'accuracy', True):.3f}",), mq),
        Claim("docs/models.md", r"\(`--layout tiled`, the default now\) is within ([\d.]+) of f32 on every model",
              lambda: (f"{max_change('mqar', 'int8_tiled', 'accuracy', True):.4f}",), mq),
        Claim("docs/models.md", r"loses up to (\d+) points \(`swa-w64` ([\d.]+) -> ([\d.]+)\)",
              lambda: (f"{100 * max_change('mqar', 'int4', 'accuracy', True):.0f}",
                       f"{metrics('mqar')['swa-w64']['runtime']['f32']['accuracy']:.2f}",
                       f"{metrics('mqar')['swa-w64']['runtime']['int4']['accuracy']:.2f}"), mq),
        Claim("docs/models.md", r"int8 image (\d+) KB of its 256 KB flash, and a (\d+) KB session",
              lambda: (kb(metrics("lm")["small"]["runtime"]["int8"]["image_bytes"]),
                       kb(metrics("lm")["small"]["runtime"]["int8"]["ram_bytes"])), "models/lm/small/metrics.json"),
        Claim("docs/models.md", r"int8 costs \+([\d.]+) / \+([\d.]+) bits per byte row-major",
              lambda: lm_changes("int8"), lm),
        Claim("docs/models.md", r"costs ([\d.]+)-([\d.]+) bits per byte on these small models",
              lambda: (f"{min(float(x) for x in lm_changes('int4')):.1f}",
                       f"{max(float(x) for x in lm_changes('int4')):.2f}"), lm),
        Claim("docs/models.md", r"([\d.]+) bits per byte on the fortunes' held-out text against `small`'s ([\d.]+)\.",
              lambda: (pytorch_bpb("en-m3", "bits_per_byte_fortunes"), pytorch_bpb("small")), lm + " (pytorch)"),
        Claim("docs/models.md", r"from scratch: ([\d.]+) on the English text, ([\d.]+) on the fortunes' \(`large`: ([\d.]+)\)",
              lambda: (pytorch_bpb("en-m4f"), pytorch_bpb("en-m4f", "bits_per_byte_fortunes"), pytorch_bpb("large")),
              lm + " (pytorch)"),
        Claim("docs/quantization.md", r"The LMs lose \+([\d.]+) \(small\) and \+([\d.]+) \(large\) bits per byte",
              lambda: lm_changes("int8_tiled"), lm),
        Claim("docs/quantization.md", r"MQAR accuracy moves by at most (.+?)\. A spot check",
              lambda: (largest_mqar_changes("int8_tiled", 6),), mq),
        Claim("docs/quantization.md", r"Row-major int8 \(the same weights' error, f32 activations\) costs \+([\d.]+) / "
              r"\+([\d.]+) bits per byte; the rest, \+([\d.]+) / \+([\d.]+), is the int8 activations",
              lambda: lm_changes("int8") + tuple(
                  f"{metrics('lm')[n]['runtime']['int8_tiled']['bits_per_byte'] - metrics('lm')[n]['runtime']['int8']['bits_per_byte']:.4f}"
                  for n in ("small", "large")), lm),
        Claim("docs/soak.md", r"worse than `ferrite eval`'s ([\d.]+) / ([\d.]+) because",
              lambda: tuple(f"{metrics('lm')[n]['runtime']['int8_tiled']['bits_per_byte']:.4f}" for n in ("small", "large")),
              lm + " (int8_tiled: the soak's images)"),
        Claim("docs/integer-path.md", r"per byte on both texts \(largest \+([\d.]+)\)",
              lambda: (f"{lm_bpb_change('int8_int'):.4f}",), lm + " (int8_int)"),
        Claim("docs/integer-path.md", r"`swa-s4-w28` \(4 sinks, window 28: ([\d.+-]+), against the f32 path's ([\d.+-]+);",
              lambda: tuple(f"{change(metrics('mqar')['swa-s4-w28']['runtime'], v, 'accuracy'):+.4f}"
                            for v in ("int8_int", "int8_tiled")), "models/mqar/swa-s4-w28/metrics.json"),
        Claim("docs/integer-path.md", r"`mqar/swa-s4-w28` misses the MQAR bar \(([\d.+-]+)\)",
              lambda: (f"{change(metrics('mqar')['swa-s4-w28']['runtime'], 'int8_int', 'accuracy'):+.4f}",),
              "models/mqar/swa-s4-w28/metrics.json"),
        Claim("docs/chips.md", r"`models/lm/small` quantized to int8: (\d+)k parameters, a (\d+) KB image, a (\d+) KB session",
              lambda: (kb(metrics("lm")["small"]["params"]), kb(metrics("lm")["small"]["runtime"]["int8_tiled"]["image_bytes"]),
                       kb(metrics("lm")["small"]["runtime"]["int8_tiled"]["ram_bytes"])), "models/lm/small/metrics.json"),
    ]
    claims.append(Claim("docs/state-study.md", r"scored the same or worse \(swa ([\d.]+) -> ([\d.]+) at ([\d.]+)x the "
                        r"state, mla ([\d.]+) -> ([\d.]+), gsa ([\d.]+) -> ([\d.]+), gdn ([\d.]+) -> ([\d.]+), bla ([\d.]+) -> "
                        r"([\d.]+)\)", lm_side_sizes, "models/lm-side/*/metrics.json (runtime f32)"))
    claims.append(Claim("docs/state-study.md", r"the best run is mla with a 32-token window \(([\d.]+)\); from (\d+) KiB "
                        r"\(([\d,]+) bytes a layer\), swa with a 32-token window \(([\d.]+)\)",
                        lambda: (bpb_of("lms-mla-w32"), f"{lm_side_state('lms-swa-w32') // 1024}",
                                 f"{lm_side_state('lms-swa-w32') // 4:,}", bpb_of("lms-swa-w32")),
                        "models/lm-side/*/metrics.json (runtime f32)"))
    for path, pattern in ((README, r"on (\d+) random configurations made at test time"),
                          ("docs/design.md", r"on (\d+) random configurations generated at test time"),
                          ("docs/spec.md", r"runtime \(CLI\) vs the reference, (\d+) random configurations"),
                          ("docs/testing.md", r"runtime vs reference on (\d+) random configurations")):
        claims.append(Claim(path, pattern, configs, "tools/python/tests/test_runtime_parity.py (its seeds)"))
    accuracy = "docs/quantization.md's accuracy table (historical, 518ba12)"
    claims.append(Claim(README, r"logit error f16 ([\d.e-]+), int8 ([\d.e-]+) \(row-major\) / ([\d.e-]+) \(tiled\), "
                        r"int4 ([\d.e-]+);",
                        lambda: tuple(doc_match("docs/quantization.md", rf"\| {d} \| ([\d.e-]+) \|")[0]
                                      for d in ("f16", "int8 rows", "int8 tiled", "int4 rows")), accuracy))
    claims.append(Claim(README, r"on a 3.6M-param model \(measured ([\d.]+)% / ([\d.]+)%\)",
                        lambda: tuple(doc_match("docs/quantization.md", rf"group 64 \| {d} rows \| [^|]+\| [^|]+\| "
                                                rf"\*\*([\d.]+)%\*\*")[0] for d in ("int8", "int4")),
                        "docs/quantization.md's size table (historical, 518ba12)"))
    claims.append(Claim("docs/fuzzing.md", r"merged again with `-merge=1` — (\d+ files, [\d.]+ [KM]B)",
                        lambda: (corpus("load_and_feed"),), "fuzz/corpus/load_and_feed/"))
    for board, tokens in (("m4f", 64), ("m4f", 256), ("rv32imac", 64), ("rv32imac", 256)):
        claims.append(Claim(README, rf"\| {board} \| [^|]+ \| {tokens} tokens \| ([\d,.]+M) \| ([\d,.]+M) \| ([\d.]+x) \|",
                            lambda board=board, tokens=tokens: baked_row(board, tokens),
                            "docs/snapshot-format.md's bake-gain block (cargo xtask bake-gain)"))
    for name in fuzz_targets():
        # A committed corpus (a fuzz run leaves an empty folder where none is).
        folder = ROOT / "fuzz" / "corpus" / name
        if folder.is_dir() and any(folder.iterdir()):
            claims.append(Claim("docs/fuzzing.md", rf"`fuzz/corpus/{name}/` \((\d+ files, [\d.]+ [KM]B)\)",
                                lambda name=name: (corpus(name),), f"fuzz/corpus/{name}/"))
    return claims


def baked_row(board: str, tokens: int) -> tuple:
    """README's rounding of docs/snapshot-format.md's bake-gain row for ``board`` and a ``tokens``-token prompt:
    fed and baked instructions in millions, and the gain."""
    fed, baked, gain = doc_match("docs/snapshot-format.md",
                                 rf"\| {board} \| [^|]+ \| {tokens} \| ([\d,]+) \| ([\d,]+) \| ([\d.]+x) \|")
    return (f"{int(fed.replace(',', '')) / 1e6:,.1f}M", f"{int(baked.replace(',', '')) / 1e6:,.1f}M", gain)


def bpb_of(name: str) -> str:
    """The runtime's f32 bits per byte of models/lm-side/``name``, as the docs print it."""
    return f"{json.loads((ROOT / 'models/lm-side' / name / 'metrics.json').read_text())['runtime']['f32']['bits_per_byte']:.4f}"


def lm_side_state(name: str) -> int:
    """The state bytes of models/lm-side/``name``, all layers together (the runtime's)."""
    return sum(json.loads((ROOT / "models/lm-side" / name / "metrics.json").read_text())["runtime"]["state_bytes_per_layer"])


def lm_side_sizes() -> tuple:
    """docs/state-study.md's "more state helped no family": each family's two sizes, and swa's ratio of states."""
    pairs = (("swa-w32", "swa-w128"), ("mla-w32", "mla-w128"), ("gsa-m16", "gsa-m64"), ("gdn-h2-k16", "gdn-h1-k32"),
             ("bla-p64-m4", "bla-p256-m16"))
    out = [bpb_of("lms-swa-w32"), bpb_of("lms-swa-w128"),
           f"{lm_side_state('lms-swa-w128') / lm_side_state('lms-swa-w32'):.1f}"]
    for small, large in pairs[1:]:
        out += [bpb_of(f"lms-{small}"), bpb_of(f"lms-{large}")]
    return tuple(out)


CLAIMS = _claims()


def check_claim(claim: Claim, text: str | None = None) -> list:
    """The differences of one claim: ``[]`` when every match quotes the source's figures."""
    text = " ".join(((ROOT / claim.path).read_text() if text is None else text).split())
    matches = list(re.finditer(claim.pattern, text))
    if not matches:
        return [f"{claim.path}: {claim.pattern!r} not found"]
    want = tuple(claim.value())
    return [f"{claim.path}: {m.group(0)!r} quotes {m.groups()}, {claim.source} gives {want}"
            for m in matches if m.groups() != want]


def check_block(block: Block, text: str | None = None) -> list:
    """The difference of one block: ``[]`` when its text is its generator's."""
    have, want = block.text() if text is None else text, block.body()
    if have == want:
        return []
    pairs = zip(have.splitlines() + [""] * len(want), want.splitlines() + [""] * len(have))
    first = next(((h, w) for h, w in pairs if h != w), (repr(have[-20:]), repr(want[-20:])))  # whitespace only
    return [f"{block.path}: the {block.name} block is not what `{block.command}` writes; first difference:\n"
            f"  doc:       {first[0]}\n  generated: {first[1]}"]


def check() -> list:
    """Every difference between the docs and their sources."""
    return ([d for b in BLOCKS for d in check_block(b)] + [d for t in TABLES for d in check_table(t)]
            + [d for c in CLAIMS for d in check_claim(c)])


def write() -> None:
    """Rewrites README.md's board table from boards/expected/."""
    path = ROOT / README
    text = path.read_text()
    start, end = "<!-- board-table:start -->", "<!-- board-table:end -->"
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(head + start + board_table() + end + tail)


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--write"]:
        write()
        return 0
    if args:
        print(__doc__)
        return 2
    diffs = check()
    for d in diffs:
        print(d)
    print(f"{len(BLOCKS)} blocks, {len(TABLES)} tables, {len(CLAIMS)} claims: {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
