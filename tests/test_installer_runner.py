"""What a release job on a runner needs beyond the build (issue 64, points 4 and 6): a command that hangs is
named with its step, nothing the self-test starts may wait on a dialog, each job's evidence is kept, and the
setup is compiled with the pinned Inno Setup, which says which one it used."""

from __future__ import annotations

import os
import shutil
import struct
import sys
from pathlib import Path

import pytest

from installer import build, linux, selftest, windows
from installer.metadata import Meta
from installer.retry import run_retrying, timed_run
from runtime.errors import SpecQuantError, UserError
from tests.conftest import REPO
from tests.test_installer_systems import pe

HANGS = [sys.executable, "-c", "print('warming up', flush=True); import time; time.sleep(60)"]


# --- a hang names its step and its command --------------------------------------------------------------


def test_a_command_that_hangs_is_named_with_its_step() -> None:
    with pytest.raises(SpecQuantError, match=r"^self-test in a window \(cocoa\) hung: `.*python[\d.]* -c print\("
                                             r"'warming up'.*` did not finish within 1 s \(its last words: warming "
                                             r"up\)$"):
        timed_run(HANGS, "self-test in a window (cocoa)", 1, capture_output=True, text=True)
    with pytest.raises(SpecQuantError, match=r"^signing the programs hung: `python[\d.]* …` did not finish"):
        timed_run([*HANGS, "/p", "hunter2"], "signing the programs", 1, secret=True)  # no password in the message
    with pytest.raises(SpecQuantError, match=r"^the uninstaller hung: `.*` did not finish within 1 s"):
        selftest.checked(HANGS, {}, "the uninstaller", timeout=1)
    with pytest.raises(SpecQuantError, match=r"^hdiutil create hung: "):
        run_retrying(HANGS, "hdiutil create", timeout=1)


# --- no dialog waits for a click -------------------------------------------------------------------------


def stand_in_tarball(folder: Path, record: Path) -> Path:
    """A real tarball around a program that, like specquant-app, passes its self-test and routes, and notes
    under which Qt platform each run was started."""
    bundle = folder / "bundle"
    bundle.mkdir(parents=True)
    program = bundle / "specquant-app"
    program.write_text(f'#!/bin/sh\necho "$1 ${{QT_QPA_PLATFORM:-unset}}" >> "{record}"\n'
                       'case "$1" in\n'
                       '  --self-test) mkdir -p "$HOME/.local/share/specquant/models"\n'
                       '    echo GGUF > "$HOME/.local/share/specquant/models/demo.gguf"; echo "self-test passed" ;;\n'
                       '  route) echo \'{"level": 0}\' ;;\n'
                       'esac\n')
    program.chmod(0o755)
    (bundle / "specquant").symlink_to("specquant-app")
    meta = Meta("SpecQuant", "1.2.3", "x", with_demo=True)
    path = folder / f"{meta.artefact_base('linux')}.tar.gz"
    linux.write_tarball(bundle, REPO / "assets" / "icon.png", meta, path)
    return path


def test_every_run_that_wants_no_window_says_offscreen_and_its_output_is_kept(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    record, log = tmp_path / "runs.txt", tmp_path / "logs" / "selftest-linux-x86_64.log"
    log.parent.mkdir()
    monkeypatch.setattr(selftest, "LOG", [log])
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")  # a runner's desktop session says otherwise
    checks = selftest.linux(stand_in_tarball(tmp_path / "src", record), tmp_path / "work", xvfb=False)
    assert checks[-2:] == ["installing again keeps the models", "uninstall keeps the models"]
    assert "self-test offscreen" in checks
    runs = record.read_text().splitlines()
    assert "--self-test offscreen" in runs and "route offscreen" in runs
    assert not [r for r in runs if r.split()[0] in ("--self-test", "route") and not r.endswith("offscreen")]
    kept = log.read_text()
    assert "=== self-test offscreen: " in kept and "self-test passed" in kept and "=== install.sh: sh " in kept
    assert selftest.no_window({"QT_QPA_PLATFORM": "windows"}) == {"QT_QPA_PLATFORM": "offscreen"}
    assert "=== install.sh over the installed copy: sh " in kept


def test_installing_again_must_keep_the_models(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "demo").mkdir(parents=True)
    (models / "demo" / "tier.gguf").write_bytes(b"GGUF")
    before = selftest.files_under(models)
    assert before == {"demo/tier.gguf": 4}
    selftest.kept(models, before, "installing again")
    (models / "demo" / "tier.gguf").unlink()
    with pytest.raises(SpecQuantError, match=r"^installing again changed or lost the user's models \("):
        selftest.kept(models, before, "installing again")


def test_windows_error_boxes_are_off_for_the_self_test_and_its_children() -> None:
    # SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX | SEM_NOOPENFILEERRORBOX
    assert selftest.NO_ERROR_BOXES == 0x8003
    if sys.platform != "win32":
        assert selftest.no_error_boxes() is None
        return
    import ctypes

    assert selftest.no_error_boxes() == 0x8003
    assert ctypes.windll.kernel32.GetErrorMode() & 0x8003 == 0x8003


def test_the_build_keeps_its_logs_beside_the_artefacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECQUANT_WHEELS", raising=False)
    work = tmp_path / "cache/specquant/pyinstaller-cpu-all-variants"
    (work / "specquant").mkdir(parents=True)
    (work / "pyinstaller.log").write_text("PyInstaller said this")
    (work / "specquant" / "warn-specquant.txt").write_text("missing module named foo")
    (tmp_path / "cache/specquant/wheels").mkdir()
    (tmp_path / "cache/specquant/wheels/build-cpu-all-variants.log").write_text("[390/390] done")
    out = tmp_path / "dist"
    out.mkdir()
    kept = build.keep_logs("cpu-all-variants", out)
    assert sorted(p.name for p in kept) == ["build-cpu-all-variants.log", "pyinstaller.log", "warn-specquant.txt"]
    assert (out / "logs" / "warn-specquant.txt").read_text() == "missing module named foo"
    assert build.keep_logs("cuda", tmp_path / "empty") == []  # nothing built yet: nothing to keep, no error
    stale = os.stat(work / "pyinstaller.log").st_mtime - 3600
    os.utime(work / "pyinstaller.log", (stale, stale))  # an earlier build's log: not this build's evidence
    later = tmp_path / "dist2"
    later.mkdir()
    assert "pyinstaller.log" not in [p.name for p in build.keep_logs("cpu-all-variants", later, stale + 1800)]


# --- the pinned Inno Setup --------------------------------------------------------------------------------


def iscc(folder: Path, version: str) -> Path:
    """A stand-in ISCC.exe whose version resource says `version` (VS_FIXEDFILEINFO, as Windows reads it)."""
    major, minor, patch = map(int, version.split("."))
    fixed = struct.pack("<13I", 0xFEEF04BD, 0x10000, major << 16 | minor, patch << 16, major << 16 | minor,
                        patch << 16, 0x3F, 0, 0x40004, 1, 0, 0, 0)
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "ISCC.exe"
    exe.write_bytes(pe(["KERNEL32.dll"], extra=b"VS_VERSION_INFO\x00" + fixed))
    return exe


def test_the_pinned_inno_setup_is_chosen_and_any_other_is_named(tmp_path: Path) -> None:
    pinned = windows.INNO_SETUP_VERSION
    assert windows.exe_version(iscc(tmp_path / "v", pinned)) == pinned
    assert windows.exe_version(Path(sys.executable)) is None  # no version resource: unknown, not a guess
    major = pinned.split(".")[0]
    on_path = iscc(tmp_path / "bin", "6.2.0")
    shutil.copyfile(on_path, on_path.with_name("iscc"))  # what shutil.which finds on a POSIX PATH
    on_path.with_name("iscc").chmod(0o755)
    files = tmp_path / "Program Files (x86)"
    iscc(files / f"Inno Setup {major}", pinned)
    env = {"PATH": str(tmp_path / "bin"), "PROGRAMFILES(X86)": str(files)}
    found = windows.find_iscc(env)
    assert found == windows.Iscc(str(files / f"Inno Setup {major}" / "ISCC.exe"), pinned)  # not the first on PATH
    assert found.describe().startswith(f"Inno Setup {pinned} (the pinned version) at ")
    assert windows.pinned_iscc(env) == found

    other = windows.find_iscc({"PATH": str(tmp_path / "bin")})
    assert other is not None and other.version == "6.2.0" and not other.pinned
    assert other.describe().endswith(f", not the pinned {pinned}")
    with pytest.raises(UserError, match=rf"^Inno Setup 6.2.0 at .*iscc, not the pinned {pinned}: `choco install "
                                        rf"innosetup --version={pinned} --allow-downgrade`$"):
        windows.pinned_iscc({"PATH": str(tmp_path / "bin")})
    assert windows.find_iscc({"PATH": str(tmp_path / "nothing")}) is None
    with pytest.raises(UserError, match=r"neither on PATH nor in Program Files"):
        windows.pinned_iscc({"PATH": str(tmp_path / "nothing")})
    flow = (REPO / ".github" / "workflows" / "release.yml").read_text()
    assert f"choco install innosetup --version={pinned} " in flow
