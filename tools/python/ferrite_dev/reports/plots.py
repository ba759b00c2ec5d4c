"""Plots for docs/models.md, written as plain SVG (no matplotlib needed, byte-reproducible).

    ferrite-plots                   # python -m ferrite_dev.reports.plots

docs/state-efficiency.svg: MQAR accuracy measured by the runtime (f32 image,
1,000 sequences of seed 0) against the recurrent state bytes per layer that
the runtime reports (`ferrite inspect`, short-convolution caches included),
one line per mixer family, log2 x axis; int8 images as hollow markers.
docs/lm-training.svg: training loss (bits per byte, 25-step means) of the two
language models over both training stages.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from .. import REPO_ROOT as ROOT
from .families import present
from .families import COLORS as FAMILY_COLORS

COLORS = {**FAMILY_COLORS, "lm-small": "#ff7f0e", "lm-large": "#1f77b4"}
W, H, L, R, T, B = 720, 440, 70, 150, 40, 60


class Chart:
    """A line chart written as plain SVG (byte-reproducible): axes, ticks, lines, a legend."""

    def __init__(self, title, xlabel, ylabel, xr, yr, logx=False):
        self.xr, self.yr, self.logx = xr, yr, logx
        self.parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
                      f'font-family="sans-serif" font-size="12">',
                      f'<rect width="{W}" height="{H}" fill="white"/>',
                      f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>',
                      f'<text x="{L + (W - L - R) / 2}" y="{H - 15}" text-anchor="middle">{xlabel}</text>',
                      f'<text transform="translate(18,{T + (H - T - B) / 2}) rotate(-90)" text-anchor="middle">{ylabel}</text>',
                      f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="black"/>']

    def px(self, x):
        lo, hi = self.xr
        if self.logx:
            x, lo, hi = math.log2(x), math.log2(lo), math.log2(hi)
        return L + (x - lo) / (hi - lo) * (W - L - R)

    def py(self, y):
        lo, hi = self.yr
        return H - B - (y - lo) / (hi - lo) * (H - T - B)

    def xtick(self, x, label):
        self.parts.append(f'<line x1="{self.px(x):.1f}" y1="{T}" x2="{self.px(x):.1f}" y2="{H - B}" stroke="#ddd"/>')
        self.parts.append(f'<text x="{self.px(x):.1f}" y="{H - B + 16}" text-anchor="middle">{label}</text>')

    def ytick(self, y, label):
        self.parts.append(f'<line x1="{L}" y1="{self.py(y):.1f}" x2="{W - R}" y2="{self.py(y):.1f}" stroke="#ddd"/>')
        self.parts.append(f'<text x="{L - 6}" y="{self.py(y) + 4:.1f}" text-anchor="end">{label}</text>')

    def line(self, pts, color, marker=True, hollow=False, dash=None):
        path = " ".join(f"{self.px(x):.1f},{self.py(y):.1f}" for x, y in pts)
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        if not hollow:
            self.parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{extra}/>')
        if marker:
            for x, y in pts:
                fill = "white" if hollow else color
                self.parts.append(f'<circle cx="{self.px(x):.1f}" cy="{self.py(y):.1f}" r="{3.5 if hollow else 4}" '
                                  f'fill="{fill}" stroke="{color}" stroke-width="1.5"/>')

    def legend(self, i, label, color):
        y = T + 10 + 20 * i
        self.parts.append(f'<line x1="{W - R + 12}" y1="{y}" x2="{W - R + 36}" y2="{y}" stroke="{color}" stroke-width="3"/>')
        self.parts.append(f'<text x="{W - R + 42}" y="{y + 4}">{label}</text>')

    def save(self, path):
        Path(path).write_text("\n".join(self.parts + ["</svg>"]) + "\n", encoding="utf-8")


def mqar_points() -> dict:
    fams = {}
    for m in sorted((ROOT / "models/mqar").glob("*/metrics.json")):
        d = json.loads(m.read_text())
        rt = d["runtime"]
        fams.setdefault(d["family"], []).append((rt["state_bytes_per_layer"][0], rt["f32"]["accuracy"], rt["int8"]["accuracy"]))
    return {f: sorted(p) for f, p in fams.items()}


def state_efficiency(path) -> None:
    fams = mqar_points()
    c = Chart("MQAR recall vs state (P=8, L=64, 2 layers, d=64; ferrite runtime, 1000 seqs)",
              "recurrent state per layer (bytes, runtime, conv caches included)", "accuracy", (1536, 24576), (0, 1.02), True)
    for b in (2048, 4096, 8192, 16384):
        c.xtick(b, f"{b // 1024} KB")
    for y in (0, 0.2, 0.4, 0.6, 0.8, 1.0):
        c.ytick(y, f"{y:.1f}")
    labels = {"swa-sinks": "swa + 4 sinks"}
    for i, fam in enumerate(present(fams)):
        pts = fams[fam]
        c.line([(x, a) for x, a, _ in pts], COLORS[fam])
        c.line([(x, a8) for x, _, a8 in pts], COLORS[fam], hollow=True)
        c.legend(i, labels.get(fam, fam), COLORS[fam])
    c.parts.append(f'<text x="{W - R + 12}" y="{T + 125}" font-size="11">filled: f32 image</text>')
    c.parts.append(f'<text x="{W - R + 12}" y="{T + 140}" font-size="11">hollow: int8 image</text>')
    c.save(path)


def lm_curves(path) -> None:
    c = Chart("Byte-level LMs on fortunes: training loss", "training step (stage 1, then stage 2)",
              "train loss (bits/byte)", (0, 8000), (1.6, 4.0))
    for x in range(0, 8001, 1000):
        c.xtick(x, str(x))
    for y in (1.6, 2.0, 2.4, 2.8, 3.2, 3.6, 4.0):
        c.ytick(y, f"{y:.1f}")
    for i, (name, d) in enumerate((("lm-small", "small"), ("lm-large", "large"))):
        pts, offset = [], 0
        for fn in ("loss-stage1.csv", "loss.csv"):
            rows = list(csv.DictReader(open(ROOT / "models/lm" / d / fn)))
            rows = [r for r in rows if float(r["lr"]) > 0]
            pts += [(offset + int(r["step"]), float(r["loss"]) / math.log(2)) for r in rows]
            offset += int(rows[-1]["step"])
        c.line([(x, min(y, 4.0)) for x, y in pts], COLORS[name], marker=False)
        c.legend(i, name, COLORS[name])
    c.save(path)


def main() -> None:
    state_efficiency(ROOT / "docs/state-efficiency.svg")
    lm_curves(ROOT / "docs/lm-training.svg")


if __name__ == "__main__":
    main()
