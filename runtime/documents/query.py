"""A user's search text as a safe FTS5 MATCH expression: every word quoted (so `"`, `*`, `(`, AND, NEAR, `:`
and `-` are never syntax) and the words OR-ed, letting BM25 rank chunks that match more of them first."""

from __future__ import annotations

import re

from runtime.errors import UserError

MAX_TERMS = 32  # a pasted page as the query: the first words are plenty, and each adds a posting-list scan
# Runs of letters and digits, as the unicode61 tokenizer splits text; a trailing * asks for a prefix.
_WORD = re.compile(r"([^\W_]+)(\*?)")


def match_expression(query: str) -> str:
    """`install model*` → `"install" OR "model"*`; UserError when the text has no word to search for."""
    terms: list[str] = []
    for word, star in _WORD.findall(query):
        term = f'"{word}"' + ("*" if star else "")  # a word of letters and digits holds no quote to escape
        if term not in terms:
            terms.append(term)
    if not terms:
        raise UserError(f"the query {query.strip()!r} has no words to search for")
    return " OR ".join(terms[:MAX_TERMS])
