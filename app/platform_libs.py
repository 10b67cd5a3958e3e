"""Before Qt starts on Linux: are the system libraries of Qt's xcb platform plugin there? Without one (often
libxcb-cursor0, which Qt 6.5+ needs and many desktops lack) Qt aborts with its reason on a debug channel; this
says what is missing and the command that installs it, in one line, on the terminal and in a native box.

No Qt here: it runs before Qt is imported, and the bundle's install script runs it too
(`specquant-app --check-display`). The libraries are those the plugin itself needs, as the dynamic loader
resolves them (`ldd`), so the list follows whatever Qt the program carries.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import re
import shutil
import subprocess
import textwrap
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

PLUGIN = "libqxcb.so"
PROBE_S = 5.0  # an X server that does not answer in this time (a dead SSH forward) is as good as none
BOX_COLUMNS = 72  # a native box's lines: xmessage never wraps, and the fix must be seen whole
# `ldd` prints "libxcb-cursor.so.0 => not found" for a library the loader cannot find.
_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)
_SONAME = re.compile(r"^lib(.+?)\.so\.(\d+)")
# Debian's package names that do not follow "soname without .so, version appended" (libxcb-cursor.so.0 ->
# libxcb-cursor0). On Fedora and openSUSE the package manager installs by soname, so they need no table.
DEBIAN_EXCEPTIONS = {"libglib-2.0.so.0": "libglib2.0-0", "libgthread-2.0.so.0": "libglib2.0-0",
                     "libGL.so.1": "libgl1", "libEGL.so.1": "libegl1"}
ARCH_PACKAGES = {
    "libxcb-cursor.so.0": "xcb-util-cursor", "libxcb-icccm.so.4": "xcb-util-wm", "libxcb-ewmh.so.2": "xcb-util-wm",
    "libxcb-keysyms.so.1": "xcb-util-keysyms", "libxcb-image.so.0": "xcb-util-image",
    "libxcb-render-util.so.0": "xcb-util-renderutil", "libxcb-util.so.1": "xcb-util",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11", "libxkbcommon.so.0": "libxkbcommon", "libX11-xcb.so.1": "libx11",
    "libX11.so.6": "libx11", "libGL.so.1": "libglvnd", "libEGL.so.1": "libglvnd", "libglib-2.0.so.0": "glib2",
    "libgthread-2.0.so.0": "glib2", "libfontconfig.so.1": "fontconfig", "libfreetype.so.6": "freetype2",
}


def xcb_plugin(env: Mapping[str, str] | None = None) -> Path | None:
    """The xcb plugin Qt would load: from $QT_QPA_PLATFORM_PLUGIN_PATH (Qt's own override), else PySide6's."""
    env = os.environ if env is None else env
    for folder in filter(None, env.get("QT_QPA_PLATFORM_PLUGIN_PATH", "").split(os.pathsep)):
        if (Path(folder) / PLUGIN).is_file():
            return Path(folder) / PLUGIN
    spec = importlib.util.find_spec("PySide6")  # found, not imported: Qt must not start before the check
    for folder in (spec.submodule_search_locations or []) if spec else []:
        plugin = Path(folder) / "Qt" / "plugins" / "platforms" / PLUGIN
        if plugin.is_file():
            return plugin
    return None


def missing_libraries(plugin: Path) -> list[str]:
    """The sonames `plugin` needs, directly or through the libraries it loads, that the loader cannot find
    (an empty list when `ldd` itself is absent: then Qt's own message, on stderr, is the fallback)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return []
    try:
        out = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return list(dict.fromkeys(_NOT_FOUND.findall(out)))


def os_release(path: Path = Path("/etc/os-release")) -> dict[str, str]:
    """/etc/os-release as a dict ({} when unreadable)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {k.strip(): v.strip().strip("\"'") for k, v in pairs}


def family(release: Mapping[str, str]) -> str:
    """debian, fedora, suse, arch or "" (unknown), from ID and ID_LIKE."""
    ids = f"{release.get('ID', '')} {release.get('ID_LIKE', '')}".lower().split()
    for name, members in (("debian", {"debian", "ubuntu"}), ("fedora", {"fedora", "rhel", "centos"}),
                          ("suse", {"suse", "opensuse", "sles"}), ("arch", {"arch", "archlinux"})):
        if any(i in members for i in ids):  # openSUSE Leap and Tumbleweed: ID_LIKE has "suse"
            return name
    return ""


def debian_package(soname: str) -> str:
    """libxcb-cursor.so.0 -> libxcb-cursor0, libxkbcommon-x11.so.0 -> libxkbcommon-x11-0 (Debian's policy:
    the soname's stem, lower case, then its version, with a hyphen after a digit)."""
    if soname in DEBIAN_EXCEPTIONS:
        return DEBIAN_EXCEPTIONS[soname]
    m = _SONAME.match(soname)
    if m is None:
        return soname
    stem, version = "lib" + m.group(1).lower(), m.group(2)
    return f"{stem}{'-' if stem[-1].isdigit() else ''}{version}"


def install_command(missing: Sequence[str], release: Mapping[str, str]) -> str:
    """The command that installs `missing` on this distribution ("" when the distribution is unknown)."""
    kind = family(release)
    if kind == "debian":
        return "sudo apt install " + " ".join(dict.fromkeys(debian_package(s) for s in missing))
    if kind in ("fedora", "suse"):  # both install a library by the soname it provides
        tool = "dnf" if kind == "fedora" else "zypper"
        return f"sudo {tool} install " + " ".join(f"'{s}()(64bit)'" for s in missing)
    if kind == "arch":
        return "sudo pacman -S " + " ".join(dict.fromkeys(ARCH_PACKAGES.get(s, s) for s in missing))
    return ""


def explain(missing: Sequence[str], release: Mapping[str, str]) -> str:
    """One line: what is missing and how to install it."""
    command = install_command(missing, release)
    them = "them" if len(missing) > 1 else "it"
    how = f"install {them} with: {command}" if command else f"install {them} with your distribution's package manager"
    return (f"specquant-app: cannot open a window: this system lacks {', '.join(missing)}, which Qt's X11 "
            f"platform needs; {how}")


def uses_xcb(env: Mapping[str, str] | None = None) -> bool:
    """Will Qt pick its xcb plugin? Asked for by name, or the default on an X11 session (on Wayland Qt 6
    uses its own plugin)."""
    env = os.environ if env is None else env
    asked = env.get("QT_QPA_PLATFORM", "")
    if asked:
        return asked.split(":")[0].split(";")[0] == "xcb"
    return bool(env.get("DISPLAY")) and not env.get("WAYLAND_DISPLAY")


def check_display() -> str:
    """The one-line complaint when the xcb plugin Qt will use lacks system libraries, else ""."""
    plugin = xcb_plugin()
    missing = missing_libraries(plugin) if plugin else []
    return explain(missing, os_release()) if missing else ""


def x_display_problem(env: Mapping[str, str] | None = None) -> str:
    """The one line saying the X display Qt would use cannot be opened, else "" (also when there is no libxcb
    to ask: then the libraries' check speaks). Qt itself aborts on such a display (#63: exit 134); libxcb is
    asked as Qt will ask it (xcb_connect: the socket, the authorisation, the screen), on a thread so that a
    server that never answers is a problem after PROBE_S rather than a hang."""
    env = os.environ if env is None else env
    display = env.get("DISPLAY", "")
    if not uses_xcb(env):
        return ""
    name = ctypes.util.find_library("xcb") or "libxcb.so.1"
    try:
        xcb = ctypes.CDLL(name)
    except OSError:
        return ""
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    result: list[int] = []

    def probe() -> None:
        connection = xcb.xcb_connect(display.encode() if display else None, None)
        result.append(xcb.xcb_connection_has_error(connection))
        xcb.xcb_disconnect(connection)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(PROBE_S)
    if result and result[0] == 0:
        return ""
    why = "it did not answer" if not result else "no X server answers there, or it refused this program"
    return f"specquant-app: the display {display or '(none set)'} cannot be opened ({why})"


def box_text(text: str) -> str:
    """`text` in lines a message box shows whole: a command after "with: " on its own line(s), never cut."""
    head, sep, command = text.partition(" with: ")
    lines = textwrap.wrap(head + sep.rstrip(), BOX_COLUMNS, break_on_hyphens=False)
    if command:
        lines += textwrap.wrap(command, BOX_COLUMNS, initial_indent="    ", subsequent_indent="    ",
                               break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines)


def box_commands(text: str) -> list[tuple[str, list[str]]]:
    """The programs that can say `text` in a native box, in the order tried, with their arguments."""
    wrapped = box_text(text)
    return [("zenity", ["--error", "--width=560", "--title=SpecQuant", f"--text={wrapped}"]),
            ("kdialog", ["--title", "SpecQuant", "--error", wrapped]),
            ("notify-send", ["--urgency=critical", "SpecQuant", wrapped]),
            ("xmessage", ["-center", wrapped])]


def show_box(text: str) -> bool:
    """Say `text` in the desktop's own message box, for someone who started the program from a menu and reads
    no terminal; False when there is no display or no program to show one. The box outlives this process."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    for program, args in box_commands(text):
        path = shutil.which(program)
        if path:
            try:
                subprocess.Popen([path, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
                return True
            except OSError:
                continue
    return False
