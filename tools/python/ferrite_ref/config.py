"""Parse and validate ``config.json`` (docs/spec.md §1.2) into fully defaulted configs.

Every field is type-checked, every default of docs/spec.md §1.2 is filled in, and
unknown mixer kinds or unknown fields raise ``ValueError`` naming them: a field
the reference does not understand may change the maths, so it is never ignored.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Union

_REQUIRED = object()


@dataclass(frozen=True)
class GdnConfig:
    """Gated DeltaNet (docs/spec.md §3.1): H q/k heads of size K, HV value heads of size V."""

    kind: ClassVar[str] = "gdn"  # the `mixer` field (ferrite_ref.kinds)
    num_heads: int
    head_dim: int  # K
    num_v_heads: int  # HV
    head_v_dim: int  # V = int(head_dim * expand_v)
    conv_size: int  # 0: no short convolution
    use_gate: bool
    allow_neg_eigval: bool
    # The GDN family (docs/spec.md §3.1.1); the defaults are Gated DeltaNet.
    decay: str = "gated"  # "gated" | "none" | "retention"
    update: str = "delta"  # "delta" | "additive"
    use_beta: bool = True
    qk_activation: str = "silu"  # "silu" | "relu" | "elu" | "identity"
    qk_norm: str = "l2"  # "l2" | "sum" | "none"


@dataclass(frozen=True)
class GsaConfig:
    """Gated Slot Attention (docs/spec.md §3.2): H query heads, Hkv kv heads, M slots."""

    kind: ClassVar[str] = "gsa"  # the `mixer` field (ferrite_ref.kinds)
    num_heads: int
    num_kv_heads: int
    head_k_dim: int  # K = hidden_size * expand_k / num_heads
    head_v_dim: int  # V = hidden_size * expand_v / num_heads
    num_slots: int  # M
    feature_map: str  # "swish" | "relu"
    gate_logit_normalizer: float
    use_short_conv: bool = False
    conv_size: int = 4


@dataclass(frozen=True)
class SwaConfig:
    """Sliding-window softmax attention with sinks (docs/spec.md §3.3).

    ``rope_theta`` None disables RoPE; config.json cannot ask for that, it
    exists only so tests can compare BLA with a plain sliding window.
    """

    kind: ClassVar[str] = "swa"  # the `mixer` field (ferrite_ref.kinds)
    num_heads: int
    num_kv_heads: int
    head_dim: int  # d
    window: int  # W
    sinks: int  # S
    rope_theta: Union[float, None]
    rope_positions: str  # "absolute" | "cache"
    sink_logits: bool
    use_short_conv: bool
    conv_size: int
    dilation: int = 1  # window keys at distances 0, r, 2r, ..., (W-1) r


@dataclass(frozen=True)
class BlaConfig:
    """Blurry Window Attention (docs/spec.md §3.4): H heads, K = V = head_dim, and
    ``num_kv_heads`` key/value heads (0 = ``num_heads``, one per query head; set
    to ``num_heads`` after construction) shared by ``num_heads / num_kv_heads``
    query heads each."""

    kind: ClassVar[str] = "bla"  # the `mixer` field (ferrite_ref.kinds)
    num_heads: int
    head_dim: int  # K = V
    period: int  # P
    modes: int  # M
    slots: int  # N
    kernel: str  # "dirichlet" | "fejer"
    decay: str  # "gated" | "scalar" | "none"
    gamma: float
    use_short_conv: bool
    conv_size: int
    num_kv_heads: int = 0  # Hkv, divides H (0: H)

    def __post_init__(self) -> None:
        if self.num_kv_heads == 0:
            object.__setattr__(self, "num_kv_heads", self.num_heads)


@dataclass(frozen=True)
class MlaConfig:
    """Latent-compressed (MLA-style) sliding window (docs/spec.md §3.6)."""

    kind: ClassVar[str] = "mla"  # the `mixer` field (ferrite_ref.kinds)
    num_heads: int
    head_dim: int  # d: q/k size without RoPE
    v_head_dim: int  # dv
    rope_dim: int  # dr: RoPE part of q and the shared RoPE key (even, 0 = none)
    kv_lora_rank: int  # R: latent size
    window: int  # W
    rope_theta: float


@dataclass(frozen=True)
class Mamba2Config:
    """Mamba-2 (docs/spec.md §3.7): H heads of P channels, state N, G groups of B and C."""

    kind: ClassVar[str] = "mamba2"  # the `mixer` field (ferrite_ref.kinds)
    num_heads: int  # H
    head_dim: int  # P
    state_size: int  # N
    n_groups: int  # G
    conv_size: int  # W
    conv_bias: bool
    gated_norm: bool
    norm_before_gate: bool
    d_per_channel: bool
    group_heads: str  # "blocked" (head h reads group h // (H/G)) | "interleaved" (h % G)


@dataclass(frozen=True)
class Rwkv7Config:
    """RWKV-7 time mixing (docs/spec.md §3.8): H heads, K = hidden / H, V per head."""

    kind: ClassVar[str] = "rwkv7"  # the `mixer` field (ferrite_ref.kinds)
    num_heads: int  # H
    head_dim: int  # K
    head_v_dim: int  # V
    decay_low_rank_dim: int
    a_low_rank_dim: int
    v_low_rank_dim: int
    gate_low_rank_dim: int
    kk_norm: str  # "l2" | "normalize"
    g_norm_eps: float
    value_first: bool  # layer 0: its value is passed to later layers (no v_lora)


@dataclass(frozen=True)
class GlaConfig:
    """Per-key-decay linear attention (docs/spec.md §3.9): fla's GLA, HGRN2 or RetNet."""

    kind: ClassVar[str] = "gla"  # the `mixer` field (ferrite_ref.kinds)
    num_heads: int  # H
    head_k_dim: int  # K
    head_v_dim: int  # V
    variant: str  # "gla" | "hgrn2" | "retention"
    gate_low_rank_dim: int  # R (gla), else 0
    gate_logit_normalizer: int  # gla, else 0
    output_gate: bool
    rope_theta: float | None  # retention, else None
    o_norm_eps: float | None  # the output norm's own epsilon; None: the model's norm_eps


@dataclass(frozen=True)
class CrossConfig:
    """Cross-attention over a fixed memory baked into the image (docs/spec.md §3.10)."""

    kind: ClassVar[str] = "cross"  # the `mixer` field (ferrite_ref.kinds)
    num_heads: int  # H
    num_kv_heads: int  # Hkv, divides H
    head_dim: int  # d
    memory_slots: int  # m
    memories: int  # N, 1..=8
    output_gate: bool
    #: Layers 0..E the memory encoder runs before this layer's norm and k/v projections
    #: (docs/cross-attention.md, "The memory encoder"); at most the first cross layer's index.
    memory_encoder_layers: int = 0


#: Most baked memories a cross layer holds.
MAX_MEMORIES = 8

MixerConfig = Union[GdnConfig, GsaConfig, SwaConfig, BlaConfig, MlaConfig, Mamba2Config, Rwkv7Config, GlaConfig,
                    CrossConfig]


@dataclass(frozen=True)
class BlockConfig:
    """The block around one layer's mixer (docs/spec.md §1.1)."""

    mlp: str = "swiglu"  # "swiglu" | "none" | "channel_mix"
    pre_norm: bool = False  # the residual stream replaced by its norm first


@dataclass(frozen=True)
class ModelConfig:
    """The whole model (docs/spec.md §1)."""

    vocab_size: int
    hidden_size: int  # D
    intermediate_size: int  # I (0 when no layer has an MLP)
    norm_eps: float
    tie_word_embeddings: bool
    tokenizer: str
    layers: tuple  # of MixerConfig
    blocks: tuple = ()  # of BlockConfig, one per layer (empty: the format-1 block everywhere)
    norm: str = "rmsnorm"  # "rmsnorm" | "layernorm": every norm of the blocks and the final one

    def block(self, n: int) -> BlockConfig:
        """Layer n's block options."""
        return self.blocks[n] if self.blocks else BlockConfig()


class _Fields:
    """Takes typed fields out of one JSON object; whatever is left is unknown."""

    def __init__(self, raw: Any, where: str):
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(raw).__name__}")
        self._raw = dict(raw)
        self.where = where

    def error(self, message: str) -> ValueError:
        return ValueError(f"{self.where}: {message}")

    def has(self, name: str) -> bool:
        return name in self._raw

    def _take(self, name: str, default: Any) -> Any:
        if name in self._raw:
            return self._raw.pop(name)
        if default is _REQUIRED:
            raise self.error(f"missing required field '{name}'")
        return default

    def integer(self, name: str, default: Any = _REQUIRED, minimum: int = 1) -> int:
        value = self._take(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"field '{name}' must be an integer, got {value!r}")
        if value < minimum:
            raise self.error(f"field '{name}' must be >= {minimum}, got {value}")
        return value

    def number(self, name: str, default: Any = _REQUIRED) -> float:
        value = self._take(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"field '{name}' must be a number, got {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise self.error(f"field '{name}' must be a positive finite number, got {value!r}")
        return float(value)

    def flag(self, name: str, default: Any = _REQUIRED) -> bool:
        value = self._take(name, default)
        if not isinstance(value, bool):
            raise self.error(f"field '{name}' must be true or false, got {value!r}")
        return value

    def choice(self, name: str, choices: tuple, default: Any = _REQUIRED) -> str:
        value = self._take(name, default)
        if value not in choices:
            raise self.error(f"field '{name}' must be one of {list(choices)}, got {value!r}")
        return value

    def string(self, name: str, default: Any = _REQUIRED) -> str:
        value = self._take(name, default)
        if not isinstance(value, str):
            raise self.error(f"field '{name}' must be a string, got {value!r}")
        return value

    def nonempty_list(self, name: str) -> list:
        value = self._take(name, _REQUIRED)
        if not isinstance(value, list) or not value:
            raise self.error(f"field '{name}' must be a non-empty list")
        return value

    def finish(self) -> None:
        """Reject every field that was not taken."""
        if self._raw:
            raise self.error(f"unknown field(s) {sorted(self._raw)}")


def _exact_div(f: _Fields, numerator: float, denominator: int, what: str) -> int:
    """numerator / denominator, which must be a whole number."""
    quotient = numerator / denominator
    if quotient != int(quotient) or quotient < 1:
        raise f.error(f"{what} = {numerator} / {denominator} is not a positive integer")
    return int(quotient)


def _head_dim(f: _Fields, hidden: int, num_heads: int) -> int:
    """head_dim, by default hidden_size / num_heads (which must then be whole)."""
    if f.has("head_dim"):
        return f.integer("head_dim")
    return _exact_div(f, hidden, num_heads, "default head_dim = hidden_size / num_heads")


def _kv_heads(f: _Fields, num_heads: int) -> int:
    """num_kv_heads (default num_heads), which must divide num_heads."""
    heads = f.integer("num_kv_heads", num_heads)
    if num_heads % heads != 0:
        raise f.error(f"num_heads {num_heads} must be a multiple of num_kv_heads {heads}")
    return heads


def _parse_gdn(f: _Fields, hidden: int) -> GdnConfig:
    num_heads = f.integer("num_heads")
    head_dim = _head_dim(f, hidden, num_heads)
    num_v_heads = f.integer("num_v_heads", num_heads)
    if num_v_heads % num_heads != 0:
        raise f.error(f"num_v_heads {num_v_heads} must be a multiple of num_heads {num_heads}")
    expand_v = f.number("expand_v", 2.0)
    head_v_dim = _exact_div(f, head_dim * expand_v, 1, "head_dim * expand_v")
    conv_size = f.integer("conv_size", 4)
    if conv_size > 64:
        raise f.error(f"field 'conv_size' must be 1..=64, got {conv_size}")
    update = f.choice("update", ("delta", "additive"), "delta")
    qk_norm = f.choice("qk_norm", ("l2", "sum", "none"), "l2")
    if update == "delta" and qk_norm == "none":
        raise f.error("field 'qk_norm' = 'none' needs 'update' = 'additive': "
                      "the delta rule diverges without normalised keys")
    use_gate = f.flag("use_gate", True)
    allow_neg_eigval = f.flag("allow_neg_eigval", False)
    return GdnConfig(
        num_heads=num_heads,
        head_dim=head_dim,
        num_v_heads=num_v_heads,
        head_v_dim=head_v_dim,
        use_gate=use_gate,
        allow_neg_eigval=allow_neg_eigval,
        decay=f.choice("decay", ("gated", "none", "retention"), "gated"),
        update=update,
        use_beta=f.flag("use_beta", True),
        qk_activation=f.choice("qk_activation", ("silu", "relu", "elu", "identity"), "silu"),
        qk_norm=qk_norm,
        conv_size=conv_size if f.flag("use_short_conv", True) else 0,
    )


def _parse_gsa(f: _Fields, hidden: int) -> GsaConfig:
    num_heads = f.integer("num_heads")
    num_kv_heads = _kv_heads(f, num_heads)
    expand_k = f.number("expand_k", 1.0)
    expand_v = f.number("expand_v", 1.0)
    return GsaConfig(
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_k_dim=_exact_div(f, hidden * expand_k, num_heads, "hidden_size * expand_k / num_heads"),
        head_v_dim=_exact_div(f, hidden * expand_v, num_heads, "hidden_size * expand_v / num_heads"),
        num_slots=f.integer("num_slots", 64),
        feature_map=f.choice("feature_map", ("swish", "relu"), "swish"),
        gate_logit_normalizer=f.number("gate_logit_normalizer", 8.0),
        use_short_conv=f.flag("use_short_conv", False),
        conv_size=f.integer("conv_size", 4),
    )


def _parse_swa(f: _Fields, hidden: int) -> SwaConfig:
    num_heads = f.integer("num_heads")
    num_kv_heads = _kv_heads(f, num_heads)
    head_dim = _head_dim(f, hidden, num_heads)
    if head_dim % 2 != 0:
        raise f.error(f"head_dim {head_dim} must be even for RoPE")
    dilation = f.integer("dilation", 1)
    if dilation > 1 and f.has("rope_positions") and f._raw["rope_positions"] == "cache":
        raise f.error("field 'dilation' > 1 needs rope_positions 'absolute'")
    return SwaConfig(
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        window=f.integer("window"),
        sinks=f.integer("sinks", 0, minimum=0),
        rope_theta=f.number("rope_theta", 10000.0),
        rope_positions=f.choice("rope_positions", ("absolute", "cache"), "absolute"),
        sink_logits=f.flag("sink_logits", False),
        use_short_conv=f.flag("use_short_conv", False),
        conv_size=f.integer("conv_size", 4),
        dilation=dilation,
    )


def _parse_bla(f: _Fields, hidden: int) -> BlaConfig:
    num_heads = f.integer("num_heads")
    period = f.integer("period")
    modes = f.integer("modes", minimum=0)
    if 2 * modes > period:
        raise f.error(f"modes {modes} above the Nyquist limit period/2 = {period / 2}")
    decay = f.choice("decay", ("gated", "scalar", "none"), "gated")
    gamma = f.number("gamma", 1.0)
    if gamma > 1.0:
        raise f.error(f"field 'gamma' must be in (0, 1], got {gamma}")
    return BlaConfig(
        num_heads=num_heads,
        num_kv_heads=_kv_heads(f, num_heads),
        head_dim=_head_dim(f, hidden, num_heads),
        period=period,
        modes=modes,
        slots=f.integer("slots", 2 * modes + 1),
        kernel=f.choice("kernel", ("dirichlet", "fejer"), "dirichlet"),
        decay=decay,
        gamma=gamma,
        use_short_conv=f.flag("use_short_conv", False),
        conv_size=f.integer("conv_size", 4),
    )


def _parse_mla(f: _Fields, hidden: int) -> MlaConfig:
    num_heads = f.integer("num_heads")
    head_dim = _head_dim(f, hidden, num_heads)
    rope_dim = f.integer("rope_dim", 0, minimum=0)
    if rope_dim % 2 != 0:
        raise f.error(f"rope_dim {rope_dim} must be even for RoPE")
    return MlaConfig(
        num_heads=num_heads,
        head_dim=head_dim,
        v_head_dim=f.integer("v_head_dim", head_dim),
        rope_dim=rope_dim,
        kv_lora_rank=f.integer("kv_lora_rank"),
        window=f.integer("window"),
        rope_theta=f.number("rope_theta", 10000.0),
    )


def _parse_mamba2(f: _Fields, hidden: int, norm_eps: float, index: int) -> Mamba2Config:
    num_heads = f.integer("num_heads")
    n_groups = f.integer("n_groups", 1)
    if num_heads % n_groups != 0:
        raise f.error(f"num_heads {num_heads} must be a multiple of n_groups {n_groups}")
    conv_size = f.integer("conv_size", 4)
    if conv_size > 64:
        raise f.error(f"field 'conv_size' must be 1..=64, got {conv_size}")
    gated_norm = f.flag("gated_norm", True)
    norm_before_gate = f.flag("norm_before_gate", False)
    if norm_before_gate and not gated_norm:
        raise f.error("field 'norm_before_gate' needs 'gated_norm' = true")
    return Mamba2Config(
        num_heads=num_heads,
        head_dim=f.integer("head_dim"),
        state_size=f.integer("state_size", 16),
        n_groups=n_groups,
        conv_size=conv_size,
        conv_bias=f.flag("conv_bias", True),
        gated_norm=gated_norm,
        norm_before_gate=norm_before_gate,
        d_per_channel=f.flag("d_per_channel", False),
        group_heads=f.choice("group_heads", ("blocked", "interleaved"), "blocked"),
    )


def _parse_rwkv7(f: _Fields, hidden: int, norm_eps: float, index: int) -> Rwkv7Config:
    num_heads = f.integer("num_heads")
    head_dim = _head_dim(f, hidden, num_heads)
    if num_heads * head_dim != hidden:
        raise f.error(f"num_heads {num_heads} * head_dim {head_dim} must be hidden_size {hidden} "
                      "(RWKV-7's key width)")
    first = index == 0
    v_rank = f.integer("v_low_rank_dim", 16)
    return Rwkv7Config(
        num_heads=num_heads,
        head_dim=head_dim,
        head_v_dim=f.integer("head_v_dim", head_dim),
        decay_low_rank_dim=f.integer("decay_low_rank_dim", 64),
        a_low_rank_dim=f.integer("a_low_rank_dim", 64),
        v_low_rank_dim=0 if first else v_rank,
        gate_low_rank_dim=f.integer("gate_low_rank_dim", 128),
        kk_norm=f.choice("kk_norm", ("l2", "normalize"), "l2"),
        g_norm_eps=f.number("g_norm_eps", head_dim * norm_eps),
        value_first=first,
    )


def _parse_gla(f: _Fields, hidden: int, norm_eps: float, index: int) -> GlaConfig:
    num_heads, head_k_dim = f.integer("num_heads"), f.integer("head_k_dim")
    head_v_dim = f.integer("head_v_dim")
    variant = f.choice("variant", ("gla", "hgrn2", "retention"), "gla")
    rank = normalizer = 0
    output_gate, theta = False, None
    if variant == "gla":
        rank = f.integer("gate_low_rank_dim", 16)
        normalizer = f.integer("gate_logit_normalizer", 16)
        if normalizer > 1 << 16:
            raise f.error("field 'gate_logit_normalizer' must be 1..=65536")
        output_gate = f.flag("output_gate", True)
    elif variant == "retention":
        output_gate = f.flag("output_gate", True)
        theta = f.number("rope_theta", 10000.0)
        if not theta > 1.0:
            raise f.error("field 'rope_theta' must be > 1")
        if head_k_dim % 2:
            raise f.error("retention's head_k_dim must be even (RoPE)")
    eps = f.number("o_norm_eps") if f.has("o_norm_eps") else None
    return GlaConfig(num_heads=num_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim, variant=variant,
                     gate_low_rank_dim=rank, gate_logit_normalizer=normalizer, output_gate=output_gate,
                     rope_theta=theta, o_norm_eps=eps)


def _parse_cross(f: _Fields, hidden: int) -> CrossConfig:
    num_heads = f.integer("num_heads")
    num_kv_heads = _kv_heads(f, num_heads)
    head_dim = _head_dim(f, hidden, num_heads)
    memory_slots = f.integer("memory_slots")
    memories = f.integer("memories", 1)
    if not 1 <= memories <= MAX_MEMORIES:
        raise f.error(f"field 'memories' must be 1..={MAX_MEMORIES}, got {memories}")
    if memory_slots * num_kv_heads * head_dim > 1 << 20:
        raise f.error("memory_slots * num_kv_heads * head_dim exceeds 2^20")
    return CrossConfig(num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                       memory_slots=memory_slots, memories=memories, output_gate=f.flag("output_gate", False),
                       memory_encoder_layers=f.integer("memory_encoder_layers", 0, 0))


def _plain(parser):
    """A parser of a mixer that needs neither norm_eps nor its layer index."""
    return lambda f, hidden, norm_eps, index: parser(f, hidden)


# One parser per kind of the runtime's table (ferrite_ref.kinds; tests/test_kinds.py checks it).
_MIXER_PARSERS = {"gdn": _plain(_parse_gdn), "gsa": _plain(_parse_gsa), "swa": _plain(_parse_swa),
                  "bla": _plain(_parse_bla), "mla": _plain(_parse_mla), "mamba2": _parse_mamba2,
                  "rwkv7": _parse_rwkv7, "gla": _parse_gla, "cross": _plain(_parse_cross)}
#: The config class of each mixer kind.
MIXER_CONFIGS = {cls.kind: cls for cls in (GdnConfig, GsaConfig, SwaConfig, BlaConfig, MlaConfig, Mamba2Config,
                                           Rwkv7Config, GlaConfig, CrossConfig)}


def _parse_layer(raw: Any, index: int, hidden: int, norm_eps: float) -> tuple:
    """(mixer config, block config) of layer ``index``."""
    f = _Fields(raw, f"layers[{index}]")
    kind = f.string("mixer")
    if kind not in _MIXER_PARSERS:
        raise f.error(f"unknown mixer kind {kind!r} (known: {sorted(_MIXER_PARSERS)})")
    layer = _MIXER_PARSERS[kind](f, hidden, norm_eps, index)
    block = BlockConfig(mlp=f.choice("mlp", ("swiglu", "none", "channel_mix"), "swiglu"),
                        pre_norm=f.flag("pre_norm", False))
    f.finish()
    return layer, block


def parse_config(raw: Any) -> ModelConfig:
    """Validate a config.json object and fill in docs/spec.md §1.2 defaults."""
    f = _Fields(raw, "config")
    f.choice("model_type", ("ferrite",), "ferrite")
    hidden = f.integer("hidden_size")
    norm_eps = f.number("norm_eps", 1e-6)
    norm = f.choice("norm", ("rmsnorm", "layernorm"), "rmsnorm")
    parsed = [_parse_layer(raw_layer, i, hidden, norm_eps) for i, raw_layer in enumerate(f.nonempty_list("layers"))]
    blocks = tuple(block for _, block in parsed)
    has_mlp = any(block.mlp != "none" for block in blocks)
    config = ModelConfig(
        vocab_size=f.integer("vocab_size"),
        hidden_size=hidden,
        intermediate_size=f.integer("intermediate_size") if has_mlp else f.integer("intermediate_size", 0, 0),
        norm_eps=norm_eps,
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        tokenizer=f.string("tokenizer", "bytes"),
        layers=tuple(layer for layer, _ in parsed),
        blocks=blocks,
        norm=norm,
    )
    f.finish()
    cross_layers = [i for i, layer in enumerate(config.layers) if isinstance(layer, CrossConfig)]
    for i in cross_layers:
        if config.layers[i].memory_encoder_layers > cross_layers[0]:
            raise ValueError(f"config.layers[{i}]: field 'memory_encoder_layers' must be at most {cross_layers[0]} "
                             f"(the memory encoder runs layers before the first cross layer)")
    return config


def load_config(path: Union[str, Path]) -> ModelConfig:
    """Read and parse a config.json file."""
    with open(path, encoding="utf-8") as file:
        return parse_config(json.load(file))

