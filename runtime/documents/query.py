"""A user's search text as a safe FTS5 MATCH expression: every word quoted (so `"`, `*`, `(`, AND, NEAR, `:`
and `-` are never syntax) and the words OR-ed, letting BM25 rank chunks that match more of them first; and the
fusion of the BM25 ranking with the embeddings' cosine ranking (Reciprocal Rank Fusion)."""

from __future__ import annotations

import re
from collections.abc import Sequence

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


RRF_K = 60  # Reciprocal Rank Fusion's constant (Cormack, Clarke and Büttcher, 2009): it damps the top ranks' lead


def fuse(*rankings: Sequence[int], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal Rank Fusion of rankings of ids (best first): each id scores the sum of 1 / (k + rank) over the
    rankings it appears in, rank counted from 1. Best first; ties keep the order of the first ranking, then of
    the next. Only ranks count, so BM25 scores and cosines need no common scale."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    # dict order is first appearance: the first ranking's order, then new ids of the next; sorted() is stable.
    return sorted(scores.items(), key=lambda kv: -kv[1])
