"""Windows: the bundle folder, an Inno Setup script beside it, and the setup .exe when `iscc` is on PATH.

Made on Windows only; the script's content is tested everywhere. Its paths are relative to the script, so
the folder and the script can be moved together and compiled later (`iscc NAME.iss`).
"""

from __future__ import annotations

import os
import shutil
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from installer.artefact import TEMPLATES, fill
from installer.metadata import BUNDLE_ID, PUBLISHER, Meta, this_arch
from installer.release import floor_of
from installer.retry import timed_run
from runtime.errors import SpecQuantError, UserError

# The oldest Windows the bundle runs on (installer.release's floors): on x86-64 10 version 1903 (build 18362),
# the first to honour the manifest's UTF-8 code page (templates/specquant.manifest); on Arm 11 (build 22000),
# the first Qt 6 supports there. The setup refuses older systems (MinVersion), and the contents check
# (installer.contents) finds the code page in each program.
MIN_VERSION = ".".join(map(str, floor_of("windows", "x86_64")))
# Inno Setup's names for the processors a setup may install on: an x86-64 setup also on x64 emulation; the Arm
# one only on Arm, where its programs run natively.
INNO_ARCH = {"x86_64": "x64compatible", "arm64": "arm64"}
MANIFEST = TEMPLATES / "specquant.manifest"
# Inno Setup as the release job installs it (choco install innosetup --version=...): pinned, so that a new major
# version does not move its folder or change the script's language under a release.
INNO_SETUP_VERSION = "6.7.1"


def app_id(meta: Meta) -> str:
    """A stable GUID per product, so a new version upgrades the old one in place ("{{" is Inno's escaped "{")."""
    return "{{" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{BUNDLE_ID}.{meta.slug}")).upper() + "}"


def inno_script(meta: Meta, folder: str, output_base: str, arch: str | None = None) -> str:
    """The .iss text for the bundle in `folder` (relative to the script), compiling to `output_base`.exe, for
    Windows on `arch` (default: this machine's)."""
    arch = arch or {"aarch64": "arm64"}.get(this_arch(), this_arch())
    if arch not in INNO_ARCH:
        raise UserError(f"no Windows setup for the architecture {arch!r}: {', '.join(INNO_ARCH)}")
    return fill(
        "specquant.iss",
        name=meta.name,
        version=meta.version,
        app_id=app_id(meta),
        publisher=PUBLISHER,
        output_base=output_base,
        bundle=folder,
        min_version=".".join(map(str, floor_of("windows", arch))),
        arch=INNO_ARCH[arch],
    )


@dataclass(frozen=True)
class Iscc:
    path: str
    version: str | None  # "6.7.1", from ISCC.exe's version resource; None where it has none

    @property
    def pinned(self) -> bool:
        return self.version == INNO_SETUP_VERSION

    def describe(self) -> str:
        if self.pinned:
            return f"Inno Setup {self.version} (the pinned version) at {self.path}"
        return f"Inno Setup {self.version or 'of unknown version'} at {self.path}, not the pinned {INNO_SETUP_VERSION}"


_FIXED_FILE_INFO = struct.pack("<I", 0xFEEF04BD)  # VS_FIXEDFILEINFO's signature, in every version resource


def exe_version(path: Path) -> str | None:
    """A Windows program's file version, "6.7.1" (major.minor.patch), read from its VS_FIXEDFILEINFO."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    at = data.find(_FIXED_FILE_INFO)
    if at < 0 or len(data) < at + 16:
        return None
    ms, ls = struct.unpack_from("<II", data, at + 8)
    return f"{ms >> 16}.{ms & 0xFFFF}.{ls >> 16}"


def find_iscc(env: Mapping[str, str] | None = None) -> Iscc | None:
    """Inno Setup's compiler, the pinned version (INNO_SETUP_VERSION) wherever it is: on PATH, or where its
    installer (and Chocolatey's package) puts it, in its major version's folder ("Inno Setup 6"). Without it,
    the first found (PATH first, then the newest major version's folder), which says it is not the pinned one."""
    env = os.environ if env is None else env
    candidates = []
    on_path = shutil.which("iscc", path=env.get("PATH"))
    if on_path:
        candidates.append(Path(on_path))
    major = INNO_SETUP_VERSION.split(".")[0]
    for root in (env.get("PROGRAMFILES(X86)"), env.get("PROGRAMFILES")):  # Windows: any case
        if not root:
            continue
        others = sorted(Path(root).glob("Inno Setup *"), key=lambda p: _major(p.name), reverse=True)
        candidates += [folder / "ISCC.exe" for folder in [Path(root) / f"Inno Setup {major}", *others]
                       if (folder / "ISCC.exe").is_file()]
    found = [Iscc(str(c), exe_version(c)) for c in dict.fromkeys(candidates)]
    return next((i for i in found if i.pinned), found[0] if found else None)


def pinned_iscc(env: Mapping[str, str] | None = None) -> Iscc:
    """The pinned Inno Setup, or a one-line error naming the one found instead: the release compiles with it."""
    iscc = find_iscc(env)
    if iscc is None:
        raise UserError(f"Inno Setup's ISCC.exe is neither on PATH nor in Program Files: "
                        f"`choco install innosetup --version={INNO_SETUP_VERSION}`")
    if not iscc.pinned:
        raise UserError(f"{iscc.describe()}: `choco install innosetup --version={INNO_SETUP_VERSION} "
                        "--allow-downgrade`")
    return iscc


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
        if timed_run(iscc_command(iscc, script, sign_tool), "compiling the setup with Inno Setup",
                     timeout=1800).returncode != 0:
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
    print(f"build_installer: compiling the setup with {iscc.describe()}")
    return [folder, script, compile_setup(out, meta, iscc.path)]
