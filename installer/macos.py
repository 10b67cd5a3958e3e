"""macOS: PyInstaller's `.app` (the spec's BUNDLE step, with this Info.plist) and a `.dmg` made by `hdiutil`.

Made on macOS only; the Info.plist is tested everywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from installer.artefact import TEMPLATES
from installer.bundle import link_cli
from installer.metadata import BUNDLE_ID, PUBLISHER, Meta
from runtime.errors import SpecQuantError


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
        "LSMinimumSystemVersion": "12.0",
        "NSHighResolutionCapable": True,
        "NSHumanReadableCopyright": f"© {PUBLISHER}; licence notices in the app's assets/licences",
    }


def codesign_command(app: Path, identity: str) -> list[str]:
    """Seal the whole .app again: PyInstaller signed every binary inside, but the `specquant` link is added
    afterwards, which breaks the bundle's seal (and a downloaded app with a broken seal is called "damaged",
    with no way to open it). A Developer ID gets the hardened runtime that notarisation requires; "-" is an
    ad-hoc signature, for unsigned builds."""
    if identity == "-":
        return ["codesign", "--force", "--sign", "-", str(app)]
    return ["codesign", "--force", "--sign", identity, "--options", "runtime", "--timestamp",
            "--entitlements", str(TEMPLATES / "entitlements.plist"), str(app)]


def package(dist: Path, out: Path, meta: Meta) -> list[Path]:
    """Move the .app into `out` and wrap it in a compressed disk image with a link to /Applications."""
    base = meta.artefact_base("macos")
    app = out / f"{meta.name}.app"
    shutil.rmtree(app, ignore_errors=True)
    (dist / f"{meta.name}.app").rename(app)
    link_cli(app / "Contents" / "MacOS")
    identity = os.environ.get("SPECQUANT_CODESIGN_IDENTITY") or "-"
    if subprocess.run(codesign_command(app, identity)).returncode != 0:
        raise SpecQuantError(f"codesign could not sign {app.name} as {identity!r}")
    hdiutil = shutil.which("hdiutil")
    if hdiutil is None:
        return [app]
    dmg, partial = out / f"{base}.dmg", out / f"{base}.partial.dmg"
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        shutil.copytree(app, Path(tmp) / app.name, symlinks=True)
        (Path(tmp) / "Applications").symlink_to("/Applications")
        cmd = [
            hdiutil,
            "create",
            "-quiet",
            "-volname",
            meta.name,
            "-srcfolder",
            tmp,
            "-ov",
            "-format",
            "UDZO",
            str(partial),
        ]
        if subprocess.run(cmd).returncode != 0:
            partial.unlink(missing_ok=True)
            raise SpecQuantError("hdiutil could not create the disk image")
    partial.replace(dmg)
    return [app, dmg]
