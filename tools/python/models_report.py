"""Print the markdown tables of docs/models.md from the shipped models' metrics.json files.

    python tools/python/models_report.py
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORDER = ["bla", "gdn", "gsa", "swa", "swa-sinks"]


def mqar_table() -> str:
    rows = []
    for m in (ROOT / "models/mqar").glob("*/metrics.json"):
        d = json.loads(m.read_text())
        rows.append(d)
    rows.sort(key=lambda d: (ORDER.index(d["family"]), d["runtime"]["state_bytes_per_layer"][0]))
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
    rows.sort(key=lambda r: (ORDER.index(r["family"]), int(r["core_state_bytes_per_layer"]), r["run"]))
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


if __name__ == "__main__":
    print("## MQAR (shipped)\n\n" + mqar_table() + "\n\n## MQAR (all runs)\n\n" + runs_table()
          + "\n\n## LM\n\n" + lm_table())
