"""Everything said before, as one searchable pool of token sequences (SuffixDecoding's idea, arXiv 2411.04975).

Each earlier prompt and answer is a document; the pool finds the longest suffix of the current context that
occurred in any of them and proposes the continuation most of those occurrences share, with its frequency as
the confidence, and a length that grows with the match (a long match predicts a long stretch). Where the
paper builds a suffix tree, this keeps an index of every `KEY`-token n-gram's positions and extends each
candidate backwards: the same longest matches and continuation counts, found lazily, in a few flat lists.

Bounded: at most `budget` tokens, the oldest documents out first. A conversation's next turn continues its
document instead of storing its prompt again (its earlier turns would otherwise count twice). Documents
carry their party, and a lookup sees only its own party's (how fast an answer runs must not tell one API
client what another asked; as in runtime/engine/prompt_cache.py).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

KEY = 3  # a match is at least this long: the n-gram the index is keyed by
MAX_MATCH = 32  # a suffix longer than this predicts no better
SCAN = 64  # the most recent occurrences of the key examined per lookup (a cheap lookup every cycle)
GROWTH = 2.0  # a proposal runs to at most GROWTH × the match length (SuffixDecoding's α)
MIN_CONFIDENCE = 0.3  # a proposal stops where the share of occurrences agreeing on its path falls below
RECENT = 8  # the newest documents a new prompt may continue
SLACK = 16  # a document continues when the new prompt shares all of it but at most this many tokens
OVERLAP = 64  # a new document keeps this much of the prefix it shares with an older one, so matches reach it


@dataclass(frozen=True)
class Match:
    """A lookup's answer: the proposed tokens, the matched suffix's length, and the share of the matches'
    occurrences that agree on the whole proposal."""

    tokens: list[int]
    length: int = 0
    confidence: float = 0.0


class _Doc:
    __slots__ = ("offset", "party", "tokens")

    def __init__(self, tokens: Sequence[int], party: str, offset: int) -> None:
        self.tokens = array("i", tokens)
        self.party = party
        self.offset = offset  # the live sequence's position of tokens[0]


class SuffixIndex:
    """Earlier token sequences of one model, within `budget` tokens, searchable by the current context."""

    def __init__(self, budget: int = 200_000) -> None:
        if budget < 0:
            raise ValueError(f"a suffix index budget must be at least 0 tokens, not {budget}")
        self.budget = budget
        self._docs: dict[int, _Doc] = {}  # by id, oldest first
        self._where: dict[tuple[int, ...], list[int]] = {}  # key n-gram -> (doc id << 32 | its end), oldest first
        self._next_id = 0
        self._entries = 0  # index entries, stale ones included
        self._live: int | None = None  # the document the answer in progress writes
        self.tokens = 0  # tokens held, over all documents

    def clear(self) -> None:
        """Forget everything (benchmarks: each pass starts with nothing said before)."""
        self._docs, self._where, self._entries, self._live, self.tokens = {}, {}, 0, None, 0

    # --- writing -----------------------------------------------------------------------------------
    def open(self, seq: Sequence[int], party: str = "") -> int:
        """Start writing `seq` (a new answer's prompt): continue the recent document it extends, else a new
        one. Returns the document's id; `follow` keeps it equal to the sequence from then on."""
        best, shared = None, 0
        for doc_id in list(self._docs)[-RECENT:]:
            doc = self._docs[doc_id]
            if doc.party != party:
                continue
            n = _common(doc.tokens, seq, doc.offset)
            if n > shared:
                best, shared = doc_id, n
        if best is not None and shared >= self._docs[best].offset + len(self._docs[best].tokens) - SLACK:
            doc = self._docs.pop(best)
            self._docs[best] = doc  # the newest now
        else:
            start = max(0, shared - OVERLAP)
            best, doc = self._next_id, _Doc((), party, start)
            self._next_id += 1
            self._docs[best] = doc
        self._live = best
        self.follow(best, seq)
        return best

    def follow(self, doc_id: int, seq: Sequence[int], same: int = 0) -> None:
        """Make document `doc_id` equal `seq` (from its offset): cut where they differ, index what is new.
        `same`: how many leading tokens of `seq` the caller knows it already holds (each cycle's shortcut)."""
        doc = self._docs.get(doc_id)
        if doc is None:  # evicted meanwhile (a budget smaller than one answer)
            return
        keep = _common(doc.tokens, seq, doc.offset, same) - doc.offset
        if keep < len(doc.tokens):
            self.tokens -= len(doc.tokens) - keep
            del doc.tokens[keep:]  # their index entries go stale; a lookup checks each
        new = seq[doc.offset + len(doc.tokens) :]
        if new:
            start = len(doc.tokens)
            doc.tokens.extend(int(t) for t in new)
            self.tokens += len(new)
            toks = doc.tokens
            for end in range(max(KEY, start + 1), len(toks) + 1):
                self._where.setdefault(tuple(toks[end - KEY : end]), []).append(doc_id << 32 | end)
                self._entries += 1
        self._evict()

    def _evict(self) -> None:
        """The oldest documents out until the pool fits its budget; the one being written stays (it is
        bounded by the context). The index is rebuilt once most of its entries are stale."""
        while self.tokens > self.budget and len(self._docs) > (self._live in self._docs):
            oldest = next(d for d in self._docs if d != self._live)
            self.tokens -= len(self._docs.pop(oldest).tokens)
        if self._entries > 2 * self.tokens + 4096:
            self._rebuild()

    def _rebuild(self) -> None:
        self._where, self._entries = {}, 0
        for doc_id, doc in self._docs.items():
            toks = doc.tokens
            for end in range(KEY, len(toks) + 1):
                self._where.setdefault(tuple(toks[end - KEY : end]), []).append(doc_id << 32 | end)
                self._entries += 1

    # --- reading -----------------------------------------------------------------------------------
    def match(self, context: Sequence[int], k: int, party: str = "") -> Match:
        """At most k tokens to follow `context`: the longest suffix of it found in the pool (at least KEY
        tokens, at most MAX_MATCH), then, token by token, what most of its occurrences continue with, while
        at least MIN_CONFIDENCE of them agree and up to GROWTH × the match length."""
        if k <= 0 or len(context) < KEY:
            return Match([])
        found = self._where.get(tuple(context[-KEY:]))
        if not found:
            return Match([])
        key = array("i", context[-KEY:])
        longest, at = 0, []
        seen: set[int] = set()
        for entry in reversed(found[-4 * SCAN :]):
            doc = self._docs.get(entry >> 32)
            end = entry & 0xFFFFFFFF
            if doc is None or doc.party != party or end >= len(doc.tokens) or entry in seen:
                continue  # evicted, another party's, cut since, or no continuation
            seen.add(entry)
            toks = doc.tokens
            if toks[end - KEY : end] != key:
                continue  # cut and rewritten since it was indexed
            n = KEY
            while n < MAX_MATCH and n < end and n < len(context) and toks[end - n - 1] == context[-n - 1]:
                n += 1
            if n > longest:
                longest, at = n, [(toks, end)]
            elif n == longest:
                at.append((toks, end))
            if len(seen) >= SCAN:
                break
        return _continue(at, longest, min(k, int(GROWTH * longest)))


def _continue(at: list[tuple[array, int]], length: int, limit: int) -> Match:
    """The most frequent path after the occurrences `at` (each a document and the position after its
    match), token by token, while its share of them stays at least MIN_CONFIDENCE."""
    out: list[int] = []
    total = len(at)
    while at and len(out) < limit:
        counts: dict[int, int] = {}
        for toks, pos in at:
            if pos < len(toks):
                counts[toks[pos]] = counts.get(toks[pos], 0) + 1
        if not counts:
            break
        # The most frequent next token; on a tie, the most recent occurrence's (`at` is newest first).
        best = max(counts, key=lambda t: counts[t])
        if counts[best] < MIN_CONFIDENCE * total:
            break
        out.append(best)
        at = [(toks, pos + 1) for toks, pos in at if pos < len(toks) and toks[pos] == best]
    agree = len(at) / total if total else 0.0
    return Match(out, length if out else 0, agree if out else 0.0)


def _common(doc: array, seq: Sequence[int], offset: int, same: int = 0) -> int:
    """How many leading tokens of `seq` the document (holding `seq[offset:]`) agrees with, offset included
    (0 where it does not reach back to `offset`); the first `same` are known to agree."""
    if len(seq) < offset:
        return 0
    limit = min(len(doc), len(seq) - offset)
    n = min(max(0, same - offset), limit)
    while n < limit and doc[n] == seq[offset + n]:
        n += 1
    return offset + n if n or offset == 0 else 0
