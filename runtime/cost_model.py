"""The speculative cost model (DESIGN.md §6) in code, and the online controller it drives.

One cycle with draft source s and k proposed tokens costs the draft's k steps plus one parent verify of
k + 1 tokens, and yields 1 + a1 + a1·a2 + ... + a1···ak tokens, where ai is the chance that position i is
accepted once position i - 1 was. Plain decoding is the case k = 0. Each cycle the controller picks the
source and k with the most predicted tokens per second, from running estimates of every term, measured as
the loop runs and seeded from the previous answers on this machine (or from priors on the first one).

Times are medians of recent samples, so one decode slowed by another program does not switch speculation
off for good; acceptance is a running mean that starts at a prior.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NGRAM = "ngram"  # the n-gram lookup source: its kind, and its name (a tier draft's name is its tier)
# Priors for a machine and model never measured. They only decide the first cycles: every term is replaced
# by measurements within a few cycles.
PRIOR_VERIFY_SLOPE = 0.15  # each verify row past the first costs ~0.15 of a step on 2 CPU cores (§6)
PRIOR_ACCEPTANCE = {NGRAM: 0.6, "tier": 0.8}
# An n-gram proposal is kept per match length: a 4-token match inside quoted code predicts far better than
# a 2-token one in prose, and one shared estimate would make the controller refuse both.
NGRAM_PRIOR_BY_MATCH = {2: 0.3, 3: 0.45, 4: 0.6}
# A caught-up token costs 0.3-0.5 of a draft step when batched (measured: q4_k_m of the 1.5B, 2 cores).
PRIOR_PREFILL_FRACTION = 0.4
EWMA = 0.15  # weight of the newest acceptance sample
WINDOW = 9  # recent timings kept per term (their median is the estimate)
PRIOR_WEIGHT = 2  # pseudo-samples a prior counts for while fewer than 4 timings are known
MIN_RATE_GAIN = 1.03  # speculate only when it predicts at least 3% more tokens per second than plain
EXPLORE_EVERY = 48  # cycles between retries of a source that is predicted not to pay, to refresh its estimates
# A tier draft declined for this many answers in a row is tried once more in a long answer: its catch-up is
# the price of finding out whether what made it look slow (another program, an old measurement) still holds.
EXPLORE_ANSWERS = 8
EXPLORE_HORIZON = 64  # only in answers expected to run at least this long (the catch-up is then a small part)
PROBE_CYCLES = 8  # cycles such a retry runs, enough to replace the stale timings' medians
K_MAX = {"tier": 8, NGRAM: 12}


def ngram_key(match: int) -> str:
    """The estimates' name for n-gram proposals from a suffix match of `match` tokens."""
    return f"{NGRAM}:{match}"


def _prior_acceptance(name: str, kind: str) -> float:
    if kind == NGRAM and name.startswith(f"{NGRAM}:") and name[len(NGRAM) + 1 :].isdigit():
        return NGRAM_PRIOR_BY_MATCH.get(int(name[len(NGRAM) + 1 :]), PRIOR_ACCEPTANCE[NGRAM])
    return PRIOR_ACCEPTANCE[kind]


def expected_tokens(acceptance: Sequence[float]) -> float:
    """Tokens one cycle yields: the accepted prefix plus the parent's correction or bonus token."""
    total, reach = 1.0, 1.0
    for a in acceptance:
        reach *= a
        total += reach
    return total


def speedup(a: float, k: int, c: float, v: float) -> float:
    """DESIGN.md §6's closed form: [(1 - a^(k+1)) / (1 - a)] / (k·c + v(k+1)), in units of a parent step."""
    tokens = k + 1.0 if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)
    return tokens / (k * c + v)


class Timing:
    """Recent timings of one term; the estimate is their median, with a prior while samples are few."""

    def __init__(self, samples: Sequence[float] = ()) -> None:
        self.samples: deque[float] = deque(samples, maxlen=WINDOW)

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)

    def estimate(self, prior: float | None = None) -> float | None:
        values = list(self.samples)
        if prior is not None and len(values) < 4:
            values += [prior] * PRIOR_WEIGHT
        return statistics.median(values) if values else None

    def __len__(self) -> int:
        return len(self.samples)


@dataclass
class SourceStats:
    """What is known of one draft source: acceptance per position, and what a proposed token costs."""

    kind: str  # "tier" or "ngram"
    accept: list[float] = field(default_factory=list)  # per position: P(accepted | the previous one was)
    step: Timing = field(default_factory=Timing)  # one draft step (tier) or one lookup (ngram)
    prefill: Timing = field(default_factory=Timing)  # per token a tier draft catches up on
    prior: float = 0.0  # acceptance at a position never measured (0: the kind's prior)
    idle: int = 0  # answers in a row that offered this tier draft and did not use it

    def acceptance(self, k: int) -> list[float]:
        out = []
        for i in range(k):
            if i < len(self.accept):
                out.append(self.accept[i])
            else:  # unseen positions: the deepest measured one, a little lower (acceptance falls with depth)
                out.append(out[-1] * 0.97 if out else self.prior or PRIOR_ACCEPTANCE[self.kind])
        return out

    def record(self, drafted: int, accepted: int) -> None:
        if drafted > len(self.accept):
            self.accept = self.acceptance(drafted)
        for i in range(min(drafted, accepted + 1)):  # positions reached: 1..accepted+1
            self.accept[i] += EWMA * ((1.0 if i < accepted else 0.0) - self.accept[i])


@dataclass
class Estimates:
    """The running estimates for one parent and sampling mode; serialisable for the cache."""

    verify: dict[int, Timing] = field(default_factory=dict)  # parent batch size -> seconds
    sources: dict[str, SourceStats] = field(default_factory=dict)

    def source(self, name: str, kind: str) -> SourceStats:
        if name not in self.sources:
            self.sources[name] = SourceStats(kind, prior=_prior_acceptance(name, kind))
        return self.sources[name]

    def step_s(self) -> float | None:
        """A plain parent step, or None before one was timed."""
        t = self.verify.get(1)
        return t.estimate() if t else None

    def verify_s(self, n: int) -> float | None:
        """Predicted seconds of a parent batch of n tokens: measured where known, else the prior's shape
        scaled from the single step (the slope from the largest measured batch, once there is one)."""
        step = self.step_s()
        if step is None:
            return None
        prior = step * (1 + PRIOR_VERIFY_SLOPE * (n - 1))
        measured = self.verify.get(n)
        if measured is not None and len(measured) > 0:
            return measured.estimate(prior)
        bigger = [m for m, t in self.verify.items() if m > 1 and len(t) >= 2]
        if bigger:
            m = min(bigger, key=lambda b: abs(b - n))
            slope = max(0.0, ((self.verify[m].estimate() or prior) / step - 1) / (m - 1))
            return step * (1 + slope * (n - 1))
        return prior

    def record_verify(self, n: int, seconds: float) -> None:
        self.verify.setdefault(n, Timing()).add(seconds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verify": {str(n): list(t.samples) for n, t in self.verify.items()},
            "sources": {
                name: {
                    "kind": s.kind,
                    "accept": s.accept,
                    "step": list(s.step.samples),
                    "prefill": list(s.prefill.samples),
                    "idle": s.idle,
                }
                for name, s in self.sources.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimates:
        """Back from `as_dict`; anything malformed is dropped (priors take its place)."""

        def numbers(raw: Any, low: float, high: float) -> list[float]:
            if not isinstance(raw, list):
                return []
            ok = (float(x) for x in raw if isinstance(x, (int, float)) and not isinstance(x, bool))
            return [x for x in ok if math.isfinite(x) and low <= x <= high]

        est = cls()
        for n, raw in (data.get("verify") or {}).items():
            if str(n).isdigit() and int(n) >= 1:
                est.verify[int(n)] = Timing(numbers(raw, 0, 3600))
        for name, raw in (data.get("sources") or {}).items():
            if not isinstance(raw, dict) or raw.get("kind") not in PRIOR_ACCEPTANCE:
                continue
            src = est.source(name, raw["kind"])
            src.accept = numbers(raw.get("accept"), 0, 1)
            src.step = Timing(numbers(raw.get("step"), 0, 3600))
            src.prefill = Timing(numbers(raw.get("prefill"), 0, 3600))
            src.idle = int(next(iter(numbers([raw.get("idle", 0)], 0, 1e6)), 0))
        return est


@dataclass(frozen=True)
class Offer:
    """A draft source's offer for this cycle: how many tokens it can propose, and what it must first do."""

    name: str
    kind: str  # "tier" | "ngram"
    max_k: int
    catch_up: int = 0  # tokens a tier draft must decode before it can propose (its prefill after a gap)
    size_ratio: float = 0.35  # draft bytes over parent bytes: the prior for its step cost (memory-bound)
    key: str = ""  # the estimates it is judged by, if not its name's (n-gram: per match length)

    @property
    def stats_key(self) -> str:
        return self.key or self.name


@dataclass(frozen=True)
class Decision:
    source: str | None  # None: a plain parent step
    k: int
    rate: float  # predicted tokens per second
    plain_rate: float


class Controller:
    """Picks, each cycle, the draft source and k that maximise predicted tokens per second.

    One Controller serves one answer; its Estimates outlive it. Estimates can only improve by running a
    source, so one that looks bad is still tried now and then: a caught-up source every EXPLORE_EVERY
    cycles for one token, and a tier draft declined for EXPLORE_ANSWERS answers for PROBE_CYCLES cycles of
    one long answer.
    """

    def __init__(self, estimates: Estimates | None = None, fixed_k: int | None = None) -> None:
        self.estimates = estimates or Estimates()
        self.fixed_k = fixed_k
        self.cycles = 0
        self._last_try: dict[str, int] = {}
        self._probing: dict[str, int] = {}  # stats key -> probe cycles left

    def _costs(self, offer: Offer, k: int, step: float) -> tuple[float, float]:
        """(seconds of k proposals, seconds paid once first: the catch-up of a draft that fell behind)."""
        src = self.estimates.source(offer.stats_key, offer.kind)
        if offer.kind == NGRAM:
            return src.step.estimate(0.0) or 0.0, 0.0
        per_step = src.step.estimate(offer.size_ratio * step) or 0.0
        per_prefill = src.prefill.estimate(PRIOR_PREFILL_FRACTION * per_step) or 0.0
        # A catch-up batch of one or two tokens costs about a step and stands for the first proposal.
        return k * per_step, per_prefill * max(0, offer.catch_up - 2)

    def _best_k(self, offer: Offer, step: float, horizon: int) -> tuple[int, float]:
        """The k with the most predicted tokens per second for this offer, and that rate."""
        src = self.estimates.source(offer.stats_key, offer.kind)
        top = min(offer.max_k, K_MAX[offer.kind])
        best_k, best_rate = 0, 0.0
        for k in [min(self.fixed_k, offer.max_k)] if self.fixed_k else range(1, top + 1):
            tokens = expected_tokens(src.acceptance(k))
            draft, once = self._costs(offer, k, step)
            cycle = draft + (self.estimates.verify_s(k + 1) or step)
            # A catch-up is paid once and repaid over the rest of the answer, if the answer is long enough.
            rate = horizon / (once + horizon * cycle / tokens)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def decide(self, offers: Sequence[Offer], remaining: int) -> Decision:
        """The best (source, k) for this cycle; `remaining` is how many tokens the answer may still need."""
        self.cycles += 1
        if self.cycles == 1:  # a new answer: one more that has not (yet) used each tier draft
            for offer in offers:
                if offer.kind == "tier":
                    self.estimates.source(offer.stats_key, offer.kind).idle += 1
        step = self.estimates.step_s()
        if step is None:  # nothing timed yet: a plain cycle measures the parent's step
            return Decision(None, 0, 0.0, 0.0)
        plain = 1.0 / step
        best = Decision(None, 0, plain, plain)
        horizon = max(1, remaining)
        for offer in offers:
            if offer.max_k <= 0:
                continue
            k, rate = self._best_k(offer, step, horizon)
            if self._probing.get(offer.stats_key, 0) > 0:  # a retry runs its cycles whatever is predicted
                self._probing[offer.stats_key] -= 1
                best = Decision(offer.name, k, rate, plain)
                break
            beats = rate > best.rate * (1.0 if best.source else MIN_RATE_GAIN)
            if beats or (self.fixed_k and best.source is None):
                best = Decision(offer.name, k, rate, plain)
        if best.source is None:
            best = self._explore(offers, best, horizon)
        if best.source is not None:
            self._last_try[best.source] = self.cycles
            for offer in offers:
                if offer.name == best.source:
                    self.estimates.source(offer.stats_key, offer.kind).idle = 0
        return best

    def _explore(self, offers: Sequence[Offer], plain: Decision, horizon: int) -> Decision:
        """Now and then try a source predicted not to pay: its estimates would otherwise never recover."""
        for offer in offers:
            if offer.max_k <= 0:
                continue
            src = self.estimates.source(offer.stats_key, offer.kind)
            if offer.catch_up > 2:
                if offer.kind != "tier" or src.idle < EXPLORE_ANSWERS or horizon < EXPLORE_HORIZON:
                    continue
                # Its timings are stale: measure afresh (priors until new samples arrive), for a few cycles.
                src.step, src.prefill = Timing(), Timing()
                self._probing[offer.stats_key] = PROBE_CYCLES - 1
                return Decision(offer.name, min(2, offer.max_k), plain.rate, plain.plain_rate)
            if self.cycles - self._last_try.get(offer.name, 0) >= EXPLORE_EVERY:
                return Decision(offer.name, 1, plain.rate, plain.plain_rate)
        return plain

    def record(self, cycle: CycleFacts) -> None:
        """Learn from one finished cycle."""
        self.estimates.record_verify(cycle.drafted + 1, cycle.verify_s)
        if cycle.source is None:
            return
        src = self.estimates.source(cycle.key or cycle.source, cycle.kind)
        src.record(cycle.drafted, cycle.accepted)
        if cycle.kind == NGRAM:
            src.step.add(cycle.draft_s)
        elif cycle.caught_up > 2:  # a real catch-up: its cost per token, and the steps after it
            src.prefill.add(cycle.catch_up_s / cycle.caught_up)
            if cycle.drafted > 1:
                src.step.add((cycle.draft_s - cycle.catch_up_s) / (cycle.drafted - 1))
        elif cycle.drafted > 0:  # a short catch-up costs about one step and stands for the first proposal
            src.step.add(cycle.draft_s / cycle.drafted)


@dataclass(frozen=True)
class CycleFacts:
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
