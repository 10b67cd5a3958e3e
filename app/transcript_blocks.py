"""The blocks under an answer in the transcript: the sources it was given (a link per file, the passage as the
tooltip) and its tool calls (a one-line block each, opened by a click to the arguments and the result, shown
as plain text). A part of app.transcript's TranscriptView, kept apart to be read on its own."""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QFont, QFontDatabase, QPalette, QTextCharFormat, QTextCursor

from app.open_source import source_url
from app.transcript_text import call_heading, shown_arguments, shown_result, source_label, source_tooltip


class AnswerBlocks:
    """TranscriptView's sources and call blocks (it provides the drawing helpers these use)."""

    expanded: set[str]
    _calls: list[str]

    def _call(self, call: dict[str, Any]) -> None:
        """A call's block: its line as a link that opens or closes it; open, its arguments and result."""
        palette = self._colours()
        small = self._small()
        is_open = call["id"] in self.expanded
        link = QTextCharFormat(small)
        link.setAnchor(True)
        link.setAnchorHref(f"call:{len(self._calls)}")
        link.setForeground(palette.color(QPalette.ColorRole.Link))
        link.setToolTip("Hide the arguments and the result" if is_open else "Show the arguments and the result")
        self._calls.append(call["id"])
        self._new_block(top_margin=self._line() * 0.3).insertText(
            ("▾ " if is_open else "▸ ") + call_heading(call), link
        )
        if not is_open:
            return
        label = QTextCharFormat(small)
        label.setFontWeight(QFont.Weight.Bold)
        mono = QTextCharFormat()
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setPointSizeF(self.font().pointSizeF() * 0.9)
        mono.setFont(font)
        mono.setForeground(palette.color(QPalette.ColorRole.Text))
        result = str(call.get("result") or "") or "(no result yet)"
        for title, text in (("Arguments", shown_arguments(str(call.get("arguments") or ""))),
                            ("Result", shown_result(result))):
            self._indented_block(self._line() * 0.2).insertText(title, label)
            self._indented_block().insertText(text, mono)  # plain text: a result's markup is shown, not run

    def _indented_block(self, top_margin: float = 0) -> QTextCursor:
        cursor = self._new_block(top_margin)
        fmt = cursor.blockFormat()
        fmt.setLeftMargin(self._line())
        cursor.setBlockFormat(fmt)
        return cursor

    def toggle_call(self, call_id: str) -> None:
        """Open or close a call's block, drawing the conversation again where the reader is."""
        self.expanded ^= {call_id}
        bar = self.verticalScrollBar()
        value = bar.value()
        live = self._live_start is not None
        role, (text, meta) = self._live_role, self._live_shown
        self.show_messages(self._messages)
        if live:
            self.begin_live(role)
            self.update_live(text, meta)
        bar.setValue(value)

    def _sources(self, citations: list[dict[str, Any]]) -> None:
        """"Sources" and one small link per source: to its file, the passage as the tooltip."""
        if not citations:
            return
        palette = self._colours()
        small = self._small()
        head = QTextCharFormat(small)
        head.setFontWeight(QFont.Weight.Bold)
        self._new_block(top_margin=self._line() * 0.4).insertText("Sources", head)
        for c in citations:
            link = QTextCharFormat(small)
            link.setAnchor(True)
            page = c.get("page") if isinstance(c.get("page"), int) else None
            link.setAnchorHref(source_url(str(c["path"]), page).toString())
            link.setForeground(palette.color(QPalette.ColorRole.Link))
            link.setToolTip(source_tooltip(c))
            self._new_block().insertText(source_label(c), link)
