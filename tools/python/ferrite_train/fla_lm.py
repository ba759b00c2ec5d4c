"""Status (2026-12-06): shipped as models/lm/rwkv7-m3 and models/lm/mamba2-m3
(settings, steps and bits per byte in models/lm/README.md and each metrics.json),
from one device call that trains both at once and tars them back:
    FLA_LM_PY=target/flalm-py bash tools/python/research/rounds/fla-lm-call.sh 420 540 505
(Mamba-2 420 s, RWKV-7 up to 540 s, training ends 505 s after the start; see the
script's header for the carry), then ``python -m ferrite_train.fla_ship``. The
warm-up (one forward and backward, no optimizer step, and the evaluation's shapes)
compiles fla's kernels before the clock starts; --end-by stops training at a
wall-clock time whatever the budget; --trim-autotune keeps at most 4 warps and 3
stages of fla's autotune configurations to cut RWKV-7's compile (still 211 s on a
cold H100, which left RWKV-7 287 s of training in the call).

Train a byte-level LM with fla's own model classes (issue 27, item 5): RWKV-7
(``RWKV7ForCausalLM``) or Mamba-2 (``Mamba2ForCausalLM``) at ``models/lm/en-m3``'s
budget (the M3: 256 KB flash, 64 KB RAM), on the English text of
``ferrite_train.corpus.english``. What it writes is an fla ``save_pretrained``
directory, so the model reaches the board the way a user's own fla checkpoint
does: ``ferrite quantize DIR -o model.fer --dtype int8``.

    python -m ferrite_train.fla_lm --family rwkv7 --out OUT/rwkv7-m3 --time-budget 430
    python -m ferrite_train.fla_lm --family mamba2 --out OUT/mamba2-m3 --time-budget 430

Needs a GPU, PyTorch and fla 0.6.0 (not part of CI). The schedule is
``ferrite_train.train``'s (10% warm-up from lr/25, cosine; progress is elapsed
/ time budget); AdamW (0.9, 0.95), weight decay 0.1 on matrices, batch 32
random windows of 513 bytes (numpy Generator(seed)), gradient clip 1, torch
seed ``seed``. RWKV-7 trains under bf16 autocast (fla's f32 chunk kernels take
minutes to compile); Mamba-2 runs fla's PyTorch forward (no mamba_ssm), in f32.
The weights are saved in f32. ``metrics.json`` holds the settings, the steps run
and the bits per byte PyTorch measures on both held-out texts (as ``ferrite eval
--text`` does: 512-byte chunks, state reset per chunk), in the training precision.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .corpus import DATA_DIR
from .train import lr_at

EVAL_CHUNK = 512
HELDOUT = {"bits_per_byte": "english-heldout.txt", "bits_per_byte_fortunes": "heldout.txt"}


def m3_config(family: str):
    """fla configurations at en-m3's budget: about 150k parameters (an int8 image
    of ~150 KB beside the firmware in 256 KB of flash) and under 32 KB of state."""
    if family == "rwkv7":
        from fla.models import RWKV7Config

        # 3 layers, d 64, 4 heads of 16: state 3 x 4 x 16 x 16 f32 = 12 KB (+ token shifts).
        return RWKV7Config(
            hidden_size=64, num_hidden_layers=3, head_dim=16, decay_low_rank_dim=16,
            gate_low_rank_dim=32, a_low_rank_dim=16, v_low_rank_dim=8, intermediate_size=128,
            vocab_size=256, tie_word_embeddings=True, fuse_cross_entropy=False,
        )
    if family == "mamba2":
        from fla.models import Mamba2Config

        # 5 layers, d 64, expand 2: 8 heads of 16, state 8, one group:
        # state 5 x 8 x 16 x 8 f32 = 20 KB, convolution rings 5 x 3 x 144 f32 = 8.6 KB.
        return Mamba2Config(
            hidden_size=64, num_hidden_layers=5, head_dim=16, expand=2, state_size=8,
            n_groups=1, conv_kernel=4, chunk_size=64, vocab_size=256, tie_word_embeddings=True,
            fuse_cross_entropy=False,
        )
    raise ValueError(f"unknown family {family!r} (rwkv7 or mamba2)")


def trim_autotune(max_warps: int = 4, max_stages: int = 3) -> None:
    """Before fla is imported: keep only the autotune configurations of every
    ``triton.autotune`` with at most ``max_warps`` warps and ``max_stages`` stages
    (else the one with fewest). fla tries up to 15 per kernel (warps 2..32 x stages
    2..4) and a cold machine compiles each: ~6 minutes for RWKV-7's chunk kernels.
    The launch configuration changes speed, not the maths of the model."""
    import functools

    import triton

    original = triton.autotune

    @functools.wraps(original)
    def autotune(configs, *args, **kwargs):
        kept = [c for c in configs
                if (c.num_warps or 4) <= max_warps and (c.num_stages or 3) <= max_stages]
        return original(kept or [min(configs, key=lambda c: (c.num_warps or 4, c.num_stages or 3))],
                        *args, **kwargs)

    triton.autotune = autotune


def model_class(family: str):
    from fla.models import Mamba2ForCausalLM, RWKV7ForCausalLM

    return {"rwkv7": RWKV7ForCausalLM, "mamba2": Mamba2ForCausalLM}[family]


class FlaLM(torch.nn.Module):
    """An fla RWKV-7 or Mamba-2 model behind the interface ``ferrite_train.train`` uses for
    ferrite's own (``forward(tokens)``, ``logits_at(tokens, positions)``), so the state study
    trains it on MQAR with the same recipe (``ferrite_train.fla_shapes``). RWKV-7 runs under
    bf16 autocast (fla's f32 chunk kernels take minutes to compile), Mamba-2 in f32."""

    def __init__(self, config: dict):
        super().__init__()
        from fla.models import Mamba2Config, RWKV7Config

        kind = config["model_type"]
        kwargs = {k: v for k, v in config.items() if k != "model_type"}
        fla_config = {"rwkv7": RWKV7Config, "mamba2": Mamba2Config}[kind](**kwargs)
        self.inner = model_class(kind)(fla_config)
        self.autocast = kind == "rwkv7"

    @property
    def precision(self) -> str:
        return "bf16 autocast" if self.autocast else "float32"

    def _hidden(self, tokens):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            return self.inner.base_model(input_ids=tokens, use_cache=False)[0]

    def forward(self, tokens):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            return self.inner.lm_head(self._hidden(tokens)).float()

    def logits_at(self, tokens, positions):
        """The logits at ``positions`` ([P] shared, or [B, P] per sequence): [B, P, vocab]."""
        h = self._hidden(tokens)
        if positions.dim() == 1:
            h = h[:, positions]
        else:
            h = h.gather(1, positions[..., None].expand(-1, -1, h.shape[-1]))
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            return self.inner.lm_head(h).float()

    def save(self, run_dir) -> None:
        """fla's ``save_pretrained`` (config.json and model.safetensors, f32)."""
        self.inner.save_pretrained(run_dir)


def logits_of(model, x, autocast: bool):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        return model(input_ids=x).logits.float()


@torch.no_grad()
def bits_per_byte(model, data: bytes, device, autocast: bool, chunk=EVAL_CHUNK) -> float:
    """As `ferrite eval --text`: reset every `chunk` bytes, predict each byte after the first."""
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)]
    nats, count = 0.0, 0
    full = [p for p in pieces if len(p) == chunk]
    rest = [[p] for p in pieces if len(p) != chunk and len(p) >= 2]
    for group in [full[i:i + 32] for i in range(0, len(full), 32)] + rest:
        x = torch.tensor([list(p) for p in group], dtype=torch.long, device=device)
        logits = logits_of(model, x[:, :-1], autocast).double()
        nats += F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1), reduction="sum").item()
        count += x[:, 1:].numel()
    return nats / count / math.log(2)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=["rwkv7", "mamba2"], required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--time-budget", type=float, default=430.0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", type=Path, default=DATA_DIR)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--end-by", type=float, default=None,
                    help="Unix time by which training stops (the budget shrinks to fit)")
    ap.add_argument("--trim-autotune", action="store_true",
                    help="fewer Triton autotune configurations (see trim_autotune)")
    args = ap.parse_args(argv)
    launched = time.time()
    if args.trim_autotune:
        trim_autotune()

    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    autocast = args.family == "rwkv7"
    model = model_class(args.family)(m3_config(args.family)).to(args.device).float().train()
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.family}: {params} parameters", flush=True)

    text = np.frombuffer((args.data_dir / "english-train.txt").read_bytes(), dtype=np.uint8)
    rng = np.random.default_rng(args.seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "loss.csv", "w", newline="")
    writer = csv.writer(log)
    writer.writerow(["step", "seconds", "lr", "loss_bits_per_byte"])
    window = args.seq_len + 1
    # Compile fla's kernels before the clock starts (a cold machine spends minutes
    # in Triton): one forward and backward on the first window of the text, no
    # optimizer step, and the evaluation's shapes; the schedule then covers training.
    warm = torch.from_numpy(np.stack([text[:window]] * args.batch).astype(np.int64)).to(args.device)
    F.cross_entropy(logits_of(model, warm[:, :-1], autocast).reshape(-1, 256),
                    warm[:, 1:].reshape(-1)).backward()
    opt.zero_grad(set_to_none=True)
    model.eval()
    bits_per_byte(model, text[:EVAL_CHUNK * args.batch + 100].tobytes(), args.device, autocast)
    model.train()
    torch.cuda.synchronize()
    warmup = time.time() - launched
    budget = args.time_budget
    if args.end_by is not None:
        budget = min(budget, args.end_by - time.time())
    print(f"{args.family}: warm-up {warmup:.0f}s, training for {budget:.0f}s", flush=True)
    start, step = time.time(), 0
    while True:
        elapsed = time.time() - start
        if elapsed >= budget:
            break
        lr = lr_at(elapsed / budget, args.lr)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(text) - window, size=args.batch)
        batch = np.stack([text[s:s + window] for s in starts]).astype(np.int64)
        x = torch.from_numpy(batch).to(args.device)
        logits = logits_of(model, x[:, :-1], autocast)
        loss = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            bpb = loss.item() / math.log(2)
            writer.writerow([step, round(elapsed, 1), f"{lr:.3g}", f"{bpb:.4f}"])
            if step % 500 == 0:
                print(f"{args.family} step {step} {elapsed:.0f}s loss {bpb:.4f} bpb", flush=True)
    log.close()
    model.eval()
    model.save_pretrained(args.out)
    metrics = {
        "family": args.family, "parameters": params, "steps": step,
        "seconds": round(time.time() - start, 1), "time_budget": round(budget, 1),
        "warmup_seconds": round(warmup, 1), "trim_autotune": args.trim_autotune,
        "lr": args.lr, "batch": args.batch,
        "seq_len": args.seq_len, "seed": args.seed, "data": "english-train.txt",
        "precision": "bf16 autocast" if autocast else "f32 (TF32 matmuls)",
        "eval_precision": "bf16 autocast" if autocast else "f32 (no TF32)",
        "fla": __import__("fla").__version__, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
    }
    torch.backends.cuda.matmul.allow_tf32 = False
    for key, name in HELDOUT.items():
        metrics[f"pytorch_{key}"] = bits_per_byte(
            model, (args.data_dir / name).read_bytes(), args.device, autocast)
    print(args.family, json.dumps(metrics), flush=True)
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")


if __name__ == "__main__":
    main()
