"""The state study's language-model side (issue 28, item 6; docs/state-study.md
"Language-model side"): byte-level LMs of one family each at two state sizes, and
models/lm/small's hybrid, in models/lm-side/.

    ferrite-lm-side-report --eval [--bin target/release/ferrite]  # the runtime's bits per byte -> metrics.json
    ferrite-lm-side-report --readme                              # README.md and docs/state-study.md blocks
    ferrite-lm-side-report                                       # the table (stdout) + docs/lm-side.svg

(``python -m ferrite_dev.reports.lm_side``.) ``--eval`` converts each model dir to an
f32 image (``ferrite quantize --dtype f32``) and an int8 image on the integer token path
(``--dtype int8 --layout tiled --path int``), reads their state bytes per layer
(``ferrite inspect``) and scores each with ``ferrite eval --text
models/lm/heldout-english.txt``, recording the results under ``runtime`` in the
model's metrics.json; the table and the figure show the runtime's f32 figure, and
tests/test_figures.py holds every integer-path figure to issue 24's +0.01.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

from .. import REPO_ROOT as ROOT
from .families import COLORS as FAMILY_COLORS
from .plots import Chart

DIR = ROOT / "models" / "lm-side"
SVG = ROOT / "docs" / "lm-side.svg"
HELDOUT = ROOT / "models" / "lm" / "heldout-english.txt"
COMMAND = "ferrite-lm-side-report --readme"
COLORS = {**FAMILY_COLORS, "hybrid": "#000000"}
#: The families in the table's and the legend's order.
ORDER = ("gdn", "swa", "swa-sinks", "gsa", "bla", "mla", "hybrid")
LABELS = {"swa-sinks": "swa + 4 sinks", "hybrid": "hybrid (lm/small's shape)"}


def runs() -> list:
    """Every model of models/lm-side: its metrics.json with ``dir`` (the name), ordered by
    family (ORDER), then state."""
    out = []
    for m in sorted(DIR.glob("*/metrics.json")):
        d = json.loads(m.read_text())
        d["dir"] = m.parent.name
        out.append(d)
    return sorted(out, key=lambda d: (ORDER.index(d["family"]), d["state_bytes_per_layer"][0]))


def layer_summary(config: dict) -> str:
    """The layers' knobs in a few words (the table's "layers" column)."""
    kinds = [layer["mixer"] for layer in config["layers"]]
    if len(set(kinds)) > 1:
        return "/".join(kinds)
    layer = config["layers"][0]
    knobs = {"gdn": lambda a: (f"{a['num_heads']} x {a['head_dim']} keys, "
                               f"{a['num_heads'] * a['head_dim'] * a['expand_v']:.0f} values"),
             "swa": lambda a: f"window {a['window']}" + (f" + {a['sinks']} sinks" if a.get("sinks") else ""),
             "gsa": lambda a: f"{a['num_slots']} slots",
             "bla": lambda a: f"period {a['period']}, {a['modes']} modes",
             "mla": lambda a: f"window {a['window']}, latent {a['kv_lora_rank']}"}
    return f"4 x {kinds[0]}: {knobs[kinds[0]](layer)}"


def table() -> str:
    """One row a model: family, layers, params, state bytes per layer (and in the whole
    model), steps run in the shared wall-clock budget, bits per byte (runtime, PyTorch)."""
    head = ("| family | layers | params | state/layer (bytes) | state, 4 layers | steps | bits/byte (runtime f32) "
            "| PyTorch | fortunes' heldout.txt (PyTorch) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
    rows = []
    for d in runs():
        state = d["runtime"]["state_bytes_per_layer"] if "runtime" in d else d["state_bytes_per_layer"]
        per_layer = f"{state[0]:,}" if len(set(state)) == 1 else " / ".join(f"{s:,}" for s in state)
        rt = d.get("runtime", {}).get("f32", {}).get("bits_per_byte")
        rows.append(f"| {d['family']} | {layer_summary(json.loads((DIR / d['dir'] / 'config.json').read_text()))} "
                    f"| {d['params']:,} | {per_layer} | {sum(state):,} | {d['training']['steps_run']:,} "
                    f"| {'-' if rt is None else f'**{rt:.4f}**'} | {d['pytorch']['bits_per_byte']:.4f} "
                    f"| {d['pytorch']['bits_per_byte_fortunes']:.4f} |")
    return head + "\n".join(rows)


def best_at(budget_bytes: int) -> dict:
    """The model with the lowest runtime bits per byte whose state over all layers fits
    ``budget_bytes`` (None when none does)."""
    fits = [d for d in runs() if sum(d["runtime"]["state_bytes_per_layer"]) <= budget_bytes]
    return min(fits, key=lambda d: d["runtime"]["f32"]["bits_per_byte"]) if fits else None


def choosing_table() -> str:
    """README's "Choosing a family": per RAM budget for the state (all 4 layers), the best of these runs."""
    rows = ["| state RAM (4 layers) | best of these runs | bits/byte (runtime) |", "|---:|---|---:|"]
    for kib in (8, 16, 32, 48, 144):
        d = best_at(kib * 1024)
        if d is None:
            rows.append(f"| {kib} KiB | none fits | - |")
            continue
        rows.append(f"| {kib} KiB | {d['dir']} ({LABELS.get(d['family'], d['family'])}, "
                    f"{sum(d['runtime']['state_bytes_per_layer']):,} bytes) | {d['runtime']['f32']['bits_per_byte']:.4f} |")
    return "\n".join(rows)


def plot(path: Path = SVG) -> None:
    """Bits per byte (runtime) against state bytes per layer, one line per family (log2 x)."""
    c = Chart("Byte LMs, 4 layers, d=64, ~150k params, English text, 430 s each (one seed)",
              "recurrent state per layer (bytes, runtime, conv caches included)", "bits per byte (held-out English)",
              (3000, 40000), (2.05, 2.40), True)
    for b in (4096, 8192, 16384, 32768):
        c.xtick(b, f"{b // 1024} KB")
    for y in (2.05, 2.10, 2.15, 2.20, 2.25, 2.30, 2.35, 2.40):
        c.ytick(y, f"{y:.2f}")
    by_family = {}
    for d in runs():
        state = d["runtime"]["state_bytes_per_layer"]
        by_family.setdefault(d["family"], []).append((sum(state) / len(state), d["runtime"]["f32"]["bits_per_byte"]))
    for i, fam in enumerate(f for f in ORDER if f in by_family):
        c.line(sorted(by_family[fam]), COLORS[fam], dash="4,3" if fam == "hybrid" else None)
        c.legend(i, LABELS.get(fam, fam).split(" (")[0], COLORS[fam])
    c.parts.append(f'<text x="{c.px(3000) + 6:.1f}" y="{c.py(2.395):.1f}" font-size="11">hybrid: its mean '
                   'state per layer</text>')
    c.save(path)


def run(cmd: list) -> str:
    return subprocess.run([str(x) for x in cmd], check=True, capture_output=True, text=True).stdout


# The integer token path's image (docs/integer-path.md): issue 24's bar is +0.01 bits per byte.
INT_PATH = ["--dtype", "int8", "--layout", "tiled", "--path", "int"]


def do_eval(bin_path: str) -> None:
    """The runtime's bits per byte on the English held-out text, f32 and on the integer token
    path (int8), into every metrics.json (its other runtime records, such as `quick`, kept)."""
    with tempfile.TemporaryDirectory() as tmp:
        for m in sorted(DIR.glob("*/metrics.json")):
            figures = {}
            for variant, args in (("f32", ["--dtype", "f32"]), ("int8_int", INT_PATH)):
                image = Path(tmp) / f"{m.parent.name}-{variant}.fer"
                run([bin_path, "quantize", m.parent, "-o", image, *args])
                state = [int(x) for x in re.findall(r"state \S+ (\d+) bytes", run([bin_path, "inspect", image]))]
                out = run([bin_path, "eval", image, "--text", HELDOUT])
                figures[variant] = (state, float(out.strip().splitlines()[-1].split("=")[1]))
            d = json.loads(m.read_text())
            (state, bpb), (int_state, int_bpb) = figures["f32"], figures["int8_int"]
            d["runtime"] = {**d.get("runtime", {}), "state_bytes_per_layer": state, "f32": {"bits_per_byte": bpb},
                            "int8_int": {"bits_per_byte": int_bpb, "state_bytes_per_layer": int_state},
                            "commands": "ferrite quantize <dir> -o <img> --dtype f32 (int8_int: "
                                        + " ".join(INT_PATH) + "); ferrite inspect <img>; "
                                        "ferrite eval <img> --text models/lm/heldout-english.txt"}
            m.write_text(json.dumps(d, indent=2) + "\n")
            print(f"{m.parent.name}: {bpb:.4f}, integer path {int_bpb:.4f} (PyTorch "
                  f"{d['pytorch']['bits_per_byte']:.4f}), state {state} / {int_state}", flush=True)


def replace_between(path: Path, body: str, marker: str) -> None:
    """``path``'s text between the ``marker`` markers becomes the generated ``body``."""
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    head, rest = path.read_text().split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(head + start + f"\n<!-- generated by {COMMAND}; do not edit -->\n\n" + body + "\n" + end + tail)


def write_readme() -> None:
    replace_between(ROOT / "README.md", choosing_table() + "\n", "lm-side")
    replace_between(ROOT / "docs" / "state-study.md", table() + "\n", "lm-side")
    plot()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--readme", action="store_true")
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "ferrite"))
    args = ap.parse_args(argv)
    if args.eval:
        do_eval(args.bin)
        return
    if args.readme:
        write_readme()
        return
    print(table())
    plot()


if __name__ == "__main__":
    main()
