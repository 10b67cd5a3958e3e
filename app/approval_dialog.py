"""The question before a tool runs (#43): which server, which tool and what it does (its server's own
description), with which arguments, one per line; Allow once, Always allow this tool, Deny, or Stop answer.
Deny refuses this one call and the model goes on without it; Stop answer, Esc and closing the box refuse it
and stop the whole answer, as Esc does in the window (#63: Esc denied one call while the turn went on). Stop,
the turn's end and closing the window deny without stopping anything more.

Everything shown is plain text (a server's or a tool's name is never read as markup), and only the call the
model proposed and the tool's description are shown: a tool's result is not part of this dialog, so nothing a
tool returns can stand in for the user's answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import Qt, Signal
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
from runtime.terminal_text import visible, visible_lines

DESCRIPTION_CHARS = 600  # a server's long description is cut here (its whole text is the tooltip)
ESC_HINT = "Deny lets the model go on without this tool. Stop answer, or Esc, denies it and stops the answer."


def readable_arguments(arguments: Mapping[str, Any] | str) -> str:
    """The arguments one per line, `name: value` (a text as it is, without quotes; a list or an object as indented
    JSON); "(none)" for none; anything that is not an object, as the model wrote it. Control characters a
    terminal or a bidirectional override would act on are shown as escapes, line breaks kept."""
    value: Any = arguments
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return visible_lines(value)
    if not isinstance(value, Mapping):
        return visible_lines(json.dumps(value, indent=2, ensure_ascii=False))
    if not value:
        return "(none)"
    lines = []
    for name, v in value.items():
        text = v if isinstance(v, str) else json.dumps(v, indent=2, ensure_ascii=False)
        first, *rest = visible_lines(text).split("\n")
        lines.append(f"{visible(str(name))}: {first}")
        lines += [f"    {line}" for line in rest]  # a value's further lines, under it
    return "\n".join(lines)


class ApprovalDialog(QDialog):
    """Window-modal, opened with `open()` (no nested event loop): `decided` carries the answer once, and
    `stopped` says whether the user also asked to stop the answer (Stop answer, Esc, the close box)."""

    decided = Signal(object)  # runtime.mcp.ApprovalAnswer

    def __init__(self, request: CallRequest, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.request = request
        self.decision = ApprovalAnswer.DENY  # until a button says otherwise: Esc and the close box deny
        self.stopped = False  # the user stopped the answer (Esc, Stop answer, the close box)
        self._by_button = False  # a button answered, or the window closed the question
        self.setWindowTitle("Allow tool?")  # short: a plain window manager cuts a long title (#63)
        self.setModal(True)
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)  # the names sit beside their labels
        rows = [("Server:", request.server), ("Tool:", request.tool)]
        description = " ".join(request.description.split())
        if description:
            cut = description[:DESCRIPTION_CHARS] + ("…" if len(description) > DESCRIPTION_CHARS else "")
            rows.append(("What it does:", visible(cut)))
        for row, (label, value) in enumerate(rows):
            shown = QLabel(value)
            shown.setTextFormat(Qt.TextFormat.PlainText)
            shown.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            shown.setWordWrap(True)
            grid.addWidget(QLabel(label), row, 0, Qt.AlignmentFlag.AlignTop)
            grid.addWidget(shown, row, 1)
        self.server_label = grid.itemAtPosition(0, 1).widget()
        self.tool_label = grid.itemAtPosition(1, 1).widget()
        self.description_label = grid.itemAtPosition(2, 1).widget() if description else None
        if self.description_label is not None:
            self.description_label.setToolTip(visible(request.description))
            self.description_label.setAccessibleName("What the tool does, as its server describes it")
        self.arguments = QPlainTextEdit(readable_arguments(request.arguments))
        self.arguments.setReadOnly(True)
        self.arguments.setAccessibleName("Arguments")
        self.arguments.setToolTip("What the model wants to give the tool, one argument per line")
        self.allow_once_button = QPushButton("Allow &once")
        self.always_button = QPushButton("&Always allow this tool")
        self.deny_button = QPushButton("&Deny")
        self.stop_button = QPushButton("&Stop answer")
        self.stop_button.setToolTip("Deny this call and stop the answer (Esc)")
        self.allow_once_button.clicked.connect(lambda: self._answer(ApprovalAnswer.ALLOW_ONCE))
        self.always_button.clicked.connect(lambda: self._answer(ApprovalAnswer.ALWAYS))
        self.deny_button.clicked.connect(lambda: self._answer(ApprovalAnswer.DENY))
        self.stop_button.clicked.connect(self.reject)  # as Esc
        # Enter on a dialog the user did not read must not run anything: Deny is the default and has the focus.
        for b in (self.allow_once_button, self.always_button, self.stop_button):
            b.setAutoDefault(False)
        self.deny_button.setDefault(True)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for b in (self.allow_once_button, self.always_button, self.deny_button, self.stop_button):
            buttons.addWidget(b)
        hint = QLabel(ESC_HINT)
        hint.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("The model wants to run a tool:"))
        layout.addLayout(grid)
        layout.addWidget(QLabel("&Arguments:", buddy=self.arguments))
        layout.addWidget(self.arguments, 1)
        layout.addWidget(hint)
        layout.addLayout(buttons)
        self.resize(560, 380)
        self.deny_button.setFocus()
        self._told = False
        self.finished.connect(self._tell)

    def reject(self) -> None:
        """Esc, the close box or Stop answer (not a Deny, nor the window closing the question): stop too."""
        if not self._by_button:
            self.stopped = True
        super().reject()

    def close_denied(self) -> None:
        """The window ends the question (Stop, the turn's end, closing): a denial that stops nothing more."""
        self._by_button = True
        super().reject()

    def _tell(self, _result: int) -> None:
        if not self._told:  # a Stop after the answer must not answer again
            self._told = True
            self.decided.emit(self.decision)

    def _answer(self, decision: ApprovalAnswer) -> None:
        self.decision, self._by_button = decision, True
        self.accept() if decision is not ApprovalAnswer.DENY else super().reject()


class ApprovalPrompt:
    """A window's one open question: `ask` opens it (closing, so denying, any earlier one), the user's
    ApprovalAnswer goes to `answer` and, when the user stopped the answer there, `stop` is called after it;
    `close` denies what is still open (Stop, the turn's end, the window's)."""

    def __init__(
        self, parent: QWidget, answer: Callable[[ApprovalAnswer], None], stop: Callable[[CallRequest], None]
    ) -> None:
        self.parent, self.answer, self.stop = parent, answer, stop
        self.dialog: ApprovalDialog | None = None  # the question open now

    def ask(self, request: CallRequest) -> None:
        self.close()
        dialog = self.dialog = ApprovalDialog(request, self.parent)
        dialog.decided.connect(lambda decision: self._decided(dialog, decision))
        dialog.open()

    def close(self) -> None:
        if self.dialog is not None:
            self.dialog.close_denied()

    def _decided(self, dialog: ApprovalDialog, decision: ApprovalAnswer) -> None:
        if self.dialog is dialog:
            self.dialog = None
        self.answer(decision)
        if dialog.stopped:
            self.stop(dialog.request)
        dialog.deleteLater()
