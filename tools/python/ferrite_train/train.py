"""Train one model of ``runs.py`` and export it as a model directory (docs/spec.md).

    python -m ferrite_train.train --run bla-m7 --out OUT [--steps N] [--time-budget S] [--device cuda]

Writes OUT/<run>/: config.json, model.safetensors (f32), metrics.json,
loss.csv. The directory is re-exported at checkpoints (every quarter of the
run), so a run cut short still leaves a usable model.

Schedule: AdamW (betas 0.9/0.95 for LM, default for MQAR), OneCycle-shaped
learning rate (10% linear warm-up from lr/25, cosine down to lr/1e4). The
schedule's progress is max(step / steps, elapsed / time_budget), so a run that
is slower than planned still anneals fully and ends in time; the number of
steps actually run is recorded (rerun with ``--steps N --time-budget 0`` for a
purely step-driven schedule).

MQAR (docs/mqar.md): batch i is drawn from seed 1_000_000 + i, the loss is the
cross-entropy at the P query positions only; accuracy is measured on 1,000
held-out sequences from seed 0. LM: random windows of seq_len + 1 bytes of the
training text (numpy Generator(seed)); bits per byte on the held-out file are
measured exactly as ``ferrite eval --text`` does: 512-byte chunks, state reset
per chunk, every byte after a chunk's first one predicted.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ferrite_ref import mqar
from ferrite_ref.config import BlaConfig, GdnConfig, GsaConfig, MlaConfig, SwaConfig

from .export import export_model_dir
from .model import FerriteLM
from .runs import all_runs

EVAL_CHUNK = 512


def layer_state_floats(layer) -> int:
    """Recurrent state words of one layer, as the runtime sizes it (runtime/src/mixers/*.rs)."""
    if isinstance(layer, GdnConfig):
        h, hv, k, v = layer.num_heads, layer.num_v_heads, layer.head_dim, layer.head_v_dim
        return hv * v * k + (2 * h * k + hv * v) * max(layer.conv_size - 1, 0)
    if isinstance(layer, GsaConfig):
        hkv, k, v = layer.num_kv_heads, layer.head_k_dim, layer.head_v_dim
        conv = (layer.num_heads * k + hkv * (k + v)) * (layer.conv_size - 1) if layer.use_short_conv else 0
        return hkv * layer.num_slots * (k + v) + conv
    if isinstance(layer, SwaConfig):
        h, hkv, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
        conv = (h * d + 2 * hkv * d) * (layer.conv_size - 1) if layer.use_short_conv else 0
        span = (layer.window - 1) * layer.dilation + 1
        return (layer.sinks + span) * hkv * 2 * d + conv
    if isinstance(layer, MlaConfig):
        return layer.window * (layer.kv_lora_rank + layer.rope_dim)
    assert isinstance(layer, BlaConfig)
    h, k, n = layer.num_heads, layer.head_dim, layer.slots
    conv = 3 * h * k * (layer.conv_size - 1) if layer.use_short_conv else 0
    return h * n * 2 * k + conv


def layer_core_state_floats(layer) -> int:
    """The mixer's memory proper, without the short-convolution caches."""
    if isinstance(layer, GdnConfig):
        return layer.num_v_heads * layer.head_v_dim * layer.head_dim
    if isinstance(layer, GsaConfig):
        return layer.num_kv_heads * layer.num_slots * (layer.head_k_dim + layer.head_v_dim)
    if isinstance(layer, SwaConfig):
        span = (layer.window - 1) * layer.dilation + 1
        return (layer.sinks + span) * layer.num_kv_heads * 2 * layer.head_dim
    if isinstance(layer, BlaConfig):
        return layer.num_heads * layer.slots * 2 * layer.head_dim
    return layer_state_floats(layer)


def lr_at(progress: float, lr: float, warmup: float = 0.1) -> float:
    if progress < warmup:
        return lr / 25 + (lr - lr / 25) * progress / warmup
    x = min(1.0, (progress - warmup) / (1 - warmup))
    low = lr / 25 / 1e4
    return low + (lr - low) * 0.5 * (1 + math.cos(math.pi * x))


@torch.no_grad()
def mqar_accuracy(model, device, n=1000, seed=mqar.EVAL_SEED, batch=500) -> float:
    tokens, positions, answers = mqar.generate_batch(seed, n)
    correct = 0
    for i in range(0, n, batch):
        x = torch.from_numpy(tokens[i:i + batch]).to(device)
        logits = model(x)[:, positions]
        correct += (logits.argmax(-1).cpu().numpy() == answers[i:i + batch]).sum()
    return float(correct) / (n * len(positions))


@torch.no_grad()
def bits_per_byte(model, data: bytes, device, chunk=EVAL_CHUNK) -> float:
    """As `ferrite eval --text`: reset every `chunk` bytes, predict each byte after the first."""
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)]
    nats, count = 0.0, 0
    full = [p for p in pieces if len(p) == chunk]
    for i in range(0, len(full), 64):
        x = torch.tensor([list(p) for p in full[i:i + 64]], dtype=torch.long, device=device)
        logits = model(x[:, :-1]).double()
        nats += F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1), reduction="sum").item()
        count += x[:, 1:].numel()
    for p in pieces:
        if len(p) != chunk and len(p) >= 2:
            x = torch.tensor([list(p)], dtype=torch.long, device=device)
            logits = model(x[:, :-1]).double()
            nats += F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1), reduction="sum").item()
            count += x[:, 1:].numel()
    return nats / count / math.log(2)


def _precise(flag: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = not flag
    torch.backends.cudnn.allow_tf32 = not flag


def train(name: str, out: Path, device: str, steps=None, time_budget=None, data_dir=None, log_every=25,
          overrides=None, init_from=None) -> dict:
    spec = dict(all_runs()[name])
    if steps:
        spec["steps"] = steps
    spec.update({k: v for k, v in (overrides or {}).items() if v is not None})
    torch.manual_seed(spec["seed"])
    model = FerriteLM(spec["config"]).to(device)
    stage1 = None
    if init_from:
        # Resume from an earlier run's exported weights (fresh optimizer and schedule).
        from .export import load_model_dir
        init_from = Path(init_from)
        model.load_state_dict(load_model_dir(init_from).state_dict())
        stage1 = json.loads((init_from / "metrics.json").read_text())
        stage1 = {"pytorch": stage1["pytorch"], "training": stage1["training"]}
    cfg = model.cfg
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() != 2]
    betas = (0.9, 0.95) if spec["task"] == "lm" else (0.9, 0.999)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": spec["wd"]}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=spec["lr"], betas=betas)
    run_dir = out / name
    run_dir.mkdir(parents=True, exist_ok=True)
    if init_from:
        (run_dir / "loss-stage1.csv").write_bytes((init_from / "loss.csv").read_bytes())

    if spec["task"] == "lm":
        data_dir = Path(data_dir)
        train_bytes = np.frombuffer((data_dir / "fortunes-train.txt").read_bytes(), dtype=np.uint8)
        heldout = (data_dir / "heldout.txt").read_bytes()
        train_gpu = torch.from_numpy(train_bytes.astype(np.int64)).to(device)
        rng = np.random.default_rng(spec["seed"])

    def batch(step):
        if spec["task"] == "mqar":
            tokens, positions, answers = mqar.generate_batch(mqar.TRAIN_SEED_BASE + step, spec["batch"])
            return (torch.from_numpy(tokens).to(device, non_blocking=True), torch.from_numpy(positions).to(device),
                    torch.from_numpy(answers).to(device, non_blocking=True))
        starts = torch.from_numpy(rng.integers(0, len(train_bytes) - spec["seq_len"] - 1, spec["batch"])).to(device)
        idx = starts[:, None] + torch.arange(spec["seq_len"] + 1, device=device)[None, :]
        return train_gpu[idx], None, None

    def evaluate():
        model.eval()
        _precise(True)
        if spec["task"] == "mqar":
            result = {"accuracy": mqar_accuracy(model, device)}
        else:
            result = {"bits_per_byte": bits_per_byte(model, heldout, device)}
        _precise(False)
        model.train()
        return result

    rows = []
    t0 = time.time()
    budget = time_budget if time_budget else float("inf")
    checkpoints = {0.25, 0.5, 0.75}
    step, running, n_running = 0, 0.0, 0
    last_eval = {}
    _precise(False)
    while True:
        progress = max(step / spec["steps"], (time.time() - t0) / budget)
        if progress >= 1.0:
            break
        lr = lr_at(progress, spec["lr"])
        for group in opt.param_groups:
            group["lr"] = lr
        x, positions, answers = batch(step)
        if spec["task"] == "mqar":
            logits = model(x)[:, positions]
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), answers.reshape(-1))
        else:
            logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        running += loss.detach()
        n_running += 1
        if step % log_every == 0:
            row = {"step": step, "elapsed_s": round(time.time() - t0, 2), "lr": lr,
                   "loss": round(float(running) / n_running, 5)}
            running, n_running = 0.0, 0
            done = [c for c in checkpoints if progress >= c]
            if done:
                checkpoints -= set(done)
                last_eval = evaluate()
                row.update(last_eval)
                export_model_dir(model, run_dir)
            rows.append(row)
            with open(run_dir / "loss.csv", "w", newline="") as f:
                keys = ["step", "elapsed_s", "lr", "loss", "accuracy" if spec["task"] == "mqar" else "bits_per_byte"]
                w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
                w.writeheader()
                w.writerows(rows)
    train_s = time.time() - t0
    final = evaluate()
    rows.append({"step": step, "elapsed_s": round(time.time() - t0, 2), "lr": 0.0,
                 "loss": rows[-1]["loss"] if rows else float("nan"), **final})
    with open(run_dir / "loss.csv", "w", newline="") as f:
        keys = ["step", "elapsed_s", "lr", "loss", "accuracy" if spec["task"] == "mqar" else "bits_per_byte"]
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    export_model_dir(model, run_dir)
    state = [4 * layer_state_floats(layer) for layer in cfg.layers]
    core = [4 * layer_core_state_floats(layer) for layer in cfg.layers]
    metrics = {
        "name": name, "task": spec["task"], "family": spec["family"], "params": n_params,
        "state_bytes_per_layer": state, "core_state_bytes_per_layer": core,
        "pytorch": {**final, "dtype": "float32", "device": device},
        "training": {
            "steps_planned": spec["steps"], "steps_run": step, "time_budget_s": time_budget,
            "train_seconds": round(train_s, 1), "batch": spec["batch"], "optimizer": "AdamW",
            "betas": list(betas), "lr_max": spec["lr"], "weight_decay": spec["wd"],
            "schedule": "OneCycle shape: 10% linear warm-up from lr/25, cosine to lr/2.5e5; progress = max(step/steps, time/budget)",
            "grad_clip": 1.0, "torch_seed": spec["seed"],
            "final_train_loss": rows[-1]["loss"],
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else platform.processor(),
        },
    }
    if stage1:
        metrics["training"]["resumed_from"] = stage1
    if spec["task"] == "mqar":
        metrics["training"]["data"] = ("docs/mqar.md generator, P=8 pairs, L=64; batch i from seed 1000000 + i; "
                                       "loss at the query positions only")
        metrics["eval"] = "1000 sequences from seed 0 (docs/mqar.md), argmax at the 8 query positions"
    else:
        metrics["training"]["seq_len"] = spec["seq_len"]
        metrics["training"]["data"] = "fortunes-train.txt (see models/lm/README.md), random windows, numpy default_rng(seed)"
        metrics["eval"] = "models/lm/heldout.txt, 512-byte chunks, state reset per chunk (as ferrite eval --text)"
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"[{name}] done: {step} steps in {train_s:.0f}s, {final}", flush=True)
    return metrics


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--time-budget", type=float, default=None)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / "data"))
    ap.add_argument("--lr", type=float)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--init-from", help="start from this model dir's weights (stage 2)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    train(args.run, Path(args.out), args.device, args.steps, args.time_budget, args.data,
          overrides={"lr": args.lr, "batch": args.batch, "seed": args.seed}, init_from=args.init_from)


if __name__ == "__main__":
    main()
