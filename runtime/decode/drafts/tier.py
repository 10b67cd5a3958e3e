"""A quantized tier of the same model as a draft source: it catches up on what it has not seen, then
decodes up to k tokens (greedy: argmax with the parent's penalties; sampled: drawn from its warped q)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from runtime.decode.draft_source import DRAFT_K_MAX, Context, DraftSource, Kind, Offer, Proposal, Setup
from runtime.decode.sampling import pick, sample, warp

if TYPE_CHECKING:
    from runtime.decode.llama_backend import LlamaBackend

KIND = Kind("tier", "the quantized tier", k_max=DRAFT_K_MAX, prior=0.8, decodes=True, word="the draft tier")


def build(setup: Setup) -> DraftSource | None:
    """The answer's draft tier, where its pair has one."""
    if setup.draft is None:
        return None
    spec = setup.spec
    return TierDraft(setup.draft, setup.draft_name, spec.k_max, spec.p_min, spec.draft_window)


def _size_ratio(draft: LlamaBackend, parent: LlamaBackend) -> float:
    """Draft bytes over parent bytes: on a CPU a decode step streams the weights, so this prices a step."""
    try:
        return draft.path.stat().st_size / max(1, parent.path.stat().st_size)
    except OSError:
        return 0.5


def _top_prob(row: np.ndarray) -> float:
    m = row.max()
    return float(1.0 / np.exp(row - m).sum())


class TierDraft(DraftSource):
    """One draft model and its KV cache, which always holds `seq[offset : offset + n_past]`."""

    kind = KIND

    def __init__(
        self, model: LlamaBackend, name: str = "draft", k_max: int = KIND.k_max, p_min: float = 0.0, window: int = 0
    ) -> None:
        self.model, self.name, self.k_max, self.p_min = model, name, k_max, p_min
        # A draft further behind than `window` catches up on the last `window` tokens only (its own positions
        # start at 0): a cheaper catch-up for a long prompt, at some cost in acceptance. 0: the whole context.
        self.window = window
        self.offset = 0
        self.windowed = False
        self.size_ratio = 0.5
        self.context: Context | None = None

    def begin(self, seq: Sequence[int], context: Context) -> None:
        # Keep what the draft shares with this sequence; from here on its cache is always a slice of `seq`
        # from `offset` (it decodes only `seq` and drafts, and rolls back to what was kept), so `n_past`
        # says how far behind it is.
        self.context = context
        self.model.truncate(min(self.model.common_prefix(seq), len(seq) - 1))
        self.size_ratio = _size_ratio(self.model, context.parent)

    def offer(self, seq: Sequence[int], room: int) -> Offer:
        behind = len(seq) - self.offset - self.model.n_past
        self.windowed = 0 < self.window < behind
        catch_up = self.window if self.windowed else behind
        return Offer(self.name, self.kind.name, min(self.k_max, room - 1), catch_up, self.size_ratio)

    def propose(self, seq: list[int], k: int) -> Proposal:
        """Up to k draft tokens, (sampled mode) the warped draft distributions they were drawn from, and the
        catch-up before them. Under a grammar the draft's rows are masked as the parent's will be, so it
        proposes only what the grammar allows (and q is masked too)."""
        assert self.context is not None, "begin() first"
        params, rng, constraint = self.context.params, self.context.rng, self.context.constraint
        if self.windowed:  # start the draft afresh on the last tokens instead of the whole gap
            self.model.truncate(0)
            self.offset = len(seq) - self.window
        drafts: list[int] = []
        qs: list[np.ndarray] = []
        if k <= 0:
            return Proposal(drafts, qs)
        # Catch up on everything the draft has not seen, the last token included, in one batch.
        t0 = self.context.clock()
        n = self.offset + self.model.n_past
        logits = self.model.decode(seq[n:], [len(seq) - n - 1])[0]
        caught_up, catch_up_s = len(seq) - n, self.context.clock() - t0
        for i in range(k):
            history = seq + drafts
            if constraint is not None:
                if constraint.done:  # past the grammar's end: nothing left worth drafting
                    break
                constraint.mask_logits(logits)
            if params.greedy:
                if self.p_min > 0 and _top_prob(logits) < self.p_min:
                    break
                tok = pick(logits, params, history)
            else:
                # Sampled mode must SAMPLE from q (an argmax draft would bias the output).
                q = warp(logits, params, history)
                tok = sample(q, rng)
                qs.append(q)
            drafts.append(tok)
            if constraint is not None:
                constraint.consume(tok)  # taken back below: the verify decides what stays
            if i + 1 < k:
                logits = self.model.decode([tok], [0])[0]
        if constraint is not None:
            constraint.rollback(len(drafts))
        return Proposal(drafts, qs, caught_up, catch_up_s)

    def rollback(self, kept: int) -> None:
        self.model.truncate(min(self.model.n_past, kept - self.offset))

    def abort_on(self, cancel: threading.Event | None) -> contextlib.AbstractContextManager[None]:
        return self.model.abort_on(cancel)
