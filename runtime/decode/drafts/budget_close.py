"""A thought's budget as certain tokens: once a thinking model has thought for its budget without closing the
thought, its close (`</think>` and the blank line after) joins the sequence as forced tokens, so the model reads
its own close and the answer follows (llama.cpp's reasoning budget does the same). Never offered to the
controller; the loop asks it each cycle, like the grammar's forced tokens (docs/architecture.md §4)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from runtime.decode.draft_source import Context, DraftSource, Kind, Proposal, Setup

KIND = Kind("budget_close", "the thinking budget", verified=False)


class ThoughtBudget(NamedTuple):
    """A thinking model's budget in one answer: the close's tokens, the budget, and whether it still thinks."""

    close: Sequence[int]
    budget: int
    thinking: Callable[[], bool]


def build(setup: Setup) -> DraftSource | None:
    """The answer's budget close, where a thinking model's thought is bounded (`Setup.thought`)."""
    t: ThoughtBudget | None = setup.thought
    return None if t is None else BudgetClose(t.close, t.budget, t.thinking)


class BudgetClose(DraftSource):
    """Forces `close` once `budget` tokens came after the prompt while `thinking()` still says so."""

    kind = KIND
    name = KIND.name

    def __init__(self, close: Sequence[int], budget: int, thinking: Callable[[], bool]) -> None:
        self.close = list(close)
        self.budget = budget
        self.thinking = thinking  # read between cycles: the answer's text so far, split (runtime.engine.thinking)
        self.start = 0
        self.spent = False

    def begin(self, seq: Sequence[int], context: Context) -> None:
        self.start = len(seq)

    def propose(self, seq: list[int], k: int) -> Proposal:
        """The close, whole, once the budget is spent (never part of it: a cut close is no close)."""
        if self.spent or len(seq) - self.start < self.budget or not self.thinking() or k < len(self.close):
            return Proposal([])
        self.spent = True
        return Proposal(list(self.close))
