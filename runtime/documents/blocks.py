"""Blocks: the structural units extraction yields (a paragraph, a heading's line, a PDF page's paragraph, a
function), each with where it came from. The chunker joins them into chunks; nothing here sizes them.

Prose formats are split here: plain text by blank lines, Markdown and reStructuredText by headings too. Only
heading lines and fences matter to chunking, so a line scanner does it rather than a full parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runtime.errors import SpecQuantError


class ExtractError(SpecQuantError):
    """A file that cannot be indexed; the message is its one-line reason."""


@dataclass(frozen=True)
class Block:
    """Text with its page (PDF, 1-based), line range (1-based, inclusive) and heading trail where known."""

    text: str
    heading: str | None = None
    page: int | None = None
    first_line: int | None = None
    last_line: int | None = None


class Trail:
    """The headings above the current line, shown as "Install > On Linux"."""

    def __init__(self) -> None:
        self._levels: list[tuple[int, str]] = []

    def enter(self, level: int, title: str) -> None:
        while self._levels and self._levels[-1][0] >= level:
            self._levels.pop()
        title = " ".join(title.split())
        if title:
            self._levels.append((level, title))

    @property
    def text(self) -> str | None:
        return " > ".join(t for _, t in self._levels) or None


class _Collector:
    """Numbered lines gathered into paragraph blocks under the current heading."""

    def __init__(self, trail: Trail, page: int | None = None, numbered: bool = True) -> None:
        self.trail, self.page, self.numbered = trail, page, numbered
        self.lines: list[tuple[int, str]] = []
        self.blocks: list[Block] = []

    def add(self, n: int, line: str) -> None:
        self.lines.append((n, line))

    def flush(self) -> None:
        text = "\n".join(line for _, line in self.lines).strip("\n")
        if text.strip():
            first, last = (self.lines[0][0], self.lines[-1][0]) if self.numbered else (None, None)
            self.blocks.append(Block(text, self.trail.text, self.page, first, last))
        self.lines = []

    def text(self, n: int, line: str) -> None:
        """A line of running text: kept in the paragraph, or, blank, the paragraph's end."""
        if line.strip():
            self.add(n, line)
        else:
            self.flush()

    def done(self) -> list[Block]:
        self.flush()
        return self.blocks


def text_blocks(
    lines: list[str], page: int | None = None, numbered: bool = True, trail: Trail | None = None
) -> list[Block]:
    """Paragraphs: runs of non-blank lines."""
    out = _Collector(trail or Trail(), page, numbered)
    for n, line in enumerate(lines, 1):
        out.text(n, line)
    return out.done()


_ATX_OPEN = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")


def _atx(line: str) -> tuple[int, str] | None:
    """An ATX heading's (level, title): `## Title ##`. String operations, not one regular expression: a pattern
    with the title between two runs of optional spaces backtracks quadratically (4.5 s on a line of 16k spaces)."""
    m = _ATX_OPEN.match(line)
    if m is None:
        return None
    rest = line[m.end() :].rstrip(" \t")
    body = rest.rstrip("#")
    if not body or body[-1] in " \t":  # a closing run of #s, after a space or alone
        rest = body
    return len(m.group(1)), rest.strip(" \t")


def markdown_blocks(lines: list[str]) -> list[Block]:
    """Paragraphs under ATX (`## Title`) and setext (underlined) headings; a fenced code block stays whole."""
    trail = Trail()
    out = _Collector(trail)
    fence: str | None = None
    for n, line in enumerate(lines, 1):
        if fence is not None:
            out.add(n, line)
            closing = line.strip()
            if closing.startswith(fence) and not closing.lstrip(fence[0]):
                fence = None
            continue
        if m := _FENCE.match(line):
            fence = m.group(1)
            out.add(n, line)
        elif atx := _atx(line):
            out.flush()
            trail.enter(*atx)
            out.add(n, line)
        elif (m := _SETEXT.fullmatch(line)) and len(out.lines) == 1 and not _atx(out.lines[0][1]):
            # Only a one-line paragraph above: `---` after a blank line is a rule, not a heading.
            title = out.lines.pop()
            out.flush()
            trail.enter(1 if m.group(1)[0] == "=" else 2, title[1])
            out.add(*title)
            out.add(n, line)
        else:
            out.text(n, line)
    return out.done()


_ADORNMENT = re.compile(r"([=\-`:'\"~^_*+#<>.])\1+[ \t]*")


def rst_blocks(lines: list[str]) -> list[Block]:
    """Paragraphs under reStructuredText section titles (underlined, or over- and underlined); a title's level is
    the order in which its adornment style first appears, as docutils ranks them."""
    trail = Trail()
    out = _Collector(trail)
    styles: list[tuple[str, bool]] = []

    def title(first: int, text: str, char: str, overline: bool, last: int) -> None:
        out.flush()
        if (char, overline) not in styles:
            styles.append((char, overline))
        trail.enter(styles.index((char, overline)) + 1, text)
        for n in range(first, last + 1):
            out.add(n, lines[n - 1])
        out.flush()

    i = 0
    while i < len(lines):
        line, nxt = lines[i], lines[i + 1] if i + 1 < len(lines) else ""
        after = lines[i + 2] if i + 2 < len(lines) else ""
        if _ADORNMENT.fullmatch(line) and nxt.strip() and after.rstrip() == line.rstrip() and not out.lines:
            title(i + 1, nxt, line.strip()[0], True, i + 3)
            i += 3
        elif (
            line.strip()
            and not line[0].isspace()
            and not out.lines
            and not _ADORNMENT.fullmatch(line)
            and _ADORNMENT.fullmatch(nxt)
            and len(nxt.rstrip()) >= len(line.rstrip())
        ):
            title(i + 1, line, nxt.strip()[0], False, i + 2)
            i += 2
        else:
            out.text(i + 1, line)
            i += 1
    return out.done()
