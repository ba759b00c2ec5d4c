"""The state study's runs (issue 15; docs/state-study.md, models/mqar-256): a
registry of ``ferrite_train`` outside the shipped package.

MQAR with 256 tokens, 16 pairs and spread queries; every (family, state size,
lr, seed) of the protocol (``study_runs``) and round 11's length curriculum
(``curriculum_runs``), which is outside it. Run from tools/python, where
``research`` is importable:

    python -m ferrite_train.launch --registry research.study_runs --out OUT --time-budget S --runs st-gdn-4k-lr3e-3-s1,...
    python -m ferrite_train.train --registry research.study_runs --run st-gdn-4k-lr3e-3-s1 --out OUT

The device rounds that ran them are research/rounds/r1.sh .. r11.sh; the second edition's
(``z2_runs``, issue 28) are r12.sh and later.
"""

from __future__ import annotations

import re

from ferrite_train import fla_shapes
from ferrite_train import runs as shipped
from ferrite_train.runs import D_MQAR, model_config

# MQAR where state matters: 256 tokens, 16 pairs, queries at random slots (docs/mqar.md "spread").
STUDY_TASK = {"pairs": 16, "seq_len": 256, "queries": "spread"}
STUDY_KB = (1, 2, 4, 8, 16, 32, 64)
STUDY_LRS = (3e-4, 1e-3, 3e-3)
STUDY_STEPS = 1500


# BLA's variants (issue 28 item 3), named ``bla[-kv<Hkv>][-p<P>]``: ``-kv1`` shares one key/value
# head between the two query heads (64 floats a slot, SWA's width, so equal-width comparisons
# exist; the runtime's num_kv_heads), ``-p<P>`` sets the period to P instead of the sequence
# length (128 and 512 at 256 tokens). Plain ``bla`` is the layer it always was.
BLA_NAME = re.compile(r"bla(?:-kv(\d+))?(?:-p(\d+))?")
Z2_BLA_VARIANTS = ("bla-kv1", "bla-p128", "bla-p512", "bla-kv1-p128", "bla-kv1-p512")


def bla_variant(family: str):
    """``(num_kv_heads, period)`` of a BLA family name (None where the name leaves the default:
    2 heads, the sequence length), or None when ``family`` is not one."""
    m = BLA_NAME.fullmatch(family)
    if m is None:
        return None
    return tuple(None if g is None else int(g) for g in m.groups())


def bla_layer(family: str, kb: int, seq_len: int) -> dict:
    """A BLA layer of ``family`` (plain or a variant) whose slots hold ``kb`` KB (f32): 2 query
    heads of 32, N = 2M + 1 slots of key and value of its key/value heads (N = the largest that
    fits; at most M = P/2, the Nyquist limit, where a short period cannot use the size)."""
    kv, period = bla_variant(family)
    heads = 2
    width = 2 * (heads if kv is None else kv) * 32
    period = seq_len if period is None else period
    modes = min((kb * 256 // width - 1) // 2, period // 2)
    layer = {"mixer": "bla", "num_heads": heads, "head_dim": 32, "period": period, "modes": modes,
             "kernel": "dirichlet", "decay": "gated", "use_short_conv": True}
    if kv is not None:
        layer["num_kv_heads"] = kv
    return layer


# GDN's (heads, key dim, value expansion) at each size (KB a layer): HV * V * K floats.
GDN_SHAPES = {1: (1, 16, 1.0), 2: (2, 16, 1.0), 4: (2, 16, 2.0), 8: (2, 32, 1.0), 16: (2, 32, 2.0),
              32: (4, 32, 2.0), 64: (4, 64, 1.0)}


def study_layer(family: str, kb: int, seq_len: int = STUDY_TASK["seq_len"]) -> dict:
    """One layer of ``family`` whose memory (without convolution caches) is ``kb`` KB (f32), for
    sequences of ``seq_len`` tokens (BLA's period and mla's longest window)."""
    floats = kb * 256
    if family == "swa":  # 2 q heads sharing 1 kv head of 32: W * 64 floats
        return {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1, "head_dim": 32, "window": floats // 64,
                "rope_theta": 10000.0, "use_short_conv": True}
    if family == "swa-sinks":  # (S + W) * 64 floats, StreamingLLM positions
        sinks = 2 if kb == 1 else 4
        return {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1, "head_dim": 32, "window": floats // 64 - sinks,
                "sinks": sinks, "rope_theta": 10000.0, "rope_positions": "cache", "use_short_conv": True}
    if bla_variant(family) is not None:  # 2 heads of 32, period = L, N = 2M + 1 slots: N * 128 floats
        return bla_layer(family, kb, seq_len)
    if family == "gsa":  # 1 kv head, K = V = 32, short conv: M * 64 floats
        return {"mixer": "gsa", "num_heads": 2, "num_kv_heads": 1, "num_slots": floats // 64, "feature_map": "swish",
                "use_short_conv": True, "conv_size": 4}
    if family == "gdn" and kb in GDN_SHAPES:  # HV * V * K floats
        h, k, ev = GDN_SHAPES[kb]
        return {"mixer": "gdn", "num_heads": h, "head_dim": k, "expand_v": ev, "use_gate": True}
    if family == "mla":  # latent R + shared RoPE key dr = 4 per slot: W * (R + 4) floats
        # R = 32 (1.8x SWA's window at the same bytes) until the window covers the
        # sequence, then the window stays at the sequence and the latent grows.
        window = min(floats // 36, seq_len)
        return {"mixer": "mla", "num_heads": 2, "head_dim": 32, "v_head_dim": 32, "rope_dim": 4,
                "kv_lora_rank": floats // window - 4, "window": window, "rope_theta": 10000.0}
    raise ValueError(family)


STUDY_FAMILIES = ("swa", "swa-sinks", "bla", "gsa", "gdn", "mla")


def study_name(family: str, kb: int, lr: float, seed: int) -> str:
    return f"st-{family}-{kb}k-lr{lr:.0e}-s{seed}".replace("e-0", "e-")


def study_runs() -> dict:
    """Every (family, size, lr, seed) of the study: 2 layers, d_model 64, batch 64, 1,500 steps
    (fewer when 200 validation sequences are solved first)."""
    out = {}
    for family in STUDY_FAMILIES:
        for kb in STUDY_KB:
            layer = study_layer(family, kb)
            for lr in STUDY_LRS:
                for seed in (1, 2, 3):
                    out[study_name(family, kb, lr, seed)] = {
                        "task": "mqar", "family": family, "state_kb": kb,
                        "config": model_config([layer, dict(layer)], D_MQAR, 2 * D_MQAR),
                        "steps": STUDY_STEPS, "batch": 64, "lr": lr, "wd": 0.1, "seed": seed, "stop_at": 0.995,
                        **STUDY_TASK}
    return out


# Round 11, outside the study's protocol (docs/state-study.md, "GDN: steps or lr?"): GDN with a
# length curriculum. cu64-* is the study's GDN run (lr 3e-3) on 64-token MQAR (16 pairs, every
# slot a query) for 1,500 steps; cu256-* resumes it on the study's 256 tokens for 3,000.
def curriculum_runs() -> dict:
    study = study_runs()
    out = {}
    for kb in (4, 8, 16):
        for seed in (1, 2, 3):
            base = study[study_name("gdn", kb, 3e-3, seed)]
            out[f"cu64-gdn-{kb}k-s{seed}"] = dict(base, seq_len=64)
            out[f"cu256-gdn-{kb}k-s{seed}"] = dict(base)
    return out


# The second edition (issue 28; docs/state-study.md "Second edition: protocol"): Zoology's MQAR
# (power-law query slots, vocabulary 8,192) at 256 tokens and 16 pairs, one recipe for every family:
# a length curriculum (Zoology's training shapes 64/4 and 128/8 first), the lr grid
# extended until its best is inside, three seeds, early stop on the validation split.
Z2_TASK = {"pairs": 16, "seq_len": 256, "queries": "zoology"}
Z2_VOCAB = 8192
# gsa and mla from round 15, swa-sinks (4 sinks, StreamingLLM cache positions; 2 at 1 KB) from the
# dated note of 2026-12-07 (the (b)).
Z2_FAMILIES = ("swa", "swa-sinks", "bla", "gdn", "gsa", "mla")
Z2_KB = STUDY_KB
Z2_LRS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)  # the grid {1e-3, 3e-3, 1e-2} and its extensions
Z2_GRID = (1e-3, 3e-3, 1e-2)
Z2_STEPS = 2400
# [share of the schedule, pairs, seq_len]: 600 steps at 64 tokens / 4 pairs, 600 at 128 / 8, then
# the task (1,200 steps at 256 / 16).
Z2_CURRICULUM = [[0.25, 4, 64], [0.25, 8, 128]]
Z2_STOP_AT = 0.995


def z2_name(family: str, kb: int, lr: float, seed: int) -> str:
    return f"z2-{family}-{kb}k-lr{lr:.0e}-s{seed}".replace("e-0", "e-")


# fla's own RWKV-7 and Mamba-2 (issue 28 item 5, from round 19): two layers at d_model 64 whose
# core state per layer is the size's (ferrite_train.fla_shapes.study_config); RWKV-7 from 4 KB
# (fla needs value_dim >= hidden_size).
Z2_FLA_FAMILIES = ("rwkv7", "mamba2")


def z2_sizes(family: str) -> tuple:
    """The state sizes (KB per layer) a family runs at."""
    if family == "rwkv7":
        return tuple(kb for kb in Z2_KB if kb in fla_shapes.RWKV7_KV)
    return Z2_KB


def z2_config(family: str, kb: int) -> dict:
    """The model of one point: two layers of ``study_layer`` (ferrite's families) or fla's."""
    if family in Z2_FLA_FAMILIES:
        return fla_shapes.study_config(family, kb, Z2_VOCAB, d=D_MQAR, layers=2)
    layer = study_layer(family, kb)
    return model_config([layer, dict(layer)], D_MQAR, 2 * D_MQAR, vocab=Z2_VOCAB)


def z2_runs() -> dict:
    """Every (family, size, lr, seed) the second edition may run (seeds 1-5)."""
    out = {}
    for family in Z2_FAMILIES + Z2_FLA_FAMILIES + Z2_BLA_VARIANTS:
        for kb in z2_sizes(family):
            for lr in Z2_LRS:
                for seed in range(1, 6):
                    out[z2_name(family, kb, lr, seed)] = {
                        "task": "mqar", "family": family, "state_kb": kb, "config": z2_config(family, kb),
                        "steps": Z2_STEPS, "batch": 64, "lr": lr, "wd": 0.1, "seed": seed, "stop_at": Z2_STOP_AT,
                        "curriculum": Z2_CURRICULUM, **Z2_TASK}
    return out


# The (c) (docs/state-study.md, the protocol's dated note of 2026-12-07, 19:10 UTC): 64
# pairs at 256 tokens (``p64``) and the longer setting, 1,024 tokens with 64 pairs (``l1k``), in the
# second edition's recipe (Zoology's layout, vocabulary 8,192, the grid, three seeds, early stop),
# for swa, bla and gdn first (the (a) families). Their curricula keep the (a) recipe's shape: a
# quarter of the schedule at 64 tokens / 4 pairs, a quarter at a middle length with 16 pairs,
# then the task. At 1,024 tokens SWA needs 256 KB a layer for full attention, so that setting's
# grid goes on to 128 and 256 KB (GDN's shapes stop at 64 KB).
Z2C_SETTINGS = {
    "p64": ({"pairs": 64, "seq_len": 256, "queries": "zoology"}, Z2_KB, [[0.25, 4, 64], [0.25, 16, 128]]),
    "l1k": ({"pairs": 64, "seq_len": 1024, "queries": "zoology"}, Z2_KB + (128, 256),
            [[0.25, 4, 64], [0.25, 16, 256]]),
}
Z2C_FAMILIES = ("swa", "bla", "gdn")


def z2c_name(setting: str, family: str, kb: int, lr: float, seed: int) -> str:
    return f"z2{setting}-{family}-{kb}k-lr{lr:.0e}-s{seed}".replace("e-0", "e-")


def z2c_runs() -> dict:
    """Every (setting, family, size, lr, seed) of the issue's (c) (seeds 1-5)."""
    out = {}
    for setting, (task, sizes, curriculum) in Z2C_SETTINGS.items():
        for family in Z2C_FAMILIES:
            for kb in sizes:
                if family == "gdn" and kb not in GDN_SHAPES:
                    continue
                layer = study_layer(family, kb, task["seq_len"])
                config = model_config([layer, dict(layer)], D_MQAR, 2 * D_MQAR, vocab=Z2_VOCAB)
                for lr in Z2_LRS:
                    for seed in range(1, 6):
                        out[z2c_name(setting, family, kb, lr, seed)] = {
                            "task": "mqar", "family": family, "state_kb": kb, "config": config,
                            "steps": Z2_STEPS, "batch": 64, "lr": lr, "wd": 0.1, "seed": seed,
                            "stop_at": Z2_STOP_AT, "curriculum": curriculum, **task}
    return out


# The language-model side (issue 28, item 6; docs/state-study.md "Language-model side"):
# byte-level LMs of one family each, 4 layers of the same layer at d=64 / SwiGLU 96 (models/lm/small's
# width and depth, ~150k parameters), at two state sizes per family, and small's hybrid, trained
# on the English text with en-m3-scratch's recipe (lr 3e-3, batch 32 x 513 bytes, seed 1).
_SWA = {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1, "head_dim": 32, "rope_theta": 10000.0,
        "use_short_conv": True}
_SINKS = {"sinks": 4, "rope_positions": "cache"}
_MLA = {"mixer": "mla", "num_heads": 2, "head_dim": 32, "v_head_dim": 32, "rope_dim": 4, "kv_lora_rank": 28,
        "rope_theta": 10000.0}
LM_SIDE_LAYERS = {
    # name: (family, the layer repeated 4 times)
    # gdn: H x K key rows of 2K values; one head of 32 keeps the parameters of two of 16.
    "gdn-h2-k16": ("gdn", {"mixer": "gdn", "num_heads": 2, "head_dim": 16, "expand_v": 2.0, "use_gate": True}),
    "gdn-h1-k32": ("gdn", {"mixer": "gdn", "num_heads": 1, "head_dim": 32, "expand_v": 2.0, "use_gate": True}),
    "swa-w32": ("swa", dict(_SWA, window=32)),
    "swa-w128": ("swa", dict(_SWA, window=128)),
    "swa-s4-w28": ("swa-sinks", dict(_SWA, window=28, **_SINKS)),
    "swa-s4-w124": ("swa-sinks", dict(_SWA, window=124, **_SINKS)),
    "gsa-m16": ("gsa", {"mixer": "gsa", "num_heads": 2, "num_kv_heads": 1, "num_slots": 16, "feature_map": "swish"}),
    "gsa-m64": ("gsa", {"mixer": "gsa", "num_heads": 2, "num_kv_heads": 1, "num_slots": 64, "feature_map": "swish"}),
    "bla-p64-m4": ("bla", {"mixer": "bla", "num_heads": 2, "head_dim": 32, "period": 64, "modes": 4,
                           "use_short_conv": True}),
    "bla-p256-m16": ("bla", {"mixer": "bla", "num_heads": 2, "head_dim": 32, "period": 256, "modes": 16,
                             "use_short_conv": True}),
    "mla-w32": ("mla", dict(_MLA, window=32)),
    "mla-w128": ("mla", dict(_MLA, window=128)),
}


def lm_side_runs() -> dict:
    """``lms-<name>``: 4 layers of LM_SIDE_LAYERS[name]; ``lms-hybrid``: models/lm/small's shape
    (en-m3-scratch's run under another name). All on the English text, lr 3e-3, seed 1."""
    base = shipped.english_lm_runs()["en-m3-scratch"]
    out = {}
    for name, (family, layer) in LM_SIDE_LAYERS.items():
        out[f"lms-{name}"] = dict(base, family=family, config=model_config([dict(layer) for _ in range(4)], 64, 96))
    out["lms-hybrid"] = dict(base, family="hybrid")
    return out


def all_runs() -> dict:
    """The shipped models' runs and the study's (the rounds launch both from this registry)."""
    return {**shipped.all_runs(), **study_runs(), **curriculum_runs(), **z2_runs(), **z2c_runs(), **lm_side_runs()}
