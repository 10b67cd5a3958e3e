"""N-gram lookup as a draft source: the tokens that followed the latest earlier occurrence of the current
suffix (`runtime.decode.ngram.NgramIndex`), for free. Deterministic, so in sampled mode its q is one-hot."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.decode.draft_source import Context, DraftSource, Kind, Offer, Proposal, Setup
from runtime.decode.ngram import NgramIndex
from runtime.decode.sampling import one_hot

NAME = "ngram"  # its kind, and its name (a tier draft's name is its tier)
# A proposal is judged per match length: a 4-token match inside quoted code predicts far better than a
# 2-token one in prose, and one shared estimate would make the controller refuse both.
PRIOR_BY_MATCH = {2: 0.3, 3: 0.45, 4: 0.6}


def ngram_key(match: int) -> str:
    """The estimates' name for n-gram proposals from a suffix match of `match` tokens."""
    return f"{NAME}:{match}"


KIND = Kind(
    NAME, "n-gram lookup", k_max=12, prior=0.6, key_priors={ngram_key(n): a for n, a in PRIOR_BY_MATCH.items()},
    word="n-gram",
)


def build(setup: Setup) -> DraftSource | None:
    return NgramDraft() if setup.spec.lookups and setup.spec.ngram else None


class NgramDraft(DraftSource):
    """Prompt lookup over the conversation and the answer so far."""

    kind = KIND
    name = NAME

    def __init__(self) -> None:
        self.index = NgramIndex()
        self.context: Context | None = None
        self.candidates: list[int] = []

    def begin(self, seq: Sequence[int], context: Context) -> None:
        self.context = context

    def offer(self, seq: Sequence[int], room: int) -> Offer:
        candidates, match = self.index.match(seq, min(KIND.k_max, room - 1))
        constraint = self.context.constraint if self.context else None
        if constraint is not None:  # never spend a verify row on a token the grammar forbids
            candidates = candidates[: constraint.valid_prefix(candidates)]
        self.candidates = candidates
        return Offer(NAME, NAME, len(candidates), key=ngram_key(match))

    def propose(self, seq: list[int], k: int) -> Proposal:
        drafts = self.candidates[:k]
        ctx = self.context
        qs = [] if ctx is None or ctx.params.greedy else [one_hot(ctx.parent.n_vocab, d) for d in drafts]
        return Proposal(drafts, qs)
