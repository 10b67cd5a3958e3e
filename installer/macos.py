"""macOS: PyInstaller's `.app` (the spec's BUNDLE step, with this Info.plist) and a `.dmg` made by `hdiutil`.

Made on macOS only; the Info.plist, the rpath repair's decisions and the retries are tested everywhere.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from installer import binaries, contents
from installer.artefact import TEMPLATES, fill
from installer.bundle import link_cli
from installer.metadata import BUNDLE_ID, PUBLISHER, Meta, this_arch
from installer.release import TARGETS
from installer.retry import run_retrying, timed_run
from runtime.errors import SpecQuantError


def floor(arch: str | None = None) -> str:
    """The oldest macOS the app runs on, as Info.plist spells it (installer.release's floor, checked by
    installer.contents on every Mach-O file)."""
    t = TARGETS.get(f"macos-{arch or this_arch()}", TARGETS["macos-arm64"])
    return ".".join(map(str, t.floor))


def info_plist(meta: Meta) -> dict[str, Any]:
    """Keys PyInstaller's defaults lack or get wrong (it would say version 0.0.0)."""
    return {
        "CFBundleName": meta.name,
        "CFBundleDisplayName": meta.name,
        "CFBundleIdentifier": BUNDLE_ID,
        "CFBundleShortVersionString": meta.version,
        "CFBundleVersion": meta.version,
        "CFBundleExecutable": "specquant-app",
        "CFBundlePackageType": "APPL",
        "LSApplicationCategoryType": "public.app-category.productivity",
        "LSMinimumSystemVersion": floor(),  # Finder refuses an older macOS with a clear message
        "NSHighResolutionCapable": True,
        "NSHumanReadableCopyright": f"© {PUBLISHER}; licence notices in the app's assets/licences",
    }


README = "Read me first.txt"  # beside the app in the disk image


def dmg_readme(meta: Meta) -> str:
    """What the disk image says beside the app: how to open an app that is not notarised, per macOS version
    (15 and later no longer let Control-click > Open skip Gatekeeper), and where the user's data stays."""
    return fill("dmg-readme.txt", name=meta.name, version=meta.version, floor=floor())


def codesign_command(app: Path, identity: str) -> list[str]:
    """Seal the whole .app again: PyInstaller signed every binary inside, but the `specquant` link is added
    afterwards, which breaks the bundle's seal (and a downloaded app with a broken seal is called "damaged",
    with no way to open it). A Developer ID gets the hardened runtime that notarisation requires; "-" is an
    ad-hoc signature, for unsigned builds."""
    if identity == "-":
        return ["codesign", "--force", "--sign", "-", str(app)]
    return ["codesign", "--force", "--sign", identity, "--options", "runtime", "--timestamp",
            "--entitlements", str(TEMPLATES / "entitlements.plist"), str(app)]


def unresolved_backends(app: Path) -> list[Path]:
    """llama.cpp's libraries in the app whose @rpath dependencies it does not find inside the app.

    ggml's backend modules (libggml-cpu-*.so, ...) come without an LC_RPATH: inside a .app they load only
    if an install name happens to match a library loaded already."""
    names = contents.paths(app)
    found = []
    for name in names:
        if contents.LIB not in name or (app / name).is_symlink():
            continue
        b = binaries.read(app / name)
        if b is not None and b.kind == "macho" and not all(contents.resolves(name, d, b.rpaths, app) for d in b.needed):
            found.append(app / name)
    return found


def rpath_commands(lib: Path, identity: str) -> list[list[str]]:
    """Give `lib` the rpath of its own folder (where libggml-base lies), and sign it again: the change breaks
    the signature PyInstaller gave it, and `codesign --verify --deep --strict` checks every nested one."""
    sign = ["codesign", "--force", "--sign", identity]
    if identity != "-":
        sign += ["--options", "runtime", "--timestamp"]
    return [["install_name_tool", "-add_rpath", "@loader_path", str(lib)], [*sign, str(lib)]]


def repair_rpaths(app: Path, identity: str) -> list[Path]:
    """Add the missing rpaths, then check again: a library still unresolved stops the build, naming it."""
    broken = unresolved_backends(app)
    for lib in broken:
        for cmd in rpath_commands(lib, identity):
            if timed_run(cmd, f"repairing {lib.name}'s rpath", timeout=300).returncode != 0:
                raise SpecQuantError(f"`{' '.join(cmd[:3])}` failed on {lib.name}")
    still = unresolved_backends(app)
    if still:
        b = binaries.read(still[0])
        deps = ", ".join(b.needed) if b else "?"
        raise SpecQuantError(f"{still[0].name} still cannot find its libraries inside {app.name} ({deps})")
    return broken


def package(dist: Path, out: Path, meta: Meta) -> list[Path]:
    """Move the .app into `out` and wrap it in a compressed disk image with a link to /Applications."""
    base = meta.artefact_base("macos")
    app = out / f"{meta.name}.app"
    shutil.rmtree(app, ignore_errors=True)
    (dist / f"{meta.name}.app").rename(app)
    link_cli(app / "Contents" / "MacOS")
    identity = os.environ.get("SPECQUANT_CODESIGN_IDENTITY") or "-"
    repaired = repair_rpaths(app, identity)
    if repaired:
        print(f"build_installer: gave {len(repaired)} of llama.cpp's libraries the rpath @loader_path")
    if timed_run(codesign_command(app, identity), f"sealing {app.name}", timeout=1200).returncode != 0:
        raise SpecQuantError(f"codesign could not sign {app.name} as {identity!r}")
    hdiutil = shutil.which("hdiutil")
    if hdiutil is None:
        return [app]
    dmg, partial = out / f"{base}.dmg", out / f"{base}.partial.dmg"
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        shutil.copytree(app, Path(tmp) / app.name, symlinks=True)
        (Path(tmp) / "Applications").symlink_to("/Applications")
        (Path(tmp) / README).write_text(dmg_readme(meta), encoding="utf-8")
        cmd = [hdiutil, "create", "-quiet", "-volname", meta.name, "-srcfolder", tmp, "-ov", "-format", "UDZO",
               str(partial)]
        try:
            run_retrying(cmd, "hdiutil create")  # "Resource busy" now and then on the runners
        except SpecQuantError:
            partial.unlink(missing_ok=True)
            raise
    partial.replace(dmg)
    return [app, dmg]
