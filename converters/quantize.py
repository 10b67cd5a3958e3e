"""Quantize an F16 GGUF with llama.cpp's own quantizer, in a spawned child process.

A child (runtime.child), because Cancel must be able to stop a quantization that llama.cpp runs as one C
call: we kill it. Progress is the output's size against the size the tier is expected to reach. The same
child then loads the result in llama.cpp as a check.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from runtime import child
from runtime.errors import Cancelled, SpecQuantError
from runtime.machine.hardware import physical_cores
from runtime.models.cache import fsync_file


@dataclass(frozen=True)
class QuantType:
    tier: str
    ftype: int  # llama_ftype
    bits_per_weight: float  # for the expected output size


QUANT_TYPES = {
    "q8_0": QuantType("q8_0", 7, 8.5),
    "q4_k_m": QuantType("q4_k_m", 15, 4.9),
    # Extra drafts for the acceptance sweep only; never part of a cached model.
    "q3_k_m": QuantType("q3_k_m", 12, 3.9),
    "q2_k": QuantType("q2_k", 10, 3.0),
}


def expected_bytes(f16_bytes: int, qtype: QuantType) -> int:
    return int(f16_bytes * qtype.bits_per_weight / 16)


def _watch_parent(ppid: int) -> None:
    """Die with the parent: a killed converter must not leave a quantizer writing into the cache."""
    while os.getppid() == ppid:
        time.sleep(0.5)
    os._exit(1)


def _child_main(task: str, src: str, dst: str, ftype: int, nthread: int, ppid: int, conn: Connection) -> None:
    threading.Thread(target=_watch_parent, args=(ppid,), daemon=True).start()
    import logging

    import llama_cpp

    from runtime.machine.hardware import ensure_backends
    from runtime.machine.llama_log import route_llama_log

    errors = route_llama_log()
    # The child stays silent (K-quant fallbacks are logged per tensor); failures reach the parent via `conn`.
    logging.getLogger("llama.cpp").setLevel(logging.CRITICAL + 1)
    try:
        if task == "quantize":
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = ftype
            params.nthread = nthread
            if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params) != 0:
                conn.send(f"llama.cpp could not quantize {src}: {errors.last() or 'unknown error'}")
                return
        ensure_backends()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        model = llama_cpp.llama_model_load_from_file(dst.encode(), mparams)
        if not model:
            conn.send(f"llama.cpp cannot load {dst}: {errors.last() or 'unknown error'}")
            return
        llama_cpp.llama_model_free(model)
        conn.send("")
    finally:
        conn.close()


def run_llama_child(
    task: str,
    src: Path,
    dst: Path,
    ftype: int = 0,
    expected: int = 0,
    on_bytes: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> None:
    """Run `task` ("quantize" or "load") in a spawned child; raise SpecQuantError on failure.

    On failure or cancel a partially written `dst` is removed (quantize only).
    """
    from runtime.machine.hardware import ensure_backends

    ensure_backends()  # choose the CPU kernels here, once: the child then reads the cached verdict

    def poll() -> None:
        if cancelled is not None and cancelled():
            raise Cancelled("cancelled")
        if on_bytes is not None and task == "quantize":
            with contextlib.suppress(OSError):
                on_bytes(min(dst.stat().st_size, expected), expected)

    ok = False
    try:
        # Not a daemon: a daemonic process may not start the CPU-variant probe if the verdict could not be
        # cached. The child dies with its parent all the same (_watch_parent), and is killed on cancel.
        message = child.run_in_child(
            _child_main,
            (task, str(src), str(dst), ftype, physical_cores(), os.getpid()),
            poll=poll,
            daemon=False,
            what="the llama.cpp child process",
        )
        if message:
            raise SpecQuantError(message)
        ok = True
    finally:
        if not ok and task == "quantize":
            with contextlib.suppress(FileNotFoundError):
                dst.unlink()


def quantize(
    src: Path,
    dst: Path,
    tier: str,
    on_bytes: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> None:
    """Write `dst` as the `tier` quantization of the F16 GGUF `src`, and check that llama.cpp loads it."""
    qtype = QUANT_TYPES[tier]
    expected = expected_bytes(src.stat().st_size, qtype)
    run_llama_child("quantize", src, dst, qtype.ftype, expected, on_bytes, cancelled)
    try:
        fsync_file(dst)  # llama.cpp closes the file without syncing it; it must be on disk before any rename
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            dst.unlink()
        raise


def check_loads(path: Path, cancelled: Callable[[], bool] | None = None) -> None:
    """Load `path` in llama.cpp (in a child, so the parent's memory stays small)."""
    run_llama_child("load", path, path, cancelled=cancelled)
