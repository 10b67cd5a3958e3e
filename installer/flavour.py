"""Which llama-cpp-python build a bundle carries, and the refusal of builds that only run here.

A default build compiles for the build machine's CPU (GGML_NATIVE), so a bundle made from it dies with
SIGILL on an older processor. Bundles therefore carry the `cpu-all-variants` flavour: one CPU backend
library per x86-64 level, loaded at run time (GGML_BACKEND_DL), the way llama.cpp's own releases ship.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from installer import progress, sdist
from installer.retry import timed_run
from runtime.errors import UserError
from runtime.models.cache import default_wheel_dir

__all__ = ["default_wheel_dir"]  # setup.sh's layout lives in runtime.models.cache; the installer's callers use it here

LLAMA_VERSION = "0.3.36"
# GGML_RPC: `specquant worker` serves this machine's backend, --rpc reaches others' (docs/second-computer.md).
PORTABLE = "-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_RPC=ON -DLLAVA_BUILD=OFF"
# The same portable CPU kernels plus one GPU backend, itself a loadable library: a machine without the
# GPU runtime just skips it and runs on the CPU.
FLAVOURS = {
    "cpu-all-variants": PORTABLE,
    "cuda": PORTABLE + " -DGGML_CUDA=ON",
    "vulkan": PORTABLE + " -DGGML_VULKAN=ON",
    "metal": PORTABLE + " -DGGML_METAL=ON",
}
# Either slash: names come from wheels (always /) and from Windows folders (\\).
_CPU_VARIANT = re.compile(r"(^|[/\\])(lib)?ggml-cpu-[\w.]+\.(so|dll|dylib)$")
_CPU_SINGLE = re.compile(r"(^|[/\\])(lib)?ggml-cpu\.(so|dll|dylib)$")
# What each system's build adds to a flavour's flags:
# - Windows: no OpenMP. clang in Visual Studio's environment links ggml to libomp140.x86_64.dll, which is
#   neither on PATH nor redistributable, so PyInstaller leaves it out and llama_cpp fails to load; ggml's own
#   thread pool replaces it (llama.cpp's own Windows releases either copy the DLL or do the same).
# - macOS on Intel: no Metal. llama-cpp-python turns Metal on for every Apple build, and an Intel Mac's GPU
#   gains nothing from it; the runner's paravirtual one aborts on missing ops.
#   The -D only holds because installer/sdist.py drops the FORCE with which llama-cpp-python sets it ON.
# - Windows on Arm: no OpenMP either (libomp140.aarch64.dll, the same story).
SYSTEM_FLAGS = {("windows", "x86_64"): " -DGGML_OPENMP=OFF", ("windows", "arm64"): " -DGGML_OPENMP=OFF",
                ("macos", "x86_64"): " -DGGML_METAL=OFF"}


def this_system() -> str:
    """`linux`, `windows` or `macos`: the names build_installer.py gives the systems."""
    return {"win32": "windows", "darwin": "macos"}.get(sys.platform, "linux")


def cmake_args(flavour: str, system: str | None = None, arch: str | None = None) -> str:
    """The CMAKE_ARGS of `flavour` as built on `system` and `arch` (default: this machine's)."""
    from installer.metadata import this_arch

    key = (system or this_system(), arch or this_arch())
    return FLAVOURS[flavour] + SYSTEM_FLAGS.get(key, "")


def find_wheel(folder: Path) -> Path | None:
    wheels = sorted(folder.glob(f"llama_cpp_python-{LLAMA_VERSION}-*.whl"))
    return wheels[0] if wheels else None


def check_flags(flags: str, where: Path) -> None:
    """Refuse flags that tie the build to one CPU, or that keep the CPU kernels in one library."""
    if re.search(r"GGML_NATIVE=(ON|1|TRUE)\b", flags, re.IGNORECASE):
        raise UserError(f"{where} is a native build (GGML_NATIVE=ON): it would crash on other CPUs; {_REBUILD}")
    for needed in ("GGML_BACKEND_DL", "GGML_CPU_ALL_VARIANTS"):
        if not re.search(rf"{needed}=(ON|1|TRUE)\b", flags, re.IGNORECASE):
            raise UserError(f"{where} was built without {needed}=ON, so it only suits this CPU; {_REBUILD}")
    if not re.search(r"GGML_RPC=(ON|1|TRUE)\b", flags, re.IGNORECASE):
        raise UserError(f"{where} was built without GGML_RPC=ON, so `specquant worker` and --rpc fail; {_REBUILD}")


_REBUILD = "bundles need `SPECQUANT_FLAVOUR=cpu-all-variants ./setup.sh` (or let build_installer.py build it)"


def check_libraries(names: list[str], where: Path) -> None:
    """The CPU kernels must come as one library per CPU level (libggml-cpu-haswell.so, ...)."""
    variants = [n for n in names if _CPU_VARIANT.search(n)]
    if not variants:
        single = any(_CPU_SINGLE.search(n) for n in names)
        what = "a single libggml-cpu for one CPU" if single else "no ggml CPU backend library"
        raise UserError(f"{where} holds {what}, not the per-CPU variants; {_REBUILD}")


def check_wheel(folder: Path) -> Path:
    """The wheel in `folder`, after its FLAGS file and its contents prove it portable."""
    wheel = find_wheel(folder)
    if wheel is None:
        raise UserError(f"{folder} holds no llama_cpp_python-{LLAMA_VERSION} wheel")
    flags_file = folder / "FLAGS"
    if not flags_file.is_file():
        raise UserError(f"{folder} has no FLAGS file saying how its wheel was built; {_REBUILD}")
    check_flags(flags_file.read_text(), folder)
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
    except (OSError, zipfile.BadZipFile) as e:
        raise UserError(f"{wheel} is not a readable wheel: {e}") from None
    check_libraries(names, wheel)
    return wheel


SDIST = f"llama_cpp_python-{LLAMA_VERSION}.tar.gz"


def fetch_sdist(cache: Path, timeout: float = 600) -> Path:
    """llama-cpp-python's source archive: the copy in `cache`, or downloaded there from PyPI once."""
    found = cache / SDIST
    if found.is_file():
        return found
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
               f"llama-cpp-python=={LLAMA_VERSION}", "-d", tmp]
        done = timed_run(cmd, "downloading llama-cpp-python's source", timeout, capture_output=True, text=True)
        got = Path(tmp) / SDIST
        if done.returncode != 0 or not got.is_file():
            said = " | ".join((done.stdout + done.stderr).strip().splitlines()[-2:])
            raise UserError(f"could not download llama-cpp-python {LLAMA_VERSION}'s source: {said or 'no output'}")
        got.replace(found)  # whole, or not at all
    return found


def build_wheel(flavour: str, folder: Path) -> Path:
    """Compile llama-cpp-python with the flavour's flags into `folder` (6 to 25 minutes on 2 cores, once),
    showing the compiler's progress; its whole log stays in `folder`'s parent as build-FLAVOUR.log.

    It is built from the source archive with installer/sdist.py's patch applied, so that CMAKE_ARGS decide
    Metal on every Mac and the CPU variants on Windows on Arm. `pip wheel --no-cache-dir`: pip's wheel cache
    ignores CMAKE_ARGS and could return another flavour.
    """
    flags = cmake_args(flavour)
    print(
        f"build_installer: building llama-cpp-python {LLAMA_VERSION} ({flavour}) into {folder}: llama.cpp is "
        "compiled once, 6 to 25 minutes on 2 cores",
        file=sys.stderr,
    )
    env = dict(os.environ, CMAKE_ARGS=flags, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    folder.parent.mkdir(parents=True, exist_ok=True)
    log = folder.parent / f"build-{flavour}.log"
    source = fetch_sdist(folder.parent / "sdist")
    with tempfile.TemporaryDirectory() as tmp:
        tree = sdist.unpack_sdist(source, Path(tmp) / "src")
        unforced = sdist.patch_tree(tree)
        print(f"build_installer: patched llama-cpp-python's build files ({unforced} forced switches freed, "
              "installer/sdist.py)", file=sys.stderr)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-v",  # ninja's "[done/total]" lines, for the progress
            "--no-deps",
            "--no-cache-dir",
            str(tree),
            "-w",
            tmp,
        ]
        if progress.run_logged(cmd, log, "build_installer: compiling llama.cpp", env=env) != 0:
            raise UserError(f"could not build llama-cpp-python ({flavour}): its log's end is above, all of it in {log}")
        built = next(Path(tmp).glob("llama_cpp_python-*.whl"))
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob(f"llama_cpp_python-{LLAMA_VERSION}-*.whl"):
            old.unlink()  # a wheel of other flags must not be found first
        (folder / "FLAGS").write_text(flags + "\n")
        # Copy, then rename: a finished wheel appears in one step, never half-written.
        partial = folder / ".partial"
        shutil.copyfile(built, partial)
        partial.replace(folder / built.name)
    return folder / built.name
