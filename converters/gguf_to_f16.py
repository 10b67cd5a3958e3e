"""A GGUF file into an F16 GGUF: F16/BF16/F32 converted, quantized types dequantized with `gguf.quants`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np

from converters.gguf_stream import F16Plan, PlannedTensor, RangeStats, row_blocks, target_dtype
from runtime.errors import UserError

FLOAT_TYPES = {gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16, gguf.GGMLQuantizationType.F32}
# Keys the writer sets itself, or that would describe the source's quantization rather than ours.
_SKIPPED_KEYS = {"general.architecture", "general.file_type", "general.quantization_version"}


def open_gguf(path: Path) -> gguf.GGUFReader:
    """Parse a GGUF, turning a damaged or truncated file into one clear line."""
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
    return str(field.contents())


def quantized_types(reader: gguf.GGUFReader) -> list[str]:
    return sorted({t.tensor_type.name for t in reader.tensors if t.tensor_type not in FLOAT_TYPES})


def plan_gguf(path: Path, name: str | None = None) -> F16Plan:
    """Plan an F16 copy of `path`, with every metadata key carried over."""
    reader = open_gguf(path)
    arch = architecture(reader, path)
    stats = RangeStats()
    planned = []
    for t in reader.tensors:
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
