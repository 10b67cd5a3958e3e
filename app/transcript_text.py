"""The text the transcript shows, without Qt: a message split into prose and fenced code, the writer's line
breaks and indentation kept through Markdown, the draft tint's runs and how rendered characters map onto the
source, and the words of a source link and of a tool call's block."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

_FENCE = re.compile(r"^(```|~~~)[ \t]*([\w+#.-]*)[^\n]*$", re.MULTILINE)
_SPACE = re.compile(r"\s")
TOOLTIP_CHARS = 1200  # a source's passage in its tooltip, at most (a chunk is ~1,200-1,600 characters)
RESULT_CHARS = 4000  # a tool's result as an expanded call block shows it, at most (the model read it whole)
RESULT_PREVIEW = 60  # characters of a call's result shown on its one-line block
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


_CONTENT_COLUMN = re.compile(r"[ \t]*(?:(?:[-*+]|\d+[.)])[ \t]+)?")  # where a paragraph's (or list item's) text starts
NBSP = "\u00a0"  # a kept indentation: neither Markdown nor Qt's layout drops it at a line's start
TAB_COLUMNS = 4


def keep_line_breaks(markdown: str) -> str:
    """Each line break and indentation as the writer made them. Markdown joins a paragraph's lines with a
    space, so a poem or an address would run on as one line: a line that only continues the one before (not a
    list item, heading, quote marker, table row, fence or rule) is joined to it with LINE_BREAK, which Markdown
    leaves as text and Qt shows as a break in the same paragraph (a Markdown hard break would start a new
    block, and in a list a new item). Its indentation past the paragraph's own (a list item's text column) is
    kept as no-break spaces, a tab as four (#63: an indented line of a poem showed flush left). Lines of a
    quote join the same way; code fences are split off before this."""
    lines = markdown.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        last = out[-1].split(LINE_BREAK)[-1]
        plain = (last.strip() and line.strip() and not out[-1].startswith(("    ", "\t")) and "|" not in last
                 and not last.lstrip().startswith("#"))
        if plain and not _BLOCK_START.match(line):
            out[-1] += LINE_BREAK + _indented(line, _columns(_CONTENT_COLUMN.match(out[-1]).group()))
        elif plain and last.lstrip().startswith(">") and line.lstrip().startswith(">") and line.lstrip(" >").strip():
            out[-1] += LINE_BREAK + line.lstrip(" >")
        else:
            out.append(line)
    return "\n".join(out)


def _columns(indent: str) -> int:
    return sum(TAB_COLUMNS if c == "\t" else 1 for c in indent)


def _indented(line: str, column: int) -> str:
    """`line` without its leading whitespace, its indentation past `column` as no-break spaces."""
    text = line.lstrip(" \t")
    return NBSP * max(0, _columns(line[: len(line) - len(text)]) - column) + text


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


def tint_runs(rendered: str, source: str, flags: Sequence[bool]) -> list[tuple[int, int]]:
    """[start, end) runs of the rendered characters whose source characters came from the draft (a newline
    shown as a space is not one of them)."""
    runs: list[tuple[int, int]] = []
    for i, k in enumerate(align(rendered, source)):
        if k is not None and flags[k] and source[k] == rendered[i]:
            runs[-1:] = [(runs[-1][0], i + 1)] if runs and runs[-1][1] == i else [*runs[-1:], (i, i + 1)]
    return runs


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
    """A call block's line: `calc › add — allowed — 0.12 s → 42` (denied: no time; under way: its state)."""
    head = f"{call.get('server') or '?'} › {call.get('tool') or call.get('name') or '?'}"
    outcome = str(call.get("outcome") or "allowed")
    if outcome in OUTCOMES:
        return f"{head} — {OUTCOMES[outcome]}"
    if outcome == "denied":
        return f"{head} — denied"
    if outcome == "allowed" and call.get("is_error"):
        outcome = "allowed, failed"
    elapsed = call.get("elapsed_s")
    line = f"{head} — {outcome}" + (f" — {elapsed:.2f} s" if isinstance(elapsed, int | float) else "")
    # What came back, at a glance (#63: only inside the collapsed block): its first line, cut short.
    result = " ".join(str(call.get("result") or "").split())
    if outcome == "allowed" and result:
        line += f" → {result[:RESULT_PREVIEW]}" + ("…" if len(result) > RESULT_PREVIEW else "")
    return line


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
