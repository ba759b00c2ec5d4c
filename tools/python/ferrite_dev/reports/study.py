"""The state-efficiency study (issue 15): MQAR with 256 tokens, 16 pairs, spread queries.

    ferrite-study-report --import R2 R3 R4 R6 R7 R8 R9 R10 R11  # once: the device rounds -> models/mqar-256
    ferrite-study-report --eval [--bin B] [--only S] [--variants f32 int8 int8_int]
                                                      # runtime accuracy into metrics.json
    ferrite-study-report                              # docs tables (stdout) + docs/state-study.svg
    ferrite-study-report --readme                     # the tables in README.md and docs/state-study.md

(``python -m ferrite_dev.reports.study``.) `--import` reads the unpacked results
of device rounds 2-4 and 6-11 (tools/python/research/rounds/r2.sh .. r4.sh,
r6.sh .. r11.sh: DIR/sweep|redo|stage2|seeds1|seeds2|long|stage3|short/mqar/<run>/),
writes models/mqar-256/runs.csv (every run) and copies the selected runs' model
dirs. Selection rule, per family and state size, on the validation split only
(500 sequences of seed 500,000; the test set is seed 0): the sweep run (seed 1,
1,500 steps) with the highest validation accuracy, ties to the lower final
training loss; it is resumed for 3,000 more steps (stage 2) unless it already
solved the validation set (early stop at 0.995). Seeds 2 and 3 were run with the
same recipe (metrics only) for every point (rounds 4, 6, 8 and 9). A re-import keeps
the --eval results of a model dir whose weights are unchanged. The runs
themselves are research/study_runs.py's.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from .. import REPO_ROOT as ROOT
from .families import COLORS
from .plots import Chart as Svg

OUT = ROOT / "models" / "mqar-256"
TASK = ["--pairs", "16", "--seq-len", "256", "--queries", "spread"]
COMMAND = "ferrite-study-report"
# The study's families in the order of its tables and plot (each a kind of the
# runtime's table or a variant of one: tests/test_kinds.py checks it).
FAMILIES = ("swa", "swa-sinks", "bla", "gsa", "gdn", "mla")
FIELDS = ["run", "family", "state_kb", "core_state_bytes", "state_bytes", "lr", "seed", "stage", "steps",
          "final_train_loss", "val_accuracy", "test_accuracy", "selected"]


def kb_of(name: str) -> int:
    return int(re.search(r"-(\d+)k-", name).group(1))


def row_of(d: dict, stage: str) -> dict:
    tr = d["training"]
    return {"run": d["name"], "family": d["family"], "state_kb": kb_of(d["name"]),
            "core_state_bytes": d["core_state_bytes_per_layer"][0], "state_bytes": d["state_bytes_per_layer"][0],
            "lr": tr["lr_max"], "seed": tr["torch_seed"], "stage": stage, "steps": tr["steps_run"],
            "final_train_loss": tr["final_train_loss"], "val_accuracy": d["pytorch"]["val_accuracy"],
            "test_accuracy": d["pytorch"]["accuracy"], "selected": ""}


# A device round's output folders -> the stage their runs are (rounds 2-7).
ROUND_STAGES = {"sweep": "sweep", "redo": "sweep", "stage2": "stage2", "seeds1": "seed-sweep",
                "seeds2": "seed-stage2",
                # Rounds 10 and 11, outside the selection protocol (docs/state-study.md, "GDN: steps
                # or lr?"); round 11's runs are named by their stage (CURRICULUM).
                "long": "extra-long", "stage3": "extra-stage3", "short": "extra-curriculum-64"}
CURRICULUM = {"cu64-": "extra-curriculum-64", "cu256-": "extra-curriculum"}


def do_import(*rounds: Path) -> None:
    rows, final = [], {}
    bases = [(stage, r / folder) for r in rounds for folder, stage in ROUND_STAGES.items() if (r / folder).is_dir()]
    sweep_dirs = [base for stage, base in bases if stage == "sweep"]
    for stage, base in bases:
        for m in sorted((base / "mqar").glob("*/metrics.json")):
            d = json.loads(m.read_text())
            rows.append(row_of(d, next((st for p, st in CURRICULUM.items() if d["name"].startswith(p)), stage)))
            if stage == "stage2":
                final[d["name"]] = m.parent
    # The selection (see the module doc), re-derived here from the sweep rows.
    best = {}
    for r in rows:
        if r["stage"] == "sweep":
            key = (r["family"], r["state_kb"])
            score = (r["val_accuracy"], -r["final_train_loss"])
            if key not in best or score > best[key][0]:
                best[key] = (score, r["run"])
    for (family, kb), (_, run) in sorted(best.items()):
        src = final.get(run) or next(p.parent for base in sweep_dirs
                                     for p in (base / "mqar").glob(f"{run}/metrics.json"))
        stage = "stage2" if run in final else "sweep"
        for r in rows:
            if r["run"] == run and r["stage"] == stage:
                r["selected"] = "yes"
        dst = OUT / run
        runtime = None  # the --eval results of the same weights survive a re-import
        if (dst / "metrics.json").exists() and (dst / "model.safetensors").read_bytes() == (
                src / "model.safetensors").read_bytes():
            runtime = json.loads((dst / "metrics.json").read_text()).get("runtime")
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir(parents=True)
        for f in ("config.json", "model.safetensors", "metrics.json", "loss.csv", "loss-stage1.csv"):
            if (src / f).exists():
                shutil.copy(src / f, dst / f)
        if runtime is not None:
            metrics = json.loads((dst / "metrics.json").read_text())
            metrics["runtime"] = runtime
            (dst / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} runs, {len(best)} selected")


def shipped() -> list:
    return sorted(p.parent for p in OUT.glob("*/metrics.json"))


# The runtime variants --eval measures: `ferrite quantize` arguments. int8_int is the
# integer token path (docs/integer-path.md; issue 24's bar for these models: within
# 0.015 of f32).
EVAL_VARIANTS = {
    "f32": ["--dtype", "f32"],
    "int8": ["--dtype", "int8"],
    "int8_int": ["--dtype", "int8", "--layout", "tiled", "--path", "int"],
}


def do_eval(binary: str, only: str = "", variants=("f32", "int8")) -> None:
    """Measures `variants` of every shipped model whose name contains `only` into its
    metrics.json (the variants not measured keep their recorded figures)."""
    for d in [d for d in shipped() if only in d.name]:
        metrics = json.loads((d / "metrics.json").read_text())
        rt = {k: v for k, v in metrics.get("runtime", {}).items() if k != "eval"}
        with tempfile.TemporaryDirectory() as tmp:
            for variant in variants:
                img = Path(tmp) / f"{variant}.fer"
                subprocess.run([binary, "quantize", str(d), "-o", str(img), *EVAL_VARIANTS[variant]],
                               check=True, capture_output=True)
                out = subprocess.run([binary, "eval", str(img), "--mqar", *TASK, "--seed", "0", "-n", "1000"],
                                     check=True, capture_output=True, text=True).stdout
                correct = int(re.search(r"correct=(\d+)", out).group(1))
                rt[variant] = {"accuracy": correct / 16000, "correct": correct, "image_bytes": img.stat().st_size}
        metrics["runtime"] = {**rt, "eval": "ferrite eval --mqar --pairs 16 --seq-len 256 --queries spread --seed 0 -n 1000"}
        (d / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        print(d.name, {k: v["accuracy"] for k, v in rt.items()}, metrics["pytorch"]["accuracy"], flush=True)


def runs() -> list:
    with open(OUT / "runs.csv") as f:
        return list(csv.DictReader(f))


def final_points() -> dict:
    """family -> [(state bytes per layer (runtime), accuracy (runtime f32 where measured), name)]"""
    out = {f: [] for f in FAMILIES}
    for d in shipped():
        m = json.loads((d / "metrics.json").read_text())
        acc = m.get("runtime", {}).get("f32", {}).get("accuracy", m["pytorch"]["accuracy"])
        out[m["family"]].append((m["state_bytes_per_layer"][0], acc, d.name, m))
    return {f: sorted(v) for f, v in out.items()}


def seed_accuracies() -> dict:
    """(family, kb) -> PyTorch test accuracies of the finished runs of every seed: the
    selected run (sweep or stage 2) and the seed runs' stage 2 (a stage 2 of an lr the
    selection did not pick, GDN 32 / 64 KB's, is not a seed)."""
    by_point = {}
    for r in runs():
        if r["stage"] == "seed-stage2" or (r["stage"] in ("sweep", "stage2") and r["selected"]):
            by_point.setdefault((r["family"], int(r["state_kb"])), []).append(float(r["test_accuracy"]))
    return by_point


def curve(family: str, pts: dict) -> list:
    """[(state bytes, accuracy, low, high)]: the median over seeds where three exist
    (low/high their range), else the selected run (runtime f32 where measured)."""
    seeds = seed_accuracies()
    out = []
    for s, acc, name, m in pts[family]:
        accs = seeds.get((family, kb_of(name)), [])
        if len(accs) >= 3:
            out.append((s, statistics.median(accs), min(accs), max(accs)))
        else:
            out.append((s, acc, acc, acc))
    return out


def needed(points: list, level: float):
    """The smallest measured state whose (median) accuracy reaches ``level``, or None."""
    hits = [p[0] for p in points if p[1] >= level]
    return min(hits) if hits else None


def tables() -> str:
    pts = final_points()
    lines = ["| model | state/layer (runtime bytes) | lr | steps (sweep + stage 2) | PyTorch val | PyTorch test | runtime f32 | runtime int8 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for f in FAMILIES:
        for s, acc, name, m in pts[f]:
            rt = m.get("runtime", {})
            tr = m["training"]
            steps = tr["steps_run"] + (tr.get("resumed_from", {}).get("training", {}).get("steps_run", 0))
            lines.append(f"| `{name}` | {s} | {tr['lr_max']:g} | {steps} | {m['pytorch']['val_accuracy']:.4f} | "
                         f"{m['pytorch']['accuracy']:.4f} | {rt.get('f32', {}).get('accuracy', float('nan')):.4f} | "
                         f"{rt.get('int8', {}).get('accuracy', float('nan')):.4f} |")
    lines += ["", "| family | state/layer for 0.5 | for 0.9 | for 0.99 |", "|---|---:|---:|---:|"]
    for f in FAMILIES:
        cells = [needed(curve(f, pts), lv) for lv in (0.5, 0.9, 0.99)]
        lines.append(f"| {f} | " + " | ".join(f"{c:,} B" if c else "not reached" for c in cells) + " |")
    lines += ["", "| point | seeds | test accuracy per seed | median | spread (max - min) |", "|---|---:|---|---:|---:|"]
    for (f, kb), accs in sorted(seed_accuracies().items()):
        if len(accs) >= 3:
            lines.append(f"| {f} {kb} KB | {len(accs)} | {', '.join(f'{a:.3f}' for a in accs)} | "
                         f"{statistics.median(accs):.3f} | {max(accs) - min(accs):.3f} |")
    return "\n".join(lines)


def thresholds_table() -> str:
    pts = final_points()
    lines = ["| family | state/layer for 0.5 | for 0.9 | for 0.99 |", "|---|---:|---:|---:|"]
    for f in FAMILIES:
        cells = [needed(curve(f, pts), lv) for lv in (0.5, 0.9, 0.99)]
        lines.append(f"| {f} | " + " | ".join(f"{c / 1024:.1f} KB" if c else "not reached" for c in cells) + " |")
    return "\n".join(lines)


def gdn_table() -> str:
    """Rounds 10-11 (outside the protocol): GDN's test accuracy per seed with the study's recipe
    (stage 2), the stalled seed 2 resumed (extra-stage3), a 4,500-step schedule at lr 1e-3
    (extra-long) and a length curriculum (extra-curriculum: its 256-token stage)."""
    rows = [r for r in runs() if r["family"] == "gdn"]
    sizes = sorted({int(r["state_kb"]) for r in rows if r["stage"].startswith("extra")})

    def cell(pick) -> str:
        got = sorted((int(r["seed"]), int(r["steps"]), float(r["test_accuracy"])) for r in rows if pick(r))
        return ", ".join(f"{a:.3f} ({n:,})" for _, n, a in got) or "-"

    lines = ["| state/layer | the study: lr 3e-3, seeds 1-3 (steps of the last stage) | seed 2 resumed at lr 3e-3 "
             "(steps added) | lr 1e-3 from scratch, one schedule, seeds 1-3 (steps) | curriculum: 64 tokens, "
             "then 256 at lr 3e-3, seeds 1-3 (steps at 256) |", "|---|---|---|---|---|"]
    for kb in sizes:
        study = cell(lambda r: int(r["state_kb"]) == kb and r["lr"] == "0.003" and (
            r["stage"] == "seed-stage2" or (r["stage"] in ("sweep", "stage2") and r["selected"])))
        stage3 = cell(lambda r: int(r["state_kb"]) == kb and r["stage"] == "extra-stage3")
        long = cell(lambda r: int(r["state_kb"]) == kb and r["stage"] == "extra-long")
        curriculum = cell(lambda r: int(r["state_kb"]) == kb and r["stage"] == "extra-curriculum")
        lines.append(f"| {kb} KB | {study} | {stage3} | {long} | {curriculum} |")
    return "\n".join(lines)


def replace_between(path: Path, body: str, marker: str = "study") -> None:
    """``path``'s text between the ``marker`` markers becomes ``body``."""
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    head, rest = path.read_text().split(start, 1)
    _, tail = rest.split(end, 1)
    note = f"\n<!-- generated by {COMMAND} --readme; do not edit -->\n\n"
    path.write_text(head + start + note + body + "\n" + end + tail)


def write_readme() -> None:
    """README.md's state-needed table and docs/state-study.md's tables."""
    replace_between(ROOT / "README.md", thresholds_table())
    replace_between(ROOT / "docs" / "state-study.md", tables())
    replace_between(ROOT / "docs" / "state-study.md", gdn_table(), "study-gdn")


def plot(path: Path) -> None:
    pts = final_points()
    svg = Svg("MQAR, 256 tokens, 16 pairs, spread queries: accuracy vs state", "state per layer (bytes, runtime)",
              "accuracy (1,000 sequences of seed 0)", (1000, 80000), (0, 1), logx=True)
    for x, label in ((1024, "1K"), (4096, "4K"), (16384, "16K"), (65536, "64K")):
        svg.xtick(x, label)
    for y in (0, 0.25, 0.5, 0.75, 1.0):
        svg.ytick(y, f"{y:g}")
    for i, f in enumerate(FAMILIES):
        c = curve(f, pts)
        svg.line([(s, a) for s, a, _, _ in c], COLORS[f])
        for s, _, lo, hi in c:
            if hi > lo:  # the range over three seeds
                svg.parts.append(f'<line x1="{svg.px(s):.1f}" y1="{svg.py(lo):.1f}" x2="{svg.px(s):.1f}" '
                                 f'y2="{svg.py(hi):.1f}" stroke="{COLORS[f]}" stroke-width="1.5"/>')
        svg.legend(i, f, COLORS[f])
    svg.save(path)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--import", dest="imports", nargs="+", metavar="DIR",
                    help="the unpacked device rounds (2, 3, 4, 6, 7), each holding some of "
                         "sweep/ redo/ stage2/ seeds1/ seeds2/ long/ stage3/ short/")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--only", default="", help="--eval: only the models whose name contains this")
    ap.add_argument("--variants", nargs="+", choices=list(EVAL_VARIANTS), default=["f32", "int8"],
                    help="--eval: the runtime variants to measure (the others keep their figures)")
    ap.add_argument("--readme", action="store_true")
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "ferrite"))
    args = ap.parse_args(argv)
    if args.imports:
        do_import(*map(Path, args.imports))
        return
    if args.eval:
        do_eval(args.bin, args.only, args.variants)
        return
    if args.readme:
        write_readme()
        return
    print(tables())
    plot(ROOT / "docs" / "state-study.svg")


if __name__ == "__main__":
    main()
