"""Prove each GPU before placement may use it: a GPU that ggml lists is not one that runs the model.

A virtual GPU (a macOS runner's paravirtual Metal device) or a broken driver reports a device with memory,
and a tier placed there aborts the whole process on the first op it lacks. So, once per machine, each local
GPU decodes a batch of the CPU probe's tiny model (runtime.machine.cpu_variant: F16, Q8_0 and Q4_K weights,
the tiers' types) with every layer on that device, in a spawned child (runtime.child): an abort, a failure
or a hang there costs only the child. A GPU that fails carries the reason (Gpu.probe_error), and placement
(runtime.plan.placement) never chooses it. The verdict is cached per machine like the CPU variant's.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Protocol, TypeVar

from runtime import child
from runtime.atomic import write_text_atomic
from runtime.machine import cpu_variant
from runtime.paths import cache_dir, private_dir


class Device(Protocol):
    """What the probe reads of a runtime.machine.hardware.Gpu (which imports this module, not the reverse)."""

    name: str
    kind: str
    total_bytes: int
    probe_error: str | None


Gpu = TypeVar("Gpu", bound=Device)

PROBE_TIMEOUT_S = 120.0  # a first Metal or CUDA start compiles its kernels
VERDICT_VERSION = 1
LOCAL_KINDS = ("gpu", "igpu")  # a worker's device ("rpc") is proven by its own machine


def _probe_child(name: str, nth: int, model: str, prepare: Callable[[], object] | None, conn: Connection) -> None:
    """In the child: the `nth` device described as `name`, every layer of `model` on it, one batch decoded;
    sends "" or why not."""
    import logging

    import llama_cpp

    from runtime.machine.ggml_lib import libggml
    from runtime.machine.llama_log import route_llama_log

    errors = route_llama_log()
    logging.getLogger("llama.cpp").setLevel(logging.CRITICAL + 1)
    try:
        if prepare is not None:
            prepare()  # the same backends as the parent: ensure_backends()
        lib = libggml()
        devices = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())] if lib else []
        same = [d for d in devices if (lib.ggml_backend_dev_description(d) or b"GPU").decode(errors="replace") == name]
        if len(same) <= nth:
            conn.send(f"ggml lists no device {name!r} in the probe's process")
            return
        only = (ctypes.c_void_p * 2)(same[nth], None)  # NULL-terminated: this device alone
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 999
        mparams.devices = ctypes.cast(only, ctypes.c_void_p)
        conn.send(cpu_variant.decode_probe(model, mparams, 2, errors.last))
    finally:
        conn.close()


def probe(gpu: Device, nth: int, model: Path, prepare: Callable[[], object] | None = None,
          timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None if `gpu` (the `nth` device of that name) runs the probe model; otherwise why not, in a few words."""
    try:
        args = (gpu.name, nth, str(model), prepare)
        message = child.run_in_child(_probe_child, args, timeout=timeout, what="its probe")
    except child.ChildFailed as e:
        return f"killed by {e.signal}" if e.signal else str(e)
    return message or None


def verdict_file(gpus: Sequence[Device]) -> Path:
    """Where the verdict on these GPUs is kept: keyed by their names and sizes and llama.cpp's version."""
    import llama_cpp

    h = hashlib.sha256(f"v{VERDICT_VERSION}\n{llama_cpp.__version__}\n".encode())
    for g in gpus:
        h.update(f"{g.name}:{g.kind}:{g.total_bytes}\n".encode())
    return cache_dir() / "gpu-probe" / f"{h.hexdigest()[:20]}.json"


def probed(
    gpus: Sequence[Gpu],
    prepare: Callable[[], object] | None = None,
    probe_one: Callable[[Gpu, int, Path], str | None] | None = None,
    cache: Path | None = None,
) -> tuple[Gpu, ...]:
    """`gpus` with each local GPU's probe verdict (Gpu.probe_error), read from the cache or proven now."""
    local = [g for g in gpus if g.kind in LOCAL_KINDS]
    if not local:
        return tuple(gpus)
    cache = cache or verdict_file(local)
    try:
        verdicts = json.loads(cache.read_text())
    except (OSError, ValueError):
        verdicts = None
    keys = _keys(gpus)
    wanted = [k for g, k in zip(gpus, keys, strict=True) if g.kind in LOCAL_KINDS]
    if not isinstance(verdicts, dict) or not all(k in verdicts for k in wanted):
        verdicts = {}
        run = probe_one or (lambda gpu, nth, m: probe(gpu, nth, m, prepare))
        with tempfile.TemporaryDirectory(prefix="specquant-gpu-probe-") as tmp:
            model = cpu_variant.write_probe_model(Path(tmp) / "probe.gguf")
            for g, key in zip(gpus, keys, strict=True):
                if g.kind in LOCAL_KINDS:
                    verdicts[key] = run(g, int(key.rsplit("#", 1)[1]), model)
        try:
            private_dir(cache.parent)
            write_text_atomic(cache, json.dumps(verdicts))
        except OSError:
            pass  # a read-only cache costs the next start a probe, nothing more
    return tuple(replace(g, probe_error=verdicts.get(k)) if g.kind in LOCAL_KINDS else g  # type: ignore[type-var]
                 for g, k in zip(gpus, keys, strict=True))


def _keys(gpus: Sequence[Device]) -> list[str]:
    """`NAME#n`: the n-th device of that name, as the probe's child finds it again."""
    seen: dict[str, int] = {}
    keys = []
    for g in gpus:
        keys.append(f"{g.name}#{seen.get(g.name, 0)}")
        seen[g.name] = seen.get(g.name, 0) + 1
    return keys
