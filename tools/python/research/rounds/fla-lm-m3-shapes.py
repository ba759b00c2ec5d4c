"""m3-size fla save_pretrained dirs (RWKV-7, Mamba-2) with random weights, shaped as
ferrite_train.fla_lm.m3_config saves them (same tensors and parameter counts:
145,152 / 151,688), to check import, image size and the m3 fit before any
training. From the repository root:
    python tools/python/research/rounds/fla-lm-m3-shapes.py /tmp/m3-shapes
    ferrite quantize /tmp/m3-shapes/rwkv7-m3 -o /tmp/rwkv7.fer --dtype int8
    cargo xtask board m3 --image /tmp/rwkv7.fer -n 16
"""
import json
import sys

import numpy as np
from pathlib import Path
from safetensors.numpy import save_file

rng = np.random.default_rng(0)
def r(*s, scale=0.1): return (rng.standard_normal(s) * scale).astype(np.float32)
out = Path(sys.argv[1])

# RWKV-7: 3 layers, d 64, heads of 16, lora 16/32/16/8, ffn 128, tied.
D, H, HD, L, I = 64, 4, 16, 3, 128
cfg = json.loads(Path("tests/fla/rwkv7_f32/config.json").read_text())
cfg.update(hidden_size=D, num_heads=H, head_dim=HD, num_hidden_layers=L, decay_low_rank_dim=16,
           gate_low_rank_dim=32, a_low_rank_dim=16, v_low_rank_dim=8, intermediate_size=I,
           tie_word_embeddings=True, fuse_cross_entropy=False, value_dim=[D] * L)
t = {"model.embeddings.weight": r(256, D, scale=1.0), "model.norm.weight": 1 + r(D), "model.norm.bias": r(D)}
for l in range(L):
    p = f"model.layers.{l}."
    for n in ["attn_norm", "ffn_norm"] + (["pre_norm"] if l == 0 else []):
        t[p + n + ".weight"] = 1 + r(D); t[p + n + ".bias"] = r(D)
    a = p + "attn."
    for n, rk in [("w", 16), ("a", 16), ("g", 32)] + ([("v", 8)] if l > 0 else []):
        t[a + f"{n}_lora.lora.0.weight"] = r(rk, D, scale=0.3); t[a + f"{n}_lora.lora.2.weight"] = r(D, rk, scale=0.3)
        if n != "g": t[a + f"{n}_lora.lora.2.bias"] = r(D)
    t[a + "g_norm.weight"] = 1 + r(D); t[a + "g_norm.bias"] = r(D)
    t[a + "k_a"] = 1 + r(D); t[a + "k_k"] = 0.85 + r(D)
    for n in "krvo": t[a + f"{n}_proj.weight"] = r(D, D, scale=0.15)
    t[a + "r_k"] = r(H, HD)
    for n in "rwkvag": t[a + f"x_{n}"] = (0.5 + r(1, 1, D))
    t[p + "ffn.key.weight"] = r(I, D, scale=0.15); t[p + "ffn.value.weight"] = r(D, I, scale=0.1)
    t[p + "ffn.x_k"] = 0.5 + r(D)
d = out / "rwkv7-m3"; d.mkdir(parents=True, exist_ok=True)
(d / "config.json").write_text(json.dumps(cfg, indent=2)); save_file(t, d / "model.safetensors", metadata={"format": "pt"})
print("rwkv7", sum(v.size for v in t.values()))

# Mamba-2: 5 layers, d 64, expand 2, heads 8 of 16, state 8, 1 group, conv 4, tied.
D, L, E, HD, N, G, K = 64, 5, 128, 16, 8, 1, 4
NH = E // HD
cfg = json.loads(Path("tests/fla/mamba2_groups_f32/config.json").read_text())
cfg.update(hidden_size=D, num_hidden_layers=L, head_dim=HD, num_heads=NH, expand=2, state_size=N,
           n_groups=G, conv_kernel=K, chunk_size=64, tie_word_embeddings=True, fuse_cross_entropy=False)
C = E + 2 * G * N
t = {"backbone.embeddings.weight": r(256, D, scale=1.0), "backbone.norm_f.weight": 1 + r(D)}
for l in range(L):
    p = f"backbone.layers.{l}."
    t[p + "norm.weight"] = 1 + r(D)
    m = p + "mixer."
    t[m + "A_log"] = np.log(rng.uniform(1, 16, NH)).astype(np.float32); t[m + "D"] = 1 + r(NH)
    t[m + "dt_bias"] = r(NH); t[m + "conv1d.weight"] = r(C, 1, K, scale=0.3); t[m + "conv1d.bias"] = r(C)
    t[m + "in_proj.weight"] = r(2 * E + 2 * G * N + NH, D, scale=0.15); t[m + "norm.weight"] = 1 + r(E)
    t[m + "out_proj.weight"] = r(D, E, scale=0.1)
d = out / "mamba2-m3"; d.mkdir(parents=True, exist_ok=True)
(d / "config.json").write_text(json.dumps(cfg, indent=2)); save_file(t, d / "model.safetensors", metadata={"format": "pt"})
print("mamba2", sum(v.size for v in t.values()))
