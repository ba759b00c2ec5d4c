"""Quantize every shipped model and measure it with the Rust runtime (host).

    cargo build --release -p ferrite-tools
    python tools/python/eval_models.py [--bin target/release/ferrite] [--only NAME ...]

For each models/mqar/<run> and models/lm/<size>: `ferrite quantize` into a
temporary directory, once per variant of VARIANTS,

    f32          --dtype f32
    int8         --dtype int8 --layout rows   row-major, f32 group scales, f32 activations
    int8_tiled   --dtype int8 --layout tiled  the integer path (int8 activations)
    int4         --dtype int4 --layout rows
    int4_tiled   --dtype int4 --layout tiled

(`int8`/`int4` are the figures recorded before the integer path existed, when
row-major was the only layout), then

    ferrite eval <image> --mqar --seed 0 --n 1000      (last line accuracy=...)
    ferrite eval <image> --text models/lm/heldout.txt  (last line bits_per_byte=...)

and writes the results under "runtime" in the model's metrics.json: the number
(and MQAR's count of correct queries), the image's flash bytes, RAM bytes and
state bytes (from `ferrite quantize`'s summary line) and the per-layer state
bytes from `ferrite inspect`. `--check` measures without writing and fails
when a figure differs from the recorded one (the runtime is deterministic, so
they must be equal). docs/quantization.md's integer-path table is
`python tools/python/models_report.py --integer`.
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
# variant -> `ferrite quantize` arguments
VARIANTS = {
    "f32": ["--dtype", "f32"],
    "int8": ["--dtype", "int8", "--layout", "rows"],
    "int8_tiled": ["--dtype", "int8", "--layout", "tiled"],
    "int4": ["--dtype", "int4", "--layout", "rows"],
    "int4_tiled": ["--dtype", "int4", "--layout", "tiled"],
}
# The recorded MQAR evaluation (docs/mqar.md defaults, the "eval" field of metrics.json).
MQAR_SEED, MQAR_N = 0, 1000


def run(cmd: list, stderr_too: bool = False) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True)
    return done.stdout + (done.stderr if stderr_too else "")


def measure(bin_path: Path, model_dir: Path, tmp: Path, variants: list, check: bool) -> dict:
    metrics_path = model_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    task = metrics["task"]
    runtime = dict(metrics.get("runtime", {}))
    for variant in variants:
        image = tmp / f"{model_dir.parent.name}-{model_dir.name}-{variant}.fer"
        summary = run([bin_path, "quantize", model_dir, "-o", image, *VARIANTS[variant]], True).strip().splitlines()[-1]
        flash = int(re.search(r"(\d+) bytes flash", summary).group(1))
        ram = re.search(r"(\d+) bytes RAM \((\d+) state\)", summary)
        entry = {"image_bytes": flash, "ram_bytes": int(ram.group(1)), "state_bytes": int(ram.group(2))}
        if variant == "f32":
            inspect = run([bin_path, "inspect", image], True)
            runtime["state_bytes_per_layer"] = [int(x) for x in re.findall(r"state (\d+) bytes", inspect)]
        if task == "mqar":
            out = run([bin_path, "eval", image, "--mqar", "--seed", MQAR_SEED, "--n", MQAR_N])
            entry["accuracy"] = float(out.strip().splitlines()[-1].split("=")[1])
            entry["correct"] = int(re.search(r"correct=(\d+)", out).group(1))
        else:
            out = run([bin_path, "eval", image, "--text", ROOT / "models/lm/heldout.txt"])
            entry["bits_per_byte"] = float(out.strip().splitlines()[-1].split("=")[1])
        if check and variant in runtime:
            recorded = {k: runtime[variant][k] for k in entry if k in runtime[variant]}
            if recorded != {k: entry[k] for k in recorded}:
                raise SystemExit(f"{model_dir.relative_to(ROOT)} {variant}: measured {entry}, recorded {runtime[variant]}")
        runtime[variant] = entry
    runtime["commands"] = ("ferrite quantize <dir> -o <img> --dtype {f32,int8,int4} [--layout rows] "
                           "(int8/int4: --layout rows; int8_tiled/int4_tiled: --layout tiled); "
                           + (f"ferrite eval <img> --mqar --seed {MQAR_SEED} --n {MQAR_N}" if task == "mqar"
                              else "ferrite eval <img> --text models/lm/heldout.txt"))
    metrics["runtime"] = {k: runtime[k] for k in ["state_bytes_per_layer", *VARIANTS, "commands"] if k in runtime}
    if not check:
        metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    key = "accuracy" if task == "mqar" else "bits_per_byte"
    print(f"{model_dir.relative_to(ROOT)}: pytorch {metrics['pytorch'][key]:.4f} | "
          + " ".join(f"{v} {runtime[v][key]:.4f}" for v in variants), flush=True)
    return metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/ferrite"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--variants", nargs="*", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--check", action="store_true",
                    help="measure, write nothing, fail when a figure differs from the recorded one")
    args = ap.parse_args()
    dirs = sorted(p.parent for p in (ROOT / "models").glob("*/*/metrics.json"))
    if args.only:
        dirs = [d for d in dirs if d.name in args.only]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda d: measure(Path(args.bin), d, Path(tmp), args.variants, args.check), dirs))


if __name__ == "__main__":
    main()
