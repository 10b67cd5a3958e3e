"""Grounded answers: the passages of the user's documents that best match a question, numbered, and the
question rewritten to answer from them and cite them.

Where the sources go decides what the KV cache can keep (runtime.engine.prompt_cache). Whole documents are
the same for every question, so they go into the system message, before the conversation: a prefix that
stays put, read once for a chat's every turn and for every new chat on the same documents, and the questions
stay as the user typed them. Passages are chosen per question, so they go into the last user message, where
earlier turns keep the text the user typed. Either way a passage the answer quotes is in the prompt, where
n-gram lookup drafts it (runtime.decode.ngram) for the price of one verify. A template without a system
role gets the whole documents in the last user message too (runtime.engine.answer_plan).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from runtime.documents.library import Hit, Library
from runtime.errors import UserError

DEFAULT_TOP = 4
MAX_TOP = 20
MAX_SOURCE_CHARS = 2000  # a chunk is about 300-400 tokens (runtime.documents.chunk); a longer one is cut here
# Characters per token for the whole-documents budget: 3, below English's ~4, so code and other languages fit too.
WHOLE_CHARS_PER_TOKEN = 3

INSTRUCTION = (
    "Answer the question from the numbered sources below. Cite each source you use by its number in square "
    "brackets, like [1]. If the sources do not answer the question, say so."
)
SYSTEM_INSTRUCTION = (
    "Answer the user's questions from the numbered sources below. Cite each source you use by its number in "
    "square brackets, like [1]. If the sources do not answer a question, say so."
)
NOTHING_FOUND = (
    "No passage of the user's documents matched the question. Say that the documents do not cover it, then "
    "answer only if you are sure."
)


@dataclass(frozen=True)
class Grounding:
    """A request to answer from documents: a collection (None: every one) and how many passages."""

    collection: str | None = None
    top: int = DEFAULT_TOP
    index: str | None = None  # the index file; None: the user's (runtime.documents.index.default_path)
    whole: bool = True  # documents that fit the context go in whole, not as passages

    def __post_init__(self) -> None:
        if not 1 <= self.top <= MAX_TOP:
            raise UserError(f"documents top {self.top} is out of range: 1 to {MAX_TOP}")


@dataclass(frozen=True)
class Citation:
    """One numbered source of a grounded answer."""

    n: int  # its number in the prompt: the answer cites it as [n]
    path: str
    collection: str
    text: str
    score: float
    page: int | None = None
    lines: tuple[int, int] | None = None
    heading: str | None = None
    whole: bool = False  # the whole document, not a passage

    @classmethod
    def of(cls, n: int, hit: Hit) -> Citation:
        return cls(n, hit.path, hit.collection, hit.text, hit.score, hit.page, hit.lines, hit.heading)

    def where(self) -> str:
        """`notes/install.md, lines 3-20, "Installing"`: enough to find the passage again."""
        parts = [self.path]
        if self.whole:
            parts.append("whole document")
        if self.page is not None:
            parts.append(f"page {self.page}")
        if self.lines is not None:
            first, last = self.lines
            parts.append(f"line {first}" if first == last else f"lines {first}-{last}")
        if self.heading:
            parts.append(f'"{self.heading}"')
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """Its number, then the fields of a search hit (Hit.as_dict), then `whole` when it is a whole document."""
        hit = Hit(self.path, self.score, self.text, self.collection, self.page, self.lines, self.heading)
        return {"n": self.n, **hit.as_dict(), **({"whole": True} if self.whole else {})}


def retrieve(
    library: Library, question: str, grounding: Grounding, whole_chars: int | None = None
) -> tuple[Citation, ...]:
    """The sources for `question`, numbered from 1: every document whole when they all fit in `whole_chars`
    (given, and the grounding allows it), else the passages that match best. A question without a searchable
    word finds no passage (the answer then says the documents do not cover it); a missing collection or an
    empty index is the UserError Library.search raises."""
    if whole_chars is not None and grounding.whole:
        texts = library.full_texts(grounding.collection, whole_chars)
        if texts:
            name = grounding.collection or ""
            return tuple(Citation(n, path, name, text, 1.0, whole=True) for n, (path, text) in enumerate(texts, 1))
    try:
        hits = library.search(question, grounding.collection, grounding.top)
    except UserError as e:
        if "no words to search for" in str(e):
            return ()
        raise
    return tuple(Citation.of(n, hit) for n, hit in enumerate(hits, 1))


def source_block(citations: Sequence[Citation]) -> str:
    """The sources as the model reads them: number, file name and heading, the passage (the full path and
    lines are for the reader: they cost tokens and tempt a small model to copy them)."""
    blocks = []
    for c in citations:
        text = c.text if c.whole or len(c.text) <= MAX_SOURCE_CHARS else c.text[:MAX_SOURCE_CHARS] + " …"
        title = PurePath(c.path).name + (f" ({c.heading})" if c.heading else "")
        blocks.append(f"[{c.n}] {title}\n{text.strip()}")
    return "\n\n".join(blocks)


def grounded_question(question: str, citations: Sequence[Citation]) -> str:
    """The last user message, rewritten to answer from `citations`."""
    if not citations:
        return f"{NOTHING_FOUND}\n\nQuestion: {question}"
    return f"{INSTRUCTION}\n\nSources:\n\n{source_block(citations)}\n\nQuestion: {question}"


_CITE = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")  # [1], [2, 3]


def cited_numbers(answer: str) -> set[int]:
    """The source numbers an answer cites: [1], [2, 3]."""
    return {int(n) for group in _CITE.findall(answer) for n in group.split(",")}


def grounded_system(system: str | None, citations: Sequence[Citation]) -> str:
    """A system message holding whole documents: the chat's own system prompt first, then the sources."""
    sources = f"{SYSTEM_INSTRUCTION}\n\nSources:\n\n{source_block(citations)}"
    return f"{system}\n\n{sources}" if system else sources


def grounded_messages(
    messages: Sequence[dict[str, Any]], citations: Sequence[Citation], system: bool = True
) -> list[dict[str, Any]]:
    """`messages` grounded: whole documents in the system message (where `system` allows it: the template
    has that role), passages, or nothing found, in the last user message (the other turns as they are)."""
    if not any(m["role"] == "user" for m in messages):
        raise UserError("a grounded answer needs a user message to answer")
    out = [dict(m) for m in messages]
    if system and citations and all(c.whole for c in citations):
        if out and out[0]["role"] == "system":
            out[0]["content"] = grounded_system(out[0]["content"], citations)
        else:
            out.insert(0, {"role": "system", "content": grounded_system(None, citations)})
        return out
    for m in reversed(out):
        if m["role"] == "user":
            m["content"] = grounded_question(m["content"], citations)
            break
    else:
        raise UserError("a grounded answer needs a user message to answer")
    return out

