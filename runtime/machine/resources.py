"""What a run costs the machine: resident memory over a process tree (anonymous and file-backed, sampled to
its peak), CPU time, and energy where the kernel exposes Intel/AMD RAPL counters.

On a CPU the model files are memory-mapped, so a model's weights show up as file-backed pages (shared with
the page cache, dropped under pressure and re-read), while the KV cache, compute buffers and repacked
weights are anonymous. Both count towards what a machine must hold, so the plan's estimate is compared
with their sum.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import psutil

RAPL_ROOT = Path("/sys/class/powercap")
SAMPLE_S = 0.02  # how often the peak sampler looks: memory grows in large steps (a model load, a KV cache)


@dataclass(frozen=True)
class Resident:
    anon_bytes: int
    file_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.anon_bytes + self.file_bytes

    def as_dict(self) -> dict[str, float]:
        mb = 1e6
        return {
            "anon_mb": round(self.anon_bytes / mb, 1),
            "file_mb": round(self.file_bytes / mb, 1),
            "total_mb": round(self.total_bytes / mb, 1),
        }


def resident(pid: int | None = None) -> Resident:
    """Resident memory of a process and its children now. psutil's `shared` is RssFile + RssShmem on Linux;
    the rest of the resident set is anonymous."""
    root = psutil.Process(pid)
    anon = file = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            info = proc.memory_info()
        except psutil.Error:  # a child that ended between the listing and the read
            continue
        shared = getattr(info, "shared", 0)
        anon += info.rss - shared
        file += shared
    return Resident(anon, file)


class PeakMemory:
    """Samples `resident(pid)` in a background thread while in the `with` block; `peak` is the sample with
    the largest total (so anonymous and file-backed are from the same moment)."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self.peak = Resident(0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)

    def _sample(self) -> None:
        try:
            now = resident(self.pid)
        except psutil.Error:
            return
        if now.total_bytes > self.peak.total_bytes:
            self.peak = now

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def __enter__(self) -> PeakMemory:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def cpu_seconds() -> float:
    """User plus system CPU time of this process (all its threads) and of the children it has waited for."""
    t = psutil.Process().cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class Rapl:
    """Package energy from RAPL (`/sys/class/powercap/intel-rapl:N`, also used by AMD), when readable.
    `reason` says why not otherwise; counters wrap at `max_energy_range_uj`, which `joules_since` handles."""

    def __init__(self, root: Path = RAPL_ROOT) -> None:
        self.domains: list[tuple[Path, int]] = []
        self.reason = ""
        try:
            for d in sorted(root.glob("intel-rapl:*")):
                if d.name.count(":") != 1:  # a sub-domain (core, uncore, dram) is already in its package
                    continue
                energy = d / "energy_uj"
                int(energy.read_text())
                self.domains.append((energy, int((d / "max_energy_range_uj").read_text())))
        except (OSError, ValueError) as e:
            self.domains = []
            self.reason = f"RAPL energy counters are not readable here ({e.__class__.__name__}: {e})"
        if not self.domains and not self.reason:
            self.reason = f"no RAPL energy counters on this machine ({root} has no intel-rapl domain)"

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def read(self) -> list[int] | None:
        if not self.domains:
            return None
        try:
            return [int(path.read_text()) for path, _ in self.domains]
        except (OSError, ValueError):
            return None

    def joules_since(self, start: list[int] | None) -> float | None:
        end = self.read()
        if start is None or end is None:
            return None
        total = 0
        for (_, wrap), a, b in zip(self.domains, start, end, strict=True):
            total += b - a if b >= a else b + wrap - a
        return total / 1e6
