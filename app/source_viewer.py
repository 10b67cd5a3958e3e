"""A grounded answer's source shown in the window when no application opens its file (#51): the file's path
(selectable, to find it again) and the passages the answer was given from it, as the index stored them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

from app.transcript_text import source_label


def passages_of(messages: list[Any], path: str) -> list[dict[str, Any]]:
    """The citations of `path` among the messages' stored answers (their meta), each passage once."""
    seen: set[tuple[Any, ...]] = set()
    found = []
    for m in messages:
        for c in (getattr(m, "meta", None) or {}).get("citations") or []:
            key = (c.get("page"), tuple(c.get("lines") or ()), c.get("text"))
            if str(c.get("path")) == path and key not in seen:
                seen.add(key)
                found.append(c)
    return found


TITLE_CHARS = 40  # a file name in the title, at most (#63: titles were cut)


class SourceViewer(QDialog):
    """The path and the passages of one source file; a message says no application on this computer opens it."""

    def __init__(self, path: str, passages: list[dict[str, Any]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        name = Path(path).name  # a long name cut in the middle (its end says what it is): the title stays short
        short = name if len(name) <= TITLE_CHARS else f"{name[:TITLE_CHARS - 17]}…{name[-16:]}"
        self.setWindowTitle(f"Source: {short}")
        self.resize(640, 480)
        layout = QVBoxLayout(self)
        self.path_label = QLabel(f"No application on this computer opens this file, so its passages are shown "
                                 f"here.\n{path}")
        self.path_label.setWordWrap(True)
        self.path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.path_label.setAccessibleName("Source file")
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setAccessibleName("Passages")
        # Plain text kept as the index stored it: a passage is the file's own words, never rendered as markup.
        self.text.setPlainText("\n\n".join(f"{source_label(c)}\n{c.get('text', '')}" for c in passages)
                               or "The answer kept no passage of this file.")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(self.path_label)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)
