"""Windows: the bundle folder, an Inno Setup script beside it, and the setup .exe when `iscc` is on PATH.

Made on Windows only; the script's content is tested everywhere. Its paths are relative to the script, so
the folder and the script can be moved together and compiled later (`iscc NAME.iss`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

from installer.artefact import TEMPLATES, fill
from installer.metadata import BUNDLE_ID, PUBLISHER, Meta
from runtime.errors import SpecQuantError

# The oldest Windows the bundle runs on: 10 version 1903 (build 18362), the first to honour the manifest's UTF-8
# code page (templates/specquant.manifest). The setup refuses older systems (MinVersion), and the contents
# check (installer.contents) finds that entry in each program.
MIN_VERSION = "10.0.18362"
MANIFEST = TEMPLATES / "specquant.manifest"
# Inno Setup as the release job installs it (choco install innosetup --version=...): pinned, so that a new major
# version does not move its folder or change the script's language under a release.
INNO_SETUP_VERSION = "6.7.1"


def app_id(meta: Meta) -> str:
    """A stable GUID per product, so a new version upgrades the old one in place ("{{" is Inno's escaped "{")."""
    return "{{" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{BUNDLE_ID}.{meta.slug}")).upper() + "}"


def inno_script(meta: Meta, folder: str, output_base: str) -> str:
    """The .iss text for the bundle in `folder` (relative to the script), compiling to `output_base`.exe."""
    return fill(
        "specquant.iss",
        name=meta.name,
        version=meta.version,
        app_id=app_id(meta),
        publisher=PUBLISHER,
        output_base=output_base,
        bundle=folder,
        min_version=MIN_VERSION,
    )


def find_iscc(env: Mapping[str, str] | None = None) -> str | None:
    """Inno Setup's compiler: on PATH, or where its installer (and Chocolatey's package) puts it: the pinned
    version's folder ("Inno Setup 6") first, then any other, newest major version first."""
    env = os.environ if env is None else env
    found = shutil.which("iscc", path=env.get("PATH"))
    if found:
        return found
    major = INNO_SETUP_VERSION.split(".")[0]
    for root in (env.get("PROGRAMFILES(X86)"), env.get("PROGRAMFILES")):  # Windows: any case
        if not root:
            continue
        others = sorted(Path(root).glob("Inno Setup *"), key=lambda p: _major(p.name), reverse=True)
        for folder in [Path(root) / f"Inno Setup {major}", *others]:
            if (folder / "ISCC.exe").is_file():
                return str(folder / "ISCC.exe")
    return None


def _major(folder: str) -> int:
    digits = folder.rsplit(" ", 1)[-1]
    return int(digits) if digits.isdigit() else 0


def iscc_command(iscc: str, script: Path, sign_tool: str | None) -> list[str]:
    """`iscc /Q script`; with `sign_tool` (a signtool command line ending in $f) the setup and uninstaller
    are signed as Inno writes them."""
    cmd = [iscc, "/Q"]
    if sign_tool:
        cmd += ["/DSign", f"/Sspecquant={sign_tool}"]
    return [*cmd, str(script)]


def compile_setup(out: Path, meta: Meta, iscc: str, sign_tool: str | None = None) -> Path:
    """`out/BASE-setup.exe` from `out/BASE.iss` and the bundle folder `out/BASE` beside it."""
    base = meta.artefact_base("windows")
    script = out / f"{base}.iss"
    # Inno writes the .exe itself: compile to a .partial name, then rename, so a failed run leaves no setup.
    script.write_text(inno_script(meta, base, f"{base}-setup.partial"), encoding="utf-8")
    partial, setup = out / f"{base}-setup.partial.exe", out / f"{base}-setup.exe"
    try:
        if subprocess.run(iscc_command(iscc, script, sign_tool)).returncode != 0:
            partial.unlink(missing_ok=True)
            raise SpecQuantError(f"Inno Setup could not compile {script}")
        partial.replace(setup)
    finally:
        # The script names the .partial output only while compiling; rewrite it for whoever compiles it again.
        script.write_text(inno_script(meta, base, f"{base}-setup"), encoding="utf-8")
    return setup


def package(bundle: Path, out: Path, meta: Meta) -> list[Path]:
    base = meta.artefact_base("windows")
    folder = out / base
    shutil.rmtree(folder, ignore_errors=True)
    bundle.rename(folder)
    script = out / f"{base}.iss"
    script.write_text(inno_script(meta, base, f"{base}-setup"), encoding="utf-8")
    iscc = find_iscc()
    if iscc is None:
        print(f"build_installer: Inno Setup's iscc is not on PATH; compile {script.name} with it later")
        return [folder, script]
    return [folder, script, compile_setup(out, meta, iscc)]
