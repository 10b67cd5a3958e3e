"""The window's main screens as PNGs, each checked for text that does not fit its widget (#51).

    xvfb-run -a -s "-screen 0 1600x1000x24" env QT_QPA_PLATFORM=xcb \\
        python scripts/window_screenshots.py [--out docs] [--screens first answer text tools addserver approval
            models about]

Screens: `first` (an empty chat: the example prompts), `answer` (the demo model answers one of them; the
status line), `text` (a stored answer with a poem, a list and code, shown as written), `tools` (the Tools
tab, with no server yet: its words on what tools are), `addserver` (Add server…'s form), `approval` (the
question before a call: the tool's description and its arguments), `models` (Models…), `about` (Help →
About). Writes window-<screen>.png at 1100x720 (the window's default size; a dialog at its own) and prints
one line per screen; any cut-off text is listed and the exit status is 1. The window runs on a temporary
history and settings folder; the demo model is converted into a temporary cache when $SPECQUANT_CACHE_DIR
does not hold it. tests/test_app_xvfb.py runs it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

REPO = Path(__file__).resolve().parents[1]
SCREENS = ("first", "answer", "text", "tools", "addserver", "approval", "models", "about")
# The `approval` screen's call, as a files server's read tool would be asked for.
APPROVAL = ("files", "read_text_file", {"path": "~/Documents/recipes/bread.md", "head": 20},
            "Read the complete contents of a file from the file system as text. Use the 'head' parameter to "
            "read only the first N lines.")
# The `text` screen's stored answer (written here, not by the demo model): lines, a list and code as written.
TEXT_QUESTION = "Write a short poem about the sea, then a shopping list and a Python one-liner."
TEXT_ANSWER = """The sea is grey at morning,
and silver by the noon;
it sings the boats to harbour
and hums beneath the moon.

Shopping list:
- bread
- apples,
  the green ones
- coffee

```python
print(sum(range(10)))
```"""
SIZE = (1100, 720)
ANSWER_S = 600  # the answer screen waits this long at most (a loaded machine answers slowly)
SLACK = 1  # px: rounding between the font's advance and the widget's integer geometry


def cut_off(root: QWidget) -> list[str]:
    """The texts shown under `root` that do not fit their widget, one line each: non-wrapping labels, buttons
    and check boxes, a combo box's current choice, tree and table columns and their headers, tabs."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import (
        QAbstractItemView,
        QCheckBox,
        QComboBox,
        QHeaderView,
        QLabel,
        QPushButton,
        QRadioButton,
        QStyle,
        QStyleOptionButton,
        QStyleOptionComboBox,
        QTabBar,
        QTreeView,
        QWidget,
    )

    found: list[str] = []
    for w in [root, *root.findChildren(QWidget)]:
        if not w.isVisible() or w.width() <= 0:
            continue
        fm, style = w.fontMetrics(), w.style()
        if isinstance(w, QLabel) and w.text() and not w.wordWrap():
            need, have = w.minimumSizeHint().width(), w.width()
            if need > have + SLACK:
                found.append(f"label {_short(w.text())}: needs {need} px, has {have}")
        elif isinstance(w, QPushButton | QCheckBox | QRadioButton) and w.text():
            opt = QStyleOptionButton()
            w.initStyleOption(opt)
            element = (QStyle.SubElement.SE_CheckBoxContents if isinstance(w, QCheckBox)
                       else QStyle.SubElement.SE_RadioButtonContents if isinstance(w, QRadioButton)
                       else QStyle.SubElement.SE_PushButtonContents)
            icon = w.iconSize().width() + 4 if not w.icon().isNull() else 0
            need = fm.horizontalAdvance(w.text().replace("&", "")) + icon
            have = style.subElementRect(element, opt, w).width()
            if need > have + SLACK:
                found.append(f"button {_short(w.text())}: needs {need} px, has {have}")
        elif isinstance(w, QComboBox) and w.currentText():
            opt = QStyleOptionComboBox()
            w.initStyleOption(opt)
            field = style.subControlRect(QStyle.ComplexControl.CC_ComboBox, opt,
                                         QStyle.SubControl.SC_ComboBoxEditField, w)
            need = fm.horizontalAdvance(w.currentText()) + (w.iconSize().width() + 4 if not w.itemIcon(
                w.currentIndex()).isNull() else 0)
            if need > field.width() + SLACK:
                found.append(f"choice {_short(w.currentText())}: needs {need} px, has {field.width()}")
        elif isinstance(w, QTabBar):
            for i in range(w.count()):
                need, have = w.tabSizeHint(i).width(), w.tabRect(i).width()
                if need > have + SLACK:
                    found.append(f"tab {_short(w.tabText(i))}: needs {need} px, has {have}")
        elif isinstance(w, QAbstractItemView) and not isinstance(w, QHeaderView) and w.model() is not None:
            header = w.header() if isinstance(w, QTreeView) else getattr(w, "horizontalHeader", lambda: None)()
            columns = w.model().columnCount() if header is not None else 1
            for c in range(columns):
                if header is not None and header.isSectionHidden(c):
                    continue
                have = header.sectionSize(c) if header is not None else w.viewport().width()
                need = w.sizeHintForColumn(c)
                title = w.model().headerData(c, Qt.Orientation.Horizontal) if header is not None else None
                if header is not None and header.isVisible():
                    need = max(need, header.sectionSizeFromContents(c).width())
                if need > have + SLACK:
                    found.append(f"column {c} ({title or w.accessibleName() or type(w).__name__}): "
                                 f"needs {need} px, has {have}")
    return found


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= 50 else text[:47] + "…")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "docs")
    p.add_argument("--screens", nargs="+", default=list(SCREENS), choices=SCREENS)
    p.add_argument("--max-tokens", type=int, default=60, help="the answer screen's answer, at most")
    args = p.parse_args()
    sys.path.insert(0, str(REPO))  # run as a file, Python looks for `app` next to it, in scripts/
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    folder = Path(tempfile.mkdtemp(prefix="specquant-shots-"))
    os.environ["SPECQUANT_CONFIG_DIR"] = str(folder / "config")  # no mcp.json of the user's: the same shots anywhere
    from runtime.models.cache import DEMO_NAME, cache_root

    if not (cache_root() / DEMO_NAME).is_dir():
        from converters.convert import convert

        os.environ["SPECQUANT_CACHE_DIR"] = str(folder / "cache")
        convert("demo", root=folder / "cache")

    from PySide6.QtCore import QEventLoop, QSettings
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app.add_server_dialog import AddServerDialog
    from app.approval_dialog import ApprovalDialog
    from app.help_menu import about_text, build_facts
    from app.settings import AppSettings, save_settings
    from app.store import Store
    from app.window import MainWindow
    from app.window_panels import EXAMPLES
    from runtime.mcp import CallRequest

    app = QApplication(sys.argv[:1])
    qsettings = QSettings(str(folder / "settings.ini"), QSettings.Format.IniFormat)
    save_settings(AppSettings(theme="light", seed=0, max_tokens=args.max_tokens), qsettings)
    window = MainWindow(Store(folder / "conversations.sqlite3"), qsettings)
    window.resize(*SIZE)
    window.show()

    def settle() -> None:
        for _ in range(5):  # layouts settle over a few passes (the transcript lays out lazily)
            app.processEvents()

    args.out.mkdir(parents=True, exist_ok=True)
    faults = 0
    for screen in args.screens:
        shown: QWidget = window
        if screen == "answer":
            answered: list[str] = []
            window.answer_finished.connect(answered.append)
            window.pane.ask(EXAMPLES[0])
            deadline = time.monotonic() + ANSWER_S  # a model that never answers must not hang the script
            while not answered and time.monotonic() < deadline:
                app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
                time.sleep(0.01)
            if not answered or not answered[0]:
                print(f"answer: none came within {ANSWER_S} s")
                faults += 1
        elif screen == "text":
            chat = window.store.create("A poem and a list")
            window.store.add_message(chat, "user", TEXT_QUESTION)
            window.store.add_message(chat, "assistant", TEXT_ANSWER, {})
            window.open_conversation(chat)
        elif screen == "tools":
            window.side_tabs.setCurrentWidget(window.tools_panel)
        elif screen == "addserver":
            shown = AddServerDialog(window)
            shown.show()
        elif screen == "approval":
            server, tool, arguments, description = APPROVAL
            shown = ApprovalDialog(CallRequest(server, tool, arguments, description=description), window)
            shown.show()
        elif screen == "models":
            window.show_models()
            shown = window.models
        elif screen == "about":
            shown = QMessageBox(QMessageBox.Icon.NoIcon, "About SpecQuant", about_text(build_facts()),
                                QMessageBox.StandardButton.Ok, window)
            shown.show()
        settle()
        path = args.out / f"window-{screen}.png"
        shown.grab().save(str(path))
        problems = cut_off(shown)
        faults += bool(problems)
        print(f"{path}: " + ("; ".join(problems) if problems else "no text cut off"))
        if shown is not window:
            shown.close()
        window.side_tabs.setCurrentIndex(0)
    window.close()
    app.processEvents()
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
