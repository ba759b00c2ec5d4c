"""The reference model: state handling, SWA's window and RoPE rules, model I/O, CLI."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ferrite_ref import Reference, write_model_dir
from ferrite_ref import swa
from ferrite_ref.ops import rope
from ferrite_ref.safetensors_io import load_safetensors, save_safetensors
from helpers import random_mixer_weights, run, swa_config

PYTHON_DIR = Path(__file__).resolve().parents[1]
HIDDEN = 16

HYBRID = {
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "tie_word_embeddings": False,
    "layers": [
        {"mixer": "gdn", "num_heads": 2, "head_dim": 16},
        {"mixer": "gsa", "num_heads": 4, "num_kv_heads": 2, "num_slots": 4},
        {"mixer": "swa", "num_heads": 4, "num_kv_heads": 2, "window": 4, "sinks": 1,
         "rope_positions": "cache", "sink_logits": True, "use_short_conv": True},
        {"mixer": "bla", "num_heads": 2, "period": 6, "modes": 2, "use_short_conv": True},
    ],
}


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory):
    return write_model_dir(tmp_path_factory.mktemp("hybrid"), HYBRID, seed=3)


def test_reset_reproduces(hybrid_dir):
    ref = Reference(hybrid_dir)
    tokens = [5, 9, 0, 63, 5, 5, 17, 2, 40, 1]
    first = ref.logits(tokens)
    ref.reset()
    again = np.stack([ref.step(t) for t in tokens])
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(Reference(hybrid_dir).logits(tokens), first)
    assert first.shape == (10, 64) and np.all(np.isfinite(first))


def test_bad_tokens_and_pinned_are_rejected(hybrid_dir):
    with pytest.raises(ValueError, match="token 64"):
        Reference(hybrid_dir).step(64)
    with pytest.raises(ValueError, match="pinned"):
        Reference(hybrid_dir, pinned=-1)


def test_tensor_mismatches_are_rejected(hybrid_dir, tmp_path):
    tensors, _ = load_safetensors(hybrid_dir / "model.safetensors")
    config = (hybrid_dir / "config.json").read_text()
    (tmp_path / "config.json").write_text(config)
    cases = [
        ({k: v for k, v in tensors.items() if k != "lm_head.weight"}, "missing \\['lm_head.weight'\\]"),
        ({**tensors, "model.layers.0.attn.extra": np.zeros(1, np.float32)}, "unexpected"),
        ({**tensors, "model.norm.weight": np.zeros(3, np.float32)}, "model.norm.weight"),
    ]
    for bad, message in cases:
        save_safetensors(tmp_path / "model.safetensors", bad)
        with pytest.raises(ValueError, match=message):
            Reference(tmp_path)


def test_writer_output_is_standard_safetensors(tmp_path):
    tensors = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.array([1, -2], dtype=np.int32)}
    save_safetensors(tmp_path / "x.safetensors", tensors, {"seed": "1", "pinned": "0"})
    loaded, metadata = load_safetensors(tmp_path / "x.safetensors")
    assert metadata == {"pinned": "0", "seed": "1"}
    for name, value in tensors.items():
        np.testing.assert_array_equal(loaded[name], value)
        assert loaded[name].dtype == value.dtype
    assert int.from_bytes((tmp_path / "x.safetensors").read_bytes()[:8], "little") % 8 == 0


def test_cli_logits_matches_reference(hybrid_dir):
    result = subprocess.run(
        [sys.executable, "-m", "ferrite_ref", "logits", str(hybrid_dir), "--tokens", "1,2,3", "--pinned", "1"],
        cwd=PYTHON_DIR, capture_output=True, text=True, check=True,
    )
    printed = np.array(json.loads(result.stdout))
    np.testing.assert_array_equal(printed, Reference(hybrid_dir, pinned=1).logits([1, 2, 3]))


def test_cli_random_model_and_errors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(HYBRID))
    subprocess.run([sys.executable, "-m", "ferrite_ref", "random-model", str(tmp_path / "m"),
                    "--config", str(tmp_path / "config.json"), "--seed", "3"], cwd=PYTHON_DIR, check=True)
    assert Reference(tmp_path / "m").logits([0]).shape == (1, 64)
    bad = subprocess.run([sys.executable, "-m", "ferrite_ref", "logits", str(tmp_path / "m"), "--tokens", "99"],
                         cwd=PYTHON_DIR, capture_output=True, text=True)
    assert bad.returncode != 0 and bad.stdout == "" and "token 99" in bad.stderr


# --- SWA window and RoPE rules ---------------------------------------------------

def test_visible_keys():
    assert swa.visible_keys(2, 4, 0) == [0, 1, 2]
    assert swa.visible_keys(9, 4, 0) == [6, 7, 8, 9]
    assert swa.visible_keys(9, 4, 2) == [0, 1, 6, 7, 8, 9]
    assert swa.visible_keys(4, 4, 2) == [0, 1, 2, 3, 4]  # sinks overlap the window: each key once
    assert swa.visible_keys(1, 4, 3) == [0, 1]


def test_cache_rope_positions():
    # S_eff = 2, W = 4, t = 9: sinks 0, 1 at 0, 1; window 6..9 at 2..5; query last at 5.
    assert swa.rope_positions(9, [0, 1, 6, 7, 8, 9], 4, 2, "cache") == (5, [0, 1, 2, 3, 4, 5])
    assert swa.rope_positions(3, [0, 1, 2, 3], 4, 2, "cache") == (3, [0, 1, 2, 3])
    assert swa.rope_positions(9, [0, 1, 6, 7, 8, 9], 4, 2, "absolute") == (9, [0, 1, 6, 7, 8, 9])


def test_rope_is_a_relative_rotation():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 8))
    scores = [rope(q, p + 7, 100.0) @ rope(k, p, 100.0) for p in range(5)]
    np.testing.assert_allclose(scores, scores[0], rtol=1e-12)
    np.testing.assert_allclose(rope(q, 0, 100.0), q)


def causal_attention(weights, cfg, xs):
    """Full causal attention with absolute RoPE in matrix form (independent of swa.py's loop)."""
    t_len, d = len(xs), cfg.head_dim
    q = (xs @ weights["q_proj.weight"].T).reshape(t_len, cfg.num_heads, d)
    k = (xs @ weights["k_proj.weight"].T).reshape(t_len, cfg.num_kv_heads, d)
    v = (xs @ weights["v_proj.weight"].T).reshape(t_len, cfg.num_kv_heads, d)
    q = np.stack([rope(q[t], t, cfg.rope_theta) for t in range(t_len)])
    k = np.stack([rope(k[t], t, cfg.rope_theta) for t in range(t_len)])
    group = cfg.num_heads // cfg.num_kv_heads
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(d)
    scores = np.where(np.tril(np.ones((t_len, t_len), bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("hts,shd->thd", p, v).reshape(t_len, -1)
    return o @ weights["o_proj.weight"].T


def test_swa_with_a_long_window_is_causal_attention():
    rng = np.random.default_rng(1)
    cfg = swa_config(window=64, heads=4, kv_heads=2, rope_theta=50.0)
    weights = random_mixer_weights(swa.tensor_shapes(cfg, HIDDEN), rng)
    xs = rng.standard_normal((20, HIDDEN))
    np.testing.assert_allclose(run(swa.SlidingWindowAttention(cfg, weights), xs),
                               causal_attention(weights, cfg, xs), rtol=1e-10, atol=1e-12)


def test_cache_positions_agree_with_absolute_until_the_window_slides():
    rng = np.random.default_rng(2)
    absolute = swa_config(window=5, sinks=2, rope_theta=50.0)
    cache = swa_config(window=5, sinks=2, rope_theta=50.0, rope_positions="cache")
    weights = random_mixer_weights(swa.tensor_shapes(absolute, HIDDEN), rng)
    xs = rng.standard_normal((12, HIDDEN))
    a = run(swa.SlidingWindowAttention(absolute, weights), xs)
    c = run(swa.SlidingWindowAttention(cache, weights), xs)
    np.testing.assert_allclose(a[:7], c[:7], rtol=1e-12)  # t < S + W: same positions
    assert np.all(np.abs(a[7:] - c[7:]).max(axis=1) > 1e-6)


@pytest.mark.parametrize("mode", ["absolute", "cache"])
def test_pinned_tokens_act_as_extra_sinks(mode):
    rng = np.random.default_rng(3)
    weights = random_mixer_weights(swa.tensor_shapes(swa_config(4), HIDDEN), rng)
    xs = rng.standard_normal((15, HIDDEN))
    pinned = swa.SlidingWindowAttention(swa_config(4, sinks=1, rope_positions=mode), weights, pinned=3)
    sinks = swa.SlidingWindowAttention(swa_config(4, sinks=4, rope_positions=mode), weights)
    np.testing.assert_allclose(run(pinned, xs), run(sinks, xs), rtol=1e-12)


def test_sink_logit_only_adds_to_the_denominator():
    rng = np.random.default_rng(4)
    plain = swa_config(3)
    learned = swa_config(3, sink_logits=True)
    weights = random_mixer_weights(swa.tensor_shapes(learned, HIDDEN), rng)
    weights["sinks"] = np.full(2, -50.0)  # exp(-50) ~ 0: no effect
    xs = rng.standard_normal((6, HIDDEN))
    np.testing.assert_allclose(run(swa.SlidingWindowAttention(learned, weights), xs),
                               run(swa.SlidingWindowAttention(plain, weights), xs), rtol=1e-12)
    weights["sinks"] = np.full(2, 50.0)  # all mass on the sink: output 0
    np.testing.assert_allclose(run(swa.SlidingWindowAttention(learned, weights), xs), 0.0, atol=1e-12)
