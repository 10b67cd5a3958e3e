"""What a run costs the machine: peak memory over a process tree (anonymous and file-backed apart), CPU
time, RAPL energy with its counter wrap. Real processes; RAPL through a powercap tree laid out as the kernel's
(this machine has none)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.machine.resources import PeakMemory, Rapl, cpu_seconds, resident

MB = 1_000_000


def test_peak_sees_a_childs_anonymous_memory() -> None:
    """200 MB allocated and touched by a grandchild, then freed: the peak keeps it, as anonymous memory. The
    grandchild holds the memory until the sampler has seen it (not for a fixed time a busy machine may miss)."""
    code = (
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-c', "
        "'import sys; b = bytearray(200_000_000); b[::4096] = b\"x\" * len(b[::4096]); "
        "print(\"ready\", flush=True); sys.stdin.readline()'])\n"
    )
    before = resident()
    with PeakMemory() as peak:
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
            deadline = time.monotonic() + 60  # a guard against a hang: the sampler looks every 20 ms
            while peak.peak.anon_bytes - before.anon_bytes <= 180 * MB:
                assert time.monotonic() < deadline, peak.peak
                time.sleep(0.02)
        finally:
            proc.communicate(b"\n", timeout=60)  # the grandchild ends, its memory freed
    assert peak.peak.anon_bytes - before.anon_bytes > 180 * MB
    assert resident().anon_bytes - before.anon_bytes < 100 * MB  # it was the child's, and it is gone


def test_peak_tells_file_backed_from_anonymous(tmp_path: Path) -> None:
    """A mapped, read file (as llama.cpp maps a model) counts as file-backed memory, not anonymous."""
    data = tmp_path / "weights.bin"
    data.write_bytes(b"\1" * (120 * MB))
    code = (
        "import mmap, sys\n"
        f"f = open({str(data)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n"
        "s = sum(m[i] for i in range(0, len(m), 4096)); print('ready', flush=True); sys.stdin.readline()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        with PeakMemory(proc.pid) as peak:  # samples on entry and exit: the mapping is held throughout
            time.sleep(0.1)
    finally:
        proc.communicate(b"\n", timeout=60)
    assert peak.peak.file_bytes > 110 * MB
    assert peak.peak.anon_bytes < 100 * MB
    assert peak.peak.as_dict()["total_mb"] == pytest.approx(peak.peak.total_bytes / MB, abs=0.1)


def test_cpu_seconds_count_every_thread_and_waited_children() -> None:
    """The waited child's CPU time is counted: at least what the child itself measured (a fixed amount of work
    takes a different time on every CPU, so the child says how much it took)."""
    t0 = cpu_seconds()
    code = "import time\nx = 0\nfor i in range(3_000_000): x += i\nprint(time.process_time())"
    child = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    own = float(child.stdout)
    assert own > 0
    assert cpu_seconds() - t0 >= 0.95 * own, (cpu_seconds() - t0, own)


def _powercap(root: Path, packages: dict[str, tuple[int, int]]) -> None:
    for name, (energy, wrap) in packages.items():
        d = root / name
        d.mkdir(parents=True)
        (d / "energy_uj").write_text(f"{energy}\n")
        (d / "max_energy_range_uj").write_text(f"{wrap}\n")


def test_rapl_sums_packages_and_handles_the_wrap(tmp_path: Path) -> None:
    _powercap(tmp_path, {"intel-rapl:0": (5_000_000, 10_000_000), "intel-rapl:1": (9_000_000, 10_000_000)})
    _powercap(tmp_path, {"intel-rapl:0:0": (1, 10_000_000)})  # a core sub-domain: inside package 0 already
    rapl = Rapl(tmp_path)
    assert rapl.available and len(rapl.domains) == 2
    start = rapl.read()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("7000000\n")  # +2 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("1000000\n")  # wrapped: +2 J
    assert rapl.joules_since(start) == pytest.approx(4.0)


def test_rapl_says_why_not(tmp_path: Path) -> None:
    assert "no RAPL" in Rapl(tmp_path / "absent").reason
    d = tmp_path / "intel-rapl:0"
    d.mkdir()
    (d / "energy_uj").mkdir()  # unreadable as a counter, as a root-only file is for a user
    rapl = Rapl(tmp_path)
    assert not rapl.available and "not readable" in rapl.reason
    assert rapl.joules_since(rapl.read()) is None
