"""CPU kernel variants: a variant whose probe child dies is skipped, the verdict is cached, and the probe
model really runs through llama.cpp.

The variants here are real shared libraries compiled for the test: one raises SIGILL when ggml initialises
it (what the faulting AMX kernels do on some Xeons), one claims no support for this CPU, and a good one hands
ggml this build's real CPU backend.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import llama_cpp
import pytest

from runtime.errors import UserError
from runtime.machine import cpu_variant, hardware
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build test variants")

LIB_DIR = Path(llama_cpp.__file__).parent / "lib"


def real_variants() -> list[cpu_variant.Variant]:
    """This build's own CPU variants, where a portable build keeps them (none in a single-variant build)."""
    for folder in hardware.backend_folders():
        found = cpu_variant.ranked(cpu_variant.variant_libraries(folder))
        if found:
            return found
    return []

_TRAP = r"""
#include <signal.h>
int ggml_backend_score(void) { return 1000; }
void *ggml_backend_init(void) { raise(SIGILL); return 0; }
"""
_NEVER = r"""
int ggml_backend_score(void) { return 0; }
void *ggml_backend_init(void) { return 0; }
"""
# The real CPU backend of this build: a variant's entry point in a portable build, else the built-in one.
_GOOD = r"""
#include <dlfcn.h>
#include <stdlib.h>
int ggml_backend_score(void) { return 10; }
void *ggml_backend_init(void) {
    void *h = dlopen(getenv("TEST_GGML_CPU_LIBRARY"), RTLD_NOW | RTLD_GLOBAL);
    if (!h) return 0;
    void *(*init)(void) = (void *(*)(void)) dlsym(h, "ggml_backend_init");
    if (!init) init = (void *(*)(void)) dlsym(h, "ggml_backend_cpu_reg");
    return init ? init() : 0;
}
"""


def real_cpu_library() -> Path:
    """This build's CPU backend: the real variant proven to run here (a portable build's best-scoring one
    may die with SIGILL on this machine, which is what the verdict is for), or its one libggml-cpu."""
    if real_variants():
        kernels = hardware.ensure_backends()
        assert kernels.path is not None
        return Path(kernels.path)
    for name in ("libggml-cpu.so", "libggml-cpu.dylib", "ggml-cpu.dll"):
        if (LIB_DIR / name).exists():
            return LIB_DIR / name
    pytest.skip("this llama-cpp-python build has no separate CPU backend library")


def compile_variant(folder: Path, name: str, source: str) -> Path:
    out = folder / f"libggml-cpu-{name}.so"
    src = folder / f"{name}.c"
    src.write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(src), "-ldl"], check=True, capture_output=True)
    src.unlink()
    return out


@pytest.fixture
def variants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "variants"
    folder.mkdir()
    for name, source in (("trap", _TRAP), ("never", _NEVER), ("good", _GOOD)):
        compile_variant(folder, name, source)
    monkeypatch.setenv("TEST_GGML_CPU_LIBRARY", str(real_cpu_library()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # platformdirs' cache on Linux
    monkeypatch.delenv(cpu_variant.FORCE_ENV, raising=False)
    return folder


def test_variants_are_ranked_by_their_own_score_and_unsupported_ones_dropped(variants: Path) -> None:
    ranked = cpu_variant.ranked(cpu_variant.variant_libraries(variants))
    assert [(v.name, v.score) for v in ranked] == [("trap", 1000), ("good", 10)]


def test_a_variant_whose_probe_child_is_killed_by_a_signal_is_skipped(variants: Path, tmp_path: Path) -> None:
    model = cpu_variant.write_probe_model(tmp_path / "probe.gguf")
    candidates = cpu_variant.ranked(cpu_variant.variant_libraries(variants))
    chosen, excluded = cpu_variant.choose_variant(candidates, lambda v: cpu_variant.probe_variant(v.path, model))
    assert chosen is not None and chosen.name == "good"
    assert excluded == {"trap": "killed by SIGILL (Illegal instruction)"}


def test_the_verdict_is_cached_per_machine_and_later_starts_cost_nothing(
    variants: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    variant, excluded, seconds, cached = cpu_variant.select(variants)
    assert (variant.name, cached) == ("good", False)
    assert "SIGILL" in excluded["trap"] and seconds > 0
    files = list(cpu_variant.verdict_path("x").parent.glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["variant"] == "good"

    # A later start costs nothing: no probe model is written and no variant is run again.
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached verdict ran a probe")

    monkeypatch.setattr(cpu_variant, "probe_variant", never)
    monkeypatch.setattr(cpu_variant, "write_probe_model", never)
    again = cpu_variant.select(variants)
    assert again[0].name == "good" and again[1] == excluded and again[3] is True


def test_a_changed_library_set_is_probed_again(variants: Path) -> None:
    cpu_variant.select(variants)
    (variants / "libggml-cpu-good.so").rename(variants / "libggml-cpu-good2.so")
    variant, _, _, cached = cpu_variant.select(variants)
    assert (variant.name, cached) == ("good2", False)


def test_when_no_variant_runs_the_error_says_why_in_one_line(variants: Path) -> None:
    (variants / "libggml-cpu-good.so").unlink()
    with pytest.raises(UserError) as err:
        cpu_variant.select(variants)
    message = str(err.value)
    assert "not supported by this build" in message and "trap: killed by SIGILL" in message
    assert "\n" not in message
    assert not list(cpu_variant.verdict_path("x").parent.glob("*.json"))  # a failure is never cached


def test_a_forced_variant_is_the_only_one_tried(variants: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_variant.FORCE_ENV, "good")
    assert cpu_variant.select(variants)[1] == {}  # the trap was never run
    monkeypatch.setenv(cpu_variant.FORCE_ENV, "never")
    with pytest.raises(UserError, match="no such CPU variant runs on this CPU"):
        cpu_variant.select(variants)


def test_this_process_runs_proven_kernels() -> None:
    kernels = hardware.ensure_backends()
    variants = real_variants()
    if variants:
        assert kernels.variant in {v.name for v in variants}
        assert kernels.variant not in kernels.excluded
    else:
        assert kernels.variant == "built-in"
    assert kernels.describe().startswith(kernels.variant)


def test_the_installed_build_passes_the_check_setup_sh_makes_of_a_native_build() -> None:
    """`python -m runtime.machine.build_check --check-build`: this build's kernels decode the probe model in a
    child (setup.sh keeps a build compiled for this CPU only when it does)."""
    done = subprocess.run([sys.executable, "-m", "runtime.machine.build_check", "--check-build"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    bad = subprocess.run([sys.executable, "-m", "runtime.machine.build_check"], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert bad.returncode == 1 and "usage:" in bad.stderr
