"""The seam for draft sources (docs/architecture.md §4, §6.10 "How to add a draft source").

A draft source proposes tokens for the parent to verify: a quantized tier, n-gram lookup, the grammar's
forced tokens. Each is one module in `runtime/decode/drafts/` implementing `DraftSource` (begin, offer,
propose, rollback: the shape of llama.cpp's `common_speculative` types), and declares its `Kind`: what the
controller needs to price its proposals, what the answer's counters and summary call it, and how an answer's
settings make one (its module's `build`). The registry (`runtime/decode/drafts/__init__.py`) lists the kinds; every
other module (the controller, the stats, the summary, the cost model, the benchmark) iterates it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from runtime.decode.constraint import Constraint
    from runtime.decode.llama_backend import LlamaBackend
    from runtime.decode.sampling import SamplingParams
    from runtime.decode.suffix_index import SuffixIndex

DRAFT_K_MAX = 8  # the longest draft a model's decode steps make (the tier and draft-model kinds' k_max)


@dataclass(frozen=True)
class SpecConfig:
    """How the loop drafts. k None: the controller picks k (and the source) every cycle from the cost model."""

    k: int | None = None  # a fixed draft length, always used when a source can propose
    lookups: bool = True  # the lookup kinds (`drafts.lookups()`) may draft: off for a pair pinned to a draft tier
    ngram: bool = True  # prompt lookup as a draft source (costs nothing, needs no memory)
    suffix: bool = True  # lookup in everything said before (the model's pool of earlier prompts and answers)
    p_min: float = 0.0  # greedy drafting stops when the draft's top probability falls below this
    k_max: int = DRAFT_K_MAX  # the longest tier draft the controller considers (and the benchmark times)
    # A draft that has fallen further behind than this catches up on the last `draft_window` tokens only
    # (its own positions start at 0): a cheaper catch-up for a long prompt, at some cost in acceptance.
    # 0: always the whole context.
    draft_window: int = 0
    # Under a grammar, tokens it forces join the batch unverified (False: one token per step, as plain
    # constrained decoding runs; the benchmark's baseline).
    forced: bool = True


@dataclass(frozen=True)
class Setup:
    """What one answer's sources are made from: its settings and what the engine lends it. Each kind's
    `build` reads what it needs and returns its source, or None where the answer has none of that kind."""

    spec: SpecConfig
    draft: LlamaBackend | None = None  # the draft tier
    draft_name: str = "draft"  # ... under the name the controller keeps its estimates by (its tier)
    said: SuffixIndex | None = None  # the model's pool of earlier sequences (suffix lookup)
    party: str = ""  # ... read and written for this party
    sibling: tuple[str, LlamaBackend] | None = None  # a draft model: its source name and backend
    thought: Any = None  # a thinking model's budget (runtime.decode.drafts.budget_close.ThoughtBudget)


@dataclass(frozen=True)
class Kind:
    """What all sources of one kind share: the controller's priors and limits for them, and the names of
    the answer's counters for them (`Stats.<kind>_drafted`, `Stats.<kind>_accepted`)."""

    name: str  # Offer.kind, the estimates' kind, the counters' prefix
    label: str  # in words, for people ("n-gram lookup")
    # False: the proposals are certain (the grammar left no other choice); they join the verify batch without
    # logit rows, are never offered to the controller, and are counted in `Step.forced`.
    verified: bool = True
    k_max: int = 0  # the longest proposal the controller considers
    prior: float = 0.0  # acceptance before any is measured
    key_priors: Mapping[str, float] = field(default_factory=dict, hash=False)  # per estimates key, if it says more
    # True: proposals are a model's decode steps (priced by the probe's draft cost c, after a catch-up on what
    # the model has not seen; the probe's agreement is its prior). False: a lookup, timed as it runs.
    decodes: bool = False
    # How the answer's summary names its accepted tokens ("12 from n-gram"); "" for the label.
    word: str = ""

    @property
    def summary_word(self) -> str:
        return self.word or self.label

    @property
    def drafted_counter(self) -> str:
        return f"{self.name}_drafted"

    @property
    def accepted_counter(self) -> str:
        return f"{self.name}_accepted"


@dataclass(frozen=True)
class Offer:
    """A draft source's offer for this cycle: how many tokens it can propose, and what it must first do."""

    name: str
    kind: str  # a registered Kind's name
    max_k: int
    catch_up: int = 0  # tokens a tier draft must decode before it can propose (its prefill after a gap)
    size_ratio: float = 0.35  # draft bytes over parent bytes: the prior for its step cost (memory-bound)
    key: str = ""  # the estimates it is judged by, if not its name's (n-gram: per match length)

    @property
    def stats_key(self) -> str:
        return self.key or self.name


@dataclass(frozen=True)
class Proposal:
    """What a source proposed: tokens in order and, in sampled mode, the distribution q each was drawn from
    (one-hot for a deterministic proposal); how many tokens it first caught up on, in how many seconds."""

    tokens: list[int]
    qs: list[np.ndarray] = field(default_factory=list)
    caught_up: int = 0
    catch_up_s: float = 0.0


@dataclass(frozen=True)
class Context:
    """What one answer's sources share with the loop: the parent, the sampling, the one random generator
    (draft and verify draw from it in turn, so a seed fixes the answer), the grammar, if any, and the loop's
    clock (a cycle's timings, a source's catch-up included, are read from one clock)."""

    parent: LlamaBackend
    params: SamplingParams
    rng: np.random.Generator
    constraint: Constraint | None = None
    clock: Callable[[], float] = time.perf_counter


class DraftSource(Protocol):
    """One answer's source of draft tokens. The loop calls `begin` once, then each cycle `offer` (verified
    kinds) or `propose` with a limit (certain kinds), `propose` for the k the controller chose, and after the
    verify `rollback` to what was kept. Subclass it to inherit the no-op defaults."""

    kind: Kind
    name: str  # what the controller and `Step.source` call it (a tier draft: its tier)

    def begin(self, seq: Sequence[int], context: Context) -> None:
        """A new answer continues `seq`: keep what state still fits it."""

    def offer(self, seq: Sequence[int], room: int) -> Offer:
        """What it can propose after `seq`, at most `room - 1` tokens (the verify batch must fit)."""
        return Offer(self.name, self.kind.name, 0)

    def propose(self, seq: list[int], k: int) -> Proposal:
        """Up to k tokens after `seq` (the offer this cycle made, cut to k)."""
        return Proposal([])

    def rollback(self, kept: int) -> None:
        """The verify kept `seq[:kept]` (its last token not yet in the parent's cache): forget the rest."""

    def abort_on(self, cancel: threading.Event | None) -> contextlib.AbstractContextManager[None]:
        """While the answer runs, `cancel` also stops this source's own decodes (a long catch-up)."""
        return contextlib.nullcontext()
