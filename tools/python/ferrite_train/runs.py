"""Every trained model of models/: name -> task, config and training settings.

MQAR models: 2 layers of one mixer family, d_model 64, vocab 256, tied
embeddings, at state sizes chosen so the recurrent state per layer lines up
across families (about 2, 4, 8 and 16 KB; exact bytes in each metrics.json).
LM models: byte-level hybrids cycling gdn / swa / gsa / bla.

The runs of the state study (models/mqar-256) are research, not shipped
models: tools/python/research/study_runs.py, a registry of its own
(``--registry research.study_runs``).
"""

from __future__ import annotations

import importlib

D_MQAR = 64
#: The module whose ``all_runs()`` names the runs ``train`` and ``launch`` know by default.
DEFAULT_REGISTRY = "ferrite_train.runs"


def model_config(layers: list, hidden: int, intermediate: int, vocab: int = 256) -> dict:
    """A config.json with tied embeddings around ``layers`` (byte-level at the default ``vocab``)."""
    return {"model_type": "ferrite", "vocab_size": vocab, "hidden_size": hidden,
            "intermediate_size": intermediate, "norm_eps": 1e-6, "tie_word_embeddings": True,
            "tokenizer": "bytes", "layers": layers}


def _mqar(name: str, family: str, layer: dict) -> tuple:
    return name, {"task": "mqar", "family": family, "config": model_config([layer, dict(layer)], D_MQAR, 2 * D_MQAR)}


def mqar_runs() -> dict:
    runs = []
    # swa: 2 query heads sharing 1 kv head of 32: (S + W) * 1 * 64 floats per layer.
    for w in (8, 16, 32, 64):
        runs.append(_mqar(f"swa-w{w}", "swa", {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1, "head_dim": 32,
                                               "window": w, "rope_theta": 10000.0, "use_short_conv": True}))
    # swa with 4 sink tokens (StreamingLLM cache positions).
    for w in (4, 12, 28):
        runs.append(_mqar(f"swa-s4-w{w}", "swa-sinks", {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1,
                                                        "head_dim": 32, "window": w, "sinks": 4, "rope_theta": 10000.0,
                                                        "rope_positions": "cache", "use_short_conv": True}))
    # bla: 2 heads of 32, period 64 = the sequence, N = 2M + 1 slots: N * 2 * 64 floats.
    for m in (1, 3, 7, 15):
        runs.append(_mqar(f"bla-m{m}", "bla", {"mixer": "bla", "num_heads": 2, "head_dim": 32, "period": 64,
                                               "modes": m, "kernel": "dirichlet", "decay": "gated",
                                               "use_short_conv": True}))
    # gsa: 2 query heads, 1 kv head, K = V = 32: M * 64 floats.
    for m in (8, 16, 32, 64):
        runs.append(_mqar(f"gsa-m{m}", "gsa", {"mixer": "gsa", "num_heads": 2, "num_kv_heads": 1,
                                               "num_slots": m, "feature_map": "swish"}))
    # gdn: HV * V * K floats.
    for name, h, k, ev in (("gdn-2k", 2, 16, 1.0), ("gdn-4k", 1, 32, 1.0), ("gdn-8k", 2, 32, 1.0), ("gdn-16k", 2, 32, 2.0),
                           ("gdn-4k-h2", 2, 16, 2.0)):
        runs.append(_mqar(name, "gdn", {"mixer": "gdn", "num_heads": h, "head_dim": k, "expand_v": ev,
                                        "use_gate": True}))
    out = {}
    for name, spec in runs:
        spec.update({"steps": 5000, "batch": 256, "lr": 1e-3, "wd": 0.1, "seed": 1})
        out[name] = spec
    # GDN sat at chance for the whole 45 s smoke run at lr 1e-3, so it is also trained at 3e-3;
    # the lr kept per size is the one with the lower final training loss (fresh batches, not the eval set).
    for name in [n for n in out if n.startswith("gdn-")]:
        out[name + "-lr3e-3"] = dict(out[name], lr=3e-3)
    # Second round (after the first showed GSA flat at ~0.36 for every size at lr 1e-3 and the
    # single-head gdn-4k at chance): GSA at lr 3e-3, and a two-head 4 KB GDN.
    for name in [n for n in out if n.startswith("gsa-")]:
        out[name + "-lr3e-3"] = dict(out[name], lr=3e-3)
    out["gdn-16k-seed2-lr3e-3"] = dict(out["gdn-16k"], lr=3e-3, seed=2)
    # Issue 14: GSA with fla's short convolution (the usual cure for the ~0.36 plateau above).
    for m in (8, 16):
        name = f"gsa-m{m}-conv"
        config = model_config([dict(layer, use_short_conv=True, conv_size=4) for layer in out[f"gsa-m{m}"]["config"]["layers"]],
                        D_MQAR, 2 * D_MQAR)
        out[name] = dict(out[f"gsa-m{m}"], family="gsa-conv", config=config)
        out[name + "-lr3e-3"] = dict(out[name], lr=3e-3)
    # Issue 14: the latent-compressed window (mla) at the state of swa-w16 / swa-w32: a
    # window of the whole sequence (64) with R + dr = 16 / 32 floats per slot (dr = 4),
    # against SWA's 64 floats per slot (2 x 1 kv head x 32) over 16 / 32 slots.
    for name, rank in (("mla-w64-r12", 12), ("mla-w64-r28", 28)):
        out[name] = dict(out["swa-w16"], family="mla", config=model_config(
            [{"mixer": "mla", "num_heads": 2, "head_dim": 32, "v_head_dim": 32, "rope_dim": 4,
              "kv_lora_rank": rank, "window": 64, "rope_theta": 10000.0}] * 2, D_MQAR, 2 * D_MQAR))
    return out


def lm_runs() -> dict:
    small = model_config([
        {"mixer": "gdn", "num_heads": 2, "head_dim": 16, "expand_v": 2.0, "use_gate": True},
        {"mixer": "swa", "num_heads": 2, "num_kv_heads": 1, "head_dim": 32, "window": 32, "sinks": 4,
         "rope_theta": 10000.0, "rope_positions": "cache", "use_short_conv": True},
        {"mixer": "gsa", "num_heads": 2, "num_kv_heads": 1, "num_slots": 16, "feature_map": "swish"},
        {"mixer": "bla", "num_heads": 2, "head_dim": 32, "period": 64, "modes": 4, "use_short_conv": True},
    ], 64, 96)
    large = model_config([
        {"mixer": "gdn", "num_heads": 2, "head_dim": 32, "expand_v": 2.0, "use_gate": True},
        {"mixer": "swa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 24, "window": 64, "sinks": 4,
         "rope_theta": 10000.0, "rope_positions": "cache", "use_short_conv": True},
        {"mixer": "gsa", "num_heads": 4, "num_kv_heads": 2, "num_slots": 32, "feature_map": "swish"},
        {"mixer": "bla", "num_heads": 4, "head_dim": 24, "period": 128, "modes": 8, "use_short_conv": True},
        {"mixer": "gdn", "num_heads": 2, "head_dim": 32, "expand_v": 2.0, "use_gate": True},
        {"mixer": "swa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 24, "window": 64, "sinks": 4,
         "rope_theta": 10000.0, "rope_positions": "cache", "use_short_conv": True},
    ], 96, 256)
    return {
        "lm-small": {"task": "lm", "family": "hybrid", "config": small, "steps": 30000, "batch": 32, "seq_len": 512,
                     "lr": 3e-3, "wd": 0.1, "seed": 1},
        "lm-large": {"task": "lm", "family": "hybrid", "config": large, "steps": 30000, "batch": 32, "seq_len": 512,
                     "lr": 1.5e-3, "wd": 0.1, "seed": 1},
    }


# ---------------------------------------------------------------------------- English LMs (issue 15, item 4)

# Trained on data/english-train.txt (ferrite-english-data: the fortunes, the Devil's
# Dictionary and the Jargon File, 4.1 MB), evaluated on both held-out texts.
#  en-m3: lm-small's shape (fits the lm3s6965's 256 KB flash at int8), continued from
#         models/lm/small (trained on the fortunes); shipped as models/lm/en-m3;
#  en-m3-scratch: the same shape from scratch (compared, not shipped);
#  en-m4f: d=128, 8 layers (1.8M parameters, int8 ~1.9 MB of the mps2-an386's 4 MB);
#          shipped as models/lm/en-m4f;
#  en-m4f-from-large: lm-large's shape continued from models/lm/large (compared, not shipped).
# Device rounds 5 and 6 trained them under the names en-m3-ft (now en-m3), en-m3 (now
# en-m3-scratch), en-m4f and en-m4f-ft (now en-m4f-from-large); the settings are unchanged.
def english_lm_runs() -> dict:
    base = lm_runs()
    wide = model_config([
        {"mixer": "gdn", "num_heads": 4, "head_dim": 32, "expand_v": 2.0, "use_gate": True},
        {"mixer": "swa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "window": 64, "sinks": 4,
         "rope_theta": 10000.0, "rope_positions": "cache", "use_short_conv": True},
        {"mixer": "gsa", "num_heads": 4, "num_kv_heads": 2, "num_slots": 32, "feature_map": "swish"},
        {"mixer": "bla", "num_heads": 4, "head_dim": 32, "period": 128, "modes": 8, "use_short_conv": True},
        {"mixer": "gdn", "num_heads": 4, "head_dim": 32, "expand_v": 2.0, "use_gate": True},
        {"mixer": "swa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "window": 64, "sinks": 4,
         "rope_theta": 10000.0, "rope_positions": "cache", "use_short_conv": True},
        {"mixer": "gsa", "num_heads": 4, "num_kv_heads": 2, "num_slots": 32, "feature_map": "swish"},
        {"mixer": "swa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "window": 64, "sinks": 4,
         "rope_theta": 10000.0, "rope_positions": "cache", "use_short_conv": True},
    ], 128, 384)
    english = {"data": "english", "family": "hybrid-english"}
    return {
        "en-m3": dict(base["lm-small"], **english, lr=1.5e-3, init_from="models/lm/small"),
        "en-m3-scratch": dict(base["lm-small"], **english),
        "en-m4f": dict(base["lm-large"], **english, config=wide, lr=1e-3),
        "en-m4f-from-large": dict(base["lm-large"], **english, lr=1e-3, init_from="models/lm/large"),
    }


# ---------------------------------------------------------------------------- int4 QAT (issue 11)

# Fine-tunes of the shipped LMs with the int4 image's quantizer in the forward pass
# (ferrite_train/qat.py): lm/small int4 everywhere (its default keeps the embedding int4),
# lm/large with the embedding table left f32 (its int4 default stores it int8).
QAT_RUNS = {
    "lm-small-qat4": ("lm-small", {"bits": 4, "group": 32, "embedding_bits": 4}),
    "lm-large-qat4": ("lm-large", {"bits": 4, "group": 32, "embedding_bits": None}),
}


def qat_runs() -> dict:
    base = lm_runs()
    out = {name: dict(base[parent], family="hybrid-qat4", qat=q, lr=3e-4, init_from=f"models/lm/{parent[3:]}")
           for name, (parent, q) in QAT_RUNS.items()}
    # The one MQAR model whose calibrated int4 image loses more than 0.03 (docs/quantization.md).
    mqar = mqar_runs()
    out["bla-m7-qat4"] = dict(mqar["bla-m7"], family="bla-qat4", qat={"bits": 4, "group": 32, "embedding_bits": 4},
                              lr=3e-4, steps=2000, init_from="models/mqar/bla-m7")
    return out


# Round 3: the LMs resume from round 2's weights for another 450 s (fresh AdamW, new warm-up).
# Round 6: the English LMs resume from round 5's weights (lower peak lr).
LM_STAGE2_LR = {"lm-small": 1.5e-3, "lm-large": 1e-3, "en-m3": 1e-3, "en-m4f": 5e-4}


def all_runs() -> dict:
    """Every run of the shipped models (the default registry of ``train`` and ``launch``)."""
    return {**mqar_runs(), **lm_runs(), **english_lm_runs(), **qat_runs()}


def load_registry(module: str = DEFAULT_REGISTRY) -> dict:
    """The runs of a registry: ``all_runs()`` of the module named ``module`` (importable
    from the working directory, e.g. ``research.study_runs`` from tools/python)."""
    try:
        registry = importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise SystemExit(f"registry {module!r} not found ({error}); research registries import "
                         "from tools/python: run `python -m ferrite_train.launch` (or .train) there") from None
    return registry.all_runs()
