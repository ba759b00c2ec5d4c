"""ferrite_train — PyTorch modules of docs/spec.md, training and export (needs torch; CI does not)."""

from .st_shim import install as _install_safetensors_shim

_install_safetensors_shim()
