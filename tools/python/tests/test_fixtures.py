"""The committed fixtures: reproducible byte for byte and consistent with the reference."""

from pathlib import Path

import numpy as np
import pytest

from ferrite_dev.fixtures import reference as fixtures
from ferrite_ref import Reference
from ferrite_ref.config import load_config
from ferrite_ref.safetensors_io import load_safetensors

COMMITTED = fixtures.FIXTURES_DIR
NAMES = [name for name, *_ in fixtures.FIXTURES]
FILES = ["config.json", "model.safetensors", "expected.safetensors"]


def test_regeneration_is_byte_identical(tmp_path):
    assert fixtures.main(["--out", str(tmp_path)]) == 0
    for name in NAMES:
        for file in FILES:
            assert (tmp_path / name / file).read_bytes() == (COMMITTED / name / file).read_bytes(), f"{name}/{file}"
    assert (tmp_path / "README.md").read_text() == (COMMITTED / "README.md").read_text()


def test_readme_counts_the_fixtures():
    readme = (COMMITTED.parent.parent / "README.md").read_text()
    assert f"`tests/fixtures/*` — {len(NAMES)} random-weight models" in readme
    assert sorted(NAMES) == sorted(p.name for p in COMMITTED.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", NAMES)
def test_fixture_is_consistent(name):
    path = COMMITTED / name
    expected, metadata = load_safetensors(path / "expected.safetensors")
    assert set(metadata) == {"pinned", "seed"}
    tokens, logits = expected["tokens"], expected["logits"]
    cfg = load_config(path / "config.json")
    assert tokens.dtype == np.int32 and tokens.shape == (fixtures.NUM_TOKENS,)
    assert logits.dtype == np.float32 and logits.shape == (fixtures.NUM_TOKENS, cfg.vocab_size)
    reference = Reference(path, pinned=int(metadata["pinned"]))
    fresh = reference.logits(tokens)
    np.testing.assert_allclose(logits, fresh, rtol=1e-6, atol=1e-6)
    # A cross fixture's other memories (docs/spec.md §3.10): every one, on the first tokens.
    memories = {layer.memories for layer in cfg.layers if layer.kind == "cross"}
    others = sorted(k for k in expected if k.startswith("logits_memory_"))
    assert others == [f"logits_memory_{n}" for n in range(1, min(memories, default=1))]
    for key in others:
        n = int(key.rsplit("_", 1)[1])
        got = expected[key]
        assert got.shape == (fixtures.MEMORY_TOKENS, cfg.vocab_size)
        np.testing.assert_allclose(got, reference.logits(tokens[:fixtures.MEMORY_TOKENS], memory=n),
                                   rtol=1e-6, atol=1e-6)
    assert sum(f.stat().st_size for f in Path(path).iterdir()) < 300_000


def test_encoder_fixture_holds_the_reference_encoder():
    """docs/cross-attention.md, "The memory encoder": the committed encoded keys and values of
    `cross_encoder` are the f64 encoder's, and the encoder is what it says: a depth-0 layer's
    keys are its norm and k_proj of the embedding rows alone."""
    path = COMMITTED / "cross_encoder"
    expected, _ = load_safetensors(path / "expected.safetensors")
    reference = Reference(path)
    for n, text in enumerate(fixtures.MEMORY_TEXTS):
        tokens = expected[f"memory_tokens_{n}"]
        assert bytes(tokens.astype(np.uint8)) == text
        encoded = reference.encode_memory(tokens)
        assert len(encoded) == 2
        for layer, (keys, values) in zip((1, 2), encoded):
            assert keys.shape == (len(text), expected[f"encoded_keys_{layer}_{n}"].shape[1])
            np.testing.assert_allclose(expected[f"encoded_keys_{layer}_{n}"], keys, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(expected[f"encoded_values_{layer}_{n}"], values, rtol=1e-6, atol=1e-6)
    # Layer 2's encoder has no layers: each slot depends on its own token only.
    block = reference.layers[2]
    row = block.norm(reference.embeddings[int(expected["memory_tokens_0"][3])], "attn_norm")
    np.testing.assert_allclose(expected["encoded_keys_2_0"][3], block.mixer.w["k_proj.weight"] @ row, rtol=1e-6,
                               atol=1e-6)
    # Layer 1's runs the gdn layer first: a slot depends on the tokens before it (both texts
    # start alike, "valve ", and then differ).
    k1 = expected["encoded_keys_1_0"], expected["encoded_keys_1_1"]
    np.testing.assert_array_equal(k1[0][:6], k1[1][:6])
    assert not np.allclose(k1[0][-1], k1[1][-1])


def test_encoder_refuses_what_it_cannot_encode():
    reference = Reference(COMMITTED / "cross_encoder")
    with pytest.raises(ValueError, match="at least one token"):
        reference.encode_memory([])
    with pytest.raises(ValueError, match="outside"):
        reference.encode_memory([256])
    with pytest.raises(ValueError, match="no cross layer"):
        Reference(COMMITTED / "gdn_gate").encode_memory([1])
