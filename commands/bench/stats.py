"""What a benchmark's paired ratios say, and what they could have been: a bootstrap interval over prompts,
and the cost model's cap from the same run's measured acceptance, draft cost and verify curve."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from runtime.decode.controller import cap
from runtime.decode.drafts import KINDS, lookups
from runtime.decode.drafts.ngram import KIND as NGRAM
from runtime.decode.drafts.tier import KIND as TIER

RESAMPLES = 2000
LEVEL = 0.90


def bootstrap(ratios: Sequence[float], seed: int = 0) -> tuple[float, float] | None:
    """The 90% bootstrap interval of the median of paired ratios, resampling prompts (None under 3)."""
    xs = np.asarray([r for r in ratios if r is not None], dtype=float)
    if len(xs) < 3:
        return None
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(xs, size=(RESAMPLES, len(xs)), replace=True), axis=1)
    tail = (1 - LEVEL) / 2 * 100
    return float(np.percentile(medians, tail)), float(np.percentile(medians, 100 - tail))


def measurable(interval: tuple[float, float] | None) -> bool:
    """Whether the interval excludes 1.0: a difference the run can tell from noise."""
    return interval is not None and not interval[0] <= 1.0 <= interval[1]


def cost_cap(
    acceptance: float | None, parent: str, draft: str | None, costs: Mapping[str, Mapping[int, float]]
) -> tuple[float, int] | None:
    """The best speed-up the cost model predicts for `draft` at its measured acceptance, from the run's own
    batch costs (milliseconds by batch size, per tier), and the k reaching it; None when not measurable."""
    if acceptance is None or draft is None or parent not in costs or draft not in costs:
        return None
    step = costs[parent][1]
    v = {n: t / step for n, t in costs[parent].items()}
    return cap(acceptance, costs[draft][1] / step, v, min(TIER.k_max, max(v) - 1))


def ngram_cap(
    acceptance: float | None, parent: str, costs: Mapping[str, Mapping[int, float]], kind: str = NGRAM.name
) -> tuple[float, int] | None:
    """The cost model's cap for a lookup kind (n-gram lookup by default) at its measured acceptance: a draft
    that costs nothing, so only the parent's verify curve limits it; None when not measurable."""
    if acceptance is None or parent not in costs:
        return None
    step = costs[parent][1]
    v = {n: t / step for n, t in costs[parent].items()}
    return cap(acceptance, 0.0, v, min(KINDS[kind].k_max, max(v) - 1))


def busiest_lookup(runs: Sequence[Mapping[str, Any]]) -> tuple[str, float] | None:
    """The lookup kind that drafted most in `runs` (by the counters each run records), and its acceptance;
    None when no lookup drafted."""
    drafted = {k.name: sum(x.get(k.drafted_counter, 0) for x in runs) for k in lookups()}
    kind = max(drafted, key=drafted.__getitem__, default=None)
    if kind is None or not drafted[kind]:
        return None
    return kind, sum(x.get(KINDS[kind].accepted_counter, 0) for x in runs) / drafted[kind]


def end_to_end_cap(baseline: Sequence[Mapping[str, Any]], decode_cap: float) -> float | None:
    """The cap in the user's terms: each baseline answer's latency over its time to first token (which drafting
    cannot shorten: the prompt is the parent's to read) plus its decode time divided by `decode_cap`; median."""
    caps = [
        r["latency_s"] / (r["ttft_s"] + (r["latency_s"] - r["ttft_s"]) / decode_cap)
        for r in baseline
        if r.get("latency_s") and r.get("ttft_s") is not None and r["latency_s"] > r["ttft_s"]
    ]
    return statistics.median(caps) if caps else None


def ratio_text(x: float | None, interval: tuple[float, float] | None) -> str:
    """"1.23x [1.10-1.35]", or "no measurable difference (0.96-1.04)" when the interval holds 1.0."""
    if x is None:
        return "-"
    if interval is None:
        return f"{x:.2f}x"
    lo, hi = interval
    if not measurable(interval):
        return f"no measurable difference ({lo:.2f}-{hi:.2f})"
    return f"{x:.2f}x [{lo:.2f}-{hi:.2f}]"


def median_or_none(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None
