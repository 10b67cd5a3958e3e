"""What the controller (`runtime.decode.controller`) knows: the cost model's arithmetic (docs/architecture.md §5:
a cycle's expected tokens, its speed-up, a source's cap, the verify curve fitted and interpolated), and the
`Estimates` of one model on this machine: the parent's step and verify timings, and per source its acceptance
by position with its evidence, from the probe's `CostShape` and each kind's priors (runtime/decode/drafts)
refined by every cycle."""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.decode.drafts import KINDS, k_max

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
