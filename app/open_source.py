"""Open a grounded answer's source file, at its page where the viewer can be told one.

The system's "open this file" (QDesktopServices, i.e. xdg-open, `open`, ShellExecute) has no way to name a
page: a `#page=N` fragment on a file URL makes most of them look for a file of that name. So for a PDF with a
known page we start, when one is installed, a viewer whose command line takes a page; otherwise the system's
application opens the file at its start.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QProcess, QUrl
from PySide6.QtGui import QDesktopServices

# How each viewer is told "open this file at page N" (1-based), in the order they are tried.
_PAGE_ARGS: tuple[tuple[str, Callable[[str, int], list[str]]], ...] = (
    ("evince", lambda path, page: [f"--page-index={page}", path]),  # GNOME
    ("okular", lambda path, page: ["-p", str(page), path]),  # KDE
    ("zathura", lambda path, page: ["-P", str(page), path]),
    ("qpdfview", lambda path, page: ["--unique", f"{path}#{page}"]),
    ("SumatraPDF", lambda path, page: ["-page", str(page), path]),  # Windows
)


def page_viewer(path: str, page: int | None) -> list[str] | None:
    """The command that opens `path` at `page`, or None: not a PDF, no page, or no such viewer installed (macOS
    Preview takes no page from the command line)."""
    if page is None or page < 1 or Path(path).suffix.lower() != ".pdf" or sys.platform == "darwin":
        return None
    for name, args in _PAGE_ARGS:
        program = shutil.which(name)
        if program:
            return [program, *args(path, page)]
    return None


def source_url(path: str, page: int | None) -> QUrl:
    """The link a source gets in the transcript: its file, with the page (if any) as `page=N` in the fragment."""
    url = QUrl.fromLocalFile(path)
    if page is not None:
        url.setFragment(f"page={page}")
    return url


def page_of(url: QUrl) -> int | None:
    fragment = url.fragment()
    if fragment.startswith("page=") and fragment[5:].isdigit():
        return int(fragment[5:])
    return None


def open_source(url: QUrl) -> bool:
    """Open the file a source link names (at its page when a viewer takes one); False if nothing opened it."""
    path = url.toLocalFile()
    command = page_viewer(path, page_of(url))
    if command is not None and QProcess.startDetached(command[0], command[1:])[0]:
        return True
    return QDesktopServices.openUrl(QUrl.fromLocalFile(path))
