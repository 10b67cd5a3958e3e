"""The speculative cost model (docs/architecture.md §5) in code, and the online controller it drives.

One cycle with draft source s and k proposed tokens costs the draft's k steps plus one parent verify of
k + 1 tokens, and yields 1 + a1 + a1·a2 + ... + a1···ak tokens, where ai is the chance that position i is
accepted once position i - 1 was. Plain decoding is the case k = 0. Each cycle the controller picks the
source and k with the most predicted tokens per second.

Where the terms come from:
- Times: the machine's probe (`runtime.decode.machine_costs`: a plain step, the verify curve v(n), each draft's cost c)
  is the prior, in units of the parent's step; this process's own measurements refine it. The verify cost
  is one curve over every batch size seen (monotone, interpolated), so a few noisy samples at one size
  cannot switch a source off. Timings are not carried from one process to the next: the probe is.
- Acceptance: per source and position, a running mean with its evidence (how many cycles reached that
  position), so each estimate has an uncertainty. Evidence fades between answers (ANSWER_DECAY).
- Exploration: a source predicted not to pay is still tried while the upper confidence bound of its
  acceptance would beat the current choice (UCB). Each try adds evidence and tightens the bound, so the
  price of exploring is bounded, and a source refused on weak evidence is tried again.
  Tries may lose at most EXPLORE_SHARE of the tokens produced so far (in this process's answers, in
  parent steps; a try's worst case is its drafts, catch-up and verify batch for one token): a first short
  answer, or one on a machine where every verify row is dear (the 135M demo: v(2) = 1.37), is not made
  slower by curiosity, and over many answers exploring costs at most that share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runtime.decode.draft_source import Offer
from runtime.decode.drafts import KINDS, ngram

# The cost model's arithmetic and the estimates it runs on live in `estimates`; named here too, where most
# callers (the probe, the plain estimate, the benchmark, the tests) meet them.
from runtime.decode.estimates import PRIOR_PREFILL_FRACTION, expected_tokens
from runtime.decode.estimates import CostShape as CostShape
from runtime.decode.estimates import Estimates as Estimates
from runtime.decode.estimates import SourceStats as SourceStats
from runtime.decode.estimates import Timing as Timing
from runtime.decode.estimates import cap as cap
from runtime.decode.estimates import interpolate as interpolate
from runtime.decode.estimates import isotonic as isotonic
from runtime.decode.estimates import speedup as speedup
from runtime.decode.estimates import v_max as v_max

# Each source's kind (runtime/decode/drafts) brings its own priors and limits: acceptance before any is
# measured, the longest proposal, and whether a proposal costs a model's steps or a lookup's time. The n-gram
# names stay here for the tests and the lookups-only mode (`--draft ngram`) that read them from here.
NGRAM = ngram.NAME
NGRAM_PRIOR_BY_MATCH = ngram.PRIOR_BY_MATCH
ngram_key = ngram.ngram_key
EXPLORE_SHARE = 0.03  # tries may lose at most this share of the answer's tokens so far, in parent steps
MIN_RATE_GAIN = 1.03  # speculate only when it predicts at least 3% more tokens per second than plain
# A source that could not beat plain even with every proposal accepted, at this machine's measured costs (a
# draft tier about as dear as the parent, as Q4_K_M of the 135M demo on some builds), is not weighed again for
# this many cycles: weighing every k each cycle cost about 2% of the demo's step, for nothing.
HOPELESS_RECHECK = 32


@dataclass(frozen=True)
class CyclePlan:
    source: str | None  # None: a plain parent step
    k: int
    rate: float  # predicted tokens per second (at the estimates' means)
    plain_rate: float
    explore: bool = False  # tried for its upper bound, not its mean


class Controller:
    """Picks, each cycle, the draft source and k that maximise predicted tokens per second.

    One Controller serves one answer; its Estimates outlive it. The best source at the estimates' means is
    used, unless another one's upper confidence bound beats it: then that one is tried (with the k its bound
    suggests), which either confirms it or tightens its bound.
    """

    def __init__(self, estimates: Estimates | None = None, fixed_k: int | None = None) -> None:
        self.estimates = estimates or Estimates()
        self.fixed_k = fixed_k
        self.cycles = 0
        self._faded: set[str] = set()
        self._exploring = False
        self._hopeless: dict[str, int] = {}  # source -> the cycle up to which it is not weighed (hopeless)

    def _costs(self, offer: Offer, k: int, step: float) -> tuple[float, float]:
        """(seconds of k proposals, seconds paid once first: the catch-up of a draft that fell behind)."""
        src = self.estimates.source(offer.stats_key, offer.kind)
        if not KINDS[offer.kind].decodes:  # a lookup: its own measured time, nothing to catch up on
            return src.step.estimate(0.0) or 0.0, 0.0
        shape = self.estimates.shape
        c = shape.c.get(offer.name) if shape else None
        per_step = src.step.estimate((c if c is not None else offer.size_ratio) * step) or 0.0
        p = shape.prefill.get(offer.name) if shape else None
        per_prefill = src.prefill.estimate(p * step if p is not None else PRIOR_PREFILL_FRACTION * per_step) or 0.0
        # A catch-up batch of one or two tokens costs about a step and stands for the first proposal.
        return k * per_step, per_prefill * max(0, offer.catch_up - 2)

    def _best_k(self, offer: Offer, step: float, horizon: int, optimistic: bool = False) -> tuple[int, float]:
        """The k with the most predicted tokens per second for this offer, and that rate (at the acceptance
        means, or at their upper bounds)."""
        src = self.estimates.source(offer.stats_key, offer.kind)
        top = min(offer.max_k, KINDS[offer.kind].k_max)
        ks = [min(self.fixed_k, offer.max_k)] if self.fixed_k else range(1, top + 1)
        accept = (src.optimistic if optimistic else src.acceptance)(max(ks))
        best_k, best_rate = 0, 0.0
        draft_k, draft_once, once = self._unit_costs(offer, step)  # the same for every k: worked out once
        curve = self.estimates.curve()
        for k in ks:
            tokens = expected_tokens(accept[:k])
            draft = k * draft_k + draft_once
            cycle = draft + ((interpolate(curve, k + 1) if curve else None) or step)
            # A catch-up is paid once and repaid over the rest of the answer, if the answer is long enough.
            rate = horizon / (once + horizon * cycle / tokens)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def plan_cycle(self, offers: Sequence[Offer], remaining: int) -> CyclePlan:
        """The best (source, k) for this cycle; `remaining` is how many tokens the answer may still need."""
        self.cycles += 1
        for offer in offers:  # a new answer for each source: earlier evidence fades a little
            if offer.stats_key not in self._faded:
                self._faded.add(offer.stats_key)
                self.estimates.source(offer.stats_key, offer.kind).fade()
        step = self.estimates.step_s()
        if step is None:  # nothing timed yet: a plain cycle measures the parent's step
            return CyclePlan(None, 0, 0.0, 0.0)
        plain = 1.0 / step
        best = CyclePlan(None, 0, plain, plain)
        horizon = max(1, remaining)
        live = [o for o in offers if o.max_k > 0 and (self.fixed_k or not self._hopeless_now(o, step, plain))]
        for offer in live:
            k, rate = self._best_k(offer, step, horizon)
            beats = rate > best.rate * (1.0 if best.source else MIN_RATE_GAIN)
            if beats or (self.fixed_k and best.source is None):
                best = CyclePlan(offer.name, k, rate, plain)
        if self.fixed_k:
            return best
        # Explore: the source whose upper bound beats the choice by the most, if any does.
        hurdle = best.rate * (1.0 if best.source else MIN_RATE_GAIN)
        explore: tuple[float, Offer, int] | None = None
        for offer in live:
            if offer.name == best.source:
                continue
            k, bound = self._best_k(offer, step, horizon, optimistic=True)
            if bound > hurdle and (explore is None or bound > explore[0]):
                explore = (bound, offer, k)
        if explore is not None:
            _, offer, k = explore
            k = self._affordable_k(offer, k, step)
            if k:
                self._exploring = True
                return CyclePlan(offer.name, k, best.rate, plain, explore=True)
        return best

    def ceiling(self, offer: Offer, step: float) -> float:
        """The most tokens per second `offer` could give at the measured costs if every proposal were
        accepted and nothing had to be caught up: an upper bound of every rate `_best_k` predicts for it."""
        top = min(offer.max_k, KINDS[offer.kind].k_max)
        best = 0.0
        draft_k, draft_once, _ = self._unit_costs(offer, step)
        curve = self.estimates.curve()
        for k in range(1, top + 1):
            verify = (interpolate(curve, k + 1) if curve else None) or step
            best = max(best, (k + 1) / (k * draft_k + draft_once + verify))
        return best

    def _unit_costs(self, offer: Offer, step: float) -> tuple[float, float, float]:
        """`_costs` as (seconds per proposed token, seconds per proposal, seconds paid once): a model's
        steps scale with k, a lookup's time does not."""
        first, once = self._costs(offer, 1, step)
        return (first, 0.0, once) if KINDS[offer.kind].decodes else (0.0, first, once)

    def _hopeless_now(self, offer: Offer, step: float, plain: float) -> bool:
        """Whether `offer` cannot beat plain decoding even at its ceiling (then it could be neither chosen nor
        explored); the verdict holds for HOPELESS_RECHECK cycles, then the costs, refined meanwhile, decide again."""
        until = self._hopeless.get(offer.stats_key)
        if until is not None and self.cycles <= until:
            return True
        if self.ceiling(offer, step) > plain * MIN_RATE_GAIN:
            self._hopeless.pop(offer.stats_key, None)
            return False
        self._hopeless[offer.stats_key] = self.cycles + HOPELESS_RECHECK
        return True

    def _affordable_k(self, offer: Offer, k_max: int, step: float) -> int:
        """The largest k up to `k_max` whose worst case (every draft refused) fits the exploration budget, 0 if
        none does."""
        budget = EXPLORE_SHARE * self.estimates.tokens - self.estimates.explore_loss
        for k in range(k_max, 0, -1):
            draft, once = self._costs(offer, k, step)
            worst = (draft + once + (self.estimates.verify_s(k + 1) or step)) / step - 1.0
            if worst <= budget:
                return k
        return 0

    def record(self, cycle: CycleOutcome) -> None:
        """Learn from one finished cycle."""
        step = self.estimates.step_s()
        if self._exploring and step:
            self.estimates.explore_loss += (cycle.draft_s + cycle.verify_s) / step - (cycle.accepted + 1)
        self._exploring = False
        self.estimates.tokens += cycle.accepted + 1
        self.estimates.record_verify(cycle.drafted + 1, cycle.verify_s)
        if cycle.source is None:
            return
        src = self.estimates.source(cycle.key or cycle.source, cycle.kind)
        src.record(cycle.drafted, cycle.accepted)
        if not KINDS[cycle.kind].decodes:
            src.step.add(cycle.draft_s)
        elif cycle.caught_up > 2:  # a real catch-up: its cost per token, and the steps after it
            src.prefill.add(cycle.catch_up_s / cycle.caught_up)
            if cycle.drafted > 1:
                src.step.add((cycle.draft_s - cycle.catch_up_s) / (cycle.drafted - 1))
        elif cycle.drafted > 0:  # a short catch-up costs about one step and stands for the first proposal
            src.step.add(cycle.draft_s / cycle.drafted)


@dataclass(frozen=True)
class CycleOutcome:
    """What the controller learns from one cycle."""

    source: str | None
    kind: str
    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    caught_up: int = 0
    catch_up_s: float = 0.0
    key: str | None = None  # the estimates it teaches, if not its source's (n-gram: per match length)
