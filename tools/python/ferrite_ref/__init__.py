"""ferrite_ref — the numpy float64 reference of docs/spec.md: one module per mixer kind (ferrite_ref.kinds)."""

from .config import ModelConfig, load_config, parse_config
from .modeldir import write_model_dir
from .reference import Reference

__all__ = ["ModelConfig", "Reference", "load_config", "parse_config", "write_model_dir"]
