"""The question before a tool runs (#43): which server, which tool, with which arguments; Allow once, Always
allow this tool, or Deny. Esc, closing it, Stop and closing the window all deny.

Everything shown is plain text (a server's or a tool's name is never read as markup), and only the call the
model proposed is shown: a tool's result is not part of this dialog, so nothing a tool says can stand in for
the user's answer.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from runtime.mcp import ApprovalAnswer, CallRequest


class ApprovalDialog(QDialog):
    """Window-modal, opened with `open()` (no nested event loop): `decided` carries the answer once."""

    decided = Signal(object)  # runtime.mcp.ApprovalAnswer

    def __init__(self, request: CallRequest, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.request = request
        self.decision = ApprovalAnswer.DENY  # until a button says otherwise: Esc and the close box deny
        self.setWindowTitle("Allow this tool call?")
        self.setModal(True)
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)  # the names sit beside their labels
        for row, (label, value) in enumerate((("Server:", request.server), ("Tool:", request.tool))):
            shown = QLabel(value)
            shown.setTextFormat(Qt.TextFormat.PlainText)
            shown.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(QLabel(label), row, 0)
            grid.addWidget(shown, row, 1)
        self.server_label = grid.itemAtPosition(0, 1).widget()
        self.tool_label = grid.itemAtPosition(1, 1).widget()
        self.arguments = QPlainTextEdit(request.arguments_text())
        self.arguments.setReadOnly(True)
        self.arguments.setAccessibleName("Arguments")
        self.arguments.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.allow_once_button = QPushButton("Allow &once")
        self.always_button = QPushButton("&Always allow this tool")
        self.deny_button = QPushButton("&Deny")
        self.allow_once_button.clicked.connect(lambda: self._answer(ApprovalAnswer.ALLOW_ONCE))
        self.always_button.clicked.connect(lambda: self._answer(ApprovalAnswer.ALWAYS))
        self.deny_button.clicked.connect(lambda: self._answer(ApprovalAnswer.DENY))
        # Enter on a dialog the user did not read must not run anything: Deny is the default and has the focus.
        for b in (self.allow_once_button, self.always_button):
            b.setAutoDefault(False)
        self.deny_button.setDefault(True)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for b in (self.allow_once_button, self.always_button, self.deny_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("The model wants to run a tool:"))
        layout.addLayout(grid)
        layout.addWidget(QLabel("&Arguments:", buddy=self.arguments))
        layout.addWidget(self.arguments, 1)
        layout.addLayout(buttons)
        self.resize(520, 360)
        self.deny_button.setFocus()
        self._told = False
        self.finished.connect(self._tell)

    def _tell(self, _result: int) -> None:
        if not self._told:  # a Stop after the answer must not answer again
            self._told = True
            self.decided.emit(self.decision)

    def _answer(self, decision: ApprovalAnswer) -> None:
        self.decision = decision
        self.accept() if decision is not ApprovalAnswer.DENY else self.reject()


class ApprovalPrompt:
    """A window's one open question: `ask` opens it (closing, so denying, any earlier one), the user's
    ApprovalAnswer goes to `answer`, and `close` denies what is still open (Stop, the turn's end, the window's)."""

    def __init__(self, parent: QWidget, answer: Callable[[ApprovalAnswer], None]) -> None:
        self.parent, self.answer = parent, answer
        self.dialog: ApprovalDialog | None = None  # the question open now

    def ask(self, request: CallRequest) -> None:
        self.close()
        dialog = self.dialog = ApprovalDialog(request, self.parent)
        dialog.decided.connect(lambda decision: self._decided(dialog, decision))
        dialog.open()

    def close(self) -> None:
        if self.dialog is not None:
            self.dialog.reject()  # Deny

    def _decided(self, dialog: ApprovalDialog, decision: ApprovalAnswer) -> None:
        if self.dialog is dialog:
            self.dialog = None
        self.answer(decision)
        dialog.deleteLater()
