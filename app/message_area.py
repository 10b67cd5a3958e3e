"""The window's messages that stay until read (#51): an export's path, an import, a presets.json fault, a
model a chat used that is gone. Each is a word-wrapped, selectable line with a close button, above the chat;
unlike a status-bar flash it is neither cut off behind the figures nor gone after a few seconds."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

MAX_NOTES = 2  # the oldest go when more arrive: four shrank the transcript at 1024×640 (#63)


class Note(QWidget):
    """One message, its action button when it offers one, and its close button."""

    def __init__(self, text: str, parent: QWidget | None = None, action: str = "") -> None:
        super().__init__(parent)
        self.setObjectName("note")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setStyleSheet("#note { border: 1px solid palette(mid); border-radius: 4px; }")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 4, 4)
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setAccessibleName("Message")
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setToolTip("Close this message")
        self.close_button.setAccessibleName("Close this message")
        layout.addWidget(self.label, 1)
        self.action_button = QPushButton(action) if action else None
        if self.action_button is not None:
            layout.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)


class MessageArea(QWidget):
    """The messages not yet closed, newest last; hidden when there are none."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Messages")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(2)
        self.hide()

    @property
    def notes(self) -> list[Note]:
        return [n for n in self.findChildren(Note) if not n.property("closing")]

    @property
    def texts(self) -> list[str]:
        """The messages shown, oldest first (what the tests read)."""
        return [n.label.text() for n in self.notes]

    def show_note(self, text: str, action: str = "", on_action: Callable[[], None] | None = None) -> None:
        """Add `text` (once: the same message again moves to the end rather than being shown twice), with a
        button `action` that calls `on_action` and closes the message."""
        if not text:
            return
        for old in self.notes:
            if old.label.text() == text:
                self._close(old)
        while len(self.notes) >= MAX_NOTES:
            self._close(self.notes[0])
        note = Note(text, self, action)
        note.close_button.clicked.connect(lambda: self._close(note))
        if note.action_button is not None and on_action is not None:
            note.action_button.clicked.connect(lambda: (self._close(note), on_action()))
        self._layout.addWidget(note)
        self.show()

    def _close(self, note: Note) -> None:
        note.setProperty("closing", True)  # deleteLater acts later: the note must stop counting now
        note.hide()
        self._layout.removeWidget(note)
        note.deleteLater()
        self.setVisible(bool(self.notes))
