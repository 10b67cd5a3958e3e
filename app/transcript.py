"""The transcript: Markdown messages with code blocks (each with a Copy link) in one selectable view.

Finished messages are rendered once. The answer in flight is re-rendered from a marker to the end of the
document at most every few frames, so streaming stays cheap however long the conversation grows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QPalette,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFrameFormat,
    QTextLength,
    QTextTableFormat,
)
from PySide6.QtWidgets import QTextBrowser, QWidget

from app.store import StoredMessage
from runtime.chat import stats_line

_FENCE = re.compile(r"^(```|~~~)[ \t]*([\w+#.-]*)[^\n]*$", re.MULTILINE)
DRAFT_TINT = QColor(255, 196, 0, 70)  # readable over light and dark text alike


@dataclass(frozen=True)
class Segment:
    kind: str  # text | code
    text: str
    lang: str = ""


def split_code(markdown: str) -> list[Segment]:
    """Text and fenced code blocks, in order; an unclosed fence (mid-stream) runs to the end as code."""
    out: list[Segment] = []
    pos = 0
    while True:
        opening = _FENCE.search(markdown, pos)
        if opening is None:
            break
        if opening.start() > pos:
            out.append(Segment("text", markdown[pos : opening.start()]))
        body_start = opening.end() + 1
        closing = re.compile(rf"^{re.escape(opening.group(1))}[ \t]*$", re.MULTILINE).search(markdown, body_start)
        end = closing.start() if closing else len(markdown)
        out.append(Segment("code", markdown[body_start:end].rstrip("\n"), opening.group(2)))
        pos = closing.end() if closing else len(markdown)
    if pos < len(markdown):
        out.append(Segment("text", markdown[pos:]))
    return [s for s in out if s.kind == "code" or s.text.strip()]


def draft_mask(flags: Sequence[bool]) -> list[list[int]]:
    """Per-character draft flags as [start, end) runs, compact enough to store with the message."""
    runs: list[list[int]] = []
    for i, flag in enumerate(flags):
        if flag:
            if runs and runs[-1][1] == i:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1])
    return runs


class TranscriptView(QTextBrowser):
    """Renders a conversation; emits `copied` with the code a Copy link put on the clipboard."""

    copied = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setAccessibleName("Conversation transcript")
        self.anchorClicked.connect(self._on_anchor)
        self.highlight_draft = False
        self._codes: list[str] = []
        self._live_start: int | None = None
        self._live_codes = 0

    # --- whole conversations -----------------------------------------------------------------------
    def show_messages(self, messages: Sequence[StoredMessage]) -> None:
        self.clear()
        self._codes.clear()
        self._live_start = None
        for m in messages:
            self._append(m.role, m.content, m.meta)
        self._scroll_to_end()

    # --- the answer in flight ----------------------------------------------------------------------
    def begin_live(self, role: str = "assistant") -> None:
        """Mark where the streamed answer starts; `update_live` redraws from here."""
        self._live_start = self._end_cursor().position()
        self._live_codes = len(self._codes)
        self._live_role = role

    def update_live(self, text: str, meta: dict | None = None) -> None:
        if self._live_start is None:
            self.begin_live()
        at_bottom = self._at_bottom()
        cursor = self._end_cursor()
        cursor.setPosition(self._live_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        del self._codes[self._live_codes :]
        self._append(self._live_role, text, meta or {})
        if at_bottom:
            self._scroll_to_end()

    # --- rendering ---------------------------------------------------------------------------------
    def _append(self, role: str, content: str, meta: dict) -> None:
        cursor = self._new_block(top_margin=14)
        who = {"user": "You", "assistant": "Assistant", "system": "System"}.get(role, role)
        head = QTextCharFormat()
        head.setFontWeight(QFont.Weight.Bold)
        head.setForeground(self.palette().color(QPalette.ColorRole.Highlight))
        cursor.insertText(who, head)
        mask = meta.get("draft_mask") if self.highlight_draft and role == "assistant" else None
        if role != "assistant":
            self._plain(content)
        elif mask is not None:
            self._highlighted(content, mask)
        else:
            for seg in split_code(content):
                if seg.kind == "code":
                    self._code(seg)
                else:
                    self._new_block().insertMarkdown(seg.text.strip("\n"))
        line = stats_line(meta) if role == "assistant" else ""
        if line:
            small = QTextCharFormat()
            small.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
            small.setFontPointSize(max(7.0, self.font().pointSizeF() * 0.85))
            self._new_block().insertText(line, small)

    def _plain(self, text: str) -> None:
        for line in text.split("\n"):
            self._new_block().insertText(line, QTextCharFormat())

    def _highlighted(self, text: str, runs: list[list[int]]) -> None:
        """Plain text with the draft's characters tinted (Markdown is skipped so the spans stay exact)."""
        cursor = self._new_block()
        plain, tinted = QTextCharFormat(), QTextCharFormat()
        tinted.setBackground(DRAFT_TINT)
        tinted.setToolTip("proposed by the draft, accepted by the parent")
        pos = 0
        for start, end in [*runs, [len(text), len(text)]]:
            for part, fmt in ((text[pos:start], plain), (text[start:end], tinted)):
                for i, line in enumerate(part.split("\n")):
                    if i:
                        cursor = self._new_block()
                    if line:
                        cursor.insertText(line, fmt)
            pos = end

    def _code(self, seg: Segment) -> None:
        cursor = self._new_block()
        fmt = QTextTableFormat()
        fmt.setBorder(0)
        fmt.setCellPadding(8)
        fmt.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
        fmt.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_None)
        table = cursor.insertTable(1, 1, fmt)
        mono = QTextCharFormat()
        mono.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        cell_format = table.cellAt(0, 0).format()
        cell_format.setBackground(self._code_background())  # a table's own background is not painted
        table.cellAt(0, 0).setFormat(cell_format)
        cell = table.cellAt(0, 0).firstCursorPosition()
        for i, line in enumerate(seg.text.split("\n")):
            if i:
                cell.insertBlock()
            cell.insertText(line, mono)
        self._codes.append(seg.text)
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(f"copy:{len(self._codes) - 1}")
        link.setForeground(self.palette().color(QPalette.ColorRole.Link))
        link.setFontPointSize(max(7.0, self.font().pointSizeF() * 0.85))
        self._new_block().insertText("Copy" + (f" {seg.lang}" if seg.lang else " code"), link)

    def _code_background(self) -> QColor:
        """The base colour moved 8% towards the text colour: visible in light and dark themes alike."""
        base, text = self.palette().color(QPalette.ColorRole.Base), self.palette().color(QPalette.ColorRole.Text)
        rgb = (b + (t - b) * 0.08 for b, t in zip(base.getRgbF()[:3], text.getRgbF()[:3], strict=True))
        return QColor.fromRgbF(*rgb)

    def _new_block(self, top_margin: int = 2) -> QTextCursor:
        cursor = self._end_cursor()
        block = QTextBlockFormat()
        block.setTopMargin(top_margin)
        if self.document().isEmpty():
            cursor.setBlockFormat(block)
        else:
            cursor.insertBlock(block, QTextCharFormat())
        return cursor

    def _end_cursor(self) -> QTextCursor:
        return self.document().rootFrame().lastCursorPosition()

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def _scroll_to_end(self) -> None:
        self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == "copy":
            index = int(url.path() or -1)
            if 0 <= index < len(self._codes):
                QGuiApplication.clipboard().setText(self._codes[index])
                self.copied.emit(self._codes[index])
