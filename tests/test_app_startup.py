"""Start-up that explains itself (#51): a missing system library of Qt's X11 plugin is named in one line with the
command that installs it, before Qt starts; Qt's own fatal message reaches stderr; nothing exits silently."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.platform_libs import (
    BOX_COLUMNS,
    box_commands,
    debian_package,
    explain,
    install_command,
    missing_libraries,
    os_release,
    uses_xcb,
    x_display_problem,
    xcb_plugin,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("gcc")
                                or not shutil.which("ldd"), reason="Linux with gcc and ldd")
ABSENT = "libxcb-specquant-absent.so.0"  # a library no system has: stands for a missing libxcb-cursor0


def fake_plugin(folder: Path, present: str) -> Path:
    """A real shared object named libqxcb.so that needs `present` (a library this system has) and ABSENT, whose
    stub is deleted once linked: the loader cannot find it, as on a desktop that lacks the package."""
    stub, platforms = folder / "stub", folder / "platforms"
    stub.mkdir(parents=True)
    platforms.mkdir()
    (folder / "empty.c").write_text("int specquant_stub(void) { return 0; }\n")
    gcc = ["gcc", "-shared", "-fPIC"]
    subprocess.run([*gcc, "-o", str(stub / ABSENT), f"-Wl,-soname,{ABSENT}", str(folder / "empty.c")], check=True)
    plugin = platforms / "libqxcb.so"
    subprocess.run([*gcc, "-o", str(plugin), str(folder / "empty.c"), "-Wl,--no-as-needed", f"-L{stub}",
                    f"-l:{ABSENT}", f"-l:{present}"], check=True)
    shutil.rmtree(stub)
    return plugin


def app_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    return env | extra


@linux_only
def test_a_missing_library_is_found_through_the_loader(tmp_path: Path) -> None:
    plugin = fake_plugin(tmp_path, "libz.so.1")
    assert xcb_plugin({"QT_QPA_PLATFORM_PLUGIN_PATH": str(plugin.parent)}) == plugin
    assert missing_libraries(plugin) == [ABSENT]  # libz is found, so not named


@linux_only
def test_the_window_says_in_one_line_what_is_missing_and_how_to_install_it(tmp_path: Path) -> None:
    plugin = fake_plugin(tmp_path, "libz.so.1")
    env = app_env(QT_QPA_PLATFORM="xcb", QT_QPA_PLATFORM_PLUGIN_PATH=str(plugin.parent))
    run = subprocess.run([sys.executable, "-m", "app"], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    (line,) = run.stderr.splitlines()
    assert line == explain([ABSENT], os_release())
    assert ABSENT in line and "install it with" in line
    command = install_command([ABSENT], os_release())
    if command:  # a distribution this knows: its package manager's command
        assert line.endswith(command)
    checked = subprocess.run([sys.executable, "-m", "app", "--check-display"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 1 and checked.stdout.strip() == line


@linux_only
def test_qts_own_fatal_message_reaches_stderr() -> None:
    """A platform Qt cannot load: Qt aborts, and its reason is on stderr in one line (it was only in a debug
    log). A platform that exists nowhere, so the same on every machine, whatever libraries it has."""
    env = app_env(QT_QPA_PLATFORM="specquant-nowhere")
    run = subprocess.run([sys.executable, "-m", "app"], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    (fatal,) = [line for line in run.stderr.splitlines() if line.startswith("specquant-app: Qt: ")]
    assert "This application failed to start" in fatal and "specquant-nowhere" in run.stderr, run.stderr


def test_install_commands_for_each_distribution() -> None:
    qt65 = ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxkbcommon-x11.so.0",
            "libX11-xcb.so.1", "libglib-2.0.so.0"]
    debian = {"ID": "debian"}
    assert install_command(qt65, debian) == ("sudo apt install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 "
                                             "libxkbcommon-x11-0 libx11-xcb1 libglib2.0-0")
    mint = {"ID": "linuxmint", "ID_LIKE": "ubuntu debian"}
    assert install_command(qt65[:1], mint) == "sudo apt install libxcb-cursor0"
    assert install_command(qt65[:2], {"ID": "fedora"}) == (
        "sudo dnf install 'libxcb-cursor.so.0()(64bit)' 'libxcb-icccm.so.4()(64bit)'")
    assert install_command(qt65[:1], {"ID": "opensuse-tumbleweed", "ID_LIKE": "opensuse suse"}).startswith(
        "sudo zypper install 'libxcb-cursor.so.0()(64bit)'")
    assert install_command(qt65[:3], {"ID": "arch"}) == "sudo pacman -S xcb-util-cursor xcb-util-wm xcb-util-keysyms"
    assert install_command(qt65[:1], {"ID": "gentoo"}) == ""
    assert explain(qt65[:1], {"ID": "gentoo"}).endswith("install it with your distribution's package manager")
    assert "install them with: sudo apt install" in explain(qt65[:2], debian)
    assert debian_package("libxcb-render-util.so.0") == "libxcb-render-util0"


def test_xcb_is_checked_only_where_qt_will_use_it() -> None:
    assert uses_xcb({"DISPLAY": ":0"})
    assert not uses_xcb({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"})  # Qt 6 takes Wayland there
    assert uses_xcb({"QT_QPA_PLATFORM": "xcb", "WAYLAND_DISPLAY": "wayland-0"})
    assert not uses_xcb({"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"})
    assert not uses_xcb({})


def test_the_native_box_shows_the_install_command_whole() -> None:
    """#63: xmessage showed one long line ending "…install them wi"; zenity had --no-wrap."""
    line = explain(["libxcb-icccm.so.4", "libxcb-cursor.so.0"], {"ID": "debian"})
    command = install_command(["libxcb-icccm.so.4", "libxcb-cursor.so.0"], {"ID": "debian"})
    boxes = dict(box_commands(line))
    assert "--no-wrap" not in boxes["zenity"]
    text = boxes["xmessage"][-1]
    assert all(len(row) <= BOX_COLUMNS for row in text.splitlines())
    assert command in [row.strip() for row in text.splitlines()]  # on a line of its own, not cut
    assert " ".join(text.split()) == " ".join(line.split())  # nothing lost in the wrapping


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11")
def test_a_display_that_cannot_be_opened_is_found_before_qt() -> None:
    """#63: DISPLAY names an X server that is gone: said in one line (Qt itself aborts, exit 134)."""
    problem = x_display_problem({"DISPLAY": ":987"})
    assert problem.startswith("specquant-app: the display :987 cannot be opened") and "\n" not in problem
    assert x_display_problem({"DISPLAY": ":987", "QT_QPA_PLATFORM": "offscreen"}) == ""  # not X: not asked
