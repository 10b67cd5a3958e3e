"""What this machine offers: physical cores and RAM (psutil), and GPUs through ggml's device API.

llama-cpp-python 0.3.36 does not bind ggml's backend device functions, so they are declared here with
ctypes on the libggml it loaded, and only asked when `llama_supports_gpu_offload()` says a GPU build.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from runtime.errors import UserError
from runtime.machine import cpu_variant
from runtime.machine.cpu_variant import CpuKernels
from runtime.machine.ggml_lib import libggml

_GPU_TYPES = {1: "gpu", 2: "igpu"}  # enum ggml_backend_dev_type: CPU 0, GPU 1, IGPU 2, ACCEL 3, META 4


def physical_cores() -> int:
    """Physical cores: llama.cpp runs best with one thread per core, not per hyper-thread."""
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


@dataclass(frozen=True)
class Gpu:
    name: str
    kind: str  # "gpu" (dedicated memory), "igpu" (shares host memory) or "rpc" (a worker's, runtime.machine.rpc)
    free_bytes: int
    total_bytes: int
    # Why the GPU failed its probe (runtime.machine.gpu_probe), so placement never uses it; None: it passed,
    # or was not probed (a worker's device, or a plan made from given facts).
    probe_error: str | None = None


@dataclass(frozen=True)
class Inventory:
    cpu: str
    physical_cores: int
    ram_total_bytes: int
    ram_available_bytes: int
    gpus: tuple[Gpu, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, object]:
        return {
            "cpu": self.cpu,
            "physical_cores": self.physical_cores,
            "ram_total_gb": round(self.ram_total_bytes / 1e9, 2),
            "ram_available_gb": round(self.ram_available_bytes / 1e9, 2),
            "gpus": [
                {
                    "name": g.name,
                    "kind": g.kind,
                    "free_gb": round(g.free_bytes / 1e9, 2),
                    "total_gb": round(g.total_bytes / 1e9, 2),
                    "probe_error": g.probe_error,
                }
                for g in self.gpus
            ],
        }


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


_kernels: CpuKernels | None = None
_CPU_TYPE = 0  # enum ggml_backend_dev_type: CPU


def _has_cpu_device(lib: ctypes.CDLL) -> bool:
    """A CPU device, not just any: a GPU backend can load while every CPU variant failed to."""
    devices = (lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count()))
    return any(lib.ggml_backend_dev_type(dev) == _CPU_TYPE for dev in devices)


def _unsupported(why: str) -> UserError:
    return UserError(
        f"this CPU ({cpu_name()}, {platform.machine()}) is not supported by this build of SpecQuant: {why}; "
        "reinstall the build made for this machine, or install from source"
    )


def backend_folders() -> list[Path]:
    """Where a wheel or a bundle keeps ggml's dynamically loaded backends."""
    import llama_cpp

    package = Path(llama_cpp.__file__).parent
    return [package / "lib", package.parent / "bin", Path(sys.executable).parent]


def variant_folder() -> Path | None:
    """The folder holding this build's per-CPU kernel libraries (libggml-cpu-*), or None: the portable
    `cpu-all-variants` flavour has one, a build with its CPU backend built in does not."""
    return next((f for f in backend_folders() if cpu_variant.variant_libraries(f)), None)


def ensure_backends() -> CpuKernels:
    """Make sure ggml has a CPU device that works on this machine before the first model loads.

    A build with GGML_BACKEND_DL (the portable `cpu-all-variants` flavour and the installers) keeps its CPU
    kernels in separate libraries, one per micro-architecture, that ggml looks for only in its compile-time
    folder, the executable's folder and the current one; inside a Python package or a bundle they sit
    elsewhere. The variant to load is proven first (runtime.machine.cpu_variant): CPUID alone can pick one that dies
    with SIGILL. Builds with one CPU backend built in have nothing to choose.
    """
    global _kernels
    if _kernels is not None:
        return _kernels
    from runtime.machine.llama_log import route_llama_log

    route_llama_log()  # ggml's "load_backend: loaded ..." lines go to the log, not to the user's terminal
    lib = libggml()
    if lib is None or _has_cpu_device(lib):
        _kernels = CpuKernels("built-in")
        return _kernels
    folder = variant_folder()
    if folder is None:
        raise _unsupported("none of its llama.cpp CPU backends (libggml-cpu-*) was found: the install may be damaged")
    variant, excluded, seconds, cached = cpu_variant.select(folder, min(physical_cores(), 4))
    if not lib.ggml_backend_load(str(variant.path).encode()) or not _has_cpu_device(lib):
        raise _unsupported(f"its {variant.name} CPU backend passed its check but does not load now")
    for other in cpu_variant.other_backends(folder):
        lib.ggml_backend_load(str(other).encode())  # GPU or RPC backends; one that finds no device is skipped
    _kernels = CpuKernels(variant.name, str(variant.path), excluded, seconds, cached)
    return _kernels


def gpus() -> tuple[Gpu, ...]:
    """GPUs with their free and total memory, or none on a CPU-only build."""
    import llama_cpp

    if not llama_cpp.llama_supports_gpu_offload():
        return ()
    lib = libggml()
    if lib is None:
        return ()
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        kind = _GPU_TYPES.get(lib.ggml_backend_dev_type(dev))
        if kind is None:
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        name = (lib.ggml_backend_dev_description(dev) or b"GPU").decode(errors="replace")
        if (lib.ggml_backend_dev_name(dev) or b"").startswith(b"RPC"):  # a worker's device (runtime.machine.rpc)
            kind, name = "rpc", f"worker {name}"  # its description is the worker's host:port
        found.append(Gpu(name, kind, free.value, total.value))
    return tuple(found)


def inventory() -> Inventory:
    """This machine, with each local GPU proven in a child first (runtime.machine.gpu_probe; cached per machine)."""
    from runtime.machine.gpu_probe import probed

    mem = psutil.virtual_memory()
    return Inventory(cpu_name(), physical_cores(), mem.total, mem.available, probed(gpus(), prepare=ensure_backends))
