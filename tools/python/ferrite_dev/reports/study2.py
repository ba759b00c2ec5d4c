"""The state study's second edition (issue 28): Zoology's MQAR, one recipe for every family.

    ferrite-study2-report --import r12=DIR [r13=DIR ...]   # device rounds -> models/mqar-zoology/runs.csv
    ferrite-study2-report                                  # the tables (stdout)
    ferrite-study2-report --readme                         # the tables in docs/state-study.md and README.md
    ferrite-study2-report --next FILE                      # the next round's runs (research/rounds/r13.sh)
    ferrite-study2-report --setting p64 [--next FILE]      # the same for the issue's (c) settings (p64, l1k)

(``python -m ferrite_dev.reports.study2``.) The protocol is docs/state-study.md's
"Second edition: protocol"; the runs are ``z2_runs()`` of
tools/python/research/study_runs.py, the rounds research/rounds/r12.sh onwards.
``--import`` reads each unpacked round (``DIR/<folder>/mqar/<run>/metrics.json`` and
``config.json``, any folder) into one row per run; the selection and the tables are
derived from runs.csv alone, so the tests recompute them. Runs of the issue's (c) settings
(``z2p64-...``: 64 pairs at 256 tokens; ``z2l1k-...``: 1,024 tokens with 64 pairs; the
protocol's dated note of 2026-12-07, 19:07 UTC) go to their own files, runs-p64.csv and
runs-l1k.csv, and ``--setting`` reads them: (a)'s tables never mix with them.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
from pathlib import Path

from ferrite_train import fla_shapes

from .. import REPO_ROOT as ROOT

OUT = ROOT / "models" / "mqar-zoology"
DOC = ROOT / "docs" / "state-study.md"
README = ROOT / "README.md"
COMMAND = "ferrite-study2-report"
# Then BLA's variants (research/study_runs.py's Z2_BLA_VARIANTS: shared key/value heads, periods
# other than the sequence length; issue 28 item 3), in the tables once they have runs.
FAMILIES = ("swa", "swa-sinks", "bla", "gdn", "gsa", "mla", "rwkv7", "mamba2", "bla-kv1", "bla-p128", "bla-p512", "bla-kv1-p128",
            "bla-kv1-p512")
GRID = (1e-3, 3e-3, 1e-2)
LEVELS = (0.5, 0.9, 0.99)
CAP = 2400  # the protocol's step cap
# The (c) settings (research/study_runs.py's Z2C_SETTINGS): "" is (a), the edition's task.
SETTINGS = ("", "p64", "l1k")
FIELDS = ["run", "family", "state_kb", "state_bytes", "core_state_bytes", "slots", "slot_floats", "lr", "seed",
          "round", "steps", "end", "final_train_loss", "val_accuracy", "test_accuracy"]


def slots_and_width(layer: dict) -> tuple:
    """(slots, floats per slot) of one layer config: SWA W + S slots of key and value of its kv
    heads, BLA 2M + 1 slots of key and value of its kv heads (its heads by default), GDN H x K key rows of V floats, GSA M
    slots of key and value of its kv heads (K = V = 32), mla W slots of the latent R and the
    shared RoPE key (research/study_runs.py's ``study_layer``)."""
    if layer["mixer"] == "swa":
        return layer["window"] + layer.get("sinks", 0), 2 * layer["num_kv_heads"] * layer["head_dim"]
    if layer["mixer"] == "bla":
        return 2 * layer["modes"] + 1, 2 * layer.get("num_kv_heads", layer["num_heads"]) * layer["head_dim"]
    if layer["mixer"] == "gdn":
        return layer["num_heads"] * layer["head_dim"], int(layer["head_dim"] * layer.get("expand_v", 2.0))
    if layer["mixer"] == "gsa":
        return layer["num_slots"], 2 * layer["num_kv_heads"] * 32
    if layer["mixer"] == "mla":
        return layer["window"], layer["kv_lora_rank"] + layer["rope_dim"]
    raise ValueError(f"no slot count for mixer {layer['mixer']!r}")


def row_of(metrics: dict, config: dict, round_name: str) -> dict:
    tr = metrics["training"]
    if fla_shapes.is_fla(config):  # fla's RWKV-7 and Mamba-2: their own config.json
        slots, width = fla_shapes.slots_and_width(config)
    else:
        slots, width = slots_and_width(config["layers"][0])
    if tr.get("stopped_early_at"):
        end = "solved"
    elif tr["steps_run"] >= tr["steps_planned"]:
        end = "cap"
    else:
        end = "time"
    return {"run": metrics["name"], "family": metrics["family"], "state_kb": int(re.search(r"-(\d+)k-", metrics["name"]).group(1)),
            "state_bytes": metrics["state_bytes_per_layer"][0], "core_state_bytes": metrics["core_state_bytes_per_layer"][0],
            "slots": slots, "slot_floats": width, "lr": tr["lr_max"], "seed": tr["torch_seed"], "round": round_name,
            "steps": tr["steps_run"], "end": end, "final_train_loss": tr["final_train_loss"],
            "val_accuracy": metrics["pytorch"]["val_accuracy"], "test_accuracy": metrics["pytorch"]["accuracy"]}


def setting_of(run: str) -> str:
    """The setting a run's name belongs to: "" (``z2-``), "p64" (``z2p64-``) or "l1k" (``z2l1k-``)."""
    m = re.match(r"z2(p64|l1k)?-", run)
    if m is None:
        raise ValueError(f"{run}: not a run of the second edition")
    return m.group(1) or ""


def csv_path(setting: str = "") -> Path:
    """runs.csv for (a), runs-<setting>.csv for the (c) settings."""
    return OUT / (f"runs-{setting}.csv" if setting else "runs.csv")


def do_import(rounds: list) -> None:
    """``rounds``: [(name, DIR)]; every run found replaces an earlier row of the same run, in its
    setting's file."""
    rows = {s: {r["run"]: r for r in runs(s)} if csv_path(s).exists() else {} for s in SETTINGS}
    found = set()
    for name, base in rounds:
        for m in sorted(Path(base).glob("*/mqar/*/metrics.json")):
            metrics = json.loads(m.read_text())
            config = json.loads((m.parent / "config.json").read_text())
            setting = setting_of(metrics["name"])
            rows[setting][metrics["name"]] = row_of(metrics, config, name)
            found.add(setting)
    OUT.mkdir(parents=True, exist_ok=True)
    # The files of the settings found (runs.csv, as before, when none is).
    for setting in sorted(found) or [""]:
        order = sorted(rows[setting].values(), key=lambda r: (FAMILIES.index(r["family"]), int(r["state_kb"]),
                                                               float(r["lr"]), int(r["seed"])))
        with open(csv_path(setting), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(order)
        print(f"{len(order)} runs in {csv_path(setting)}")


def runs(setting: str = "") -> list:
    with open(csv_path(setting)) as f:
        return list(csv.DictReader(f))


def points(rows: list) -> dict:
    """(family, kb) -> the point: its seed-1 runs by lr, the selected lr (the best seed-1
    validation accuracy, ties to the lower final training loss), whether the selection sits at
    an edge of the lrs run, and the seeds reported (those at the lr that has seeds 2 and 3: the
    selected one where it has them, else the lr the seeds were run at)."""
    out = {}
    for r in rows:
        p = out.setdefault((r["family"], int(r["state_kb"])), {"sweep": {}, "by_lr": {}, "row": r})
        lr = float(r["lr"])
        p["by_lr"].setdefault(lr, {})[int(r["seed"])] = r
        if int(r["seed"]) == 1:
            p["sweep"][lr] = r
    for p in out.values():
        best = max(p["sweep"].values(), key=lambda r: (float(r["val_accuracy"]), -float(r["final_train_loss"])))
        p["selected"] = float(best["lr"])
        lrs = sorted(p["sweep"])
        p["edge"] = p["selected"] in (lrs[0], lrs[-1])
        seeded = [lr for lr, seeds in p["by_lr"].items() if {2, 3} <= set(seeds)]
        p["seeds_lr"] = p["selected"] if p["selected"] in seeded or not seeded else seeded[0]
        p["seeds"] = [p["by_lr"][p["seeds_lr"]][s] for s in sorted(p["by_lr"][p["seeds_lr"]]) if s <= 3]
        accs = [float(r["test_accuracy"]) for r in p["seeds"]]
        p["median"], p["min"], p["max"] = statistics.median(accs), min(accs), max(accs)
    return out


def state_needed(curve: list, level: float):
    """``curve``: [(state, accuracy)] in increasing state. The state where the accuracy first
    reaches ``level``, log(state) interpolated linearly between the grid points either side:
    (state, "=") — or (the smallest state, "<=") when the first point already reaches it, or
    None when no point does."""
    for k, (s, a) in enumerate(curve):
        if a >= level:
            if k == 0:
                return s, "<="
            s0, a0 = curve[k - 1]
            return math.exp(math.log(s0) + (level - a0) / (a - a0) * (math.log(s) - math.log(s0))), "="
    return None


def curves(pts: dict, family: str, axis: str) -> dict:
    """'median' / 'worst' / 'best' -> [(state, accuracy)]; ``axis`` 'bytes' (runtime state per
    layer) or 'floats' (slots x width)."""
    mine = sorted((kb, p) for (f, kb), p in pts.items() if f == family)

    def x(p):
        r = p["row"]
        return int(r["state_bytes"]) if axis == "bytes" else int(r["slots"]) * int(r["slot_floats"])
    return {name: [(x(p), p[key]) for _, p in mine] for name, key in (("median", "median"), ("worst", "min"),
                                                                         ("best", "max"))}


def fmt_state(needed, axis: str) -> str:
    if needed is None:
        return "not reached"
    s, how = needed
    text = f"{s / 1024:.1f} KB" if axis == "bytes" else f"{s:,.0f}"
    return ("<= " if how == "<=" else "") + text


def _bounds(needed, top: float) -> tuple:
    """The state a ``state_needed`` result allows, as (low, high): exact, at most the smallest
    state, or more than the grid's largest ``top`` (never reached)."""
    if needed is None:
        return top, math.inf
    s, how = needed
    return (0.0, s) if how == "<=" else (s, s)


def fmt_ratio(a, b, top_a: float, top_b: float) -> str:
    """a / b of two ``state_needed`` results: a number, a bound (">= x", "<= x") or "-"
    where the grid bounds it neither way."""
    (a_lo, a_hi), (b_lo, b_hi) = _bounds(a, top_a), _bounds(b, top_b)
    lo = a_lo / b_hi if b_hi < math.inf else 0.0
    hi = a_hi / b_lo if b_lo > 0 else math.inf
    if lo == hi:
        return f"{lo:.1f}"
    if lo > 0 and hi == math.inf:
        return f">= {lo:.1f}"
    if lo == 0 and hi < math.inf:
        return f"<= {hi:.1f}"
    if lo > 0:
        return f"{lo:.1f}-{hi:.1f}"
    return "-"


# A run the time budget stopped this far short of the cap is flagged with its steps.
SHORT = 0.9


def _short(row: dict) -> str:
    """" (t)" for a run the time budget stopped, with its steps where they fall below
    ``SHORT`` of the cap (its schedule was compressed into fewer steps)."""
    if row["end"] != "time":
        return ""
    steps = int(row["steps"])
    return f" (t, {steps:,})" if steps < SHORT * CAP else " (t)"


def lr_table(pts: dict) -> str:
    lrs = sorted({lr for p in pts.values() for lr in p["sweep"]})
    lines = ["| family | KB | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | selected | inside the grid |",
             "|---|---:|" + "---:|" * len(lrs) + "---:|---|"]
    for (f, kb), p in sorted(pts.items(), key=lambda kv: (FAMILIES.index(kv[0][0]), kv[0][1])):
        cells = []
        for lr in lrs:
            r = p["sweep"].get(lr)
            cells.append("-" if r is None else f"{float(r['val_accuracy']):.3f}" + _short(r))
        lines.append(f"| {f} | {kb} | " + " | ".join(cells) + f" | {p['selected']:g} | "
                     + ("no (edge)" if p["edge"] else "yes") + " |")
    return "\n".join(lines)


def point_table(pts: dict) -> str:
    lines = ["| family | KB | state/layer (runtime bytes) | slots x floats | lr | test accuracy per seed (steps, end) "
             "| median | min | max |", "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for (f, kb), p in sorted(pts.items(), key=lambda kv: (FAMILIES.index(kv[0][0]), kv[0][1])):
        r = p["row"]
        seeds = ", ".join(f"s{s['seed']} {float(s['test_accuracy']):.3f} ({int(s['steps']):,}, {s['end']})" for s in p["seeds"])
        lr = f"{p['seeds_lr']:g}" + ("" if p["seeds_lr"] == p["selected"] else f" (seed 1 prefers {p['selected']:g})")
        lines.append(f"| {f} | {kb} | {int(r['state_bytes']):,} | {r['slots']} x {r['slot_floats']} | {lr} | {seeds} | "
                     f"{p['median']:.3f} | {p['min']:.3f} | {p['max']:.3f} |")
    return "\n".join(lines)


def threshold_table(pts: dict, axis: str) -> str:
    unit = "runtime bytes per layer" if axis == "bytes" else "floats per layer (slots x width)"
    lines = [f"| family | seeds | " + " | ".join(f"{lv:g}: median [worst, best]" for lv in LEVELS) + " |",
             "|---|---|" + "---|" * len(LEVELS)]
    for f in FAMILIES:
        if not any(k[0] == f for k in pts):
            continue
        c = curves(pts, f, axis)
        counts = {k[1]: len(p["seeds"]) for k, p in pts.items() if k[0] == f}
        n = str(max(counts.values()))
        fewer = sorted(kb for kb, c in counts.items() if c < max(counts.values()))
        if fewer:
            n += " (" + ", ".join(f"{counts[kb]} at {kb} KB" for kb in fewer) + ")"
        cells = [f"{fmt_state(state_needed(c['median'], lv), axis)} [{fmt_state(state_needed(c['worst'], lv), axis)}, "
                 f"{fmt_state(state_needed(c['best'], lv), axis)}]" for lv in LEVELS]
        lines.append(f"| {f} | {n} | " + " | ".join(cells) + " |")
    return f"State needed ({unit}):\n\n" + "\n".join(lines)


def ratio_table(pts: dict, axis: str) -> str:
    pairs = [(a, b) for a, b in (("swa", "bla"), ("swa", "gdn"), ("bla", "gdn"))
             if any(k[0] == a for k in pts) and any(k[0] == b for k in pts)]
    lines = ["| ratio | " + " | ".join(f"{lv:g}: median (worst, best)" for lv in LEVELS) + " |",
             "|---|" + "---|" * len(LEVELS)]
    for a, b in pairs:
        ca, cb = curves(pts, a, axis), curves(pts, b, axis)
        top_a, top_b = max(s for s, _ in ca["median"]), max(s for s, _ in cb["median"])
        cells = []
        for lv in LEVELS:
            m, w, bb = (fmt_ratio(state_needed(ca[k], lv), state_needed(cb[k], lv), top_a, top_b)
                        for k in ("median", "worst", "best"))
            cells.append(f"{m} ({w}, {bb})")
        lines.append(f"| {a} / {b} | " + " | ".join(cells) + " |")
    what = "runtime bytes" if axis == "bytes" else "slots x width"
    return (f"Ratios of the state needed ({what}; a bound where a family reaches the level at its smallest "
            "size or never on the grid):\n\n" + "\n".join(lines))


def tables(setting: str = "") -> str:
    pts = points(runs(setting))
    return "\n\n".join([f"Seed 1's validation accuracy per lr ((t): stopped by the time budget before the cap, "
                         f"with the steps run where they are below {SHORT:.0%} of it):",
                        lr_table(pts), point_table(pts), threshold_table(pts, "bytes"), threshold_table(pts, "floats"),
                        ratio_table(pts, "bytes"), ratio_table(pts, "floats")])


def readme_tables() -> str:
    """README.md's summary: the state each family needs, and the ratios, in runtime bytes."""
    pts = points(runs())
    return "\n\n".join([threshold_table(pts, "bytes"), ratio_table(pts, "bytes")])


# The lr ladder the grid extends along (half decades), as research/study_runs.py's Z2_LRS.
LADDER = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


def run_name(family: str, kb: int, lr: float, seed: int, setting: str = "") -> str:
    """The run's name in research/study_runs.py's ``z2_runs()`` (``z2c_runs()`` for a setting)."""
    return f"z2{setting}-{family}-{kb}k-lr{lr:.0e}-s{seed}".replace("e-0", "e-")


def next_runs(pts: dict, setting: str = "") -> list:
    """The next round of the protocol: seed-1 runs that stopped before the task's phase, seeds 2
    and 3 at each point's selected lr where they are missing, and seed 1 at the next lr of the
    ladder past an edge that the selection sits at."""
    out = []
    for (f, kb), p in sorted(pts.items(), key=lambda kv: (FAMILIES.index(kv[0][0]), kv[0][1])):
        # A seed-1 run stopped before the task's phase (a quarter of the cap; queued behind the
        # others, it started with little time left) did not measure its lr: run it again.
        again = [r["run"] for lr, r in sorted(p["sweep"].items()) if int(r["steps"]) < CAP // 4]
        out += again
        lr = p["selected"]
        if p["sweep"][lr]["run"] in again:
            continue  # the selection waits for the runs again
        have = set(p["by_lr"].get(lr, {}))
        out += [run_name(f, kb, lr, s, setting) for s in (2, 3) if s not in have]
        if p["edge"]:
            i = LADDER.index(lr) + (1 if lr == max(p["sweep"]) else -1)
            if 0 <= i < len(LADDER) and LADDER[i] not in p["sweep"]:
                out.append(run_name(f, kb, LADDER[i], 1, setting))
    return out


def replace_between(path: Path, body: str, marker: str) -> None:
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    head, rest = path.read_text().split(start, 1)
    _, tail = rest.split(end, 1)
    note = f"\n<!-- generated by {COMMAND} --readme; do not edit -->\n\n"
    path.write_text(head + start + note + body + "\n" + end + tail)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--import", dest="imports", nargs="+", metavar="ROUND=DIR",
                    help="unpacked device rounds (r12=DIR ...), each holding <folder>/mqar/<run>/metrics.json")
    ap.add_argument("--readme", action="store_true", help="write the tables into docs/state-study.md and README.md")
    ap.add_argument("--next", metavar="FILE", help="write the next round's runs (one a line) to FILE")
    ap.add_argument("--setting", choices=[s for s in SETTINGS if s], default="",
                    help="the issue's (c) settings' runs (runs-SETTING.csv) for the tables and --next")
    args = ap.parse_args(argv)
    if args.readme and args.setting:
        ap.error("--readme writes (a)'s tables only: the (c) settings have no section yet")
    if not args.imports and not csv_path(args.setting).exists():
        ap.error(f"{csv_path(args.setting)} does not exist: --import the setting's rounds first")
    if args.next:
        names = next_runs(points(runs(args.setting)), args.setting)
        Path(args.next).write_text("".join(n + "\n" for n in names))
        print(f"{len(names)} runs in {args.next}")
        return
    if args.imports:
        do_import([tuple(spec.split("=", 1)) if "=" in spec else (Path(spec).name, spec) for spec in args.imports])
        return
    if args.readme:
        replace_between(DOC, tables(), "study2")
        replace_between(README, readme_tables(), "study2")
        return
    print(tables(args.setting))


if __name__ == "__main__":
    main()
