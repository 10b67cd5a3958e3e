"""The Help menu: the guides (docs/*.md, shipped beside the program) and About, which names the version and the
llama.cpp build and CPU kernels answering on this machine: what a bug report needs."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from PySide6.QtCore import QUrl, qVersion
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QMenu, QMenuBar, QMessageBox, QWidget

# The guides a user reads, in the order offered: (menu text, file in docs/).
GUIDES = (
    ("&Using the window", "window.md"),
    ("Answering from your &documents", "documents.md"),
    ("Using &tools", "tools.md"),
    ("Adding &models", "models.md"),
    ("The &command line", "cli.md"),
)


def docs_dir() -> Path:
    """`docs/` next to the packages, or inside a PyInstaller bundle (installer/specquant.spec ships it)."""
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[1]))
    return base / "docs"


def build_facts() -> list[tuple[str, str]]:
    """(what, value) for About: SpecQuant's version, the llama.cpp binding, the CPU kernels ggml runs, Qt and
    Python. The kernels are chosen once per machine (a cached verdict after the first start)."""
    import llama_cpp

    from runtime import __version__
    from runtime.errors import SpecQuantError
    from runtime.machine.hardware import ensure_backends

    try:
        kernels = ensure_backends().describe()
    except SpecQuantError as e:  # no CPU backend works here: say so, as a model load would
        kernels = f"none usable ({e})"
    return [
        ("SpecQuant", __version__),
        ("llama.cpp", f"llama-cpp-python {llama_cpp.__version__}"),
        ("CPU kernels", kernels),
        ("Qt", qVersion()),
        ("Python", f"{platform.python_version()} on {platform.system()} {platform.machine()}"),
    ]


def about_text(facts: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><td><b>{what}</b>&nbsp;&nbsp;</td><td>{value}</td></tr>" for what, value in facts)
    return ("<p>SpecQuant answers with a language model on this computer, faster through speculative decoding: "
            "a smaller version of the model proposes words and the full model checks them, so the answer is "
            f"as good as the full model's.</p><table>{rows}</table>")


def add_help_menu(bar: QMenuBar, parent: QWidget) -> QMenu:
    """Help: one entry per guide (opened by the desktop's viewer for .md files), then About SpecQuant."""
    menu = bar.addMenu("&Help")
    folder = docs_dir()
    for text, name in GUIDES:
        path = folder / name
        action = menu.addAction(text)
        action.setEnabled(path.is_file())
        action.setToolTip(str(path) if path.is_file() else f"{name} is not part of this install")
        action.triggered.connect(lambda _=False, p=path: _open_guide(parent, p))
    menu.addSeparator()
    about = menu.addAction("&About SpecQuant")
    about.triggered.connect(lambda: QMessageBox.about(parent, "About SpecQuant", about_text(build_facts())))
    return menu


def _open_guide(parent: QWidget, path: Path) -> None:
    """The desktop's viewer for the guide; without one, where the file is, so it can be opened by hand."""
    if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
        QMessageBox.information(parent, "SpecQuant", f"No application here opens {path.name}. It is at:\n{path}")
