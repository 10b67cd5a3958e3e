"""The Help menu: the user guides (docs/guide/*.md, shipped beside the program, read in the window's own
viewer, app.guide_viewer) and About, which names the version and the llama.cpp build and CPU kernels
answering on this machine: what a bug report needs. The other docs/*.md are for developers."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from PySide6.QtCore import qVersion
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QMenuBar, QMessageBox, QWidget

from app.guide_viewer import GuideViewer

# The guides a person reads, in the order offered: (menu text, file in docs/guide/).
GUIDES = (
    ("&Getting started", "getting-started.md"),
    ("What a &tier is", "tiers.md"),
    ("Your &documents", "documents.md"),
    ("T&ools", "tools.md"),
    ("What the &numbers mean", "numbers.md"),
    ("Getting a better &model", "models.md"),
)


def docs_dir() -> Path:
    """`docs/guide/` next to the packages, or inside a PyInstaller bundle (installer/specquant.spec ships docs/)."""
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[1]))
    return base / "docs" / "guide"


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


def guide_action(menu: QMenu, name: str) -> QAction | None:
    """The Help menu's entry for the guide `name` (a file in docs/guide/), or None."""
    return next((a for a in menu.actions() if a.data() == name), None)


def add_help_menu(bar: QMenuBar, parent: QWidget) -> QMenu:
    """Help: one entry per guide (read in the window's guide viewer), then About SpecQuant."""
    menu = bar.addMenu("&Help")
    folder = docs_dir()
    viewer: list[GuideViewer] = []  # made at the first guide asked for, then shown again

    def open_guide(name: str) -> None:
        if not viewer:
            viewer.append(GuideViewer(folder, GUIDES, parent))
        viewer[0].show_guide(name)

    for text, name in GUIDES:
        path = folder / name
        action = menu.addAction(text)
        action.setEnabled(path.is_file())
        action.setToolTip("" if path.is_file() else f"{name} is not part of this install")
        action.setData(name)  # found by its file name: a link elsewhere in the window opens it (guide_action)
        action.triggered.connect(lambda _=False, n=name: open_guide(n))
    menu.addSeparator()
    about = menu.addAction("&About SpecQuant")
    about.triggered.connect(lambda: QMessageBox.about(parent, "About SpecQuant", about_text(build_facts())))
    return menu
