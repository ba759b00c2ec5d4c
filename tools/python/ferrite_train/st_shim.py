"""A pure-numpy stand-in for the parts of the `safetensors` package that
ferrite_ref uses (``safe_open(...).metadata()`` and ``safetensors.numpy.load_file``),
installed only where the real package is missing (the GPU machine may not have it)."""

from __future__ import annotations

import json
import struct
import sys
import types

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "F16": np.float16}


def read_header(path) -> tuple:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return header, 8 + n


def load_file(path) -> dict:
    header, base = read_header(path)
    data = open(path, "rb").read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(data[base + start : base + end], dtype=np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<"))
        out[name] = arr.reshape(info["shape"]).astype(_DTYPES[info["dtype"]])
    return out


class _SafeOpen:
    def __init__(self, path, framework="np"):
        self.header, _ = read_header(path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def metadata(self):
        return self.header.get("__metadata__")


def install() -> None:
    """Register the stand-in as `safetensors` / `safetensors.numpy` if the real one is absent."""
    try:
        import safetensors  # noqa: F401
        import safetensors.numpy  # noqa: F401
    except ImportError:
        top = types.ModuleType("safetensors")
        top.safe_open = _SafeOpen
        sub = types.ModuleType("safetensors.numpy")
        sub.load_file = load_file
        top.numpy = sub
        sys.modules["safetensors"] = top
        sys.modules["safetensors.numpy"] = sub
