"""Quantize every shipped model and measure it with the Rust runtime (host).

    cargo build --release -p ferrite-tools
    python tools/python/eval_models.py [--bin target/release/ferrite] [--only NAME ...]

For each models/mqar/<run> and models/lm/<size>: `ferrite quantize --dtype
{f32,int8,int4}` into a temporary directory, then

    ferrite eval <image> --mqar --seed 0 --n 1000      (last line accuracy=...)
    ferrite eval <image> --text models/lm/heldout.txt  (last line bits_per_byte=...)

and writes the results under "runtime" in the model's metrics.json: the number,
the image's flash bytes, RAM bytes and state bytes (from `ferrite quantize`'s
summary line) and the per-layer state bytes from `ferrite inspect`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DTYPES = ("f32", "int8", "int4")


def run(cmd: list, stderr_too: bool = False) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True)
    return done.stdout + (done.stderr if stderr_too else "")


def measure(bin_path: Path, model_dir: Path, tmp: Path) -> dict:
    metrics_path = model_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    task = metrics["task"]
    runtime = {}
    for dtype in DTYPES:
        image = tmp / f"{model_dir.parent.name}-{model_dir.name}-{dtype}.fer"
        summary = run([bin_path, "quantize", model_dir, "-o", image, "--dtype", dtype], True).strip().splitlines()[-1]
        flash = int(re.search(r"(\d+) bytes flash", summary).group(1))
        ram = re.search(r"(\d+) bytes RAM \((\d+) state\)", summary)
        entry = {"image_bytes": flash, "ram_bytes": int(ram.group(1)), "state_bytes": int(ram.group(2))}
        if dtype == "f32":
            inspect = run([bin_path, "inspect", image], True)
            runtime["state_bytes_per_layer"] = [int(x) for x in re.findall(r"state (\d+) bytes", inspect)]
        if task == "mqar":
            out = run([bin_path, "eval", image, "--mqar", "--seed", "0", "--n", "1000"])
            entry["accuracy"] = float(out.strip().splitlines()[-1].split("=")[1])
        else:
            out = run([bin_path, "eval", image, "--text", ROOT / "models/lm/heldout.txt"])
            entry["bits_per_byte"] = float(out.strip().splitlines()[-1].split("=")[1])
        runtime[dtype] = entry
    runtime["commands"] = ("ferrite quantize <dir> -o <img> --dtype {f32,int8,int4}; "
                           + ("ferrite eval <img> --mqar --seed 0 --n 1000" if task == "mqar"
                              else "ferrite eval <img> --text models/lm/heldout.txt"))
    metrics["runtime"] = runtime
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    key = "accuracy" if task == "mqar" else "bits_per_byte"
    print(f"{model_dir.relative_to(ROOT)}: pytorch {metrics['pytorch'][key]:.4f} | "
          + " ".join(f"{d} {runtime[d][key]:.4f}" for d in DTYPES), flush=True)
    return metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/ferrite"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    dirs = sorted(p.parent for p in (ROOT / "models").glob("*/*/metrics.json"))
    if args.only:
        dirs = [d for d in dirs if d.name in args.only]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda d: measure(Path(args.bin), d, Path(tmp)), dirs))


if __name__ == "__main__":
    main()
