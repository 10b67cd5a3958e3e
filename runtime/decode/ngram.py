"""Prompt lookup: draft tokens for free by finding the last few tokens earlier in the conversation.

When an answer quotes, edits or repeats what came before (code to revise, names, lists), the tokens that
followed the previous occurrence of the current suffix are very likely to follow again. Like llama.cpp's
`ngram` speculative types, but incremental: an index of every n-gram's latest position is extended as the
sequence grows, so a lookup costs a few dictionary probes, not a scan.
"""

from __future__ import annotations

from collections.abc import Sequence

N_MAX = 4  # the longest suffix matched: longer matches predict better, shorter ones match more often
N_MIN = 2


class NgramIndex:
    """The latest position after each n-gram (N_MIN ≤ n ≤ N_MAX) of a growing token sequence."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._seq: list[int] = []
        self._after: list[dict[tuple[int, ...], int]] = [{} for _ in range(N_MAX + 1)]
        self._indexed = 0  # n-grams ending before this position are in the index

    def sync(self, seq: Sequence[int]) -> None:
        """Follow `seq`: extend the index, or rebuild it when `seq` is not a continuation (a new chat)."""
        n_common = 0
        limit = min(len(self._seq), len(seq))
        while n_common < limit and self._seq[n_common] == seq[n_common]:
            n_common += 1
        if n_common < len(self._seq):
            self._reset()
        self._seq.extend(int(t) for t in seq[len(self._seq) :])
        # Index n-grams that end strictly before the last token, so the current suffix never matches itself.
        for end in range(self._indexed + 1, len(self._seq)):
            for n in range(N_MIN, N_MAX + 1):
                if end >= n:
                    self._after[n][tuple(self._seq[end - n : end])] = end
        self._indexed = max(self._indexed, len(self._seq) - 1)

    def lookup(self, seq: Sequence[int], k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest matching suffix."""
        return self.match(seq, k)[0]

    def match(self, seq: Sequence[int], k: int) -> tuple[list[int], int]:
        """`lookup`'s tokens and the length of the suffix that matched (0: none). A longer match predicts
        better, so the controller keeps acceptance per match length."""
        self.sync(seq)
        if k <= 0:
            return [], 0
        for n in range(N_MAX, N_MIN - 1, -1):
            if len(self._seq) < n:
                continue
            at = self._after[n].get(tuple(self._seq[-n:]))
            if at is not None:
                return self._seq[at : at + k], n
        return [], 0
