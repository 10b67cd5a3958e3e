"""Memory-mapped, streaming access to `*.safetensors` shards, BF16 included.

The `safetensors` package cannot hand BF16 to numpy (numpy has no bfloat16), so we read the documented
layout directly: an 8-byte little-endian header length, a JSON header of dtype/shape/offsets, then the
raw data. Every tensor is a view into one `np.memmap`; nothing is read until a tensor is converted.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.errors import UserError

_DTYPES = {"F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "F32": np.dtype("<f4")}
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit
_MAX_DIMS = 8


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


def _tensor_entry(path: Path, name: str, info: object, data_len: int) -> tuple[str, tuple[int, ...], int, int]:
    """Validate one header entry: (dtype, shape, begin, end). Offsets and sizes are checked with Python's
    unbounded integers, so a hostile shape cannot wrap around int64 into a small, plausible size."""
    if not isinstance(info, dict):
        raise UserError(f"{path}: malformed header entry for tensor {name!r}")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(offsets, list):
        raise UserError(f"{path}: malformed header entry for tensor {name!r}")
    if dtype not in _DTYPES:
        raise UserError(f"{path}: tensor {name!r} is {dtype}; only F16, BF16 and F32 checkpoints are supported")
    if len(shape) > _MAX_DIMS or not all(_is_int(d) and d >= 0 for d in shape):
        raise UserError(f"{path}: tensor {name!r} has an invalid shape {shape!r} (want up to {_MAX_DIMS} sizes >= 0)")
    if 0 in shape:
        raise UserError(f"{path}: tensor {name!r} has a zero-sized dimension (shape {shape!r})")
    if len(offsets) != 2 or not all(_is_int(o) for o in offsets):
        raise UserError(f"{path}: tensor {name!r} has invalid data_offsets {offsets!r}")
    begin, end = offsets
    want = math.prod(shape) * _DTYPES[dtype].itemsize
    if not 0 <= begin <= end <= data_len:
        raise UserError(
            f"{path}: truncated or damaged (tensor {name!r} lies outside the file: "
            f"data_offsets {offsets!r}, {data_len} data bytes)"
        )
    if end - begin != want:
        raise UserError(
            f"{path}: tensor {name!r} of shape {shape!r} needs {want} bytes but its data_offsets {offsets!r} "
            f"hold {end - begin}"
        )
    return dtype, tuple(shape), begin, end


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_shard(path: Path) -> dict[str, SafeTensor]:
    """Parse one shard's header and map its tensors; damaged or hostile files get one clear line."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise UserError(f"{path}: not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER:
                raise UserError(f"{path}: not a safetensors file (header length {n} bytes is over 100 MB)")
            if n > size - 8:
                raise UserError(
                    f"{path}: not a safetensors file or truncated (header length {n} bytes, file {size} bytes)"
                )
            header = json.loads(f.read(n))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise UserError(f"{path}: not a safetensors file (header is not JSON)") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: not a safetensors file (header is not a table)")
    header.pop("__metadata__", None)
    data_start = 8 + n
    data_len = size - data_start
    entries = {name: _tensor_entry(path, name, info, data_len) for name, info in header.items()}
    if not entries:
        return {}
    try:
        mm = np.memmap(path, dtype=np.uint8, mode="r", offset=data_start, shape=(data_len,))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot map {path}: {e}") from None
    tensors = {}
    for name, (dtype, shape, begin, end) in entries.items():
        raw = mm[begin:end].view(_DTYPES[dtype]).reshape(shape)
        tensors[name] = SafeTensor(name, dtype, shape, path, raw)
    return tensors


def shard_paths(directory: Path, index: Path) -> list[Path]:
    """The shards `model.safetensors.index.json` names. The index is untrusted: each shard must be a plain
    file name inside `directory` (no path, no '..'), or a hostile index could make us read any file."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        raise UserError(f"{index}: not a valid safetensors index") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserError(f"{index}: 'weight_map' must be a non-empty object")
    names = set()
    for tensor, shard in weight_map.items():
        if (
            not isinstance(shard, str)
            or shard in ("", ".", "..")
            or any(c in shard for c in "/\\:\0")
            or Path(shard).name != shard
            or not shard.endswith(".safetensors")
        ):
            raise UserError(
                f"{index}: tensor {tensor!r} names shard {shard!r}; a shard must be a plain *.safetensors file name "
                "in the model folder"
            )
        names.add(shard)
    return [directory / name for name in sorted(names)]


def read_checkpoint(directory: Path) -> dict[str, SafeTensor]:
    """All tensors of a checkpoint directory, following `model.safetensors.index.json` when sharded."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = shard_paths(directory, index)
        missing = [s.name for s in shards if not s.is_file()]
        if missing:
            raise UserError(f"{directory}: shard {missing[0]} named in {index.name} is missing")
    else:
        shards = sorted(directory.glob("*.safetensors"))
    tensors: dict[str, SafeTensor] = {}
    for shard in shards:
        for name, t in read_shard(shard).items():
            if name in tensors:
                raise UserError(f"{shard}: tensor {name!r} is also in {tensors[name].file.name}")
            tensors[name] = t
    return tensors
