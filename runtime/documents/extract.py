"""A file's bytes to blocks: the format from the name, then its extractor. Every failure is an ExtractError
with one line saying why; the index records it and goes on with the next file."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pygments.lexers import find_lexer_class_for_filename

from runtime.documents.blocks import Block, ExtractError, markdown_blocks, rst_blocks, text_blocks
from runtime.documents.budget import NO_DEADLINE, Deadline
from runtime.documents.chunk import Passage, chunk_blocks
from runtime.documents.decode import decode, lines_of

_BY_EXTENSION = {
    ".txt": "text", ".text": "text", ".log": "text", ".csv": "text", ".tsv": "text",
    ".md": "markdown", ".markdown": "markdown", ".mdown": "markdown", ".mkd": "markdown", ".mdx": "markdown",
    ".rst": "rst", ".rest": "rst",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".py": "python", ".pyw": "python", ".pyi": "python",
}  # fmt: skip
FORMATS = ("text", "markdown", "rst", "html", "pdf", "docx", "python", "code")


def detect_format(name: str, named: bool = False) -> str | None:
    """The format of a file called `name`: by extension, then any language Pygments knows by name ("code").
    None for other files found in a folder; a file the user `named` is tried as text (binary is refused)."""
    base = os.path.basename(name)
    fmt = _BY_EXTENSION.get(os.path.splitext(base)[1].lower())
    if fmt is not None:
        return fmt
    try:
        lexer = find_lexer_class_for_filename(base)
    except Exception:  # a name Pygments cannot match against (undecodable bytes): not code we know
        lexer = None
    if lexer is not None and lexer.__name__ != "TextLexer":
        return "code"
    return "text" if named else None


@dataclass(frozen=True)
class Extracted:
    format: str
    chunks: list[Passage]


def extract(data: bytes, fmt: str, name: str, deadline: Deadline = NO_DEADLINE) -> Extracted:
    """The chunks of one file's content; ExtractError with the reason when it cannot be read or takes longer
    than `deadline` allows."""
    try:
        blocks = _blocks(data, fmt, name, deadline)
        deadline.check()
        passages = chunk_blocks(blocks, join_headings=fmt in ("python", "code"), deadline=deadline)
    except ExtractError:
        raise
    except MemoryError:
        raise ExtractError("out of memory while reading it") from None
    except RecursionError:
        raise ExtractError(f"{fmt}: nested too deeply to read") from None
    except Exception as e:  # parsers of hostile files raise anything (KeyError, ValueError, ...): one line each
        detail = str(e).splitlines()[0][:200] if str(e) else ""
        raise ExtractError(f"cannot read {fmt}: {type(e).__name__}" + (f": {detail}" if detail else "")) from None
    return Extracted(fmt, passages)


def _blocks(data: bytes, fmt: str, name: str, deadline: Deadline) -> list[Block]:
    if fmt == "pdf":
        from runtime.documents.office import pdf_blocks

        return pdf_blocks(data, deadline)
    if fmt == "docx":
        from runtime.documents.office import docx_blocks

        return docx_blocks(data, deadline)
    text = decode(data)
    if fmt == "html":
        from runtime.documents.html import html_blocks

        return html_blocks(text)
    lines = lines_of(text)
    if fmt == "markdown":
        return markdown_blocks(lines)
    if fmt == "rst":
        return rst_blocks(lines)
    if fmt in ("python", "code"):
        from runtime.documents.code import code_blocks, python_blocks

        return python_blocks(lines, deadline) if fmt == "python" else code_blocks(lines, name, deadline)
    return text_blocks(lines)


__all__ = ["ExtractError", "Extracted", "detect_format", "extract"]
