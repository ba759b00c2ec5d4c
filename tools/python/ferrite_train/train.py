"""Train one model of ``runs.py`` and export it as a model directory (docs/spec.md).

    python -m ferrite_train.train --run bla-m7 --out OUT [--steps N] [--time-budget S] [--device cuda]
                                  [--registry MODULE]

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
held-out sequences from seed 0. A run's ``curriculum`` (the state study's second
edition) trains its first phases on shorter MQAR: ``[[fraction, pairs, seq_len],
...]``, each phase the given share of the schedule, then the run's own task for the
rest; the CUDA graph is captured again at each change of shape, and the early stop
(``stop_at``) is checked in the last phase only. LM: random windows of seq_len + 1 bytes of the
training text (numpy Generator(seed)); bits per byte on the held-out file are
measured exactly as ``ferrite eval --text`` does: 512-byte chunks, state reset
per chunk, every byte after a chunk's first one predicted.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ferrite_ref import mqar

from . import qat
from .corpus import DATA_DIR
from .export import export_model_dir
from .fla_shapes import is_fla, state_floats as fla_state_floats
from .mixers import layer_core_state_floats, layer_state_floats
from .model import FerriteLM
from .runs import DEFAULT_REGISTRY, load_registry
from .tasks import curriculum_task, mqar_task

EVAL_CHUNK = 512
# LM data sets (tools/python/data, built by ferrite_train.corpus: fortunes / english):
# name -> (training text, held-out text).
LM_DATA = {"fortunes": ("fortunes-train.txt", "heldout.txt"),
           "english": ("english-train.txt", "english-heldout.txt")}
# Where each held-out text is committed under models/lm/.
LM_HELDOUT_COPY = {"heldout.txt": "heldout.txt", "english-heldout.txt": "heldout-english.txt"}


def lr_at(progress: float, lr: float, warmup: float = 0.1) -> float:
    if progress < warmup:
        return lr / 25 + (lr - lr / 25) * progress / warmup
    x = min(1.0, (progress - warmup) / (1 - warmup))
    low = lr / 25 / 1e4
    return low + (lr - low) * 0.5 * (1 + math.cos(math.pi * x))


# Validation sequences (model selection in the state study): neither the
# evaluation seed 0 nor a training seed (>= 1,000,000).
VAL_SEED = 500_000


@torch.no_grad()
def mqar_accuracy(model, device, n=1000, seed=mqar.EVAL_SEED, batch=100, task=None) -> float:
    tokens, positions, answers = mqar.generate_batch(seed, n, **(task or {}))
    correct = 0
    for i in range(0, n, batch):
        x = torch.from_numpy(tokens[i:i + batch]).to(device)
        pos = torch.from_numpy(positions if positions.ndim == 1 else positions[i:i + batch]).to(device)
        logits = model.logits_at(x, pos)
        correct += (logits.argmax(-1).cpu().numpy() == answers[i:i + batch]).sum()
    return float(correct) / answers.size


class GraphStep:
    """One training step (forward, backward, clip, AdamW) captured as a CUDA graph:
    these models are launch-bound, so replaying the whole step is several times
    faster than running it op by op. The batch is copied into static inputs and
    the learning rate into the optimizer's tensor before each replay."""

    def __init__(self, step_fn, opt, lr_tensor, example):
        self.opt, self.lr = opt, lr_tensor
        self.inputs = [t.clone() for t in example]
        self.graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.loss = step_fn(*self.inputs)

    def __call__(self, batch, lr):
        for dst, src in zip(self.inputs, batch):
            dst.copy_(src, non_blocking=True)
        self.lr.fill_(lr)
        self.graph.replay()
        return self.loss.detach().clone()


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


def csv_keys(spec: dict) -> list:
    extra = ["val_accuracy", "accuracy"] if spec["task"] == "mqar" else ["bits_per_byte"]
    if spec.get("data", "fortunes") != "fortunes":
        extra.append("bits_per_byte_fortunes")
    return ["step", "elapsed_s", "lr", "loss"] + extra


def _precise(flag: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = not flag
    torch.backends.cudnn.allow_tf32 = not flag


def train(name: str, out: Path, device: str, steps=None, time_budget=None, data_dir=None, log_every=25,
          overrides=None, init_from=None, graph=None, runs=None, end_by=None) -> dict:
    """Train run ``name`` of ``runs`` (default: the shipped models' registry) into ``out/name``;
    ``end_by`` (Unix time) shortens the time budget so that training stops by then."""
    spec = dict((runs if runs is not None else load_registry())[name])
    if steps:
        spec["steps"] = steps
    spec.update({k: v for k, v in (overrides or {}).items() if v is not None})
    torch.manual_seed(spec["seed"])
    fla = is_fla(spec["config"])
    if fla:
        # fla's RWKV-7 or Mamba-2 (the state study, ferrite_train.fla_shapes): GPU only.
        from .fla_lm import FlaLM, trim_autotune
        if spec["config"]["model_type"] == "rwkv7":
            trim_autotune()
        if spec.get("qat") or spec.get("init_from") or init_from:
            raise ValueError(f"{name}: fla models train from scratch without QAT")
        model = FlaLM(spec["config"]).to(device)
    else:
        model = FerriteLM(spec["config"]).to(device)
    stage1 = None
    if not init_from and spec.get("init_from"):
        init_from = Path(__file__).resolve().parents[3] / spec["init_from"]
    if init_from:
        # Resume from an earlier run's exported weights (fresh optimizer and schedule).
        from .export import load_model_dir
        init_from = Path(init_from)
        model.load_state_dict(load_model_dir(init_from).state_dict())
        stage1 = json.loads((init_from / "metrics.json").read_text())
        stage1 = {"pytorch": stage1["pytorch"], "training": stage1["training"]}
    cfg = None if fla else model.cfg
    n_params = sum(p.numel() for p in model.parameters())
    qat_names = []
    if spec.get("qat"):
        qat_names = qat.attach(model, **spec["qat"])
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() != 2]
    betas = (0.9, 0.95) if spec["task"] == "lm" else (0.9, 0.999)
    if graph is None:
        # QAT runs step eagerly: with a captured step, reading a parametrized weight
        # in the evaluation failed on the H200 (AttributeError from the parametrization).
        graph = device.startswith("cuda") and not qat_names
    lr_tensor = torch.tensor(spec["lr"], device=device) if graph else None
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": spec["wd"]}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr_tensor if graph else spec["lr"], betas=betas, capturable=bool(graph))
    task = mqar_task(spec)

    def exported():
        return qat.frozen_copy(model) if qat_names else model

    def save():
        if fla:
            model.save(run_dir)
        else:
            export_model_dir(exported(), run_dir)
    run_dir = out / name
    run_dir.mkdir(parents=True, exist_ok=True)
    if init_from:
        (run_dir / "loss-stage1.csv").write_bytes((init_from / "loss.csv").read_bytes())

    if spec["task"] == "lm":
        data_dir = Path(data_dir)
        train_file, heldout_file = LM_DATA[spec.get("data", "fortunes")]
        train_bytes = np.frombuffer((data_dir / train_file).read_bytes(), dtype=np.uint8)
        heldout = (data_dir / heldout_file).read_bytes()
        # Runs on the English text also report the fortunes' held-out bits per byte,
        # so they compare with models/lm/{small,large}.
        fortunes_heldout = (data_dir / "heldout.txt").read_bytes() if heldout_file != "heldout.txt" else None
        train_gpu = torch.from_numpy(train_bytes.astype(np.int64)).to(device)
        rng = np.random.default_rng(spec["seed"])

    def batch(step, task=task):
        if spec["task"] == "mqar":
            tokens, positions, answers = mqar.generate_batch(mqar.TRAIN_SEED_BASE + step, spec["batch"], **task)
            return (torch.from_numpy(tokens).to(device, non_blocking=True), torch.from_numpy(positions).to(device),
                    torch.from_numpy(answers).to(device, non_blocking=True))
        starts = torch.from_numpy(rng.integers(0, len(train_bytes) - spec["seq_len"] - 1, spec["batch"])).to(device)
        idx = starts[:, None] + torch.arange(spec["seq_len"] + 1, device=device)[None, :]
        return (train_gpu[idx],)

    def step_loss(x, positions=None, answers=None):
        if spec["task"] == "mqar":
            logits = model.logits_at(x, positions)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), answers.reshape(-1))
        logits = model(x[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))

    def step_update(*batch):
        loss = step_loss(*batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    def set_lr(lr):
        for group in opt.param_groups:
            if torch.is_tensor(group["lr"]):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def evaluate():
        model.eval()
        _precise(True)
        if spec["task"] == "mqar":
            result = {"val_accuracy": mqar_accuracy(model, device, n=500, seed=VAL_SEED, task=task),
                      "accuracy": mqar_accuracy(model, device, task=task)}
        else:
            result = {"bits_per_byte": bits_per_byte(model, heldout, device)}
            if fortunes_heldout is not None:
                result["bits_per_byte_fortunes"] = bits_per_byte(model, fortunes_heldout, device)
        _precise(False)
        model.train()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()  # many runs share the GPU: give the evaluation's memory back
        return result

    if fla:
        # Compile fla's Triton kernels before the clock starts (minutes on a cold machine for
        # RWKV-7): a forward and backward at every shape the run trains on, no optimizer step,
        # and the evaluation's shape.
        warm_t0 = time.time()
        shapes = [dict(task, pairs=p, seq_len=n) for _, p, n in spec.get("curriculum", [])] + [task]
        for i, shape in enumerate(shapes):
            step_loss(*batch(i, shape)).backward()
        opt.zero_grad(set_to_none=True)
        model.eval()
        mqar_accuracy(model, device, n=100, seed=VAL_SEED, task=task)
        model.train()
        torch.cuda.synchronize()
        print(f"[{name}] fla warm-up {time.time() - warm_t0:.0f}s", flush=True)
    rows = []
    t0 = time.time()
    budget = time_budget if time_budget else float("inf")
    if end_by is not None:
        budget = max(1.0, min(budget, end_by - t0))
        time_budget = budget
    checkpoints = {0.25, 0.5, 0.75}
    step, running, n_running = 0, 0.0, 0
    last_eval = {}
    _precise(False)
    captured, graph_note, stopped_early = None, "off", None
    step_task, eager_steps, phases = task, 0, []
    while True:
        progress = max(step / spec["steps"], (time.time() - t0) / budget)
        if progress >= 1.0:
            break
        lr = lr_at(progress, spec["lr"])
        if spec["task"] == "mqar":
            now = curriculum_task(spec, progress)
            if now != step_task or not phases:
                if now != step_task:
                    # A new shape: the captured step no longer fits; capture again after 3 eager steps.
                    captured, eager_steps = None, 0
                step_task = now
                phases.append({"from_step": step, "pairs": now["pairs"], "seq_len": now["seq_len"]})
        data = batch(step, step_task)
        if graph and captured is None and eager_steps >= 3:
            # Three eager steps (on a side stream, as CUDA graph capture asks) warmed
            # everything up; capture the step now, or fall back to eager steps.
            try:
                torch.cuda.synchronize()
                captured = GraphStep(step_update, opt, lr_tensor, data)
                graph_note = "cuda graph"
            except Exception as exc:  # noqa: BLE001 - any capture failure means eager steps
                graph, graph_note = False, f"eager (capture failed: {type(exc).__name__}: {exc})"[:300]
                print(f"[{name}] {graph_note}", flush=True)
                opt.zero_grad(set_to_none=True)
        if captured is not None:
            loss = captured(data, lr)
        else:
            set_lr(lr)
            opt.zero_grad(set_to_none=True)
            if graph:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    loss = step_update(*data)
                torch.cuda.current_stream().wait_stream(side)
            else:
                loss = step_update(*data)
            eager_steps += 1
        step += 1
        if spec.get("stop_at") and step % 100 == 0 and step < spec["steps"] and step_task == task:
            # Early stop (state study): the run is done once 200 validation sequences are solved.
            model.eval()
            reached = mqar_accuracy(model, device, n=200, seed=VAL_SEED, task=task) >= spec["stop_at"]
            model.train()
            if reached:
                stopped_early = step
                running += loss.detach()
                n_running += 1
                break
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
                save()
            rows.append(row)
            with open(run_dir / "loss.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=csv_keys(spec), extrasaction="ignore")
                w.writeheader()
                w.writerows(rows)
    train_s = time.time() - t0
    final = evaluate()
    rows.append({"step": step, "elapsed_s": round(time.time() - t0, 2), "lr": 0.0,
                 "loss": rows[-1]["loss"] if rows else float("nan"), **final})
    with open(run_dir / "loss.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=csv_keys(spec), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    save()
    if fla:
        state = [4 * fla_state_floats(spec["config"])[0]] * spec["config"]["num_hidden_layers"]
        core = [4 * fla_state_floats(spec["config"])[1]] * spec["config"]["num_hidden_layers"]
    else:
        state = [4 * layer_state_floats(layer) for layer in cfg.layers]
        core = [4 * layer_core_state_floats(layer) for layer in cfg.layers]
    metrics = {
        "name": name, "task": spec["task"], "family": spec["family"], "params": n_params,
        "state_bytes_per_layer": state, "core_state_bytes_per_layer": core,
        "pytorch": {**final, "dtype": model.precision if fla else "float32", "device": device},
        "training": {
            "steps_planned": spec["steps"], "steps_run": step, "time_budget_s": time_budget,
            "train_seconds": round(train_s, 1), "batch": spec["batch"], "optimizer": "AdamW",
            "betas": list(betas), "lr_max": spec["lr"], "weight_decay": spec["wd"],
            "schedule": "OneCycle shape: 10% linear warm-up from lr/25, cosine to lr/2.5e5; progress = max(step/steps, time/budget)",
            "grad_clip": 1.0, "torch_seed": spec["seed"], "step_mode": graph_note,
            "stopped_early_at": stopped_early, "phases": phases or None,
            "curriculum": spec.get("curriculum"), "stop_rule": (f"val accuracy (200 sequences of seed {VAL_SEED}, every 100 steps) >= {spec['stop_at']}"
                                                            if spec.get("stop_at") else None),
            "final_train_loss": rows[-1]["loss"],
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else platform.processor(),
        },
    }
    if stage1:
        metrics["training"]["resumed_from"] = stage1
    if qat_names:
        metrics["training"]["qat"] = {**spec["qat"], "weights": qat_names,
                                      "note": "exported weights are the fake-quantized values (ferrite_train/qat.py)"}
    if spec["task"] == "mqar":
        p, length, queries = task["pairs"], task["seq_len"], task["queries"]
        metrics["mqar"] = task
        metrics["training"]["data"] = (f"docs/mqar.md generator, P={p} pairs, L={length}, queries={queries}; "
                                       "batch i from seed 1000000 + i; loss at the query positions only")
        metrics["eval"] = (f"1000 sequences from seed 0 (docs/mqar.md), argmax at the {p} query positions; "
                           f"val_accuracy: 500 sequences from seed {VAL_SEED}")
    else:
        metrics["training"]["seq_len"] = spec["seq_len"]
        train_file, heldout_file = LM_DATA[spec.get("data", "fortunes")]
        metrics["training"]["data"] = f"{train_file} (see models/lm/README.md), random windows, numpy default_rng(seed)"
        metrics["eval"] = (f"{heldout_file} (models/lm/{LM_HELDOUT_COPY[heldout_file]}), 512-byte chunks, state reset "
                           "per chunk (as ferrite eval --text)")
        if heldout_file != "heldout.txt":
            metrics["eval"] += "; bits_per_byte_fortunes: the same on models/lm/heldout.txt"
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"[{name}] done: {step} steps in {train_s:.0f}s, {final}", flush=True)
    return metrics


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--registry", default=DEFAULT_REGISTRY,
                    help="module whose all_runs() names the runs (default: %(default)s; the state study's: "
                         "research.study_runs, from tools/python)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--time-budget", type=float, default=None)
    ap.add_argument("--data", default=str(DATA_DIR))
    ap.add_argument("--lr", type=float)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--init-from", help="start from this model dir's weights (stage 2)")
    ap.add_argument("--eager", action="store_true", help="no CUDA graph: run every step op by op")
    ap.add_argument("--end-by", type=float, help="Unix time by which training stops (the budget shrinks to fit)")
    args = ap.parse_args(argv)
    runs = load_registry(args.registry)
    if args.run not in runs:
        ap.error(f"unknown run {args.run!r} in registry {args.registry}")
    torch.set_num_threads(1)
    train(args.run, Path(args.out), args.device, args.steps, args.time_budget, args.data,
          overrides={"lr": args.lr, "batch": args.batch, "seed": args.seed}, init_from=args.init_from,
          graph=False if args.eager else None, runs=runs, end_by=args.end_by)


if __name__ == "__main__":
    main()
