"""A conversation's documents, and the one policy that decides when the built-in `search_documents` is offered
(#62, #63): every front end asks `DocumentChoice`, none decides on its own.

- **Answering from documents** ("Answer from" in the window, `--docs` on the CLI, `specquant.documents` in the
  API) puts the chosen collection's documents, or its best passages, into the prompt (runtime.documents.grounding).
- **The search tool** is offered only in a turn with tools, only when a collection exists, and then only when
  the chat chose documents (the search looks in the chosen collection) or the question is likely about them: it
  names documents, files, notes… or a collection (the search looks in every collection). An arithmetic chat is
  never offered a search of the user's files just because a collection exists.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.documents.grounding import DEFAULT_TOP, Grounding
from runtime.engine.options import Message

# Words that say a question is about the user's documents (whole words, any case).
ABOUT_DOCUMENTS = re.compile(
    r"\b(documents?|docs?|files?|folders?|notes|pdfs?|manuals?|attachments?|attached|uploaded)\b", re.IGNORECASE
)


@dataclass(frozen=True)
class SearchOffer:
    """`search_documents` as a turn offers it: over `collection` (None: every one) of the index at `index`, `top`
    passages a call."""

    index: Path
    collection: str | None
    top: int = DEFAULT_TOP


@dataclass(frozen=True)
class DocumentChoice:
    """Which documents a conversation answers from: `collection` None (none), "" (every collection) or a
    collection's name; `top` passages, or the documents that fit the context in `whole`; `index` the index
    file (None: the user's, runtime.documents.index.default_path)."""

    collection: str | None = None
    top: int = DEFAULT_TOP
    whole: bool = True
    index: Path | None = None

    @property
    def chosen(self) -> bool:
        """Whether the conversation answers from documents."""
        return self.collection is not None

    def index_path(self) -> Path:
        from runtime.documents.index import default_path

        return self.index or default_path()

    def grounding(self) -> Grounding | None:
        """What the engine answers from (runtime.documents.grounding), None when no documents were chosen."""
        if self.collection is None:
            return None
        index = str(self.index) if self.index is not None else None  # None: the user's, as the engine reads it
        return Grounding(self.collection or None, self.top, index, self.whole)

    def search(self, question: str) -> SearchOffer | None:
        """The policy: whether a turn with tools offers `search_documents` for `question`, and over what. Reads
        the index's collections (an index that does not exist has none, and is not created)."""
        return search_offer(self, question, collection_names(self.index_path()))

    @classmethod
    def of(cls, grounding: Grounding | None) -> DocumentChoice:
        """The choice a Grounding stands for (an API request's `specquant.documents`)."""
        if grounding is None:
            return cls()
        index = Path(grounding.index) if grounding.index else None
        return cls(grounding.collection or "", grounding.top, grounding.whole, index)


def search_offer(choice: DocumentChoice, question: str, collections: Sequence[str]) -> SearchOffer | None:
    """The one policy, on the collections that exist: none, no search; the chat chose documents, a search of
    its collection (every one for ""); else a search of every collection when the question is about them."""
    if not collections:
        return None
    if choice.chosen:
        if choice.collection and choice.collection not in collections:
            return None  # a collection since deleted: the grounding says so; there is nothing to search
        return SearchOffer(choice.index_path(), choice.collection or None, choice.top)
    if about_documents(question, collections):
        return SearchOffer(choice.index_path(), None, choice.top)
    return None


def about_documents(question: str, collections: Sequence[str]) -> bool:
    """Whether `question` is likely about the user's documents: it names documents, files, notes… or one of
    the `collections`."""
    if ABOUT_DOCUMENTS.search(question):
        return True
    folded = question.casefold()
    return any(re.search(rf"(?<!\w){re.escape(name.casefold())}(?!\w)", folded) for name in collections if name)


def collection_names(index: Path) -> list[str]:
    """The collections of the index at `index`; [] when there is no index file yet (none is created)."""
    if not index.exists():
        return []
    from runtime.documents.index import Index

    opened = Index(index)
    try:
        return [name for _, name in opened.collections()]
    finally:
        opened.close()


def last_question(messages: Sequence[Message]) -> str:
    """The text of the conversation's last user message ("" when there is none)."""
    for m in reversed(messages):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content parts: their text
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return ""
    return ""
