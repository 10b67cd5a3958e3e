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

import itertools
import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.decode.draft_source import Offer
from runtime.decode.drafts import KINDS, k_max, ngram

# Each source's kind (runtime/decode/drafts) brings its own priors and limits: acceptance before any is
# measured, the longest proposal, and whether a proposal costs a model's steps or a lookup's time. The n-gram
# names stay here for the tests and the lookups-only mode (`--draft ngram`) that read them from here.
NGRAM = ngram.NAME
NGRAM_PRIOR_BY_MATCH = ngram.PRIOR_BY_MATCH
ngram_key = ngram.ngram_key
# Priors for a machine and model never measured. They only decide until the probe or the first cycles
# have measured the terms.
PRIOR_VERIFY_SLOPE = 0.15  # each verify row past the first costs ~0.15 of a step on 2 CPU cores
# A caught-up token costs 0.3-0.5 of a draft step when batched (measured: q4_k_m of the 1.5B, 2 cores).
PRIOR_PREFILL_FRACTION = 0.4
WINDOW = 9  # recent timings kept per term (their median is the estimate)
PRIOR_WEIGHT = 2  # pseudo-samples a timing prior counts for
PRIOR_EVIDENCE = 2.0  # pseudo-cycles behind a prior acceptance
PROBE_EVIDENCE = 4.0  # pseudo-cycles behind the probe's measured acceptance of a tier draft
EWMA_MIN = 0.06  # once evidence is ample, the newest sample still moves the mean this much (tracks ~16 cycles)
ANSWER_DECAY = 0.8  # evidence carried from one answer into the next: old refusals weaken, and are retried
UCB_Z = 1.28  # the one-sided 90% bound used for exploring
EXPLORE_SHARE = 0.03  # tries may lose at most this share of the answer's tokens so far, in parent steps
MIN_RATE_GAIN = 1.03  # speculate only when it predicts at least 3% more tokens per second than plain
# A source that could not beat plain even with every proposal accepted, at this machine's measured costs (a
# draft tier about as dear as the parent, as Q4_K_M of the 135M demo on some builds), is not weighed again for
# this many cycles: weighing every k each cycle cost about 2% of the demo's step, for nothing.
HOPELESS_RECHECK = 32


def v_max() -> int:
    """The largest verify batch the controller considers: one past the longest proposal of any kind."""
    return 1 + k_max()


def _prior_acceptance(name: str, kind: str) -> float:
    return KINDS[kind].key_priors.get(name, KINDS[kind].prior)


def expected_tokens(acceptance: Sequence[float]) -> float:
    """Tokens one cycle yields: the accepted prefix plus the parent's correction or bonus token."""
    total, reach = 1.0, 1.0
    for a in acceptance:
        reach *= a
        total += reach
    return total


def speedup(a: float, k: int, c: float, v: float) -> float:
    """The closed form: [(1 - a^(k+1)) / (1 - a)] / (k·c + v(k+1)), in units of a parent step."""
    tokens = k + 1.0 if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)
    return tokens / (k * c + v)


def cap(a: float, c: float, v: Mapping[int, float], k_max: int) -> tuple[float, int]:
    """The best predicted speed-up over plain decoding at acceptance a and draft cost c, and the k reaching
    it (1.0 and 0 when no k pays): what a perfect controller could get from this source on this machine."""
    best, best_k = 1.0, 0
    for k in range(1, k_max + 1):
        if k + 1 in v:
            s = speedup(a, k, c, v[k + 1])
            if s > best:
                best, best_k = s, k
    return best, best_k


def upper_bound(mean: float, evidence: float, z: float = UCB_Z) -> float:
    """Wilson's upper confidence bound of a rate measured as `mean` over `evidence` trials."""
    n = max(evidence, 1e-9)
    centre = mean + z * z / (2 * n)
    spread = z * math.sqrt(max(0.0, mean * (1 - mean)) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def isotonic(points: Sequence[tuple[int, float, float]]) -> list[tuple[int, float]]:
    """(n, value, weight) sorted by n, fitted non-decreasing in n (pool adjacent violators, weighted)."""
    blocks: list[list[float]] = []  # [value, weight, count]
    for _, value, weight in points:
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, c2 = blocks.pop()
            v1, w1, c1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    fitted: list[float] = []
    for value, _, count in blocks:
        fitted += [value] * int(count)
    return [(n, f) for (n, _, _), f in zip(points, fitted, strict=True)]


def interpolate(curve: Sequence[tuple[int, float]], n: int) -> float:
    """The fitted curve at n: exact at a fitted size, linear between two, extended past the largest by the
    slope over its upper half (the compute-bound part, steeper than the start)."""
    for (n0, t0), (n1, t1) in itertools.pairwise(curve):
        if n0 <= n <= n1:
            return t0 + (t1 - t0) * (n - n0) / (n1 - n0)
    last_n, last_t = curve[-1]
    if n <= last_n or len(curve) == 1:
        return curve[0][1] if n < curve[0][0] else last_t
    lower = [p for p in curve if p[0] <= last_n / 2] or curve[:1]
    mid_n, mid_t = lower[-1]
    slope = max(0.0, (last_t - mid_t) / (last_n - mid_n)) if last_n > mid_n else 0.0
    return last_t + slope * (n - last_n)


@dataclass(frozen=True)
class CostShape:
    """The machine's costs as the probe measured them (`runtime.decode.machine_costs`), in units of one parent step."""

    step_s: float  # one plain parent step, seconds
    v: Mapping[int, float]  # batch size -> verify seconds over one step (v[1] = 1)
    c: Mapping[str, float] = field(default_factory=dict)  # draft tier -> its step over a parent step
    prefill: Mapping[str, float] = field(default_factory=dict)  # draft tier -> a caught-up token over a step
    acceptance: Mapping[str, float] = field(default_factory=dict)  # draft tier -> greedy agreement (probe)


_SERIALS = itertools.count()


class Timing:
    """Recent timings of one term; the estimate is their median, with a prior while samples are few."""

    def __init__(self, samples: Sequence[float] = ()) -> None:
        self.samples: deque[float] = deque(samples, maxlen=WINDOW)
        self.serial = next(_SERIALS)  # with `added`, tells a cached fit that this term changed
        self.added = 0

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)
        self.added += 1

    def estimate(self, prior: float | None = None) -> float | None:
        values = list(self.samples)
        if prior is not None and len(values) < 4:
            values += [prior] * PRIOR_WEIGHT
        return statistics.median(values) if values else None

    def __len__(self) -> int:
        return len(self.samples)


@dataclass
class SourceStats:
    """What is known of one draft source: acceptance per position with its evidence, and what a proposed
    token costs."""

    kind: str  # a registered Kind's name (runtime/decode/drafts)
    accept: list[float] = field(default_factory=list)  # per position: P(accepted | the previous one was)
    seen: list[float] = field(default_factory=list)  # per position: cycles that reached it (fading)
    step: Timing = field(default_factory=Timing)  # one draft step (tier) or one lookup (ngram)
    prefill: Timing = field(default_factory=Timing)  # per token a tier draft catches up on
    prior: float = 0.0  # acceptance at a position never measured (0: the kind's prior)
    prior_evidence: float = PRIOR_EVIDENCE  # pseudo-cycles behind `prior`

    def _prior(self) -> float:
        return self.prior or KINDS[self.kind].prior

    def acceptance(self, k: int) -> list[float]:
        out = []
        for i in range(k):
            if i < len(self.accept):
                out.append(self.accept[i])
            else:  # unseen positions: the deepest measured one, a little lower (acceptance falls with depth)
                out.append(out[-1] * 0.97 if out else self._prior())
        return out

    def evidence(self, i: int) -> float:
        return self.prior_evidence + (self.seen[i] if i < len(self.seen) else 0.0)

    def optimistic(self, k: int) -> list[float]:
        """Per position, the upper confidence bound of its acceptance."""
        return [upper_bound(a, self.evidence(i)) for i, a in enumerate(self.acceptance(k))]

    def record(self, drafted: int, accepted: int) -> None:
        if drafted > len(self.accept):
            self.accept = self.acceptance(drafted)
        self.seen += [0.0] * (len(self.accept) - len(self.seen))
        for i in range(min(drafted, accepted + 1)):  # positions reached: 1..accepted+1
            self.seen[i] += 1.0
            weight = max(EWMA_MIN, 1.0 / (self.evidence(i) + 1.0))
            self.accept[i] += weight * ((1.0 if i < accepted else 0.0) - self.accept[i])

    def fade(self) -> None:
        """A new answer: earlier answers' evidence counts for less (the answer at hand may differ), so each
        mean moves back towards the prior by as much as its evidence faded, and its bound widens again."""
        prior = self._prior()
        for i, seen in enumerate(self.seen):
            if i >= len(self.accept):
                break
            n0 = self.prior_evidence
            hits = self.accept[i] * (n0 + seen) - prior * n0  # the successes behind the mean
            self.seen[i] = seen * ANSWER_DECAY
            self.accept[i] = min(1.0, max(0.0, (prior * n0 + hits * ANSWER_DECAY) / (n0 + self.seen[i])))


@dataclass
class Estimates:
    """The running estimates for one parent and sampling mode. Acceptance is saved with the model; times
    come from the machine's probe (`shape`) and this process's measurements."""

    verify: dict[int, Timing] = field(default_factory=dict)  # parent batch size -> seconds
    sources: dict[str, SourceStats] = field(default_factory=dict)
    shape: CostShape | None = None
    # Exploration's account over this process's answers: tokens produced, and parent steps lost to tries
    # (a try that paid off refunds). Not saved: a new process starts with no allowance.
    tokens: int = 0
    explore_loss: float = 0.0
    _fit: tuple[CostShape | None, tuple[Any, ...], list[tuple[int, float]]] | None = field(
        default=None, repr=False, compare=False
    )

    def source(self, name: str, kind: str) -> SourceStats:
        if name not in self.sources:
            stats = SourceStats(kind, prior=_prior_acceptance(name, kind))
            if KINDS[kind].decodes and self.shape is not None and name in self.shape.acceptance:
                stats.prior, stats.prior_evidence = self.shape.acceptance[name], PROBE_EVIDENCE
            self.sources[name] = stats
        return self.sources[name]

    def seed(self, shape: CostShape) -> None:
        """Take the probe's costs as priors, and its acceptance for tier drafts not yet measured here."""
        self.shape = shape
        for name, a in shape.acceptance.items():
            src = self.sources.get(name)
            if src is not None and KINDS[src.kind].decodes and not any(src.seen):
                src.prior, src.prior_evidence = a, PROBE_EVIDENCE

    def step_s(self) -> float | None:
        """A plain parent step: this process's recent ones, the probe's while they are few; None before
        either exists."""
        t = self.verify.get(1) or Timing()
        return t.estimate(self.shape.step_s if self.shape else None)

    def curve(self) -> list[tuple[int, float]]:
        """Verify seconds by batch size, one monotone curve over every size measured here or by the probe:
        each size's median, weighted by its samples, pooled with the probe's shape scaled to today's step.
        Fitted again only when a timing or the probe changed: the controller asks many times per cycle, and
        on a 16 ms step a refit each time cost 4% of the answer."""
        key = tuple((n, t.serial, t.added) for n, t in self.verify.items())
        if self._fit is None or self._fit[0] is not self.shape or self._fit[1] != key:
            self._fit = (self.shape, key, self._fitted_curve())
        return self._fit[2]

    def _fitted_curve(self) -> list[tuple[int, float]]:
        step = self.step_s()
        if step is None:
            return []
        points: dict[int, tuple[float, float]] = {1: (step, 1.0)}
        shape_v = self.shape.v if self.shape else {}
        for n in sorted(set(shape_v) | set(self.verify)):
            if n <= 1:
                continue
            t = self.verify.get(n)
            live = (statistics.median(t.samples), float(len(t))) if t is not None and len(t) else None
            prior = (step * shape_v[n], float(PRIOR_WEIGHT)) if n in shape_v else None
            if live and prior:
                w = live[1] + prior[1]
                points[n] = ((live[0] * live[1] + prior[0] * prior[1]) / w, w)
            elif live or prior:
                points[n] = live or prior  # type: ignore[assignment]
        if len(points) == 1:  # nothing but the step: the prior's shape
            n = v_max()
            points[n] = (step * (1 + PRIOR_VERIFY_SLOPE * (n - 1)), 1.0)
        fitted = isotonic([(n, t, w) for n, (t, w) in sorted(points.items())])
        return [(n, max(t, step)) for n, t in fitted]  # a batch never costs less than one token

    def verify_s(self, n: int) -> float | None:
        """Predicted seconds of a parent batch of n tokens (None before any step was timed)."""
        curve = self.curve()
        return interpolate(curve, n) if curve else None

    def v(self, n_max: int | None = None) -> dict[int, float]:
        """The fitted curve in units of one step, for n = 1..n_max ({} before a step was timed)."""
        curve = self.curve()
        if not curve:
            return {}
        step = curve[0][1]
        return {n: interpolate(curve, n) / step for n in range(1, (n_max or v_max()) + 1)}

    def record_verify(self, n: int, seconds: float) -> None:
        self.verify.setdefault(n, Timing()).add(seconds)

    def as_dict(self) -> dict[str, Any]:
        """What is saved with the model: acceptance and its evidence (times are this machine's probe's)."""
        return {
            "sources": {
                name: {"kind": s.kind, "accept": s.accept, "seen": s.seen}
                for name, s in self.sources.items()
                if s.accept
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], shape: CostShape | None = None) -> Estimates:
        """Back from `as_dict`; anything malformed is dropped (priors take its place)."""

        def numbers(raw: Any, low: float, high: float) -> list[float]:
            if not isinstance(raw, list):
                return []
            ok = (float(x) for x in raw if isinstance(x, (int, float)) and not isinstance(x, bool))
            return [x for x in ok if math.isfinite(x) and low <= x <= high]

        est = cls(shape=shape)
        sources = data.get("sources") if isinstance(data, Mapping) else None
        for name, raw in (sources if isinstance(sources, Mapping) else {}).items():
            if not isinstance(raw, dict) or raw.get("kind") not in KINDS or not KINDS[raw["kind"]].verified:
                continue
            src = est.source(str(name), raw["kind"])
            src.accept = numbers(raw.get("accept"), 0, 1)
            src.seen = numbers(raw.get("seen"), 0, 1e9)[: len(src.accept)]
        return est


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
