"""config.json parsing: docs/spec.md §1.2 defaults and rejections."""

import copy

import pytest

from ferrite_ref.config import (BlaConfig, BlockConfig, GdnConfig, GsaConfig, Mamba2Config, Rwkv7Config, SwaConfig,
                                parse_config)

SPEC_EXAMPLE = {
    "model_type": "ferrite", "vocab_size": 256, "hidden_size": 128,
    "intermediate_size": 384, "norm_eps": 1e-6, "tie_word_embeddings": True,
    "tokenizer": "bytes",
    "layers": [
        {"mixer": "gdn", "num_heads": 2, "head_dim": 32, "num_v_heads": 2, "expand_v": 2.0,
         "conv_size": 4, "use_gate": True, "allow_neg_eigval": False},
        {"mixer": "gsa", "num_heads": 4, "num_kv_heads": 2, "num_slots": 16,
         "expand_k": 1.0, "expand_v": 1.0, "feature_map": "swish", "gate_logit_normalizer": 8},
        {"mixer": "swa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "window": 64,
         "sinks": 4, "rope_theta": 10000.0, "rope_positions": "cache", "sink_logits": False},
        {"mixer": "bla", "num_heads": 2, "head_dim": 32, "period": 64, "modes": 8,
         "slots": 17, "kernel": "dirichlet", "decay": "gated", "gamma": 1.0,
         "use_short_conv": True, "conv_size": 4},
    ],
}


def minimal(*layers, **top):
    return {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "layers": list(layers), **top}


def test_spec_example_parses():
    cfg = parse_config(SPEC_EXAMPLE)
    gdn, gsa, swa, bla = cfg.layers
    assert gdn == GdnConfig(2, 32, 2, 64, 4, True, False)
    assert gsa == GsaConfig(4, 2, 32, 32, 16, "swish", 8.0)
    assert swa == SwaConfig(4, 2, 32, 64, 4, 10000.0, "cache", False, False, 4)
    assert bla == BlaConfig(2, 32, 64, 8, 17, "dirichlet", "gated", 1.0, True, 4)
    assert cfg.tie_word_embeddings and cfg.norm_eps == 1e-6 and cfg.hidden_size == 128


def test_defaults():
    cfg = parse_config(minimal(
        {"mixer": "gdn", "num_heads": 2},
        {"mixer": "gsa", "num_heads": 4},
        {"mixer": "swa", "num_heads": 4, "window": 8},
        {"mixer": "bla", "num_heads": 2, "period": 16, "modes": 3},
    ))
    assert cfg.norm_eps == 1e-6 and cfg.tie_word_embeddings is False and cfg.tokenizer == "bytes"
    gdn, gsa, swa, bla = cfg.layers
    assert gdn == GdnConfig(num_heads=2, head_dim=32, num_v_heads=2, head_v_dim=64, conv_size=4,
                            use_gate=True, allow_neg_eigval=False)
    assert gsa == GsaConfig(num_heads=4, num_kv_heads=4, head_k_dim=16, head_v_dim=16, num_slots=64,
                            feature_map="swish", gate_logit_normalizer=8.0)
    assert swa == SwaConfig(num_heads=4, num_kv_heads=4, head_dim=16, window=8, sinks=0, rope_theta=10000.0,
                            rope_positions="absolute", sink_logits=False, use_short_conv=False, conv_size=4)
    assert bla == BlaConfig(num_heads=2, head_dim=32, period=16, modes=3, slots=7, kernel="dirichlet",
                            decay="gated", gamma=1.0, use_short_conv=False, conv_size=4)


def test_gsa_expand_and_gdn_expand_v():
    cfg = parse_config(minimal(
        {"mixer": "gsa", "num_heads": 4, "num_kv_heads": 1, "expand_k": 0.5, "expand_v": 2},
        {"mixer": "gdn", "num_heads": 2, "head_dim": 24, "num_v_heads": 4, "expand_v": 1.5},
    ))
    gsa, gdn = cfg.layers
    assert (gsa.head_k_dim, gsa.head_v_dim, gsa.num_kv_heads) == (8, 32, 1)
    assert (gdn.head_dim, gdn.head_v_dim, gdn.num_v_heads) == (24, 36, 4)


def test_family_options_default_to_the_original_mixers():
    cfg = parse_config(minimal({"mixer": "gdn", "num_heads": 2}))
    gdn = cfg.layers[0]
    assert (gdn.decay, gdn.update, gdn.use_beta, gdn.qk_activation, gdn.qk_norm, gdn.conv_size) == (
        "gated", "delta", True, "silu", "l2", 4)
    gdn = parse_config(minimal({"mixer": "gdn", "num_heads": 2, "use_short_conv": False})).layers[0]
    assert gdn.conv_size == 0
    gsa = parse_config(minimal({"mixer": "gsa", "num_heads": 2, "use_short_conv": True})).layers[0]
    assert (gsa.use_short_conv, gsa.conv_size) == (True, 4)
    swa = parse_config(minimal({"mixer": "swa", "num_heads": 4, "window": 8})).layers[0]
    assert swa.dilation == 1


def test_explicit_head_dim_needs_no_divisible_hidden():
    cfg = parse_config(minimal({"mixer": "swa", "num_heads": 3, "head_dim": 8, "window": 4}))
    assert cfg.layers[0].head_dim == 8


@pytest.mark.parametrize("layer, message", [
    ({"mixer": "mamba", "num_heads": 2}, "mamba"),
    ({"mixer": "swa", "num_heads": 4, "window": 8, "window_size": 8}, "window_size"),
    ({"mixer": "gdn", "num_heads": 2, "use_short_conv": 1}, "use_short_conv"),
    ({"mixer": "gsa", "num_heads": 2, "use_short_conv": "yes"}, "use_short_conv"),
    ({"mixer": "gdn", "num_heads": 2, "decay": "exp"}, "decay"),
    ({"mixer": "gdn", "num_heads": 2, "update": "hebbian"}, "update"),
    ({"mixer": "gdn", "num_heads": 2, "qk_norm": "l1"}, "qk_norm"),
    ({"mixer": "gdn", "num_heads": 2, "qk_norm": "none"}, "diverges"),
    ({"mixer": "gdn", "num_heads": 2, "qk_activation": "gelu"}, "qk_activation"),
    ({"mixer": "gdn", "num_heads": 2, "conv_size": 65}, "conv_size"),
    ({"mixer": "swa", "num_heads": 4, "window": 8, "dilation": 0}, "dilation"),
    ({"mixer": "mla", "num_heads": 2, "window": 8}, "kv_lora_rank"),
    ({"mixer": "mla", "num_heads": 2, "kv_lora_rank": 4}, "window"),
    ({"mixer": "mla", "num_heads": 2, "kv_lora_rank": 4, "window": 8, "rope_dim": 3}, "even"),
    ({"mixer": "mla", "num_heads": 2, "kv_lora_rank": 4, "window": 8, "sinks": 2}, "sinks"),
    ({"mixer": "swa", "num_heads": 4, "window": 8, "dilation": 2, "rope_positions": "cache"}, "dilation"),
    ({"mixer": "swa", "num_heads": 4}, "window"),
    ({"mixer": "bla", "num_heads": 2, "modes": 3}, "period"),
    ({"mixer": "bla", "num_heads": 2, "period": 8}, "modes"),
    ({"mixer": "bla", "num_heads": 2, "period": 8, "modes": 5}, "Nyquist"),
    ({"mixer": "bla", "num_heads": 2, "period": 8, "modes": 2, "kernel": "gauss"}, "kernel"),
    ({"mixer": "bla", "num_heads": 2, "period": 8, "modes": 2, "decay": "exp"}, "decay"),
    ({"mixer": "bla", "num_heads": 2, "period": 8, "modes": 2, "gamma": 1.5}, "gamma"),
    ({"mixer": "bla", "num_heads": 4, "period": 8, "modes": 2, "num_kv_heads": 3}, "num_kv_heads"),
    ({"mixer": "bla", "num_heads": 4, "period": 8, "modes": 2, "num_kv_heads": 0}, "num_kv_heads"),
    ({"mixer": "swa", "num_heads": 4, "window": 8, "rope_positions": "relative"}, "rope_positions"),
    ({"mixer": "swa", "num_heads": 4, "num_kv_heads": 3, "window": 8}, "num_kv_heads"),
    ({"mixer": "swa", "num_heads": 2, "head_dim": 7, "window": 8}, "even"),
    ({"mixer": "swa", "num_heads": 4, "window": 8, "sinks": -1}, "sinks"),
    ({"mixer": "swa", "num_heads": 4, "window": True}, "window"),
    ({"mixer": "swa", "num_heads": 4, "window": 8, "sink_logits": 1}, "sink_logits"),
    ({"mixer": "swa", "num_heads": 5, "window": 8}, "head_dim"),
    ({"mixer": "gdn", "num_heads": 2, "num_v_heads": 3}, "num_v_heads"),
    ({"mixer": "gdn", "num_heads": 2, "head_dim": 5, "expand_v": 1.5}, "expand_v"),
    ({"mixer": "gsa", "num_heads": 2, "feature_map": "elu"}, "feature_map"),
    ({"mixer": "gsa", "num_heads": 3}, "expand_k"),
    ({"mixer": "mamba2", "num_heads": 4}, "head_dim"),
    ({"mixer": "mamba2", "num_heads": 4, "head_dim": 8, "n_groups": 3}, "n_groups"),
    ({"mixer": "mamba2", "num_heads": 4, "head_dim": 8, "conv_size": 65}, "conv_size"),
    ({"mixer": "mamba2", "num_heads": 4, "head_dim": 8, "gated_norm": False, "norm_before_gate": True},
     "norm_before_gate"),
    ({"mixer": "mamba2", "num_heads": 4, "head_dim": 8, "group_heads": "random"}, "group_heads"),
    ({"mixer": "rwkv7", "num_heads": 4, "head_dim": 8}, "hidden_size"),
    ({"mixer": "rwkv7", "num_heads": 2, "kk_norm": "l1"}, "kk_norm"),
    ({"mixer": "gdn", "num_heads": 2, "mlp": "geglu"}, "mlp"),
    ({"mixer": "gdn", "num_heads": 2, "pre_norm": 1}, "pre_norm"),
])
def test_layer_rejections(layer, message):
    with pytest.raises(ValueError, match=message):
        parse_config(minimal(layer))


@pytest.mark.parametrize("change, message", [
    ({"model_type": "llama"}, "model_type"),
    ({"rope_scaling": None}, "rope_scaling"),
    ({"layers": []}, "layers"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"norm_eps": -1.0}, "norm_eps"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
])
def test_model_rejections(change, message):
    raw = copy.deepcopy(SPEC_EXAMPLE)
    raw.update(change)
    with pytest.raises(ValueError, match=message):
        parse_config(raw)


def test_block_options_and_the_new_families_take_their_defaults():
    """docs/spec.md §1.2: every layer's `mlp` and `pre_norm`, the model's `norm`,
    Mamba-2's and RWKV-7's defaults, layer 0 of RWKV-7 passing its value on."""
    cfg = parse_config({"vocab_size": 256, "hidden_size": 64, "norm": "layernorm", "norm_eps": 1e-5,
                        "layers": [{"mixer": "rwkv7", "num_heads": 4, "mlp": "none", "pre_norm": True},
                                   {"mixer": "rwkv7", "num_heads": 4, "mlp": "none"},
                                   {"mixer": "mamba2", "num_heads": 4, "head_dim": 32, "mlp": "none"}]})
    assert cfg.norm == "layernorm" and cfg.intermediate_size == 0
    assert [b.pre_norm for b in cfg.blocks] == [True, False, False]
    first, later, mamba = cfg.layers
    assert first == Rwkv7Config(num_heads=4, head_dim=16, head_v_dim=16, decay_low_rank_dim=64, a_low_rank_dim=64,
                                v_low_rank_dim=0, gate_low_rank_dim=128, kk_norm="l2", g_norm_eps=16 * 1e-5,
                                value_first=True)
    assert later.value_first is False and later.v_low_rank_dim == 16
    assert mamba == Mamba2Config(num_heads=4, head_dim=32, state_size=16, n_groups=1, conv_size=4, conv_bias=True,
                                 gated_norm=True, norm_before_gate=False, d_per_channel=False, group_heads="blocked")
    # An MLP needs a width; the default block is format 1's.
    with pytest.raises(ValueError, match="intermediate_size"):
        parse_config({"vocab_size": 256, "hidden_size": 64, "layers": [{"mixer": "gdn", "num_heads": 2}]})
    plain = parse_config(minimal({"mixer": "gdn", "num_heads": 2}))
    assert plain.norm == "rmsnorm" and plain.block(0) == BlockConfig()


def test_missing_required_top_level_field():
    raw = copy.deepcopy(SPEC_EXAMPLE)
    del raw["hidden_size"]
    with pytest.raises(ValueError, match="hidden_size"):
        parse_config(raw)


def test_cross_memory_encoder_layers_default_and_reach():
    """docs/spec.md §3.10: `memory_encoder_layers` defaults to 0 and may not reach the first
    cross layer (the runtime and ferrite-tools refuse the same)."""
    from ferrite_ref.config import parse_config

    def config(*encoders):
        layers = [{"mixer": "swa", "num_heads": 2, "head_dim": 16, "window": 4}]
        for e in encoders:
            layer = {"mixer": "cross", "num_heads": 2, "memory_slots": 4}
            if e is not None:
                layer["memory_encoder_layers"] = e
            layers.append(layer)
        return {"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "layers": layers}

    assert parse_config(config(None)).layers[1].memory_encoder_layers == 0
    assert [layer.memory_encoder_layers for layer in parse_config(config(1, 0, 1)).layers[1:]] == [1, 0, 1]
    with pytest.raises(ValueError, match="must be at most 1"):
        parse_config(config(1, 2))
    with pytest.raises(ValueError, match="must be at most 1"):
        parse_config(config(2))
