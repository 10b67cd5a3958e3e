"""The benchmark's statistics: bootstrap intervals over prompts, "no measurable difference", and the cost
model's cap from a run's own costs."""

from __future__ import annotations

import pytest

from commands.bench.stats import bootstrap, cost_cap, measurable, ratio_text
from runtime.decode.controller import speedup


def test_an_interval_that_holds_one_is_no_measurable_difference() -> None:
    noise = [0.95, 1.04, 0.99, 1.02, 0.97, 1.05, 1.0, 0.98]
    gain = [1.31, 1.22, 1.4, 1.27, 1.35, 1.19, 1.3, 1.28]
    lo, hi = bootstrap(noise)
    assert lo <= 1.0 <= hi and not measurable((lo, hi))
    assert ratio_text(1.0, (lo, hi)).startswith("no measurable difference")
    interval = bootstrap(gain)
    assert interval is not None and 1.19 <= interval[0] < 1.29 < interval[1] <= 1.4 and measurable(interval)
    assert ratio_text(1.29, interval) == f"1.29x [{interval[0]:.2f}-{interval[1]:.2f}]"
    assert bootstrap([1.2, 1.3]) is None and ratio_text(1.25, None) == "1.25x"


def test_the_cap_is_the_best_k_of_the_closed_form_on_the_runs_own_costs() -> None:
    costs = {"f16": {n: 100.0 * (1 + 0.1 * (n - 1)) for n in range(1, 10)}, "q4_k_m": {1: 35.0}}
    best, k = cost_cap(0.95, "f16", "q4_k_m", costs)
    assert 1 <= k <= 8
    assert best == pytest.approx(max(speedup(0.95, j, 0.35, 1 + 0.1 * j) for j in range(1, 9)))
    assert cost_cap(None, "f16", "q4_k_m", costs) is None and cost_cap(0.9, "f16", "q8_0", costs) is None
    # A draft that costs as much as the parent has no cap above 1: plain decoding is the best it allows.
    assert cost_cap(0.99, "f16", "q8_0", costs | {"q8_0": {1: 100.0}})[0] == pytest.approx(1.0, abs=0.05)
