"""What rounding MLA's cache costs, in the f64 numpy reference (docs/integer-path.md,
"MLA on the integer path"): bits per byte of a models/lm-side MLA LM on the first
chunks of models/lm/heldout-english.txt (512 bytes each, the state reset per chunk, as
``ferrite eval --text``) with every cached latent, and optionally every cached RoPE key,
rounded to ``levels`` steps of its own max |value| (127: int8 with one scale per entry).

    python -m research.mla_cache_rounding lms-mla-w128 --chunks 8              # f32 cache
    python -m research.mla_cache_rounding lms-mla-w128 --chunks 8 --levels 127 # int8 latents
    python -m research.mla_cache_rounding lms-mla-w128 --chunks 8 --levels 127 --rope-keys

(run from tools/python). Measured 2026-12-04, lms-mla-w128, 8 chunks: 2.1565 f32,
2.1567 int8 latents, 2.1623 int8 latents and RoPE keys: why the runtime keeps RoPE keys
at 16 bits.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ferrite_ref import mla
from ferrite_ref.reference import Reference

ROOT = Path(__file__).resolve().parents[3]


def rounded(v: np.ndarray, levels: int) -> np.ndarray:
    """``v`` rounded to ``levels`` steps of its largest magnitude (zero stays zero)."""
    m = np.abs(v).max()
    return v if m == 0 else np.round(v * levels / m) * m / levels


class RoundedCache(list):
    """A cache list whose entries are rounded as they are appended."""

    levels = 127

    def append(self, v):
        super().append(rounded(v, self.levels))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", help="a directory name under models/lm-side (an MLA model)")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--levels", type=int, help="round the cached latents (default: f32 cache)")
    ap.add_argument("--rope-keys", action="store_true", help="round the cached RoPE keys too")
    args = ap.parse_args(argv)
    if args.levels:
        RoundedCache.levels = args.levels
        init = mla.LatentWindowAttention.__init__

        def rounded_init(self, cfg, weights):
            init(self, cfg, weights)
            self.latents = RoundedCache()
            if args.rope_keys:
                self.rope_keys = RoundedCache()

        mla.LatentWindowAttention.__init__ = rounded_init
    ref = Reference(ROOT / "models/lm-side" / args.model)
    text = (ROOT / "models/lm/heldout-english.txt").read_bytes()
    nats, n = 0.0, 0
    for c in range(args.chunks):
        chunk = text[c * 512:(c + 1) * 512]
        ref.reset()
        for i in range(len(chunk) - 1):
            logits = ref.step(chunk[i]).astype(np.float64)
            logits -= logits.max()
            nats += np.log(np.exp(logits).sum()) - logits[chunk[i + 1]]
            n += 1
    print(f"{args.model} levels={args.levels} rope_keys={args.rope_keys}: bits_per_byte={nats / n / np.log(2):.4f}")


if __name__ == "__main__":
    main()
