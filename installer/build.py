"""`python build_installer.py`: the bundle and this platform's installer, with their sizes and SHA-256.

Bad input exits 2 with one line and no traceback; artefacts are written under temporary names and only
renamed when complete.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from installer import bundle as bundling
from installer import linux, macos, windows
from installer.artefact import human, sha256
from installer.environment import ensure_environment, installer_cache_dir
from installer.flavour import FLAVOURS, build_wheel, check_wheel, cmake_args, default_wheel_dir, find_wheel
from installer.metadata import Meta, read_meta
from runtime.errors import UserError, run_command

REPO = Path(__file__).resolve().parents[1]


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="build_installer.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / "dist", help="folder for the artefacts (default: dist)")
    p.add_argument("--with-demo-model", action="store_true", help="put the demo model inside: first chat offline")
    p.add_argument("--name", default="SpecQuant", help="product name in menus and file names (default: SpecQuant)")
    p.add_argument(
        "--flavour",
        choices=sorted(FLAVOURS),
        default="cpu-all-variants",
        help="llama.cpp build to bundle (default: cpu-all-variants, CPU only, any x86-64)",
    )
    p.add_argument(
        "--wheels",
        type=Path,
        default=None,
        help="folder holding that flavour's llama-cpp-python wheel and FLAGS "
        "(default: ~/.cache/specquant/wheels/FLAVOUR, built there if missing)",
    )
    return p


def writable_folder(path: Path) -> Path:
    """`path`, created if needed, after proving a file can be written there."""
    path = path.expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise UserError(f"--out {path}: cannot write there ({e.strerror or e})") from None
    return path


def portable_wheel(flavour: str, folder: Path | None) -> Path:
    """The flavour's wheel after its checks; built into the default folder when that one has none."""
    if folder is not None:
        folder = folder.expanduser().resolve()
        if not folder.is_dir():
            raise UserError(f"--wheels {folder}: no such folder")
        return check_wheel(folder)
    folder = default_wheel_dir(flavour)
    flags_file = folder / "FLAGS"
    stale = flags_file.is_file() and flags_file.read_text().strip() != cmake_args(flavour)
    if find_wheel(folder) is None or stale:  # stale: built by an older SpecQuant with other flags
        build_wheel(flavour, folder)
    return check_wheel(folder)


def package_for_platform(bundle: Path, dist: Path, out: Path, meta: Meta) -> list[Path]:
    """This platform's installer artefacts, from the finished bundle."""
    if sys.platform == "linux":
        return linux.package(bundle, out, meta, REPO / "assets" / "icon.png")
    if sys.platform == "win32":
        return windows.package(bundle, out, meta)
    if sys.platform == "darwin":
        return macos.package(dist, out, meta)
    raise UserError(f"no installer for {sys.platform}: build on Linux, Windows or macOS")


def keep_logs(flavour: str, out: Path, since: float = 0.0) -> list[Path]:
    """Copy the logs this build wrote (modified at `since`, a time.time(), or later) into OUT/logs, whether it
    passed or failed: the wheel's compile log, PyInstaller's log and its warn file (the modules it could not
    find). A failed release job uploads that folder; an older build's logs would mislead, so they stay out."""
    pyinstaller = installer_cache_dir() / f"pyinstaller-{flavour}"
    found = [default_wheel_dir(flavour).parent / f"build-{flavour}.log", pyinstaller / "pyinstaller.log",
             *sorted(pyinstaller.glob("*/warn-*.txt"))]
    kept = []
    for log in found:
        if log.is_file() and log.stat().st_mtime >= since:
            (out / "logs").mkdir(exist_ok=True)
            kept.append(out / "logs" / log.name)
            shutil.copyfile(log, kept[-1])
    return kept


def build_bundle(args: argparse.Namespace) -> tuple[list[Path], int, float]:
    """Artefacts, the bundle's unpacked size and PyInstaller's time."""
    out = writable_folder(args.out)
    started = time.time() - 1  # file times may be rounded down to the second
    try:
        return _build(args, out)
    finally:
        keep_logs(args.flavour, out, started)


def _build(args: argparse.Namespace, out: Path) -> tuple[list[Path], int, float]:
    meta = read_meta(REPO, args.name, args.with_demo_model)
    wheel = portable_wheel(args.flavour, args.wheels)
    python = ensure_environment(installer_cache_dir() / f"build-venv-{args.flavour}", wheel, REPO)
    found = bundling.locate(python)
    if args.with_demo_model and found.demo is None:
        raise UserError("the build environment lacks the demo model package; delete it to have it rebuilt")
    if found.embedding is None:
        raise UserError("the build environment lacks the embedding model package; delete it to have it rebuilt")
    demo = found.demo if args.with_demo_model else None
    config = bundling.spec_config(REPO, meta, found.llama_cpp, demo, macos.info_plist(meta), found.embedding)
    # Built beside the artefacts, so that packaging can move the bundle instead of copying it.
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=out))
    try:
        started = time.monotonic()
        print("build_installer: running PyInstaller", file=sys.stderr)
        work = installer_cache_dir() / f"pyinstaller-{args.flavour}"
        bundle = bundling.run_pyinstaller(python, config, staging, work)
        bundling.strip_python(bundle)
        bundling.link_cli(bundle)
        bundling.check_bundle(bundle)
        took = time.monotonic() - started
        size = bundling.bundle_size(bundle)
        print(f"build_installer: packaging the {human(size)} bundle", file=sys.stderr)
        return package_for_platform(bundle, staging, out, meta), size, took
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def report(artefacts: list[Path], size: int, took: float) -> None:
    print(f"bundle: {human(size)} unpacked, PyInstaller {took:.0f} s")
    for path in artefacts:
        if path.is_dir():
            print(f"{path}  {human(bundling.bundle_size(path))}  (folder)")
        else:
            print(f"{path}  {human(path.stat().st_size)}  sha256 {sha256(path)}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        report(*build_bundle(args))
        return 0

    return run_command("build_installer", body)
