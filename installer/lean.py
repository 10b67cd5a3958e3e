"""What the bundle leaves out, so it stays lean: decisions on file names only, used by the spec file.

PyInstaller's Qt hook collects every plugin of each plugin type a module uses (Wayland, EGLFS, GTK theme,
virtual keyboard, ...) and then every library those plugins link, which nearly doubles the Qt part.
"""

from __future__ import annotations

import re
from pathlib import PureWindowsPath

# Per plugin type, the plugins kept (by name without `lib` prefix and suffix); other types are dropped whole.
QT_PLUGINS = {
    # offscreen for --self-test and CI; xcb for X11 and XWayland; each OS's own for Windows and macOS.
    "platforms": {"qoffscreen", "qxcb", "qwindows", "qcocoa"},
    "styles": {"qmodernwindowsstyle", "qwindowsvistastyle", "qmacstyle"},
    # Typing: dead keys and compose sequences, and IBus for input methods (CJK and others).
    "platforminputcontexts": {"composeplatforminputcontextplugin", "ibusplatforminputcontextplugin"},
    "imageformats": {"qsvg", "qico", "qjpeg", "qgif"},
    "iconengines": {"qsvgicon"},
}
# Data left out: Qt's translations (the app is in English), and hyphenation dictionaries other than English
# (textstat, used by the router, only reads en_US).
DROPPED_DATA = (
    re.compile(r"^PySide6/(Qt/)?translations/"),  # PySide6/translations in the Windows wheel
    re.compile(r"^pyphen/dictionaries/(?!hyph_en_)"),
)


def plugin_name(filename: str) -> str:
    """`libqxcb.so` -> `qxcb`, `qwindows.dll` -> `qwindows`, from a path with either slash.

    PureWindowsPath, because PyInstaller hands the spec Windows paths with backslashes there, and a POSIX
    path takes `C:\\...\\qwindows.dll` whole as one name; it splits on `/` too, so Linux and macOS paths
    come apart the same way (a backslash is never part of a real plugin's file name).
    """
    stem = PureWindowsPath(filename).name.split(".")[0]
    return stem[3:] if stem.startswith("lib") else stem


def keep_plugin(plugin_type: str, filename: str) -> bool:
    return plugin_name(filename) in QT_PLUGINS.get(plugin_type, set())


def keep(dest: str) -> bool:
    """Whether a bundle entry (its path inside the bundle) is kept."""
    dest = dest.replace("\\", "/")
    return not any(pattern.search(dest) for pattern in DROPPED_DATA)
