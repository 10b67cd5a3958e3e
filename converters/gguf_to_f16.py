"""A GGUF file into an F16 GGUF: F16/BF16/F32 converted, quantized types dequantized with `gguf.quants`."""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from converters.gguf_stream import F16Plan, PlannedTensor, RangeStats, row_blocks, target_dtype
from runtime.errors import UserError

FLOAT_TYPES = {gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16, gguf.GGMLQuantizationType.F32}
# Keys the writer sets itself, or that would describe the source's quantization rather than ours.
_SKIPPED_KEYS = {"general.architecture", "general.file_type", "general.quantization_version"}


_V = gguf.GGUFValueType
_SCALAR_BYTES = {
    _V.UINT8: 1, _V.INT8: 1, _V.BOOL: 1, _V.UINT16: 2, _V.INT16: 2, _V.UINT32: 4, _V.INT32: 4, _V.FLOAT32: 4,
    _V.UINT64: 8, _V.INT64: 8, _V.FLOAT64: 8,
}  # fmt: skip
_SCALAR_FORMATS = {
    _V.UINT8: "B", _V.INT8: "b", _V.BOOL: "?", _V.UINT16: "H", _V.INT16: "h", _V.UINT32: "I", _V.INT32: "i",
    _V.FLOAT32: "f", _V.UINT64: "Q", _V.INT64: "q", _V.FLOAT64: "d",
}  # fmt: skip
_MAX_DIMS = 4  # GGML_MAX_DIMS


class _Header:
    """A bounds-checked walk over a GGUF header. gguf's reader trusts the counts it reads: an array that claims
    2^60 items sends it into a loop that never ends, and a string longer than the file is silently cut short.
    Every count here is checked against the bytes that are left before anything is read."""

    def __init__(self, path: Path, buf: mmap.mmap) -> None:
        self.path, self.buf, self.pos, self.order = path, buf, 0, "<"

    def fail(self, what: str) -> UserError:
        return UserError(f"{self.path}: {what}")

    @property
    def left(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int, what: str) -> int:
        if n > self.left:
            raise self.fail(f"truncated or damaged ({what} needs {n} bytes, {self.left} are left in the file)")
        start, self.pos = self.pos, self.pos + n
        return start

    def uint(self, size: int, what: str) -> int:
        return struct.unpack_from(self.order + ("I" if size == 4 else "Q"), self.buf, self.take(size, what))[0]

    def string(self, what: str) -> bytes:
        n = self.uint(8, f"the length of {what}")
        if n > self.left:
            raise self.fail(f"{what} claims {n} bytes, more than the {self.left} left in the file")
        start = self.take(n, what)
        return bytes(self.buf[start : start + n])

    def text(self, what: str) -> str:
        try:
            return self.string(what).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text") from None

    def count(self, n: int, least: int, what: str) -> int:
        """`n` items of at least `least` bytes each must fit in what is left of the file."""
        if n * least > self.left:
            raise self.fail(f"{what} claims {n} items, more than the file could hold")
        return n

    def value(self, kind: int, key: str) -> Any:
        """Read one metadata value: a number, a bool or text (undecodable text as None); an array is skipped
        and its length returned as an `ArrayLength`."""
        if kind == _V.STRING:
            try:
                return self.string(f"metadata {key!r}").decode("utf-8")
            except UnicodeDecodeError:
                return None
        if kind == _V.ARRAY:
            item = self.uint(4, f"the item type of metadata {key!r}")
            n = self.uint(8, f"the length of metadata {key!r}")
            if item == _V.STRING:
                for _ in range(self.count(n, 8, f"metadata array {key!r}")):
                    self.string(f"an item of metadata {key!r}")
            elif item in _SCALAR_BYTES:
                size = _SCALAR_BYTES[_V(item)] * self.count(n, _SCALAR_BYTES[_V(item)], f"metadata array {key!r}")
                self.take(size, f"metadata array {key!r}")
            else:
                raise self.fail(f"metadata array {key!r} has items of unknown or nested type {item}")
            return ArrayLength(n)
        if kind not in _SCALAR_BYTES:
            raise self.fail(f"metadata {key!r} has unknown type {kind}")
        size = _SCALAR_BYTES[_V(kind)]
        start = self.take(size, f"metadata {key!r}")
        return struct.unpack_from(self.order + _SCALAR_FORMATS[_V(kind)], self.buf, start)[0]


@dataclass(frozen=True)
class ArrayLength:
    """A metadata array, by its length (its items are not read)."""

    n: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # as stored: the fastest-varying dimension first
    type: gguf.GGMLQuantizationType


@dataclass(frozen=True)
class Layout:
    """What a GGUF's header says, read without its arrays' items or its tensor data."""

    metadata: dict[str, Any]  # numbers, bools and text; arrays as ArrayLength
    tensors: list[TensorInfo]


def check_layout(path: Path) -> Layout:
    """Walk `path`'s GGUF header and tensor table with every count and offset checked against the file, so a
    damaged or hostile file is one line naming the value at fault before gguf's reader sees it. Returns what
    the header says: enough to check a written tier without gguf's reader, which builds a numpy view per
    vocabulary entry (seconds for a 150k-token vocabulary)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _walk(_Header(path, buf))
    except ValueError:  # mmap of an empty file
        raise UserError(f"{path}: not a GGUF file (empty)") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None


def _walk(h: _Header) -> Layout:
    if h.left < 24 or h.buf[:4] != b"GGUF":
        raise h.fail("not a GGUF file (bad magic)")
    h.pos = 4
    version = h.uint(4, "the version")
    if version & 0xFFFF == 0:  # written on a big-endian machine
        h.order, h.pos = ">", 4
        version = h.uint(4, "the version")
    if version not in (2, 3):
        raise h.fail(f"GGUF version {version} is not supported (2 or 3)")
    n_tensors, n_kv = h.uint(8, "the tensor count"), h.uint(8, "the metadata count")
    h.count(n_kv, 13, "the metadata table")  # key length, type, one byte of value at least
    h.count(n_tensors, 32, "the tensor table")  # name length, dims, one dim, type, offset at least
    alignment = 32
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = h.text("a metadata key")
        if key in metadata:
            raise h.fail(f"metadata {key!r} appears twice")
        kind = h.uint(4, f"the type of metadata {key!r}")
        value = metadata[key] = h.value(kind, key)
        if key == "general.alignment":
            if kind not in (_V.UINT32, _V.UINT64) or value == 0 or value & (value - 1) or value > 1 << 30:
                raise h.fail(f"general.alignment {value!r} is not a power of two")
            alignment = value
    tensors: list[tuple[str, int, int]] = []  # name, offset, bytes
    infos: list[TensorInfo] = []
    names: set[str] = set()
    for _ in range(n_tensors):
        name = h.text("a tensor name")
        if name in names:
            raise h.fail(f"tensor {name!r} appears twice")
        names.add(name)
        n_dims = h.uint(4, f"the dimension count of tensor {name!r}")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise h.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {_MAX_DIMS} allowed)")
        dims = [h.uint(8, f"the shape of tensor {name!r}") for _ in range(n_dims)]
        if 0 in dims:
            raise h.fail(f"tensor {name!r} has a zero-sized dimension (shape {dims})")
        kind = h.uint(4, f"the type of tensor {name!r}")
        try:
            qtype = gguf.GGMLQuantizationType(kind)
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise h.fail(f"tensor {name!r} has unknown type {kind}") from None
        if dims[0] % block:
            raise h.fail(f"tensor {name!r}: rows of {dims[0]} values do not split into blocks of {block}")
        offset = h.uint(8, f"the offset of tensor {name!r}")
        if offset % alignment:
            raise h.fail(f"tensor {name!r}: offset {offset} is not a multiple of the alignment {alignment}")
        tensors.append((name, offset, math.prod(dims) // block * type_size))
        infos.append(TensorInfo(name, tuple(dims), qtype))
    data_start = -(-h.pos // alignment) * alignment
    for name, offset, nbytes in tensors:
        if data_start + offset + nbytes > len(h.buf):
            raise h.fail(f"truncated (tensor {name!r} lies outside the file: offset {offset}, {nbytes} bytes)")
    return Layout(metadata, infos)


def open_gguf(path: Path) -> gguf.GGUFReader:
    """Parse a GGUF, turning a damaged, truncated or hostile file into one clear line."""
    check_layout(path)
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError, KeyError, UnicodeDecodeError, OverflowError) as e:
        raise UserError(f"{path}: not a valid GGUF file or truncated ({type(e).__name__})") from None
    size = path.stat().st_size
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise UserError(f"{path}: truncated (tensor {t.name} lies outside the file)")
    return reader


def architecture(reader: gguf.GGUFReader, path: Path) -> str:
    field = reader.fields.get("general.architecture")
    if field is None:
        raise UserError(f"{path}: GGUF without general.architecture")
    if field.types != [gguf.GGUFValueType.STRING]:
        raise UserError(f"{path}: general.architecture is not text")
    return str(field.contents())


def _can_dequantize(kind: gguf.GGMLQuantizationType) -> bool:
    """Whether gguf's numpy code knows this type (it raises NotImplementedError for a few, at write time)."""
    if kind in FLOAT_TYPES:
        return True
    _, type_size = gguf.GGML_QUANT_SIZES[kind]
    try:
        gguf.quants.dequantize(np.zeros((1, type_size), dtype=np.uint8), kind)
    except NotImplementedError:
        return False
    return True


def quantized_types(reader: gguf.GGUFReader) -> list[str]:
    return sorted({t.tensor_type.name for t in reader.tensors if t.tensor_type not in FLOAT_TYPES})


def plan_gguf(path: Path, name: str | None = None) -> F16Plan:
    """Plan an F16 copy of `path`, with every metadata key carried over."""
    reader = open_gguf(path)
    arch = architecture(reader, path)
    stats = RangeStats()
    planned = []
    for t in reader.tensors:
        if not _can_dequantize(t.tensor_type):
            raise UserError(f"{path}: tensor {t.name} is {t.tensor_type.name}, a type this converter cannot read")
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        dtype = target_dtype(t.name, shape)
        stats.source_dtypes.add(t.tensor_type.name)
        planned.append(PlannedTensor(t.name, shape, dtype, _producer(t, shape, dtype, stats)))

    # Copy the metadata out as plain values and drop the reader's parsed fields: for a 150k-token
    # vocabulary those are hundreds of thousands of small arrays, far larger than the strings themselves.
    metadata = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in _SKIPPED_KEYS or (key == "general.name" and name is not None):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        metadata.append((key, field.contents(), kind, sub))
    quantized = quantized_types(reader)
    reader.fields.clear()

    def make_writer(out: Path) -> gguf.GGUFWriter:
        w = gguf.GGUFWriter(out, arch)
        for key, value, kind, sub in metadata:
            w.add_key_value(key, value, kind, sub_type=sub)
        if name is not None:
            w.add_name(name)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        return w

    return F16Plan(planned, make_writer, stats, quantized)


def _producer(t: gguf.ReaderTensor, shape: tuple[int, ...], dtype: np.dtype, stats: RangeStats):
    def produce() -> Iterator[np.ndarray]:
        # The reader's data is (rows, row bytes) for quantized types and (rows, values) for float types.
        data = t.data.reshape(shape[0], -1) if len(shape) > 1 else t.data.reshape(1, -1)
        for rows in row_blocks(data.shape):
            block = data[rows]
            if t.tensor_type == gguf.GGMLQuantizationType.F16 and dtype == np.float16:
                yield block
                continue
            x = gguf.quants.dequantize(block, t.tensor_type).astype(np.float32, copy=False)
            yield stats.to_f16(x) if dtype == np.float16 else x

    return produce
