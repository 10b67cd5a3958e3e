"""The transcript: Markdown messages with coloured code blocks (a header with the language and Copy) in one
selectable reading column.

Finished messages are rendered once. The answer in flight is re-rendered from a marker to the end of the
document at most every few frames, so streaming stays cheap however long the conversation grows. Closed code
blocks are lexed once (code_highlight caches by content); the block still being written is shown plain until
its fence closes, so a long block is never re-lexed on every frame.

A grounded answer's sources (its stored facts' "citations") follow it as a compact block: one link per
source, to the file, with the passage as its tooltip.

An answer that called tools shows each round's words and, for each call, a one-line block (collapsed by
default): "server › tool — allowed — 0.12 s". A click expands it to the arguments and the result, inserted as
plain text (never read as markup), a long result cut with a note. The blocks come from the answer's stored
meta, so they are the same when the conversation is opened again.

The draft tint is laid over the rendered Markdown: each rendered character is matched to the next equal
source character (Markdown only removes syntax, so the rendered text is a subsequence of the source), and
characters whose source came from an accepted draft token get the tint. The text itself, without Qt (code
fences, line breaks, the tint's runs, the words of sources and calls), is app.transcript_text.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, Qt, QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QFontInfo,
    QFontMetricsF,
    QGuiApplication,
    QPalette,
    QResizeEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFrame,
    QTextFrameFormat,
    QTextLength,
    QTextTableFormat,
)
from PySide6.QtWidgets import QApplication, QTextBrowser, QWidget

from app import thinking_block
from app.code_highlight import highlight, language_label, mix
from app.open_source import open_source
from app.plain_words import meta_line, meta_tooltip
from app.stored_messages import StoredMessage, tool_rounds
from app.transcript_blocks import AnswerBlocks
from app.transcript_text import (
    Segment,
    draft_flags,
    keep_line_breaks,
    split_code,
    tint_runs,
)

DRAFT_TINT = QColor(255, 196, 0, 70)  # readable over light and dark text alike
COLUMN_EM = 52  # the reading column's widest measure, in font heights (~70 characters of prose)


class TranscriptView(AnswerBlocks, QTextBrowser):
    """Renders a conversation; emits `copied` with the code a Copy link put on the clipboard, and
    `open_failed` with a source file that no application would open."""

    copied = Signal(str)
    open_failed = Signal(str)

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
        self._live_role = "assistant"
        self._frame: QTextFrame | None = None  # where blocks go: the root frame, or a user turn's frame
        self._fresh = False  # the block at the end is still unused (a new frame's first, the one after it)
        self._live_fresh = False
        self._messages: Sequence[StoredMessage] = ()  # what is shown, to draw again when a call block toggles
        self._live_shown: tuple[str, dict] = ("", {})  # the answer in flight as last drawn
        self._calls: list[str] = []  # the call ids of the blocks shown, in order (their links' numbers)
        self._live_calls = 0
        self.expanded: set[str] = set()  # call ids whose blocks are open

    # --- whole conversations -----------------------------------------------------------------------
    def show_messages(self, messages: Sequence[StoredMessage]) -> None:
        self.clear()
        self._messages = messages
        self._codes.clear()
        self._calls.clear()
        self._live_start = None
        self._frame = None
        self._fresh = False
        self._fit_column()  # clear() resets the root frame's format
        for m in messages:
            self._append(m.role, m.content, m.meta)
        self._scroll_to_end()

    # --- the answer in flight ----------------------------------------------------------------------
    def begin_live(self, role: str = "assistant") -> None:
        """Mark where the streamed answer starts; `update_live` redraws from here."""
        self._live_start = self._end_cursor().position()
        self._live_codes = len(self._codes)
        self._live_calls = len(self._calls)
        self._live_role = role
        self._live_fresh = self._fresh

    def update_live(self, text: str, meta: dict | None = None) -> None:
        if self._live_start is None:
            self.begin_live()
        at_bottom = self._at_bottom()
        cursor = self._end_cursor()
        cursor.setPosition(self._live_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        self._fresh = self._live_fresh  # removing leaves the block the answer started in, empty again
        del self._codes[self._live_codes :]
        del self._calls[self._live_calls :]
        self._live_shown = (text, meta or {})
        self._append(self._live_role, text, meta or {}, live=True)
        if at_bottom:
            self._scroll_to_end()

    # --- layout ------------------------------------------------------------------------------------
    def resizeEvent(self, event: QResizeEvent) -> None:
        self._fit_column(event.size().width())  # before the relayout the resize triggers anyway
        super().resizeEvent(event)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._fit_column()

    def _fit_column(self, width: int | None = None) -> None:
        """Centre a reading column of at most COLUMN_EM font heights: the root frame's side margins."""
        width = self.width() if width is None else width
        em = QFontInfo(self.font()).pixelSize()
        usable = width - self.verticalScrollBar().sizeHint().width() - 2 * self.frameWidth()
        side = max(em, (usable - COLUMN_EM * em) // 2)
        frame = self.document().rootFrame()
        fmt = frame.frameFormat()
        if fmt.leftMargin() != side or fmt.rightMargin() != side:  # an unchanged format would relayout too
            fmt.setLeftMargin(side)
            fmt.setRightMargin(side)
            frame.setFrameFormat(fmt)

    def _colours(self) -> QPalette:
        """The application's palette, unless this widget has its own: a theme switch re-renders at once,
        before the widget's copy of the palette follows (that waits for the next event-loop pass)."""
        if self.testAttribute(Qt.WidgetAttribute.WA_SetPalette):
            return self.palette()
        return QApplication.palette(self)

    def _small(self) -> QTextCharFormat:
        """The small, muted text of an answer's stats line, its sources and its calls."""
        small = QTextCharFormat()
        small.setForeground(self._colours().color(QPalette.ColorRole.PlaceholderText))
        small.setFontPointSize(max(7.0, self.font().pointSizeF() * 0.85))
        return small

    def _line(self) -> float:
        """One line of the widget's font: the unit for spacing, so it follows zoom and the platform."""
        return QFontMetricsF(self.font()).height()

    # --- rendering ---------------------------------------------------------------------------------
    def _append(self, role: str, content: str, meta: dict, live: bool = False) -> None:
        runs = meta.get("draft_mask") if self.highlight_draft and role == "assistant" else None
        flags = draft_flags(runs, len(content)) if runs is not None else None
        palette = self._colours()
        if role == "user":
            self._open_turn_frame()
        cursor = self._new_block(top_margin=0 if self._frame is not None else self._line())
        who = {"user": "You", "assistant": "Assistant", "system": "System"}.get(role, role)
        head = QTextCharFormat()
        head.setFontWeight(QFont.Weight.Bold)
        head.setForeground(palette.color(QPalette.ColorRole.Highlight if role == "user" else QPalette.ColorRole.Text))
        cursor.insertText(who, head)
        if role == "assistant":  # a thinking model's thought, collapsible, above the answer
            thinking_block.draw(self, meta, content, live)
        for r in tool_rounds(meta) if role == "assistant" else []:
            self._body(r["content"], None, live=False)
            for call in r["calls"]:
                self._call(call)
        self._body(content, flags, live)
        if self._frame is not None:
            self._frame = None
            self._fresh = True  # Qt keeps an empty block after a frame: the next turn starts in it
        citations = meta.get("citations") if role == "assistant" else None
        if isinstance(citations, list) and citations:
            self._sources([c for c in citations if isinstance(c, dict) and c.get("path")])
        line = meta_line(meta, content) if role == "assistant" else ""
        if line:
            small = self._small()
            small.setToolTip(meta_tooltip(meta))  # the technical line, on demand (#51)
            self._new_block(top_margin=self._line() * 0.2).insertText(line, small)

    def _body(self, content: str, flags: list[bool] | None, live: bool) -> None:
        for seg in split_code(content):
            if seg.kind == "code":
                self._code(seg, flags, colour=seg.closed or not live)
            else:
                self._markdown(seg, flags)

    def _open_turn_frame(self) -> None:
        """A user turn sits on a lightly tinted panel, so turns read apart at a glance."""
        palette = self._colours()
        fmt = QTextFrameFormat()
        fmt.setBackground(mix(palette.color(QPalette.ColorRole.Base), palette.color(QPalette.ColorRole.Highlight), 0.1))
        fmt.setPadding(self._line() * 0.5)
        fmt.setTopMargin(self._line() * (0 if self.document().isEmpty() else 1))
        fmt.setBottomMargin(self._line())  # the next block's own top margin is not applied after a frame
        fmt.setBorder(0)
        self._frame = self._end_cursor().insertFrame(fmt)
        self._fresh = True

    def _markdown(self, seg: Segment, flags: list[bool] | None) -> None:
        text = seg.text.strip("\n")
        offset = seg.start + len(seg.text) - len(seg.text.lstrip("\n"))
        cursor = self._new_block(top_margin=self._line() * 0.3)  # off a code block or the heading
        start = cursor.position()
        cursor.insertMarkdown(keep_line_breaks(text))  # LINE_BREAK is whitespace: align() maps it onto "\n"
        if flags is not None:
            self._tint(start, self._end_cursor().position(), text, flags[offset : offset + len(text)])

    def _tint(self, start: int, end: int, source: str, flags: list[bool]) -> None:
        """Tint the document's characters in [start, end) whose source characters came from the draft."""
        doc = self.document()
        rendered = "".join(doc.characterAt(p) for p in range(start, end))
        fmt = QTextCharFormat()
        fmt.setBackground(DRAFT_TINT)
        fmt.setToolTip("proposed by the draft, accepted by the parent")
        cursor = QTextCursor(doc)
        for a, b in tint_runs(rendered, source, flags):
            cursor.setPosition(start + a)
            cursor.setPosition(start + b, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(fmt)

    def _code(self, seg: Segment, flags: list[bool] | None, colour: bool) -> None:
        """A two-row table: a header (language, Copy) over the code, coloured unless `colour` is False."""
        palette = self._colours()
        base, text = palette.color(QPalette.ColorRole.Base), palette.color(QPalette.ColorRole.Text)
        body_bg, head_bg = mix(base, text, 0.06), mix(base, text, 0.13)
        cursor = self._new_block(top_margin=self._line() * 0.4)
        fmt = QTextTableFormat()
        fmt.setBorder(0)
        fmt.setCellSpacing(0)
        fmt.setCellPadding(self._line() * 0.4)
        fmt.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
        fmt.setColumnWidthConstraints([QTextLength(QTextLength.Type.PercentageLength, 50)] * 2)
        fmt.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_None)
        table = cursor.insertTable(2, 2, fmt)
        table.mergeCells(1, 0, 1, 2)
        for row, col, bg in ((0, 0, head_bg), (0, 1, head_bg), (1, 0, body_bg)):
            cell_format = table.cellAt(row, col).format()
            cell_format.setBackground(bg)  # a table's own background is not painted
            table.cellAt(row, col).setFormat(cell_format)
        small = self.font().pointSizeF() * 0.85
        label = QTextCharFormat()
        label.setForeground(mix(text, head_bg, 0.3))  # the placeholder grey is too faint on the header
        label.setFontPointSize(small)
        table.cellAt(0, 0).firstCursorPosition().insertText(language_label(seg.lang), label)
        self._codes.append(seg.text)
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(f"copy:{len(self._codes) - 1}")
        link.setForeground(palette.color(QPalette.ColorRole.Link))
        link.setFontPointSize(small)
        link.setToolTip("Copy the code to the clipboard")
        copy = table.cellAt(0, 1).firstCursorPosition()
        right = QTextBlockFormat()
        right.setAlignment(Qt.AlignmentFlag.AlignRight)
        copy.setBlockFormat(right)
        copy.insertText("Copy", link)
        mono = QTextCharFormat()
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setPointSizeF(self.font().pointSizeF() * 0.95)  # the system's mono size ignores the app's zoom
        mono.setFont(font)
        mono.setForeground(text)
        cell = table.cellAt(1, 0).firstCursorPosition()
        start = cell.position()
        spans = highlight(seg.text, seg.lang, body_bg, text) if colour else [(seg.text, QTextCharFormat())]
        for part, style in spans:
            fmt_part = QTextCharFormat(mono)
            fmt_part.merge(style)
            for i, piece in enumerate(part.split("\n")):
                if i:
                    cell.insertBlock()
                if piece:
                    cell.insertText(piece, fmt_part)
        if flags is not None:
            self._tint(start, cell.position(), seg.text, flags[seg.start : seg.start + len(seg.text)])

    def _new_block(self, top_margin: float = 0) -> QTextCursor:
        cursor = self._end_cursor()
        block = QTextBlockFormat()
        block.setTopMargin(top_margin)
        if self._fresh or (self._frame is None and self.document().isEmpty()):
            cursor.setBlockFormat(block)
            self._fresh = False
        else:
            cursor.insertBlock(block, QTextCharFormat())
        return cursor

    def _end_cursor(self) -> QTextCursor:
        return (self._frame or self.document().rootFrame()).lastCursorPosition()

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def _scroll_to_end(self) -> None:
        self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())

    def _on_anchor(self, url: QUrl) -> None:
        if url.isLocalFile():  # a source of a grounded answer: the system's application for the file
            if not open_source(url):
                self.open_failed.emit(url.toLocalFile())
            return
        if url.scheme() == thinking_block.SCHEME:  # a thought's block opens or closes as a call's does
            self.toggle_call(url.path())
            return
        if url.scheme() == "call":
            index = int(url.path() or -1)
            if 0 <= index < len(self._calls):
                self.toggle_call(self._calls[index])
            return
        if url.scheme() == "copy":
            index = int(url.path() or -1)
            if 0 <= index < len(self._codes):
                QGuiApplication.clipboard().setText(self._codes[index])
                self.copied.emit(self._codes[index])
