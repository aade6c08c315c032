"""The safetensors byte format as `gdn-verify`'s C++ writer (core/safetensors.cpp) lays it out (docs/DESIGN.md §5).

Tensors sorted by name, a compact JSON header with sorted keys, space padding to 8 bytes, each tensor's
raw little-endian bytes in name order, and an atomic rename: so `inputs.safetensors` of one case is the
same file whichever side wrote it, and a C++ rank file read and rewritten is byte-identical.
"""

from __future__ import annotations

import ctypes
import json
import os
import tempfile
from pathlib import Path
from typing import Mapping

import torch
from safetensors import safe_open

SAFETENSORS_DTYPE = {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64"}


class ImageError(ValueError):
    """A bad image or a request that would corrupt one; the message names the fix."""


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The raw little-endian row-major bytes of `t` (CPU), without numpy."""
    t = t.detach().to("cpu").contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""


def header_text(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """The 8-byte length and JSON header the C++ writer (core/safetensors.cpp) produces for these tensors."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in SAFETENSORS_DTYPE:
            raise ImageError(f"tensor '{name}' has dtype {t.dtype}: images hold F64, F32, BF16 or I64")
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": SAFETENSORS_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return len(text).to_bytes(8, "little") + text


def safetensors_bytes(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """The whole file as the C++ writer lays it out: header, then each tensor's bytes in name order."""
    return header_text(tensors, metadata) + b"".join(tensor_bytes(tensors[n]) for n in sorted(tensors))


def write_atomic(path: Path, data: bytes) -> None:
    """Writes `data` to a temporary file beside `path`, then renames it: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a safetensors file; ImageError naming the file when it cannot be read."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return {n: f.get_tensor(n) for n in f.keys()}, dict(f.metadata() or {})
    except (OSError, Exception) as e:  # safetensors raises its own SafetensorError
        raise ImageError(f"{path}: not a readable safetensors file ({e}): dump the image again") from e
