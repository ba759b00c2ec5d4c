"""Turn a ``ferrite_train.fla_lm`` output directory into a shipped byte-level LM,
``models/lm/<name>``, in the layout and ``metrics.json`` schema of the other LMs
(models/lm/README.md), so ``ferrite-eval-models`` measures it and the reports list it:

    python -m ferrite_train.fla_ship OUT/rwkv7-m3 ../../models/lm/rwkv7-m3
    ferrite-eval-models --only rwkv7-m3 && ferrite-eval-models --quick --only rwkv7-m3

It copies fla's ``save_pretrained`` files (config.json, model.safetensors) and
loss.csv as they are (the board gets the checkpoint a user's own fla training
would give), and writes metrics.json: the PyTorch bits per byte on both held-out
texts under "pytorch", fla_lm's own record under "training". Needs no torch.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

# What fla_lm writes (its HELDOUT keys, prefixed) -> the shipped schema's keys.
PYTORCH_KEYS = ("bits_per_byte", "bits_per_byte_fortunes")
EVAL = ("english-heldout.txt (models/lm/heldout-english.txt), 512-byte chunks, state reset per chunk "
        "(as ferrite eval --text); bits_per_byte_fortunes: the same on models/lm/heldout.txt")
COPIED = ("config.json", "model.safetensors", "loss.csv")


def shipped_metrics(name: str, trained: dict) -> dict:
    """The shipped metrics.json of a model fla_lm trained (``trained``: its metrics.json)."""
    missing = [k for k in ("family", "parameters", *(f"pytorch_{k}" for k in PYTORCH_KEYS)) if k not in trained]
    if missing:
        raise ValueError(f"not an fla_lm metrics.json: no {', '.join(missing)}")
    return {
        "name": name,
        "task": "lm",
        "family": f"{trained['family']}-english",
        "params": trained["parameters"],
        "pytorch": {**{k: trained[f"pytorch_{k}"] for k in PYTORCH_KEYS},
                    "dtype": trained.get("eval_precision", "float32"), "device": "cuda"},
        "training": {k: v for k, v in trained.items() if not k.startswith("pytorch_")},
        "eval": EVAL,
    }


def ship(trained_dir: Path, out: Path) -> dict:
    """Copies the checkpoint into ``out`` and writes its metrics.json; returns the metrics."""
    metrics = shipped_metrics(out.name, json.loads((trained_dir / "metrics.json").read_text()))
    out.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        shutil.copyfile(trained_dir / name, out / name)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trained", type=Path, help="an fla_lm --out directory")
    ap.add_argument("out", type=Path, help="models/lm/<name>")
    args = ap.parse_args(argv)
    try:
        m = ship(args.trained, args.out)
    except (OSError, ValueError) as e:  # one line, non-zero exit
        raise SystemExit(f"fla_ship: {e}") from None
    print(f"{args.out}: {m['params']} params, PyTorch bits per byte "
          + " / ".join(f"{m['pytorch'][k]:.4f}" for k in PYTORCH_KEYS))


if __name__ == "__main__":
    main()
