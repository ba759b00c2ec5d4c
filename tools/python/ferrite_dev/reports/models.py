"""Print the markdown tables of docs/models.md from the shipped models' metrics.json files.

    ferrite-models-report            # tables for docs/models.md, on stdout
    ferrite-models-report --readme   # rewrite README.md's model section (and models.md's English LMs)
    ferrite-models-report --integer  # the integer path's tables for docs/quantization.md
    ferrite-models-report --int4     # the int4 tables for docs/quantization.md
    ferrite-models-report --token-path  # docs/integer-path.md's "Measured" table

(``python -m ferrite_dev.reports.models``.) Families are sorted as
``families.ORDER`` (the runtime's mixer kinds and their variants).
"""

from __future__ import annotations

import csv
import json
import sys

from .. import REPO_ROOT as ROOT
from . import evaluate
from .families import present, rank

COMMAND = "ferrite-models-report"


def mqar_table() -> str:
    rows = []
    for m in (ROOT / "models/mqar").glob("*/metrics.json"):
        d = json.loads(m.read_text())
        rows.append(d)
    rows.sort(key=lambda d: (rank(d["family"]), d["runtime"]["state_bytes_per_layer"][0]))
    out = ["| model | family | state/layer (runtime) | core state/layer | params | lr | steps | PyTorch | runtime f32 | int8 | int4 | int8 image |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for d in rows:
        rt = d["runtime"]
        out.append(f"| `{d['name']}` | {d['family']} | {rt['state_bytes_per_layer'][0]} | {d['core_state_bytes_per_layer'][0]} "
                   f"| {d['params']} | {d['training']['lr_max']:g} | {d['training']['steps_run']} "
                   f"| {d['pytorch']['accuracy']:.4f} | {rt['f32']['accuracy']:.4f} | {rt['int8']['accuracy']:.4f} "
                   f"| {rt['int4']['accuracy']:.4f} | {rt['int8']['image_bytes']} |")
    return "\n".join(out)


def runs_table() -> str:
    rows = list(csv.DictReader(open(ROOT / "models/mqar/runs.csv")))
    out = ["| run | family | core state/layer | lr | seed | round | steps | final train loss | PyTorch acc | shipped |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|:-:|"]
    rows.sort(key=lambda r: (rank(r["family"]), int(r["core_state_bytes_per_layer"]), r["run"]))
    for r in rows:
        out.append(f"| `{r['run']}` | {r['family']} | {r['core_state_bytes_per_layer']} | {float(r['lr']):g} | {r['seed']} "
                   f"| {r['round']} | {r['steps']} | {float(r['final_train_loss']):.3f} | {float(r['pytorch_accuracy']):.4f} "
                   f"| {'yes' if r['shipped'] == 'True' else ''} |")
    return "\n".join(out)


def lm_table() -> str:
    out = ["| model | params | layers | PyTorch | runtime f32 | int8 | int4 | int8 image | RAM (session) | state |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for size in ("small", "large"):
        d = json.loads((ROOT / "models/lm" / size / "metrics.json").read_text())
        cfg = json.loads((ROOT / "models/lm" / size / "config.json").read_text())
        rt = d["runtime"]
        layers = "/".join(layer["mixer"] for layer in cfg["layers"])
        out.append(f"| `models/lm/{size}` | {d['params']} | {layers} (d={cfg['hidden_size']}) "
                   f"| {d['pytorch']['bits_per_byte']:.4f} | {rt['f32']['bits_per_byte']:.4f} "
                   f"| {rt['int8']['bits_per_byte']:.4f} | {rt['int4']['bits_per_byte']:.4f} "
                   f"| {rt['int8']['image_bytes']} | {rt['int8']['ram_bytes']} | {rt['int8']['state_bytes']} |")
    return "\n".join(out)


# The LMs trained on the English text: ferrite's own hybrids, then fla's RWKV-7 and
# Mamba-2 (ferrite_train.fla_lm, issue 27) at en-m3's budget.
ENGLISH_LMS = ("en-m3", "en-m4f", "rwkv7-m3", "mamba2-m3")


def layers_of(cfg: dict) -> str:
    """A model's layers as the tables show them: ferrite's mixer per layer, or an fla
    checkpoint's model type and depth."""
    if "layers" in cfg:
        return "/".join(layer["mixer"] for layer in cfg["layers"])
    return f"{cfg['model_type']} x {cfg['num_hidden_layers']}"


def english_lm_table() -> str:
    """The LMs trained on the English text (models/lm/README.md): bits per byte on its
    held-out part and on the fortunes' held-out text, PyTorch and the runtime (f32 and
    the default int8 / int4 images: tiled layout)."""
    out = ["| model | params | layers | held-out text | PyTorch | runtime f32 | int8 | int4 | int8 image | RAM (session) | state |",
           "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ENGLISH_LMS:
        d = json.loads((ROOT / "models/lm" / name / "metrics.json").read_text())
        cfg = json.loads((ROOT / "models/lm" / name / "config.json").read_text())
        rt = d["runtime"]
        layers = layers_of(cfg)
        for key, text in (("bits_per_byte", "heldout-english.txt"), ("bits_per_byte_fortunes", "heldout.txt")):
            first = key == "bits_per_byte"
            out.append(f"| `models/lm/{name}` | {d['params'] if first else ''} "
                       f"| {layers + ' (d=' + str(cfg['hidden_size']) + ')' if first else ''} | {text} "
                       f"| {d['pytorch'][key]:.4f} | {rt['f32'][key]:.4f} | {rt['int8_tiled'][key]:.4f} "
                       f"| {rt['int4_tiled'][key]:.4f} | {rt['int8_tiled']['image_bytes'] if first else ''} "
                       f"| {rt['int8_tiled']['ram_bytes'] if first else ''} | {rt['int8_tiled']['state_bytes'] if first else ''} |")
    return "\n".join(out)


def state_efficiency_table() -> str:
    """MQAR accuracy (runtime, int8) per family against runtime state bytes per layer."""
    by_family: dict = {}
    for m in (ROOT / "models/mqar").glob("*/metrics.json"):
        d = json.loads(m.read_text())
        rt = d["runtime"]
        by_family.setdefault(d["family"], []).append(
            (rt["state_bytes_per_layer"][0], rt["int8"]["accuracy"], rt["f32"]["accuracy"]))
    out = ["| family | state bytes per layer -> MQAR accuracy (runtime, int8; f32 in brackets) |", "|---|---|"]
    for family in present(by_family):
        cells = [f"{b / 1024:.1f} KB: **{a8:.3f}** ({a32:.3f})" for b, a8, a32 in sorted(by_family[family])]
        out.append(f"| {family} | " + " · ".join(cells) + " |")
    return "\n".join(out)


# The integer path's targets against f32 (docs/quantization.md).
MAX_BPB_RISE, MAX_ACCURACY_CHANGE = 0.01, 0.005
VARIANTS = [("f32", "f32"), ("int8", "int8 rows"), ("int8_tiled", "int8 tiled"),
            ("int4", "int4 rows"), ("int4_tiled", "int4 tiled")]


def _integer_row(name: str, rt: dict, key: str) -> str:
    f32 = rt["f32"][key]

    def delta(v: str) -> float:
        if key == "accuracy":  # exact, from the counts of 8,000 queries
            return (rt[v]["correct"] - rt["f32"]["correct"]) / 8000
        return rt[v][key] - f32

    def ok(v: str) -> bool:
        return abs(delta(v)) <= MAX_ACCURACY_CHANGE if key == "accuracy" else delta(v) <= MAX_BPB_RISE

    cells = [f"{f32:.4f}"] + [f"{rt[v][key]:.4f} ({delta(v):+.4f}){'' if ok(v) else ' ✗'}"
                              for v, _ in VARIANTS[1:]]
    met = "**yes**" if ok("int8_tiled") else "**no**"
    sizes = " / ".join(str(rt[v]["image_bytes"]) for v, _ in VARIANTS)
    return f"| `{name}` | " + " | ".join(cells) + f" | {met} | {sizes} |"


def integer_tables() -> str:
    """docs/quantization.md's tables: every shipped model at f32 and int8/int4 in both
    layouts (metrics.json, written by ``ferrite-eval-models``), the change against f32, whether
    int8 on the integer path meets the target, and the image sizes."""
    head = (" | f32 | " + " | ".join(label for _, label in VARIANTS[1:])
            + " | int8 tiled meets the target | image bytes: " + " / ".join(label for _, label in VARIANTS) + " |\n"
            + "|---|" + "---:|" * (len(VARIANTS) + 2))
    lm = ["| model (bits per byte, heldout.txt; target +0.01)" + head]
    for size in ("small", "large"):
        d = json.loads((ROOT / "models/lm" / size / "metrics.json").read_text())
        lm.append(_integer_row(f"lm/{size}", d["runtime"], "bits_per_byte"))
    mq = ["| model (MQAR accuracy, 1,000 sequences of seed 0; target ±0.005)" + head]
    rows = [json.loads(m.read_text()) for m in (ROOT / "models/mqar").glob("*/metrics.json")]
    rows.sort(key=lambda d: (rank(d["family"]), d["runtime"]["state_bytes_per_layer"][0]))
    for d in rows:
        mq.append(_integer_row(d["name"], d["runtime"], "accuracy"))
    return "\n".join(lm) + "\n\n" + "\n".join(mq)


# Issue 24's quality bar for the integer token path against the f32 image:
# bits per byte within +0.01, MQAR accuracy within 0.01 (1,000 sequences).
TOKEN_PATH_MAX_BPB_RISE, TOKEN_PATH_MAX_ACCURACY_CHANGE = 0.01, 0.01


def token_path_table() -> str:
    """docs/integer-path.md's "Measured" table: every shipped model at f32, int8 on the
    f32 path (tiled) and int8 on the integer token path (`int8_int`, image format 6), the
    change against f32 (✗ past issue 24's bar) and the state bytes of the f32 and the
    integer-path image (layers without an integer step keep f32 states)."""
    out = ["| model | figure | f32 | int8 (f32 path) | int8, integer token path | state bytes: f32 / integer |",
           "|---|---|---:|---:|---:|---:|"]

    def cells(rt: dict, key: str) -> str:
        if key == "accuracy":  # exact, from the counts of 8,000 queries
            d = (rt["int8_int"]["correct"] - rt["f32"]["correct"]) / 8000
            ok = abs(d) <= TOKEN_PATH_MAX_ACCURACY_CHANGE
        else:
            d = rt["int8_int"][key] - rt["f32"][key]
            ok = d <= TOKEN_PATH_MAX_BPB_RISE
        return (f"{rt['f32'][key]:.4f} | {rt['int8_tiled'][key]:.4f} | "
                f"{rt['int8_int'][key]:.4f} ({d:+.4f}){'' if ok else ' ✗'}")

    def states(rt: dict) -> str:
        return f"{rt['f32']['state_bytes']:,} / {rt['int8_int']['state_bytes']:,}"

    mqar = [json.loads(m.read_text()) for m in (ROOT / "models/mqar").glob("*/metrics.json")]
    mqar.sort(key=lambda d: (rank(d["family"]), d["runtime"]["state_bytes_per_layer"][0], d["name"]))
    for d in mqar:
        rt = d["runtime"]
        out.append(f"| `mqar/{d['name']}` | MQAR accuracy | {cells(rt, 'accuracy')} | {states(rt)} |")
    for name in ("small", "large", *ENGLISH_LMS):
        d = json.loads((ROOT / "models/lm" / name / "metrics.json").read_text())
        rt, refusal = d["runtime"], evaluate.token_path_refusal(d)
        texts = [("bits_per_byte", "heldout.txt")]
        if "bits_per_byte_fortunes" in rt["f32"]:
            texts = [("bits_per_byte", "heldout-english.txt"), ("bits_per_byte_fortunes", "heldout.txt")]
        for i, (key, text) in enumerate(texts):
            if refusal:  # no integer-path image: the quantizer refuses it
                row = f"{rt['f32'][key]:.4f} | {rt['int8_tiled'][key]:.4f} | refused: {refusal}"
                state = f"{rt['f32']['state_bytes']:,} / —"
            else:
                row, state = cells(rt, key), states(rt)
            out.append(f"| {'`lm/' + name + '`' if i == 0 else ''} | bits per byte, {text} | {row} "
                       f"| {state if i == 0 else ''} |")
    return "\n".join(out)


# issue 11's int4 targets against f32: bits per byte at most 1.03 x (lm/large) and
# 1.05 x (lm/small); MQAR models with f32 accuracy >= 0.5 lose at most 0.03; the
# int4 image at most 0.6 x the int8 (tiled) image.
INT4_BPB_RATIO = {"lm/small": 1.05, "lm/large": 1.03}
INT4_MQAR_LOSS, INT4_MQAR_FROM, INT4_SIZE = 0.03, 0.5, 0.6


def int4_tables() -> str:
    """docs/quantization.md's int4 tables: every shipped model at f32, int4 absmax
    (the scheme before the search, row-major: the recorded `int4`), the int4 default
    (`int4_tiled`) and calibrated (`int4_calibrated`), against issue 11's targets."""
    def row(name: str, rt: dict, key: str, target) -> str:
        f32 = rt["f32"][key]
        cells = [f"{f32:.4f}"]
        marks = {}
        for v in ("int4", "int4_tiled", "int4_calibrated"):
            x = rt[v][key]
            if key == "accuracy":
                d = (rt[v]["correct"] - rt["f32"]["correct"]) / 8000
                ok = f32 < INT4_MQAR_FROM or -d <= INT4_MQAR_LOSS
                cells.append(f"{x:.4f} ({d:+.4f}){'' if ok else ' ✗'}")
            else:
                ok = x <= target * f32
                cells.append(f"{x:.4f} ({x / f32:.3f} x){'' if ok else ' ✗'}")
            marks[v] = ok
        ratio = rt["int4_tiled"]["image_bytes"] / rt["int8_tiled"]["image_bytes"]
        size_ok = ratio <= INT4_SIZE
        cells.append(f"{rt['int8_tiled']['image_bytes']} / {rt['int4_tiled']['image_bytes']} "
                     f"({ratio:.3f}){'' if size_ok else ' ✗'}")
        return f"| `{name}` | " + " | ".join(cells) + " |"

    head = (" | f32 | int4 absmax (rows, before) | int4 default | int4 calibrated | "
            "image bytes int8 / int4 (ratio; target <= 0.6) |\n|---|---:|---:|---:|---:|---:|")
    lm = ["| model (bits per byte, heldout.txt; target <= 1.03 x f32 large, 1.05 x small)" + head]
    for size in ("small", "large"):
        d = json.loads((ROOT / "models/lm" / size / "metrics.json").read_text())
        lm.append(row(f"lm/{size}", d["runtime"], "bits_per_byte", INT4_BPB_RATIO[f"lm/{size}"]))
    mq = ["| model (MQAR accuracy, 1,000 sequences of seed 0; target: loses <= 0.03 where f32 >= 0.5)" + head]
    rows = [json.loads(m.read_text()) for m in (ROOT / "models/mqar").glob("*/metrics.json")]
    rows.sort(key=lambda d: (rank(d["family"]), d["runtime"]["state_bytes_per_layer"][0]))
    for d in rows:
        mq.append(row(d["name"], d["runtime"], "accuracy", None))
    return "\n".join(lm) + "\n\n" + "\n".join(mq)


START, END = "<!-- models:start -->", "<!-- models:end -->"


EN_START, EN_END = "<!-- english-lm:start -->", "<!-- english-lm:end -->"


def write_readme() -> None:
    """Replace README.md's text between the model markers with the generated tables,
    and docs/models.md's English-LM table."""
    readme = ROOT / "README.md"
    text = readme.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    body = (f"\n<!-- generated by {COMMAND} --readme; do not edit -->\n\n"
            + state_efficiency_table() + "\n\nLanguage models, bits per byte on `models/lm/heldout.txt`"
            " (PyTorch, and the runtime at each weight dtype):\n\n" + lm_table()
            + "\n\nThe English LMs (models/lm/README.md), bits per byte on both held-out texts "
            "(int8 / int4: the default tiled images):\n\n" + english_lm_table() + "\n")
    readme.write_text(head + START + body + END + tail)
    # docs/models.md's English-LM table.
    models_md = ROOT / "docs" / "models.md"
    text = models_md.read_text()
    head, rest = text.split(EN_START, 1)
    _, tail = rest.split(EN_END, 1)
    body = f"\n<!-- generated by {COMMAND} --readme; do not edit -->\n\n" + english_lm_table() + "\n"
    models_md.write_text(head + EN_START + body + EN_END + tail)


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--readme"]:
        write_readme()
    elif args == ["--int4"]:
        print(int4_tables())
    elif args == ["--integer"]:
        print(integer_tables())
    elif args == ["--token-path"]:
        print(token_path_table())
    else:
        print("## MQAR (shipped)\n\n" + mqar_table() + "\n\n## MQAR (all runs)\n\n" + runs_table()
              + "\n\n## LM\n\n" + lm_table() + "\n\n## English LMs\n\n" + english_lm_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
