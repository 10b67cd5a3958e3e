"""Linux: a .tar.gz holding the bundle and an install script for the user's home (menu entry, icon,
uninstall script), and an AppImage as well when `appimagetool` is on PATH."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from installer.artefact import fill
from installer.metadata import Meta
from runtime.atomic import replacing
from runtime.errors import SpecQuantError


def desktop_entry(meta: Meta) -> str:
    """The menu entry; the install script replaces @APPDIR@ with where it put the program."""
    return fill("specquant.desktop", name=meta.name, summary=meta.summary, slug=meta.slug)


def install_script(meta: Meta) -> str:
    return fill("install.sh", name=meta.name, version=meta.version, slug=meta.slug)


def uninstall_script(meta: Meta) -> str:
    return fill("uninstall.sh", name=meta.name, slug=meta.slug)


# A symbol version an ELF file needs, as its dynamic string table spells it: between NULs, which adjacent
# names share (hence look-arounds: a match that consumed the NUL would hide the next name).
_GLIBC = re.compile(rb"(?<=\x00)GLIBC_(\d+)\.(\d+)(?:\.\d+)?(?=\x00)")


def glibc_needed(folder: Path) -> tuple[tuple[int, int], Path | None]:
    """The newest glibc any ELF file under `folder` asks for, and which file: the oldest glibc the bundle runs
    on. PyInstaller never bundles glibc itself, so every GLIBC_x.y named in the bundle is a requirement."""
    newest: tuple[tuple[int, int], Path | None] = ((0, 0), None)
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                continue
            data = f.read()
        for major, minor in _GLIBC.findall(data):
            version = (int(major), int(minor))
            if version > newest[0]:
                newest = (version, path)
    return newest


def _add_text(tar: tarfile.TarFile, name: str, text: str, mode: int) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def write_tarball(bundle: Path, icon: Path, meta: Meta, path: Path) -> None:
    """BASE/{install.sh, uninstall.sh, share/SLUG.desktop, share/SLUG.png, SLUG/<the bundle>}."""
    top = path.name.removesuffix(".tar.gz")
    # Level 6: nearly level 9's size at a third of its time on a 200 MB bundle.
    with replacing(path, shared=True) as partial, tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        _add_text(tar, f"{top}/install.sh", install_script(meta), 0o755)
        _add_text(tar, f"{top}/uninstall.sh", uninstall_script(meta), 0o755)
        _add_text(tar, f"{top}/share/{meta.slug}.desktop", desktop_entry(meta), 0o644)
        tar.add(icon, f"{top}/share/{meta.slug}.png")
        tar.add(bundle, f"{top}/{meta.slug}")


def write_appimage(bundle: Path, icon: Path, meta: Meta, path: Path, tool: str) -> None:
    """An AppDir (the bundle, AppRun, the menu entry and icon at its root) packed by appimagetool."""
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        appdir = Path(tmp) / f"{meta.slug}.AppDir"
        shutil.copytree(bundle, appdir / "usr" / "lib" / meta.slug, symlinks=True)
        (appdir / "AppRun").symlink_to(f"usr/lib/{meta.slug}/specquant-app")
        entry = desktop_entry(meta).replace('"@APPDIR@/specquant-app"', "specquant-app")
        (appdir / f"{meta.slug}.desktop").write_text(entry.replace("TryExec=@APPDIR@/specquant-app\n", ""))
        shutil.copyfile(icon, appdir / f"{meta.slug}.png")
        with replacing(path, shared=True) as partial:
            env = dict(os.environ, ARCH=os.uname().machine)
            if subprocess.run([tool, "--no-appstream", str(appdir), str(partial)], env=env).returncode != 0:
                raise SpecQuantError("appimagetool could not build the AppImage")


def package(bundle: Path, out: Path, meta: Meta, icon: Path) -> list[Path]:
    base = meta.artefact_base("linux")
    tarball = out / f"{base}.tar.gz"
    write_tarball(bundle, icon, meta, tarball)
    made = [tarball]
    tool = shutil.which("appimagetool")
    if tool is not None:
        made.append(out / f"{base}.AppImage")
        write_appimage(bundle, icon, meta, made[-1], tool)
    return made
