"""Source code split at its definitions: Python through `ast` (top-level functions and classes; a long class
by its methods), other languages at top-level blank-line boundaries, named by Pygments' tokens."""

from __future__ import annotations

import ast
import re

from pygments.lexers import get_lexer_for_filename
from pygments.token import Name
from pygments.util import ClassNotFound

from runtime.documents.blocks import Block
from runtime.documents.budget import NO_DEADLINE, Deadline

_LONG_CLASS_LINES = 60  # a class longer than this is split by its methods: about 400 tokens of code
# Characters Pygments names definitions in; past that blocks go unnamed. Its lexers run in Python, about 170 KB
# of real code a second here and 45 KB of dense code (1 MB of `x=1` lines took 23 s).
LEX_LIMIT = 256 * 1024
# Characters `ast` parses: its tree takes up to 600 bytes per character of dense code (8 MB of `x=1` lines
# reached 4.9 GB), so 256 KiB peaks near 150 MB. Real modules are far smaller; a larger file (generated code,
# data) is split at blank lines like other code.
AST_LIMIT = 256 * 1024
# A top-level line that closes a construct (`}`, `end`, `)`) belongs to the block above it.
_CLOSER = re.compile(r"[\]})]|end\b|fi\b|done\b|esac\b")


def python_blocks(lines: list[str], deadline: Deadline = NO_DEADLINE) -> list[Block]:
    """Definitions with their decorators, comments and module code between them; a file that does not parse
    (Python 2, a template) or is over AST_LIMIT characters is split like any other code."""
    if sum(len(line) + 1 for line in lines) > AST_LIMIT:
        return code_blocks(lines, "x.py", deadline)
    source = "\n".join(lines)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: NUL bytes
        return code_blocks(lines, "x.py", deadline)
    spans: list[tuple[int, int, str | None]] = []  # (first, last, name): 1-based inclusive
    for node in tree.body:
        spans.extend(_spans(node))
    blocks: list[Block] = []
    covered = 0
    for first, last, name in spans:
        if first > covered + 1:  # module code (imports, constants) between definitions
            blocks += _lines_block(lines, covered + 1, first - 1, None)
        blocks += _lines_block(lines, first, last, name)
        covered = max(covered, last)
    blocks += _lines_block(lines, covered + 1, len(lines), None)
    return blocks


def _spans(node: ast.stmt, prefix: str = "") -> list[tuple[int, int, str | None]]:
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return []
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    last = node.end_lineno or node.lineno
    name = prefix + node.name
    if not isinstance(node, ast.ClassDef) or last - first < _LONG_CLASS_LINES:
        return [(first, last, name)]
    # The class line and its body up to the first method, then each method under "Class.method".
    inner = [s for child in node.body for s in _spans(child, name + ".")]
    if not inner:
        return [(first, last, name)]
    out = [(first, inner[0][0] - 1, name)] if inner[0][0] > first else []
    for i, (f, _, n) in enumerate(inner):
        end = inner[i + 1][0] - 1 if i + 1 < len(inner) else last
        out.append((f, end, n))
    return out


def _lines_block(lines: list[str], first: int, last: int, name: str | None) -> list[Block]:
    """Lines first..last (1-based) as one block, leading and trailing blank lines dropped."""
    while first <= last and not lines[first - 1].strip():
        first += 1
    while last >= first and not lines[last - 1].strip():
        last -= 1
    if first > last:
        return []
    return [Block("\n".join(lines[first - 1 : last]), name, None, first, last)]


def code_blocks(lines: list[str], filename: str, deadline: Deadline = NO_DEADLINE) -> list[Block]:
    """Blocks that start where a blank line is followed by an unindented line (a new top-level construct in
    nearly every language); each named by the first function or class name Pygments finds in it."""
    starts = [1]
    for i in range(1, len(lines)):
        line = lines[i]
        if line[:1].strip() and not lines[i - 1].strip() and not _CLOSER.match(line):
            starts.append(i + 1)
    names = _definition_names(lines, filename, deadline)
    blocks: list[Block] = []
    for k, first in enumerate(starts):
        last = starts[k + 1] - 1 if k + 1 < len(starts) else len(lines)
        name = next((names[n] for n in range(first, last + 1) if n in names), None)
        blocks += _lines_block(lines, first, last, name)
    return blocks


def _definition_names(lines: list[str], filename: str, deadline: Deadline) -> dict[int, str]:
    """Line number → the function or class defined on it, from the language's Pygments lexer."""
    text = "\n".join(lines)
    if len(text) > LEX_LIMIT:
        return {}
    try:
        lexer = get_lexer_for_filename(filename, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return {}
    names: dict[int, str] = {}
    line, pos = 1, 0
    for n, (index, kind, value) in enumerate(lexer.get_tokens_unprocessed(text)):
        if n % 4096 == 0:
            deadline.check()
        line += text.count("\n", pos, index)
        pos = index
        if (kind in Name.Function or kind in Name.Class) and value.strip():
            names.setdefault(line, value.strip())
    return names
