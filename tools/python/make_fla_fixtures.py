"""Parity fixtures made with the real flash-linear-attention (fla) library.

Run where PyTorch, transformers, fla and a CUDA GPU are available (fla's
kernels are Triton); not in CI. For each case it builds a small fla model,
gives it well-scaled random weights, writes the checkpoint with fla's own
`save_pretrained` (f32, and bf16 sharded), and records fla's logits for 64
tokens in `expected.safetensors` (`tokens` int32 [T], `logits` f32 [T, vocab]):

- `<case>_f32/`: fla's logits on the f32 weights;
- `<case>_bf16/`: the bf16 checkpoint (sharded, with an index), and fla's f32
  logits on the bf16-rounded weights, i.e. the f32 reference of what a bf16
  checkpoint means.

fla's `Attention` layer needs the flash-attn package, which is not available
on the machine these were made on; for the hybrid case `flash_attn_func` is
replaced by `_windowed_attention` below (plain PyTorch, the same causal window
`(window_size - 1, 0)` flash-attn applies). Everything else — layer
placement, RoPE, projections, GDN/GSA kernels, norms, MLPs — is fla's code.

Usage (the commands that made tests/fla/; the second added the cases of
issue 14 — fla `delta_net` and GSA with its short convolution — without
remaking the first four):
    python tools/python/make_fla_fixtures.py --out tests/fla
    python tools/python/make_fla_fixtures.py --out tests/fla \
        --cases delta_net_beta delta_net_gate_relu_sum delta_net_noconv_elu gsa_short_conv

Seeds: case number i (its place in `_cases()`, the full list) seeds torch
with i, the weights with 100 + i and the tokens with 200 + i, so a case makes
the same fixture whether it is made alone or with the others.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

SEQ_LEN = 64
VOCAB = 256


def _windowed_attention(q, k, v, causal=True, window_size=(-1, -1), **_):
    """flash_attn_func's maths for q, k, v [B, T, H(kv), D]: causal, left window."""
    assert causal
    heads, kv_heads = q.shape[2], k.shape[2]
    k = k.repeat_interleave(heads // kv_heads, dim=2)
    v = v.repeat_interleave(heads // kv_heads, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q.float(), k.float()) / math.sqrt(q.shape[-1])
    t = torch.arange(q.shape[1], device=q.device)
    visible = t[None, :] <= t[:, None]
    if window_size[0] >= 0:
        visible &= t[None, :] >= t[:, None] - window_size[0]
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v.float()).to(q.dtype)


def _cases():
    from fla.models import (
        DeltaNetConfig,
        DeltaNetForCausalLM,
        GatedDeltaNetConfig,
        GatedDeltaNetForCausalLM,
        GSAConfig,
        GSAForCausalLM,
    )

    common = dict(hidden_size=32, vocab_size=VOCAB, intermediate_size=64)
    return {
        "gdn_gva": (GatedDeltaNetForCausalLM, GatedDeltaNetConfig(
            num_hidden_layers=2, num_heads=2, head_dim=16, num_v_heads=4, expand_v=1.0,
            tie_word_embeddings=False, **common)),
        "gdn_negeig_nogate": (GatedDeltaNetForCausalLM, GatedDeltaNetConfig(
            num_hidden_layers=2, num_heads=2, head_dim=8, expand_v=2.0, use_gate=False,
            allow_neg_eigval=True, conv_size=3, tie_word_embeddings=True, **common)),
        "gsa_gqa_tied": (GSAForCausalLM, GSAConfig(
            num_hidden_layers=2, num_heads=4, num_kv_heads=2, num_slots=16,
            tie_word_embeddings=True, **common)),
        "hybrid_gdn_attn": (GatedDeltaNetForCausalLM, GatedDeltaNetConfig(
            num_hidden_layers=3, num_heads=2, head_dim=16, num_v_heads=4, expand_v=1.0,
            attn={"layers": [1], "num_heads": 4, "num_kv_heads": 2, "window_size": 16},
            tie_word_embeddings=False, **common)),
        # issue 14: fla's DeltaNet (no decay gate) and GSA with short convolution.
        "delta_net_beta": (DeltaNetForCausalLM, DeltaNetConfig(
            num_hidden_layers=2, num_heads=2, expand_k=1.0, expand_v=1.0,
            tie_word_embeddings=False, **common)),
        "delta_net_gate_relu_sum": (DeltaNetForCausalLM, DeltaNetConfig(
            num_hidden_layers=2, num_heads=4, expand_k=1.0, expand_v=2.0, use_gate=True,
            use_beta=False, qk_activation="relu", qk_norm="sum", conv_size=3,
            tie_word_embeddings=True, **common)),
        "delta_net_noconv_elu": (DeltaNetForCausalLM, DeltaNetConfig(
            num_hidden_layers=2, num_heads=2, expand_k=0.5, expand_v=1.0, use_short_conv=False,
            qk_activation="elu", allow_neg_eigval=True, tie_word_embeddings=False, **common)),
        "gsa_short_conv": (GSAForCausalLM, GSAConfig(
            num_hidden_layers=2, num_heads=4, num_kv_heads=2, num_slots=8, use_short_conv=True,
            conv_size=4, feature_map="relu", tie_word_embeddings=False, **common)),
    }


def _widen(model: torch.nn.Module, seed: int) -> None:
    """fla initialises with std 0.02, which makes near-constant logits; give
    every tensor a scale at which each path of the model matters (A_log and
    dt_bias keep fla's own initialisation)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("A_log", "dt_bias")):
                continue
            if p.dim() == 1:
                new = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            elif "conv1d" in name:
                new = torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1])
            elif "embeddings" in name:
                new = torch.randn(p.shape, generator=g)
            else:
                new = torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1])
            p.copy_(new.to(p.dtype))


def _save_expected(path: Path, tokens: torch.Tensor, logits: torch.Tensor, meta: dict) -> None:
    from safetensors.numpy import save_file

    save_file(
        {"tokens": tokens.cpu().numpy().astype(np.int32), "logits": logits.float().cpu().numpy()},
        str(path / "expected.safetensors"),
        metadata={k: str(v) for k, v in meta.items()},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--cases", nargs="*", help="only these cases (default: all)")
    args = parser.parse_args()

    import fla
    import fla.layers.attn
    import transformers

    fla.layers.attn.flash_attn_func = _windowed_attention
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    meta = {"fla": fla.__version__, "torch": torch.__version__, "transformers": transformers.__version__}
    made_with = args.out / "MADE_WITH.json"
    report = json.loads(made_with.read_text())["cases"] if made_with.exists() and args.cases else {}
    for i, (name, (cls, config)) in enumerate(_cases().items()):
        if args.cases and name not in args.cases:
            continue
        torch.manual_seed(i)
        model = cls(config).to(args.device).float().eval()
        _widen(model, seed=100 + i)
        tokens = torch.randint(0, VOCAB, (SEQ_LEN,), generator=torch.Generator().manual_seed(200 + i))
        with torch.no_grad():
            f32_dir = args.out / f"{name}_f32"
            model.save_pretrained(f32_dir)
            logits = model(input_ids=tokens[None].to(args.device)).logits[0]
            _save_expected(f32_dir, tokens, logits, {**meta, "weights": "f32"})

            bf16_dir = args.out / f"{name}_bf16"
            model.to(torch.bfloat16).save_pretrained(bf16_dir, max_shard_size="40KB")
            model.float()  # the bf16-rounded weights, computed in f32
            rounded = model(input_ids=tokens[None].to(args.device)).logits[0]
            _save_expected(bf16_dir, tokens, rounded, {**meta, "weights": "bf16 (logits: f32 on the rounded weights)"})
        report[name] = {
            "max_abs_logit": float(logits.abs().max()),
            "bf16_vs_f32_max_diff": float((rounded - logits).abs().max()),
        }
        print(name, json.dumps(report[name]), flush=True)
    made_with.write_text(json.dumps({**meta, "cases": report}, indent=1) + "\n")


if __name__ == "__main__":
    main()
