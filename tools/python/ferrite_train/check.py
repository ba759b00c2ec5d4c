"""Parity: the PyTorch modules against the numpy reference on the committed fixtures.

    python -m ferrite_train.check [--device cuda] [--fixtures tests/fixtures]

Each fixture's weights are loaded into ``FerriteLM`` and run in float64 (and
float32) over the fixture's 80 tokens in one parallel forward pass; the logits
are compared with ``expected.safetensors`` (the f64 numpy reference, rounded to
f32) and, for float64, also with a fresh run of ``ferrite_ref.Reference``.
Prints one line per fixture and the maximum; exits 1 above the tolerance.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from ferrite_ref import mqar
from ferrite_ref.reference import Reference
from ferrite_ref.safetensors_io import load_safetensors

from .export import load_model_dir

ROOT = Path(__file__).resolve().parents[3]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=str(ROOT / "tests" / "fixtures"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--models", nargs="*", default=[],
                    help="also compare these model dirs (torch f64 vs Reference, one 64-token MQAR sequence / 256 text bytes)")
    args = ap.parse_args(argv)
    results = {}
    for d in args.models:
        model = load_model_dir(d, args.device, torch.float64)
        tokens = mqar.generate(0, 1)[0].tokens if model.cfg.layers and "mqar" in str(d) else list(range(32, 288))[:256]
        tokens = [t % 256 for t in tokens]
        with torch.no_grad():
            got = model(torch.tensor([tokens], device=args.device))[0].cpu().numpy()
        ref = Reference(d).logits(tokens)
        diff = float(np.max(np.abs(got - ref)))
        print(f"{d}: torch f64 vs Reference max |logit diff| {diff:.2e} over {len(tokens)} tokens")
        if diff > args.tolerance:
            return 1
    if args.models:
        return 0
    worst64 = worst32 = 0.0
    for fx in sorted(p for p in Path(args.fixtures).iterdir() if (p / "config.json").exists()):
        expected, meta = load_safetensors(fx / "expected.safetensors")
        pinned = int(meta.get("pinned", 0))
        tokens = torch.tensor(expected["tokens"].astype(np.int64))[None].to(args.device)
        want = expected["logits"].astype(np.float64)
        row = {}
        for name, dtype in (("f64", torch.float64), ("f32", torch.float32)):
            model = load_model_dir(fx, args.device, dtype)
            with torch.no_grad():
                got = model(tokens, pinned=pinned)[0].double().cpu().numpy()
            row[name] = float(np.max(np.abs(got - want)))
            if name == "f64":
                ref = Reference(fx, pinned=pinned).logits(expected["tokens"].tolist())
                row["f64_vs_live_reference"] = float(np.max(np.abs(got - ref)))
        worst64 = max(worst64, row["f64"], row["f64_vs_live_reference"])
        worst32 = max(worst32, row["f32"])
        results[fx.name] = row
        print(f"{fx.name:32s} f64 {row['f64']:.2e} (live ref {row['f64_vs_live_reference']:.2e})  f32 {row['f32']:.2e}")
    print(f"max |logit diff| over {len(results)} fixtures x 80 tokens: float64 {worst64:.2e}, float32 {worst32:.2e}"
          f" (device {args.device}, torch {torch.__version__})")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "torch": torch.__version__,
                                               "max_f64": worst64, "max_f32": worst32, "fixtures": results}, indent=1))
    return 0 if worst64 <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
