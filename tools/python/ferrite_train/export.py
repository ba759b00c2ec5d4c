"""Model directories (docs/spec.md): config.json + model.safetensors (f32, §2 names)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ferrite_ref.reference import check_tensors, model_tensor_shapes
from ferrite_ref.safetensors_io import save_safetensors

from .model import FerriteLM


def full_config(model: FerriteLM) -> dict:
    """The config as written: every top-level field explicit (tie_word_embeddings included)."""
    cfg = model.cfg
    config = dict(model.raw_config)
    config.setdefault("model_type", "ferrite")
    config["vocab_size"] = cfg.vocab_size
    config["hidden_size"] = cfg.hidden_size
    config["intermediate_size"] = cfg.intermediate_size
    config["norm_eps"] = cfg.norm_eps
    config["tie_word_embeddings"] = cfg.tie_word_embeddings
    config["tokenizer"] = cfg.tokenizer
    order = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "norm_eps",
             "tie_word_embeddings", "tokenizer", "layers"]
    return {key: config[key] for key in order}


def state_tensors(model: FerriteLM) -> dict:
    """name -> float32 numpy array, exactly the tensors docs/spec.md §2 asks for."""
    tensors = {name: p.detach().to("cpu", torch.float32).numpy() for name, p in model.state_dict().items()}
    tensors = {name: np.ascontiguousarray(t) for name, t in tensors.items()}
    check_tensors(tensors, model_tensor_shapes(model.cfg))
    return tensors


def export_model_dir(model: FerriteLM, path, metadata: dict | None = None) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(full_config(model), indent=2) + "\n", encoding="utf-8")
    save_safetensors(path / "model.safetensors", state_tensors(model), metadata)
    return path


def load_model_dir(path, device="cpu", dtype=torch.float32) -> FerriteLM:
    """A model directory back into a FerriteLM (any ferrite model dir, fla names)."""
    from ferrite_ref.safetensors_io import load_safetensors

    path = Path(path)
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    model = FerriteLM(config)
    tensors, _ = load_safetensors(path / "model.safetensors")
    check_tensors(tensors, model_tensor_shapes(model.cfg))
    state = {name: torch.from_numpy(np.array(t, dtype=np.float64)) for name, t in tensors.items()}
    if model.cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    model.load_state_dict(state, strict=True)
    return model.to(device=device, dtype=dtype)
