"""Train the memory-lookup model of issue 32 (docs/cross-attention.md, "The trained
memory-lookup model"): a short sliding window and a ``cross`` layer whose memory is
encoded by the model itself, every sequence with its own memory
(``ferrite_train.memory_task``), at one memory size per run.

    python -m ferrite_train.memory_lookup --slots 256 --out DIR [--time-budget S] [--steps N]
        [--curriculum-start P --curriculum-ramp F]

Writes into DIR: ``metrics.json`` (held-out accuracy on memories of unseen seeds, the
loss, steps, seconds, and the exported model against the f64 reference), ``loss.csv``,
the model directory ``model/`` (config.json + model.safetensors, the baked memory zeros),
and ``heldout/`` (4 held-out memories as ``memory_{n}.bin`` and ``queries.json``), so that

    ferrite quantize DIR/model -o lookup.fer --memory DIR/heldout/memory_0.bin ...

bakes them (the tools' encoder is the runtime's, docs/spec.md §3.10).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import memory_task as task
from .export import export_model_dir
from .model import FerriteLM


def _tensors(batch: dict, device) -> tuple:
    return tuple(torch.from_numpy(batch[k]).to(device) for k in ("memory", "stream", "targets"))


def loss_and_logits(model: FerriteLM, memory, stream, targets):
    """Cross-entropy at the scored positions, and the logits [B, T, vocab]."""
    model.encode_memory(memory)
    logits = model(stream)
    scored = targets >= 0
    return F.cross_entropy(logits[scored].float(), targets[scored]), logits


@torch.no_grad()
def heldout_accuracy(model: FerriteLM, slots: int, queries: int, sequences: int, device, batch: int) -> float:
    """Accuracy over ``sequences`` held-out sequences (each its own unseen memory)."""
    model.eval()
    hits = total = 0
    for index in range(math.ceil(sequences / batch)):
        b = task.heldout_batch(index, batch, slots, queries)
        memory, stream, targets = _tensors(b, device)
        _, logits = loss_and_logits(model, memory, stream, targets)
        scored = targets >= 0
        hits += int((logits.argmax(-1)[scored] == targets[scored]).sum())
        total += int(scored.sum())
    model.train()
    return hits / total


def reference_check(model_dir: Path, batch: dict, torch_logits: np.ndarray) -> float:
    """Max |logit diff| between the trained model (float32, torch) and the f64 reference
    (ferrite_ref, its own encoder) on the first held-out sequence: the export is what the
    tools quantize."""
    from ferrite_ref import Reference

    ref = Reference(model_dir)
    ref.use_memories([ref.encode_memory(batch["memory"][0])])
    want = ref.logits(batch["stream"][0], memory=0)
    return float(np.abs(want - torch_logits[0]).max())


def train(args) -> dict:
    torch.manual_seed(args.seed)
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    config = task.lookup_config(args.slots, hidden=args.hidden, heads=args.heads, window=args.window)
    model = FerriteLM(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, start, step = [], time.monotonic(), 0
    warmup = 200
    while step < args.steps and time.monotonic() - start < args.time_budget:
        # Training seeds: the run's seed times 2^32 plus the step, all below HELDOUT_SEED.
        pairs = None
        if args.curriculum_start:
            progress = max(step / args.steps, (time.monotonic() - start) / args.time_budget)
            pairs = task.curriculum_pairs(args.slots, args.curriculum_start, progress, args.curriculum_ramp)
        b = task.make_batch(args.seed * (1 << 32) + step, args.batch, args.slots, args.queries, pairs)
        memory, stream, targets = _tensors(b, device)
        lr = args.lr * min(1.0, (step + 1) / warmup)
        for group in opt.param_groups:
            group["lr"] = lr
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss, _ = loss_and_logits(model, memory, stream, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0 or step == 1:
            rows.append((step, round(time.monotonic() - start, 2), float(loss), pairs or task.pairs_for(args.slots)))
            print(f"slots {args.slots} step {step} loss {float(loss):.4f}", flush=True)
    seconds = time.monotonic() - start
    model.encode_memory(None)
    model = model.float()
    acc = heldout_accuracy(model, args.slots, args.queries, args.heldout, device, args.batch)
    model_dir = export_model_dir(model.cpu(), out / "model", {"task": "memory-lookup", "slots": str(args.slots)})
    held = task.heldout_batch(0, 4, args.slots, args.queries)
    task.write_memories(out / "heldout", held, 4)
    with torch.no_grad():
        model.encode_memory(torch.from_numpy(held["memory"]))
        logits = model(torch.from_numpy(held["stream"])).numpy()
        model.encode_memory(None)
    metrics = {
        "task": "memory-lookup", "slots": args.slots, "pairs": task.pairs_for(args.slots),
        "queries": args.queries, "steps": step, "train_seconds": round(seconds, 1),
        "final_loss": rows[-1][2] if rows else None, "heldout_sequences": args.heldout,
        "heldout_accuracy": acc, "chance": 1 / 64, "config": config,
        "heldout_accuracy_first4": task.accuracy(logits, held["targets"]),
        "reference_max_abs_diff": reference_check(model_dir, held, logits),
        "lr": args.lr, "batch": args.batch, "seed": args.seed, "device": str(device),
        "curriculum": ({"start_pairs": args.curriculum_start, "ramp": args.curriculum_ramp}
                       if args.curriculum_start else None),
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    (out / "loss.csv").write_text("step,seconds,loss,pairs\n" + "".join(f"{a},{b},{c},{d}\n" for a, b, c, d in rows),
                                  encoding="utf-8")
    return metrics


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slots", type=int, required=True, help="memory slots m (3 tokens a pair)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--steps", type=int, default=100_000, help="at most this many steps")
    p.add_argument("--time-budget", type=float, default=300.0, help="seconds of training")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--queries", type=int, default=32, help="lookups per sequence")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--heldout", type=int, default=1024, help="held-out sequences scored")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="auto")
    p.add_argument("--curriculum-start", type=int, default=0,
                   help="pair curriculum: start with this many pairs (0: the memory full from the start)")
    p.add_argument("--curriculum-ramp", type=float, default=0.5,
                   help="share of the run over which the pairs grow to the full memory")
    args = p.parse_args(argv)
    task.pairs_for(args.slots)
    if args.curriculum_start:
        task.curriculum_pairs(args.slots, args.curriculum_start, 0.0, args.curriculum_ramp)
    return args


def main(argv=None) -> int:
    metrics = train(parse_args(argv))
    print(json.dumps({k: metrics[k] for k in ("slots", "steps", "heldout_accuracy", "reference_max_abs_diff")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
