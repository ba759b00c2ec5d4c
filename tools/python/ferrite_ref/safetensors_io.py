"""Byte-deterministic safetensors writing and checked reading.

``safetensors.numpy.save_file`` writes the ``__metadata__`` keys in a random
(hash-map) order, so two runs can differ byte for byte. This writer sorts the
metadata and the tensors by name; files are read back with the safetensors
library itself.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Union

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

_DTYPE_NAMES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int32): "I32"}


def save_safetensors(path: Union[str, Path], tensors: dict, metadata: Union[dict, None] = None) -> None:
    """Write ``tensors`` (name -> array) little-endian, sorted by name, header padded to 8 bytes."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {key: str(metadata[key]) for key in sorted(metadata)}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        array = np.asarray(tensors[name])
        if array.dtype not in _DTYPE_NAMES:
            raise ValueError(f"tensor {name!r}: unsupported dtype {array.dtype}")
        blob = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
        header[name] = {
            "dtype": _DTYPE_NAMES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(header_bytes)))
        file.write(header_bytes)
        for blob in blobs:
            file.write(blob)


def load_safetensors(path: Union[str, Path]) -> tuple:
    """(tensors: name -> array, metadata: dict) of a safetensors file."""
    with safe_open(str(path), framework="np") as file:
        metadata = dict(file.metadata() or {})
    return load_file(str(path)), metadata
