"""Drafts from everything said before: the continuation that most often followed the longest matching
suffix, in this model's earlier prompts and answers for the same party (`runtime.decode.suffix_index`),
the answer in progress included. A lookup, so it costs no model step; deterministic, so in sampled mode
its q is one-hot."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.decode.draft_source import Context, DraftSource, Kind, Offer, Proposal, Setup
from runtime.decode.sampling import one_hot
from runtime.decode.suffix_index import KEY, SuffixIndex

NAME = "suffix"
# Judged per match length, as n-gram lookup is: a 16-token match (a function quoted again, a repeated tool
# call) predicts far better than a 3-token one in prose.
BUCKETS = (KEY, 4, 8, 16)
PRIOR_BY_MATCH = {KEY: 0.45, 4: 0.6, 8: 0.75, 16: 0.85}


def suffix_key(match: int) -> str:
    """The estimates' name for proposals from a suffix match of `match` tokens (by bucket: 3, 4-7, 8-15, 16+)."""
    return f"{NAME}:{max((b for b in BUCKETS if b <= match), default=KEY)}"


KIND = Kind(
    NAME,
    "earlier text",
    k_max=12,
    prior=0.6,
    key_priors={suffix_key(n): a for n, a in PRIOR_BY_MATCH.items()},
)


def build(setup: Setup) -> DraftSource | None:
    """Lookup in the model's pool, where the engine keeps one and the settings allow it."""
    on = setup.spec.lookups and setup.spec.suffix and setup.said is not None
    return SuffixDraft(setup.said, setup.party) if on and setup.said is not None else None


class SuffixDraft(DraftSource):
    """Lookup in the model's pool of earlier sequences; writes this answer's sequence into it as it grows."""

    kind = KIND
    name = NAME

    def __init__(self, index: SuffixIndex, party: str = "") -> None:
        self.index, self.party = index, party
        self.context: Context | None = None
        self.doc: int | None = None
        self.synced = 0  # leading tokens of the sequence the pool's document is known to hold
        self.candidates: list[int] = []

    def begin(self, seq: Sequence[int], context: Context) -> None:
        self.context = context
        self.doc = self.index.open(seq, self.party)
        self.synced = len(seq)

    def offer(self, seq: Sequence[int], room: int) -> Offer:
        if self.doc is not None and len(seq) > self.synced:
            self.index.follow(self.doc, seq, self.synced)
            self.synced = len(seq)
        found = self.index.match(seq, min(KIND.k_max, room - 1), self.party)
        candidates = found.tokens
        constraint = self.context.constraint if self.context else None
        if constraint is not None:  # never spend a verify row on a token the grammar forbids
            candidates = candidates[: constraint.valid_prefix(candidates)]
        self.candidates = candidates
        return Offer(NAME, NAME, len(candidates), key=suffix_key(found.length))

    def propose(self, seq: list[int], k: int) -> Proposal:
        drafts = self.candidates[:k]
        ctx = self.context
        qs = [] if ctx is None or ctx.params.greedy else [one_hot(ctx.parent.n_vocab, d) for d in drafts]
        return Proposal(drafts, qs)

    def rollback(self, kept: int) -> None:
        self.synced = min(self.synced, kept)
