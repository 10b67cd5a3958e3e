"""Write a GGUF tensor by tensor, so peak memory is one tensor, not the model.

Both F16 writers (from Hugging Face safetensors and from another GGUF) describe their tensors as
`PlannedTensor`s whose data is produced only when it is written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

from runtime.errors import Cancelled, SpecQuantError
from runtime.models.cache import disk_error

F16_MAX = 65504.0
F16_MIN_SUBNORMAL = 2.0**-24


CHUNK_ELEMENTS = 1 << 22  # rows are converted in blocks of about this many values, to bound memory


def row_blocks(shape: Sequence[int]) -> Iterator[slice]:
    """Slices over the first axis covering about CHUNK_ELEMENTS values each."""
    rows = int(shape[0]) if shape else 1
    per_row = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    step = max(1, CHUNK_ELEMENTS // max(per_row, 1))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


@dataclass
class PlannedTensor:
    """A tensor to write; `produce` yields its data as consecutive row blocks in the target dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype  # float16 or float32
    produce: Callable[[], Iterable[np.ndarray]]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass
class RangeStats:
    """Values that F16 cannot hold: beyond ±65504 (overflow) or non-zero below its smallest subnormal."""

    overflow: int = 0
    underflow: int = 0
    source_dtypes: set[str] = field(default_factory=set)

    def to_f16(self, x: np.ndarray) -> np.ndarray:
        """Cast to F16, counting losses. Overflows saturate at ±65504: an inf would poison every
        quantized block it lands in (llama.cpp refuses such rows)."""
        a = np.abs(x)
        over = np.isfinite(a) & (a > F16_MAX)
        n_over = int(np.count_nonzero(over))
        self.overflow += n_over
        self.underflow += int(np.count_nonzero((a > 0) & (a < F16_MIN_SUBNORMAL / 2)))
        if n_over:
            x = np.clip(x, -F16_MAX, F16_MAX)
        return x.astype(np.float16)

    def as_dict(self) -> dict[str, object]:
        return {"overflow": self.overflow, "underflow": self.underflow, "source_dtypes": sorted(self.source_dtypes)}


def target_dtype(name: str, shape: Sequence[int]) -> np.dtype:
    """F16 for weight matrices; F32 for norms, biases and other vectors (llama.cpp expects that)."""
    return np.dtype(np.float16) if len(shape) >= 2 and not name.startswith("rope_") else np.dtype(np.float32)


def write_gguf(
    path: Path,
    writer: gguf.GGUFWriter,
    tensors: Sequence[PlannedTensor],
    on_bytes: Callable[[int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> None:
    """Stream `tensors` after the writer's metadata into `path`, then flush and fsync it.

    gguf's writer takes whole tensors; we write row blocks ourselves, with the same alignment padding
    the GGUF format asks for, so peak memory is one block rather than the largest tensor.
    """
    for t in tensors:
        writer.add_tensor_info(t.name, t.shape, t.dtype, t.nbytes)
    try:
        writer.write_header_to_file(path)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        assert writer.fout is not None and len(writer.fout) == 1
        fout = writer.fout[0]
        done = 0
        for t in tensors:
            if cancelled is not None and cancelled():
                raise Cancelled("cancelled")
            writer.write_padding(fout, fout.tell())
            written = 0
            for block in t.produce():
                data = np.ascontiguousarray(block, dtype=t.dtype)
                data.tofile(fout)
                written += data.nbytes
                if on_bytes is not None:
                    on_bytes(done + written)
            if written != t.nbytes:
                raise SpecQuantError(f"tensor {t.name}: wrote {written} bytes, expected {t.nbytes}")
            writer.write_padding(fout, written)
            done += written
        fout.flush()
        os.fsync(fout.fileno())
        writer.close()
    except OSError as e:
        _close_quietly(writer)
        raise disk_error(path, e) from None
    except BaseException:
        _close_quietly(writer)
        raise


def _close_quietly(writer: gguf.GGUFWriter) -> None:
    """Close after a failure; a second error while closing (a full disk again) must not mask the first."""
    with contextlib.suppress(OSError):
        writer.close()


@dataclass
class F16Plan:
    """Everything needed to write an F16 tier: its tensors, and its metadata writer for a given path."""

    tensors: list[PlannedTensor]
    make_writer: Callable[[Path], gguf.GGUFWriter]
    stats: RangeStats
    quantized: list[str] = field(default_factory=list)  # quantized source types: F16 will be reconstructed

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def write(
        self, path: Path, on_bytes: Callable[[int], None] | None = None, cancelled: Callable[[], bool] | None = None
    ) -> None:
        write_gguf(path, self.make_writer(path), self.tensors, on_bytes, cancelled)
