"""Memory-mapped, streaming access to `*.safetensors` shards, BF16 included.

The `safetensors` package cannot hand BF16 to numpy (numpy has no bfloat16), so we read the documented
layout directly: an 8-byte little-endian header length, a JSON header of dtype/shape/offsets, then the
raw data. Every tensor is a view into one `np.memmap`; nothing is read until a tensor is converted.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.errors import UserError

_DTYPES = {"F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "F32": np.dtype("<f4")}
_MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class SafeTensor:
    name: str
    dtype: str  # "F16", "BF16" or "F32"
    shape: tuple[int, ...]
    file: Path
    raw: np.ndarray  # memmapped view, dtype per _DTYPES

    def to_f32(self, rows: slice = slice(None)) -> np.ndarray:
        """Rows of the values as float32 (BF16 is the upper half of an F32 bit pattern)."""
        raw = self.raw[rows] if self.raw.ndim else self.raw
        if self.dtype == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float32)


def read_shard(path: Path) -> dict[str, SafeTensor]:
    """Parse one shard's header and map its tensors; damaged files get one clear line."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise UserError(f"{path}: not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", head)
            if n > min(_MAX_HEADER, size - 8):
                raise UserError(f"{path}: not a safetensors file or truncated (bad header length)")
            header = json.loads(f.read(n))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{path}: not a safetensors file (header is not JSON)") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: not a safetensors file (header is not a table)")
    header.pop("__metadata__", None)
    data_start = 8 + n
    data_len = size - data_start
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=data_start, shape=(data_len,)) if data_len else None
    tensors = {}
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], tuple(int(d) for d in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{path}: malformed header entry for tensor {name!r}") from None
        if dtype not in _DTYPES:
            raise UserError(f"{path}: tensor {name!r} is {dtype}; only F16, BF16 and F32 checkpoints are supported")
        np_dtype = _DTYPES[dtype]
        want = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
        if end - begin != want or begin < 0 or end > data_len or mm is None:
            raise UserError(f"{path}: truncated or damaged (tensor {name!r} lies outside the file)")
        raw = mm[begin:end].view(np_dtype).reshape(shape)
        tensors[name] = SafeTensor(name, dtype, shape, path, raw)
    return tensors


def read_checkpoint(directory: Path) -> dict[str, SafeTensor]:
    """All tensors of a checkpoint directory, following `model.safetensors.index.json` when sharded."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError):
            raise UserError(f"{index}: not a valid safetensors index") from None
        shards = sorted({directory / f for f in weight_map.values()})
        missing = [s.name for s in shards if not s.is_file()]
        if missing:
            raise UserError(f"{directory}: shard {missing[0]} named in {index.name} is missing")
    else:
        shards = sorted(directory.glob("*.safetensors"))
    tensors: dict[str, SafeTensor] = {}
    for shard in shards:
        tensors.update(read_shard(shard))
    return tensors
