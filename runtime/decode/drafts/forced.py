"""The grammar's forced tokens as a draft source: where the mask allows exactly one token, that token is
certain. Such tokens join the verify batch without logit rows (no model could choose otherwise), in the
prefill too, cost no draft step and are never offered to the controller (docs/architecture.md §4)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from runtime.decode.draft_source import Context, DraftSource, Kind, Proposal, Setup

FORCED_MAX = 64  # forced tokens joined to one batch at most (a long enum value, a tool call's wrapper)
KIND = Kind("forced", "the grammar", verified=False)


def build(setup: Setup) -> DraftSource | None:
    """Forced tokens join the batch unless the settings ask for one token per step (the baseline)."""
    return ForcedTokens() if setup.spec.forced else None


class ForcedTokens(DraftSource):
    """The tokens the answer's grammar leaves no choice about; none without a grammar."""

    kind = KIND
    name = KIND.name

    def __init__(self) -> None:
        self.context: Context | None = None

    def begin(self, seq: Sequence[int], context: Context) -> None:
        self.context = context

    def propose(self, seq: list[int], k: int) -> Proposal:
        """The forced tokens from here, at most k (and FORCED_MAX); the grammar is left as it was."""
        constraint = self.context.constraint if self.context else None
        out: list[int] = []
        if constraint is None:
            return Proposal(out)
        try:
            while len(out) < min(k, FORCED_MAX) and not constraint.done:
                allowed = np.flatnonzero(constraint.allowed_mask())
                if allowed.size != 1:
                    break
                out.append(int(allowed[0]))
                constraint.consume(out[-1])
        finally:
            constraint.rollback(len(out))
        return Proposal(out)
