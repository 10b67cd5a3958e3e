"""A thinking model's thought in the transcript: a collapsible "Thinking" block above the answer, its heading
saying how long the thought ran (tokens and seconds). While the model thinks the block is open and grows; once
the answer begins it closes, and a click on its heading opens or closes it again (the transcript keeps which
blocks are open, as it does for tool calls). The thought is inserted as plain text, dimmed: never read as
Markdown or markup. It comes from the answer's stored meta (app.store.THINKING), so a conversation opened again
shows the same block."""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from PySide6.QtGui import QFont, QPalette, QTextCharFormat, QTextCursor

from app.stored_messages import THINKING


class ThinkingHost(Protocol):
    """What the block needs of app.transcript.TranscriptView (which imports this module)."""

    expanded: set[str]

    def font(self) -> QFont: ...

    def _colours(self) -> QPalette: ...

    def _line(self) -> float: ...

    def _new_block(self, top_margin: float = 0) -> QTextCursor: ...

    def _indented_block(self, top_margin: float = 0) -> QTextCursor: ...

SCHEME = "thinking"  # the heading's link: thinking:<key>
LIVE_KEY = "live"  # the answer in flight's block (its thought still grows, so no digest names it)
WAITING = ("", "…")  # what the answer in flight shows before its first words


def thought_of(meta: dict[str, Any]) -> str:
    """The answer's stored thought ("" for none, or for a malformed entry of an edited file)."""
    thought = meta.get(THINKING)
    return thought if isinstance(thought, str) else ""


def block_key(thought: str, live: bool) -> str:
    """What the transcript's set of open blocks remembers this block by."""
    return LIVE_KEY if live else hashlib.sha1(thought.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def heading(meta: dict[str, Any], thinking_now: bool) -> str:
    """"Thinking… · 42 tokens" while it runs; "Thinking · 120 tokens · 3.1 s" once the answer began."""
    tokens, seconds = meta.get("thinking_tokens"), meta.get("thinking_s")
    parts = ["Thinking…" if thinking_now else "Thinking"]
    if isinstance(tokens, int) and tokens > 0:
        parts.append(f"{tokens} tokens")
    if not thinking_now and isinstance(seconds, int | float) and seconds > 0:
        parts.append(f"{seconds:.1f} s")
    return " · ".join(parts)


def draw(view: ThinkingHost, meta: dict[str, Any], content: str, live: bool) -> None:
    """The block of an answer that thought, at the transcript's end (nothing for one that did not)."""
    thought = thought_of(meta)
    if not thought:
        return
    thinking_now = live and content.strip() in WAITING
    key = block_key(thought, live)
    is_open = thinking_now or key in view.expanded
    palette = view._colours()
    small = QTextCharFormat()
    small.setForeground(palette.color(QPalette.ColorRole.PlaceholderText))
    small.setFontPointSize(max(7.0, view.font().pointSizeF() * 0.85))
    link = QTextCharFormat(small)
    link.setAnchor(True)
    link.setAnchorHref(f"{SCHEME}:{key}")
    link.setForeground(palette.color(QPalette.ColorRole.Link))
    link.setToolTip("Hide the model's thoughts" if is_open else "Show the model's thoughts")
    view._new_block(top_margin=view._line() * 0.3).insertText(("▾ " if is_open else "▸ ") + heading(meta, thinking_now),
                                                              link)
    if is_open:
        view._indented_block(view._line() * 0.2).insertText(thought, small)  # plain text, dimmed
