"""Blocks joined into chunks of about 200-400 tokens that never cross a page or (in prose) a heading.

Tokens are estimated as characters / 4 (English under common BPE vocabularies; no tokenizer is loaded to
index). Code may join small neighbouring definitions into one chunk; prose keeps one heading per chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from runtime.documents.blocks import Block
from runtime.documents.budget import NO_DEADLINE, Deadline

CHARS_PER_TOKEN = 4
TARGET_TOKENS = 300  # a chunk stops growing once it has this many
MAX_TOKENS = 400  # and never grows past this; a longer block is cut at lines, then at spaces
LEAD_IN_TOKENS = 50  # a section this short joins the subsection after it
_SPACES = re.compile(" *")


@dataclass(frozen=True)
class Passage:
    """One piece of a document as indexed (a row of the `chunks` table), with where it came from. Not
    runtime.engine.answer.Chunk, which is a piece of an answer."""

    text: str
    heading: str | None = None
    page: int | None = None
    first_line: int | None = None
    last_line: int | None = None


def token_estimate(text: str) -> int:
    """The token estimate: ceil(characters / 4)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def chunk_blocks(blocks: list[Block], join_headings: bool = False, deadline: Deadline = NO_DEADLINE) -> list[Passage]:
    """Consecutive blocks joined up to TARGET_TOKENS. `join_headings`: blocks under different headings may
    share a chunk (code: small functions together); its heading then names them all. `deadline` is checked
    once per block."""
    chunks: list[Passage] = []
    group: list[Block] = []
    size = 0
    for block in (piece for b in blocks for piece in _cut(b)):
        deadline.check()
        n = token_estimate(block.text)
        if group and (
            block.page != group[0].page
            or (not join_headings and block.heading != group[-1].heading and not _lead_in(group, size, block))
            or size >= TARGET_TOKENS
            or size + n > MAX_TOKENS
        ):
            chunks.append(_join(group, join_headings))
            group, size = [], 0
        group.append(block)
        size += n + 1
    if group:
        chunks.append(_join(group, join_headings))
    return chunks


def _lead_in(group: list[Block], size: int, block: Block) -> bool:
    """Whether `group` is a short lead-in (a title, a line of intro) to `block`'s subsection: they go together
    rather than leave a chunk of a title alone."""
    parent = group[-1].heading
    return size < LEAD_IN_TOKENS and parent is not None and (block.heading or "").startswith(parent + " > ")


def _join(group: list[Block], join_headings: bool) -> Passage:
    # Prose: the deepest heading (a lead-in's trail is its prefix); code: every definition's name.
    headings = list(dict.fromkeys(b.heading for b in group if b.heading))
    if not join_headings:
        headings = headings[-1:]
    firsts = [b.first_line for b in group if b.first_line is not None]
    lasts = [b.last_line for b in group if b.last_line is not None]
    return Passage(
        "\n\n".join(b.text for b in group),
        ", ".join(headings) or None,
        group[0].page,
        min(firsts) if firsts else None,
        max(lasts) if lasts else None,
    )


def _cut(block: Block) -> list[Block]:
    """A block over MAX_TOKENS as pieces of about TARGET_TOKENS: whole lines where it has them, each piece
    keeping its own line range."""
    if token_estimate(block.text) <= MAX_TOKENS:
        return [block]
    limit = TARGET_TOKENS * CHARS_PER_TOKEN
    pieces: list[Block] = []
    lines: list[str] = []
    start = 0  # index of the first line in `lines` within the block
    length = 0
    for i, line in enumerate(block.text.split("\n")):
        if lines and length + len(line) > limit:
            pieces.append(_piece(block, "\n".join(lines), start, i - 1))
            lines, length, start = [], 0, i
        if len(line) > MAX_TOKENS * CHARS_PER_TOKEN:  # one huge line (minified code, a PDF page without breaks)
            pieces += [_piece(block, part, i, i) for part in _split_line(line, limit)]
            start = i + 1
            continue
        lines.append(line)
        length += len(line) + 1
    if lines:
        pieces.append(_piece(block, "\n".join(lines), start, start + len(lines) - 1))
    return [p for p in pieces if p.text.strip()]


def _piece(block: Block, text: str, first: int, last: int) -> Block:
    if block.first_line is None:
        return replace(block, text=text)
    return replace(block, text=text, first_line=block.first_line + first, last_line=block.first_line + last)


def _split_line(line: str, limit: int) -> list[str]:
    """A line cut into parts of at most `limit` characters, at the last space before the limit if any. Linear:
    it moves an offset along the line (cutting the rest off each time copied it, quadratic on a 16 MB line)."""
    parts = []
    start, end = 0, len(line)
    while end - start > limit:
        cut = line.rfind(" ", start + limit // 2, start + limit)
        cut = cut if cut > start else start + limit
        parts.append(line[start:cut])
        start = _SPACES.match(line, cut).end()  # type: ignore[union-attr]  # " *" always matches
    return [*parts, line[start:]] if start < end else parts
