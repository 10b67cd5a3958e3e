"""A built installer's first run, as a user would have it, checked before the release job uploads it.

    python -m installer.selftest TARGET [--out dist] [--no-xvfb]

It installs (or unpacks) the file the way a user would, into folders whose names hold a space and a letter
beyond ASCII, runs `specquant-app --self-test` (it sets up the bundled demo model, answers a prompt and exits
0), then uninstalls, which must keep the user's models. Linux also checks the bundle's glibc floor and runs the
self-test twice: offscreen, and in a window on a virtual X display (xvfb-run). Windows and macOS run it again
with the system's own Qt platform on the runner's desktop and keep a screenshot of the window after its answer
(FILE.window.png beside the file, uploaded as its own artifact). Each check passed goes into a record beside
the file, which `release collect` uploads and the release notes cite.

On a runner nobody closes a dialog, so nothing it starts may open one: Windows' error boxes are off for it and
its children (SetErrorMode), every run that wants no window says so (QT_QPA_PLATFORM=offscreen), and every
command has a time limit that, when it runs out, names the step and the command. Every command's output also
goes to OUT/logs/selftest-TARGET.log, which the workflow keeps when a job fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from installer.linux import glibc_needed
from installer.release import RECORD, TARGETS, Target, release_file, target, version
from installer.retry import run_retrying, timed_run
from runtime.errors import SpecQuantError, UserError, run_command

ODD = "Programme für alle"  # every folder the check installs into has a space and a non-ASCII letter
CLEAN_PATH = "/usr/bin:/bin"  # Linux and macOS: no Python, nothing of the build's on PATH
XVFB = ["xvfb-run", "--auto-servernum", "env", "QT_QPA_PLATFORM=xcb"]  # the app defaults to offscreen otherwise


# Where each command's whole output goes (main sets it): the evidence a failed job uploads.
LOG: list[Path] = []
STEP_TIMEOUT_S = 900  # one command; the workflow's step has its own limit above all of them


def log_output(what: str, cmd: Sequence[str], out: str) -> None:
    if LOG:
        with open(LOG[0], "a", encoding="utf-8") as f:
            f.write(f"=== {what}: {' '.join(cmd)}\n{out.rstrip()}\n\n")


def checked(cmd: Sequence[str | Path], env: Mapping[str, str], what: str, timeout: float = STEP_TIMEOUT_S) -> str:
    """Run `cmd`; its stdout, or an error naming `what` with the end of its output (or, when it hangs past
    `timeout`, naming `what` and the command)."""
    args = [str(c) for c in cmd]
    done = timed_run(args, what, timeout, env=dict(env), capture_output=True, text=True, encoding="utf-8",
                     errors="replace")
    log_output(what, args, done.stdout + done.stderr)
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise SpecQuantError(f"{what} failed with exit code {done.returncode}: {tail or 'no output'}")
    return done.stdout


# SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX | SEM_NOOPENFILEERRORBOX: no "program has stopped working" or
# "cannot find DLL" box waits for a click; the program fails instead, and its exit code says so.
NO_ERROR_BOXES = 0x0001 | 0x0002 | 0x8000


def no_error_boxes() -> int | None:
    """Turn Windows' error boxes off for this process; the programs it starts inherit the mode. Elsewhere None."""
    if sys.platform != "win32":
        return None
    import ctypes

    ctypes.windll.kernel32.SetErrorMode(NO_ERROR_BOXES)  # type: ignore[attr-defined]
    return NO_ERROR_BOXES


def no_window(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a run that wants no window: Qt's offscreen platform, whatever the runner's environment says."""
    return {**env, "QT_QPA_PLATFORM": "offscreen"}


def self_test(program: Path, env: Mapping[str, str], what: str, wrap: Sequence[str] = (),
              args: Sequence[str | Path] = ()) -> None:
    out = checked([*wrap, program, "--self-test", *args], env, what)
    # A windowed Windows program has no stdout to print to: there its exit code is the verdict.
    if sys.platform != "win32" and "self-test passed" not in out:
        raise SpecQuantError(f"{what} exited 0 without saying 'self-test passed': {out.strip()[-300:]}")


# Each system's own Qt platform plugin: the app's --self-test defaults to offscreen, which proves nothing
# about the window; with this one it must open on the desktop (app/selftest.py waits until it is exposed).
NATIVE_PLATFORM = {"win32": "windows", "darwin": "cocoa", "linux": "xcb"}


def screenshot_file(artefact: Path) -> Path:
    """Where the window's picture goes: beside the file, uploaded as its own artifact, never released."""
    return artefact.with_name(artefact.name + ".window.png")


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height from its IHDR chunk; (0, 0) when it is no PNG."""
    try:
        head = path.read_bytes()[:24]
    except OSError:
        return 0, 0
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return 0, 0
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def window_screenshot(program: Path, env: Mapping[str, str], png: Path, platform: str | None = None,
                      wrap: Sequence[str] = ()) -> str:
    """Run the self-test again in a real window with the system's own platform plugin, and keep a picture of
    the window after its answer (`--screenshot`, QWidget.grab); the check's words for the record."""
    platform = platform or NATIVE_PLATFORM[sys.platform]
    png.unlink(missing_ok=True)
    what = f"self-test in a window ({platform})"
    self_test(program, {**env, "QT_QPA_PLATFORM": platform}, what, wrap, args=["--screenshot", png])
    width, height = png_size(png)
    if width < 200 or height < 150:
        raise SpecQuantError(f"{what} passed but left no picture of its window ({png.name}: {width}x{height})")
    return f"{what}, screenshot {width}x{height}"


def routes(cli: Path, env: Mapping[str, str]) -> None:
    """The command line answers too (on Windows a separate console program)."""
    out = checked([cli, "route", "hello", "--json"], no_window(env), f"{cli.name} route")
    if '"level"' not in out:
        raise SpecQuantError(f"{cli.name} route printed no level: {out.strip()[-300:]}")


def app_checks(app: Path, cli: Path, env: Mapping[str, str], png: Path | None) -> list[str]:
    """An installed copy's window self-test offscreen (and, given `png`, its picture), then its command line's
    routes: the checks passed, as the record lists them (Windows and macOS alike)."""
    self_test(app, no_window(env), "self-test")
    checks = ["self-test offscreen"]
    if png is not None:
        checks.append(window_screenshot(app, env, png))
    routes(cli, env)
    return [*checks, "specquant route"]


# --- Linux -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinuxInstall:
    home: Path
    program: Path  # the installed bundle's folder

    def env(self, **extra: str) -> dict[str, str]:
        """A fresh login's environment: this home, no Python on PATH, nothing inherited."""
        return {"HOME": str(self.home), "PATH": CLEAN_PATH, **extra}

    @property
    def models(self) -> Path:
        return self.home / ".local/share/specquant/models"


def unpack_tarball(tarball: Path, into: Path) -> Path:
    into.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="tar")
        else:  # Python before 3.10.12 has no extraction filters
            tar.extractall(into)
    (top,) = into.iterdir()
    return top


def linux_install(tarball: Path, work: Path) -> LinuxInstall:
    """Unpack into an odd folder, run its install.sh for a fresh home there, and delete the unpacked copy."""
    top = unpack_tarball(tarball, work / ODD / "unpacked")
    home = work / ODD / "home"
    home.mkdir(parents=True)
    installed = LinuxInstall(home, home / ".local/share/specquant-app")
    checked(["sh", top / "install.sh"], installed.env(), "install.sh")
    shutil.rmtree(top.parent)  # the installed copy must stand alone
    entry = home / ".local/share/applications/specquant.desktop"
    if f'Exec="{installed.program}/specquant-app"' not in entry.read_text(encoding="utf-8"):
        raise SpecQuantError(f"{entry} does not start {installed.program}/specquant-app")
    if not (home / ".local/share/icons/hicolor/256x256/apps/specquant.png").is_file():
        raise SpecQuantError("install.sh put no icon in the hicolor theme")
    return installed


def files_under(folder: Path) -> dict[str, int]:
    """Each file under `folder` with its size: what an upgrade must leave as it was."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def kept(folder: Path, before: dict[str, int], what: str) -> None:
    if not folder.is_dir() or files_under(folder) != before:
        raise SpecQuantError(f"{what} changed or lost the user's models ({folder})")


def linux_reinstall(tarball: Path, installed: LinuxInstall, work: Path) -> None:
    """Install the same file again over the installed copy, as an upgrade does: the user's models stay."""
    before = files_under(installed.models)
    top = unpack_tarball(tarball, work / ODD / "again")
    checked(["sh", top / "install.sh"], installed.env(), "install.sh over the installed copy")
    shutil.rmtree(top.parent)
    kept(installed.models, before, "installing again over the installed copy")


def linux_uninstall(installed: LinuxInstall) -> None:
    checked(["sh", installed.program / "uninstall.sh"], installed.env(), "uninstall.sh")
    if installed.program.exists() or (installed.home / ".local/bin/specquant").exists():
        raise SpecQuantError(f"uninstall.sh left {installed.program} or its command links behind")
    if not installed.models.is_dir():
        raise SpecQuantError(f"uninstall.sh deleted the user's models ({installed.models})")


def linux(tarball: Path, work: Path, xvfb: bool = True, floor: tuple[int, ...] = (2, 35),
          runner: str = "ubuntu-22.04") -> list[str]:
    installed = linux_install(tarball, work)
    checks = [f"installed into '{ODD}', menu entry and icon"]
    needed, by = glibc_needed(installed.program)
    if needed > floor:
        most, where = ".".join(map(str, floor)), by.relative_to(installed.program) if by else "?"
        raise SpecQuantError(f"{where} needs glibc {needed[0]}.{needed[1]}, newer than {most}: build on {runner}")
    checks.append(f"needs glibc {needed[0]}.{needed[1]}")
    self_test(installed.program / "specquant-app", no_window(installed.env()), "self-test offscreen")
    checks.append("self-test offscreen")
    if xvfb:
        if shutil.which("xvfb-run", path=CLEAN_PATH) is None:
            raise UserError("xvfb-run is not installed (Debian and Ubuntu: apt install xvfb xauth); or pass --no-xvfb")
        self_test(installed.program / "specquant-app", installed.env(), "self-test on Xvfb", wrap=XVFB)
        checks.append("self-test in a window on Xvfb")
    routes(installed.program / "specquant", installed.env())
    checks.append("specquant route")
    linux_reinstall(tarball, installed, work)
    checks.append("installing again keeps the models")
    linux_uninstall(installed)
    checks.append("uninstall keeps the models")
    return checks


# --- Windows ---------------------------------------------------------------------------------------------------


def windows(setup: Path, work: Path, png: Path | None = None) -> list[str]:
    """A silent per-user install into an odd folder, the self-test (and, given `png`, the window's picture),
    and a silent uninstall."""
    folder, models = work / ODD / "SpecQuant", work / ODD / "models"
    quiet = ["/VERYSILENT", "/SUPPRESSMSGBOXES", "/NORESTART"]
    setup_log = LOG[0].with_name("setup-install.log") if LOG else work / "setup.log"  # kept as evidence
    install = [setup, *quiet, "/CURRENTUSER", f"/DIR={folder}", f"/LOG={setup_log}"]
    checked(install, os.environ, setup.name)
    checks = [f"installed per user into '{ODD}'"]
    # The models go to a scratch folder rather than the runner's own AppData.
    env = dict(os.environ, SPECQUANT_CACHE_DIR=str(models))
    checks += app_checks(folder / "specquant-app.exe", folder / "specquant.exe", env, png)
    before = files_under(models)
    checked(install, os.environ, f"{setup.name}, again over the installed copy")  # as an upgrade runs
    kept(models, before, "installing again over the installed copy")
    checks.append("installing again keeps the models")
    checked([folder / "unins000.exe", *quiet], os.environ, "the uninstaller")
    # The uninstaller hands over to a copy of itself in %TEMP% and returns at once: wait for it to finish.
    for _ in range(120):
        if not (folder / "specquant-app.exe").exists():
            break
        time.sleep(1)
    else:
        raise SpecQuantError(f"the uninstaller left {folder / 'specquant-app.exe'} after 2 minutes")
    if not models.is_dir():
        raise SpecQuantError(f"uninstalling deleted the user's models ({models})")
    checks.append("uninstall keeps the models")
    return checks


# --- macOS -----------------------------------------------------------------------------------------------------


def macos(dmg: Path, work: Path, png: Path | None = None) -> list[str]:
    """Copy the app out of the disk image as a user drags it, check its seal, run the self-test (and, given
    `png`, keep the window's picture)."""
    mount = work / "mount"
    run_retrying(["hdiutil", "attach", "-nobrowse", "-readonly", "-noautoopen", "-mountpoint", mount, dmg],
                 "hdiutil attach")
    try:
        (app_in_image,) = mount.glob("*.app")
        app = work / ODD / "Applications" / app_in_image.name
        shutil.copytree(app_in_image, app, symlinks=True)
    finally:
        run_retrying(["hdiutil", "detach", mount], "hdiutil detach")
    checked(["codesign", "--verify", "--deep", "--strict", app], os.environ, f"codesign --verify {app.name}")
    checks = [f"copied into '{ODD}', signature sealed"]
    home = work / ODD / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": CLEAN_PATH}
    return checks + app_checks(app / "Contents/MacOS/specquant-app", app / "Contents/MacOS/specquant", env, png)


# --- the record ------------------------------------------------------------------------------------------------


def built_on(env: Mapping[str, str] | None = None) -> str:
    """`GitHub runner ubuntu22 20261201.1 (Ubuntu 22.04.5 LTS, glibc 2.35)`, or this machine's system."""
    env = os.environ if env is None else env
    if sys.platform == "linux":
        names = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        system = f"{names.get('PRETTY_NAME', 'Linux').strip(chr(34))}, glibc {platform.libc_ver()[1]}"
    elif sys.platform == "darwin":
        system = f"macOS {platform.mac_ver()[0]} {platform.machine()}"
    else:
        system = platform.platform(terse=True)
    if env.get("GITHUB_ACTIONS") == "true":
        image = " ".join(filter(None, (env.get("ImageOS"), env.get("ImageVersion"))))  # the runner image's name
        return f"GitHub runner {image or '?'} ({system})"
    return system


def run_checks(t: Target, artefact: Path, work: Path, xvfb: bool) -> list[str]:
    expected = {"linux": "linux", "windows": "win32", "macos": "darwin"}[t.os]
    if sys.platform != expected:
        raise UserError(f"{artefact.name} is checked on {t.os}, and this is {sys.platform}")
    if t.os == "linux":
        return linux(artefact, work, xvfb, t.floor, t.runner)
    # Windows and macOS runners have a desktop: the app opens there too, and its picture is kept.
    if t.os == "windows":
        return windows(artefact, work, screenshot_file(artefact))
    return macos(artefact, work, screenshot_file(artefact))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m installer.selftest", description=__doc__.splitlines()[0])
    p.add_argument("target", help="one of " + ", ".join(TARGETS))
    p.add_argument("--out", type=Path, default=Path("dist"), help="build_installer.py's --out (default: dist)")
    p.add_argument("--no-xvfb", action="store_true", help="Linux: skip the run on a virtual display (recorded)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        t = target(args.target)
        artefact = args.out / release_file(t, version())
        if not artefact.is_file():
            raise UserError(f"{artefact} does not exist: build it with build_installer.py --with-demo-model")
        no_error_boxes()
        logs = args.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        LOG[:] = [logs / f"selftest-{t.key}.log"]
        LOG[0].write_text("", encoding="utf-8")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="specquant-selftest-", ignore_cleanup_errors=True) as work:
            checks = run_checks(t, artefact, Path(work), xvfb=not args.no_xvfb)
        record = {"file": artefact.name, "target": t.key, "built_on": built_on(), "checks": checks,
                  "seconds": round(time.monotonic() - started)}
        artefact.with_name(artefact.name + RECORD).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n",
                                                             encoding="utf-8")
        print(f"selftest: {artefact.name} passed: {'; '.join(checks)} ({record['seconds']} s)")
        return 0

    return run_command("selftest", body)


if __name__ == "__main__":
    sys.exit(main())
