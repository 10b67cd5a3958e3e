"""Windows: the bundle folder, an Inno Setup script beside it, and the setup .exe when `iscc` is on PATH.

Made on Windows only; the script's content is tested everywhere. Its paths are relative to the script, so
the folder and the script can be moved together and compiled later (`iscc NAME.iss`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from installer.artefact import fill
from installer.metadata import BUNDLE_ID, PUBLISHER, Meta
from runtime.errors import SpecQuantError


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
    )


def find_iscc() -> str | None:
    """Inno Setup's compiler: on PATH, or where its installer (and Chocolatey's package) puts it."""
    found = shutil.which("iscc")
    if found:
        return found
    for root in (os.environ.get("PROGRAMFILES(X86)"), os.environ.get("PROGRAMFILES")):  # Windows: any case
        candidate = Path(root or "") / "Inno Setup 6" / "ISCC.exe"
        if root and candidate.is_file():
            return str(candidate)
    return None


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
