#!/usr/bin/env python3
"""Regenerate the committed parity fixtures under tests/fixtures/ (byte for byte).

Each fixture directory holds config.json, model.safetensors (random f32 weights)
and expected.safetensors: ``tokens`` int32 [T] and ``logits`` float32 [T, vocab]
computed by the f64 reference from those f32 weights, with metadata
{"pinned": "<n>", "seed": "<s>"}. tests/fixtures/README.md is written too.

    python tools/python/make_fixtures.py [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ferrite_ref import Reference, write_model_dir
from ferrite_ref.safetensors_io import save_safetensors

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
REGENERATE = "python tools/python/make_fixtures.py"
NUM_TOKENS = 80
VOCAB = 256


def model(layers: list, hidden: int = 32, intermediate: int = 80, tied: bool = True) -> dict:
    """A full config.json with every top-level field written out."""
    return {
        "model_type": "ferrite",
        "vocab_size": VOCAB,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "norm_eps": 1e-6,
        "tie_word_embeddings": tied,
        "tokenizer": "bytes",
        "layers": layers,
    }


def gdn(**fields) -> dict:
    return {"mixer": "gdn", "num_heads": 2, "head_dim": 16, **fields}


def gsa(**fields) -> dict:
    return {"mixer": "gsa", "num_heads": 4, "num_kv_heads": 2, "num_slots": 8, **fields}


def swa(**fields) -> dict:
    return {"mixer": "swa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8, "window": 8, **fields}


def bla(**fields) -> dict:
    return {"mixer": "bla", "num_heads": 2, "head_dim": 16, **fields}


# (name, seed, pinned, config, what it covers). Seeds are fixed per fixture so
# adding one never changes the others.
FIXTURES = [
    ("gdn_gate", 101, 0,
     model([gdn(expand_v=2.0, conv_size=4, use_gate=True), gdn(expand_v=2.0, conv_size=4, use_gate=True)]),
     "gdn x2, use_gate, expand_v 2, conv 4"),
    ("gdn_nogate_conv3", 102, 0,
     model([gdn(expand_v=1.0, conv_size=3, use_gate=False)]),
     "gdn without gate (plain o_norm), conv_size 3"),
    ("gdn_gva_negeig", 103, 0,
     model([gdn(num_v_heads=4, expand_v=1.0, allow_neg_eigval=True)]),
     "gdn GVA (num_v_heads = 2 num_heads), allow_neg_eigval, defaults for conv/gate"),
    ("gsa_swish_gqa", 104, 0,
     model([gsa(feature_map="swish"), gsa(num_slots=4)]),
     "gsa x2, GQA 4/2, swish (explicit and default), tied head"),
    ("gsa_relu_untied", 105, 0,
     model([gsa(num_heads=2, num_kv_heads=1, num_slots=6, feature_map="relu", expand_k=0.5,
                gate_logit_normalizer=4)], tied=False),
     "gsa GQA 2/1, relu, expand_k 0.5, normalizer 4, untied lm_head"),
    ("swa_gqa", 106, 0,
     model([swa(window=8)], hidden=64, intermediate=128),
     "swa GQA 4/2, no sinks, absolute RoPE (fla Attention(window_size=8)), hidden 64"),
    ("swa_sinks_absolute", 107, 0,
     model([swa(num_heads=2, num_kv_heads=2, head_dim=16, window=12, sinks=3, rope_positions="absolute")]),
     "swa MHA, window 12, 3 sinks, absolute RoPE"),
    ("swa_sinks_cache", 108, 0,
     model([swa(num_kv_heads=1, window=10, sinks=4, rope_positions="cache", rope_theta=100.0)]),
     "swa GQA 4/1 (MQA), window 10, 4 sinks, cache RoPE (StreamingLLM), rope_theta 100"),
    ("swa_sink_logits", 109, 0,
     model([swa(window=8, sink_logits=True)]),
     "swa learned sink logits (tensor sinks [H]), no sink tokens, absolute RoPE"),
    ("swa_short_conv", 110, 0,
     model([swa(window=16, sinks=2, rope_positions="cache", rope_theta=500.0, use_short_conv=True,
                conv_size=4)]),
     "swa with q/k/v short conv, window 16, 2 sinks, cache RoPE"),
    ("swa_pinned", 111, 5,
     model([swa(window=8, sinks=2, rope_positions="cache"), swa(window=6, rope_positions="absolute")]),
     "session pinned = 5: cache RoPE with 2 sinks (S_eff 7) and absolute RoPE with no sinks (S_eff 5)"),
    ("bla_dirichlet_gated_full", 112, 0,
     model([bla(period=9, modes=4)]),
     "bla full resolution (2M+1 = P = N = 9): dirichlet, gated (defaults) = SWA window 9 without RoPE"),
    ("bla_dirichlet_scalar_nyquist", 113, 0,
     model([bla(period=8, modes=4, kernel="dirichlet", decay="scalar", gamma=0.9)]),
     "bla dirichlet, scalar decay gamma 0.9, 2M = P = 8 (Nyquist weight 1), slots 9 > P"),
    ("bla_dirichlet_none_slots8", 114, 0,
     model([bla(period=12, modes=3, slots=8, kernel="dirichlet", decay="none")]),
     "bla dirichlet, no decay (ABC), even period 12, slots 8 != 2M+1"),
    ("bla_fejer_gated_conv", 115, 0,
     model([bla(period=16, modes=4, kernel="fejer", decay="gated", use_short_conv=True, conv_size=4)]),
     "bla fejer, gated, period 16, q/k/v short conv"),
    ("bla_fejer_scalar_nyquist", 116, 0,
     model([bla(period=10, modes=5, slots=6, kernel="fejer", decay="scalar", gamma=0.8)]),
     "bla fejer, scalar gamma 0.8, 2M = P = 10 (Nyquist inside D_M), slots 6 < 2M+1"),
    ("bla_fejer_none_odd", 117, 0,
     model([bla(period=11, modes=3, kernel="fejer", decay="none")]),
     "bla fejer, no decay, odd period 11, default slots 7"),
    ("bla_dirichlet_gated_blur_conv", 118, 0,
     model([bla(num_heads=4, head_dim=8, period=13, modes=3, use_short_conv=True, conv_size=3),
            bla(period=8, modes=2, slots=5)]),
     "bla x2: blurred dirichlet gated, odd period 13, conv 3, 4 heads; then period 8, M 2"),
    ("hybrid_gdn_swa", 119, 0,
     model([gdn(), swa(window=12, sinks=2, rope_positions="cache"), gdn(use_gate=False)], intermediate=64),
     "gdn / swa / gdn alternation (gdn defaults: expand_v 2, conv 4, gate)"),
    ("hybrid_all4_untied", 120, 0,
     model([gdn(head_dim=8, num_v_heads=4, expand_v=1.0), gsa(num_slots=6), swa(window=8, sinks=2, sink_logits=True),
            bla(period=8, modes=3, decay="gated", use_short_conv=True)], intermediate=48, tied=False),
     "4 layers, one of each family, untied lm_head"),
    # issue 14: GSA short convolution, the GDN family, dilated windows.
    ("gsa_short_conv", 121, 0,
     model([gsa(use_short_conv=True), gsa(feature_map="relu", num_slots=4, use_short_conv=True, conv_size=2)]),
     "gsa x2 with q/k/v short conv (fla use_short_conv): swish conv 4 (default), relu conv 2"),
    ("gdn_delta_net", 122, 0,
     model([gdn(decay="none", expand_v=1.0, use_gate=False),
            gdn(decay="none", use_beta=False, qk_activation="relu", qk_norm="sum", conv_size=3)]),
     "DeltaNet (decay none): fla defaults (beta, l2, silu); then no beta, relu, sum norm, conv 3, gate"),
    ("gdn_delta_net_noconv_elu", 123, 0,
     model([gdn(decay="none", num_v_heads=4, expand_v=1.0, use_short_conv=False, qk_activation="elu",
                allow_neg_eigval=True)]),
     "DeltaNet without short conv, elu+1, GVA 2/4, allow_neg_eigval"),
    ("gdn_linear_attention", 124, 0,
     model([gdn(decay="none", update="additive", use_beta=False, qk_activation="elu", qk_norm="none",
                expand_v=1.0)]),
     "linear attention: additive update, no decay, elu+1 feature map, no q/k norm, gate"),
    ("gdn_retention", 125, 0,
     model([gdn(num_heads=4, head_dim=8, decay="retention", update="additive", use_beta=False,
                qk_activation="identity", qk_norm="none", use_gate=True),
            gdn(decay="retention", update="delta", expand_v=1.0)]),
     "retention (gamma_j = 1 - 2^(-5-j), additive, identity q/k, 4 heads); then retention with the delta rule"),
    ("swa_dilated", 126, 0,
     model([swa(window=4, dilation=3, sinks=2), swa(window=3, dilation=2, sink_logits=True, use_short_conv=True)]),
     "swa dilated: window 4 x dilation 3 (span 10) with 2 sinks; window 3 x dilation 2, sink logits, short conv"),
    ("mla_latent_window", 127, 0,
     model([{"mixer": "mla", "num_heads": 4, "head_dim": 8, "v_head_dim": 4, "rope_dim": 4, "kv_lora_rank": 10,
             "window": 12},
            {"mixer": "mla", "num_heads": 2, "kv_lora_rank": 8, "window": 5, "rope_theta": 100.0}]),
     "mla: latent 10 + RoPE key 4 per slot, 4 heads (d 8, dv 4), window 12; then no RoPE part, window 5"),
]


def write_fixture(out_dir: Path, name: str, seed: int, pinned: int, config: dict) -> Path:
    """Write one fixture directory; return it."""
    path = write_model_dir(out_dir / name, config, seed)
    tokens = np.random.default_rng([seed, 1]).integers(0, VOCAB, NUM_TOKENS).astype(np.int32)
    logits = Reference(path, pinned=pinned).logits(tokens)
    save_safetensors(
        path / "expected.safetensors",
        {"tokens": tokens, "logits": logits.astype(np.float32)},
        metadata={"pinned": str(pinned), "seed": str(seed)},
    )
    return path


def _layers_summary(config: dict) -> str:
    return " / ".join(layer["mixer"] for layer in config["layers"])


def readme_text() -> str:
    """tests/fixtures/README.md, generated so it never drifts from FIXTURES."""
    lines = [
        "# Parity fixtures",
        "",
        "Generated by `tools/python/make_fixtures.py` with the f64 numpy reference",
        "(`tools/python/ferrite_ref`, the executable form of `docs/spec.md`). Regenerate",
        "(byte-identical on the same numpy) from the repository root with:",
        "",
        "```",
        REGENERATE,
        "```",
        "",
        "Each directory holds:",
        "",
        "- `config.json` — docs/spec.md §1.2 config, every top-level field written out;",
        "- `model.safetensors` — random float32 weights (docs/spec.md §2 names);",
        f"- `expected.safetensors` — `tokens` int32 [{NUM_TOKENS}] (uniform in [0, {VOCAB})) and",
        f"  `logits` float32 [{NUM_TOKENS}, {VOCAB}], the reference's f64 logits after each token",
        "  from a fresh state, rounded to f32; metadata `pinned` (the session's",
        "  pinned-prefix length for swa layers) and `seed` (weights and tokens).",
        "",
        "A runtime passes a fixture when, fed `tokens` one at a time with",
        "`pinned` set, its logits are within docs/spec.md §5's tolerance of `logits`.",
        "",
        "| fixture | layers | pinned | seed | covers |",
        "|---|---|---|---|---|",
    ]
    for name, seed, pinned, config, covers in FIXTURES:
        lines.append(f"| `{name}` | {_layers_summary(config)} | {pinned} | {seed} | {covers} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=FIXTURES_DIR, help="output directory (default: tests/fixtures)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="regenerate only these fixtures")
    args = parser.parse_args(argv)

    known = {name for name, *_ in FIXTURES}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        parser.error(f"unknown fixture(s) {unknown}; known: {sorted(known)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, seed, pinned, config, _ in FIXTURES:
        if args.only is None or name in args.only:
            path = write_fixture(args.out, name, seed, pinned, config)
            size = sum(f.stat().st_size for f in path.iterdir())
            print(f"{name}: {size / 1024:.0f} KiB")
    if args.only is None:
        (args.out / "README.md").write_text(readme_text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
