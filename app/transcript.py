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
characters whose source came from an accepted draft token get the tint.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

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
from app.open_source import open_source, source_url
from app.plain_words import meta_line, meta_tooltip
from app.store import StoredMessage, tool_rounds

_FENCE = re.compile(r"^(```|~~~)[ \t]*([\w+#.-]*)[^\n]*$", re.MULTILINE)
_SPACE = re.compile(r"\s")
DRAFT_TINT = QColor(255, 196, 0, 70)  # readable over light and dark text alike
COLUMN_EM = 52  # the reading column's widest measure, in font heights (~70 characters of prose)
TOOLTIP_CHARS = 1200  # a source's passage in its tooltip, at most (a chunk is ~1,200-1,600 characters)
RESULT_CHARS = 4000  # a tool's result as an expanded call block shows it, at most (the model read it whole)
OUTCOMES = {"proposed": "waiting for approval", "running": "running…"}  # a call still under way


@dataclass(frozen=True)
class Segment:
    kind: str  # text | code
    text: str
    lang: str = ""
    start: int = 0  # where `text` starts in the message (maps the draft flags onto it)
    closed: bool = True  # False for a fence still open at the end (mid-stream)


def split_code(markdown: str) -> list[Segment]:
    """Text and fenced code blocks, in order; an unclosed fence (mid-stream) runs to the end as code."""
    out: list[Segment] = []
    pos = 0
    while True:
        opening = _FENCE.search(markdown, pos)
        if opening is None:
            break
        if opening.start() > pos:
            out.append(Segment("text", markdown[pos : opening.start()], start=pos))
        body_start = opening.end() + 1
        closing = re.compile(rf"^{re.escape(opening.group(1))}[ \t]*$", re.MULTILINE).search(markdown, body_start)
        end = closing.start() if closing else len(markdown)
        body = markdown[body_start:end].rstrip("\n")
        out.append(Segment("code", body, opening.group(2), start=body_start, closed=closing is not None))
        pos = closing.end() if closing else len(markdown)
    if pos < len(markdown):
        out.append(Segment("text", markdown[pos:], start=pos))
    return [s for s in out if s.kind == "code" or s.text.strip()]


_BLOCK_START = re.compile(r"[ \t]*(#|>|[-*+][ \t]|\d+[.)]([ \t]|$)|\||```|~~~|<|[-=*_ \t]+$)")
LINE_BREAK = "\u2028"  # a line break inside a paragraph: Qt's text layout breaks there, Markdown does not


def keep_line_breaks(markdown: str) -> str:
    """Each line break as the writer made it. Markdown joins a paragraph's lines with a space, so a poem or an
    address would run on as one line: a line that only continues the one before (not a list item, heading,
    quote marker, table row, fence or rule) is joined to it with LINE_BREAK, which Markdown leaves as text and
    Qt shows as a break in the same paragraph (a Markdown hard break would start a new block, and in a list a
    new item). Lines of a quote join the same way; code fences are split off before this."""
    lines = markdown.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        last = out[-1].split(LINE_BREAK)[-1]
        plain = (last.strip() and line.strip() and not last.startswith(("    ", "\t")) and "|" not in last
                 and not last.lstrip().startswith("#"))
        if plain and not _BLOCK_START.match(line):
            out[-1] += LINE_BREAK + line.lstrip()
        elif plain and last.lstrip().startswith(">") and line.lstrip().startswith(">") and line.lstrip(" >").strip():
            out[-1] += LINE_BREAK + line.lstrip(" >")
        else:
            out.append(line)
    return "\n".join(out)


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


def draft_flags(runs: Sequence[Sequence[int]], length: int) -> list[bool]:
    """The inverse of draft_mask, clipped to `length` characters."""
    flags = [False] * length
    for start, end in runs:
        flags[max(0, start) : min(length, end)] = [True] * max(0, min(length, end) - max(0, start))
    return flags


def align(rendered: str, source: str) -> list[int | None]:
    """For each rendered character, the index of the source character it shows (None: shown from nothing,
    e.g. an image's placeholder). Greedy: the next equal source character; any whitespace (a paragraph
    break, a soft line break shown as a space) matches the next source whitespace."""
    out: list[int | None] = []
    j = 0
    for ch in rendered:
        if ch.isspace():
            m = _SPACE.search(source, j)
            k = m.start() if m else -1
        else:
            k = source.find(ch, j)
        if k < 0:
            out.append(None)
        else:
            out.append(k)
            j = k + 1
    return out


def source_label(citation: dict[str, Any]) -> str:
    """`[1] install.md — lines 1-8, "Installing"`: the number the answer cites, the file's name, where in it."""
    where = ["whole document"] if citation.get("whole") is True else []
    if isinstance(citation.get("page"), int):
        where.append(f"page {citation['page']}")
    lines = citation.get("lines")
    if isinstance(lines, list) and len(lines) == 2:
        where.append(f"line {lines[0]}" if lines[0] == lines[1] else f"lines {lines[0]}-{lines[1]}")
    if citation.get("heading"):
        where.append(f'"{citation["heading"]}"')
    name = PurePath(str(citation.get("path", ""))).name
    return f"[{citation.get('n', '?')}] {name}" + (f" — {', '.join(where)}" if where else "")


def source_tooltip(citation: dict[str, Any]) -> str:
    """The passage the answer was given, as rich text (so that `<` in it is shown, not parsed), cut short."""
    text = str(citation.get("text", "")).strip()
    if len(text) > TOOLTIP_CHARS:
        text = text[:TOOLTIP_CHARS] + " …"
    return f"<p style='white-space: pre-wrap'>{html.escape(text)}</p>"


def call_heading(call: dict[str, Any]) -> str:
    """A call block's line: `files › read_file — allowed — 0.12 s` (denied: no time; under way: its state)."""
    head = f"{call.get('server') or '?'} › {call.get('tool') or call.get('name') or '?'}"
    outcome = str(call.get("outcome") or "allowed")
    if outcome in OUTCOMES:
        return f"{head} — {OUTCOMES[outcome]}"
    if outcome == "denied":
        return f"{head} — denied"
    if outcome == "allowed" and call.get("is_error"):
        outcome = "allowed, failed"
    elapsed = call.get("elapsed_s")
    return f"{head} — {outcome}" + (f" — {elapsed:.2f} s" if isinstance(elapsed, int | float) else "")


def shown_arguments(arguments: str) -> str:
    """The arguments as indented JSON where they parse, else as the model wrote them."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return arguments


def shown_result(text: str, limit: int = RESULT_CHARS) -> str:
    """A result cut to `limit` characters for the transcript, with a note saying how much is not shown."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit:,} more characters not shown here; the model read them all]"


class TranscriptView(QTextBrowser):
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
            small = QTextCharFormat()
            small.setForeground(palette.color(QPalette.ColorRole.PlaceholderText))
            small.setFontPointSize(max(7.0, self.font().pointSizeF() * 0.85))
            small.setToolTip(meta_tooltip(meta))  # the technical line, on demand (#51)
            self._new_block(top_margin=self._line() * 0.2).insertText(line, small)

    def _body(self, content: str, flags: list[bool] | None, live: bool) -> None:
        for seg in split_code(content):
            if seg.kind == "code":
                self._code(seg, flags, colour=seg.closed or not live)
            else:
                self._markdown(seg, flags)

    def _call(self, call: dict[str, Any]) -> None:
        """A call's block: its line as a link that opens or closes it; open, its arguments and result."""
        palette = self._colours()
        small = QTextCharFormat()
        small.setForeground(palette.color(QPalette.ColorRole.PlaceholderText))
        small.setFontPointSize(max(7.0, self.font().pointSizeF() * 0.85))
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
        small = QTextCharFormat()
        small.setForeground(palette.color(QPalette.ColorRole.PlaceholderText))
        small.setFontPointSize(max(7.0, self.font().pointSizeF() * 0.85))
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
        tinted = [
            start + i
            for i, k in enumerate(align(rendered, source))
            if k is not None and flags[k] and source[k] == rendered[i]  # a newline shown as a space is not
        ]
        fmt = QTextCharFormat()
        fmt.setBackground(DRAFT_TINT)
        fmt.setToolTip("proposed by the draft, accepted by the parent")
        cursor = QTextCursor(doc)
        i = 0
        while i < len(tinted):
            j = i
            while j + 1 < len(tinted) and tinted[j + 1] == tinted[j] + 1:
                j += 1
            cursor.setPosition(tinted[i])
            cursor.setPosition(tinted[j] + 1, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(fmt)
            i = j + 1

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
