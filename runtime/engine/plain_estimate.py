"""What plain decoding would have cost this answer, and whether a speed-up over it can honestly be claimed.

Plain decoding by the same parent would pay the same first cycle (the prefill and first token), then one
plain step per further token, plus the loop's own per-token work. The step is the machine's measured one
(the probe's, runtime.decode.machine_costs; before any probe, this process's plain steps), scaled by how
fast this answer's own parent batches ran against what the same measurement predicts for them: a machine
slowed by another program slows plain decoding too. No claim is made, with the reason, when:
- no plain step was ever measured here;
- this answer's batches ran far off the prediction, or their speed changed during the answer;
- the claim would exceed what the measured costs allow even at full acceptance.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from runtime.decode.controller import Estimates, interpolate, v_max
from runtime.decode.drafts import KINDS
from runtime.decode.machine_costs import MachineCosts
from runtime.decode.speculative import Step
from runtime.engine.answer import Stats

# This answer's batches over their prediction: a steady factor (the window's own drawing shares the cores;
# another program runs throughout) scales plain decoding alike, but far outside this band, or changing by
# more than SHIFT between the answer's two halves, it no longer says what plain decoding would have cost.
LOAD_BAND = (0.4, 2.5)
SHIFT = 1.4
STALE = 0.67  # a long answer this much faster than measured: the measurement was made under load
BOUND_SLACK = 1.1  # timing noise allowed above the cost model's bound before a claim is refused


@dataclass
class PlainEstimate:
    """One answer's plain-decoding estimate, fed each Step (`judge`)."""

    curve: list[tuple[int, float]]  # verify seconds by batch size, as known when the answer started
    c: dict[str, float]  # draft tier -> its step over the parent's (the probe's, else none known)
    machine_cap: float | None = None  # the cost model's cap for this answer's draft on this machine
    ratios: list[float] = field(default_factory=list)  # this answer's batches: measured over predicted
    measured_s: float = 0.0  # the same batches' seconds, and what the measurement predicted for them
    predicted_s: float = 0.0
    work_s: float = 0.0  # draft and verify seconds after the first cycle
    sources: set[str] = field(default_factory=set)  # the sources that drafted, by name
    kinds: dict[str, str] = field(default_factory=dict)  # ... and each one's kind

    @classmethod
    def start(cls, estimates: Estimates, costs: MachineCosts | None, draft: str | None) -> PlainEstimate:
        if costs is None:
            shape = estimates.shape
            return cls(estimates.curve(), dict(shape.c) if shape else {})
        cap = costs.caps()[draft]["cap"] if draft in costs.c else None
        return cls([(n, costs.step_s * x) for n, x in sorted(costs.v.items())], dict(costs.c), cap)

    @property
    def load(self) -> float:
        """This answer's parent batches over their prediction (1.0: the machine runs as when measured): a
        ratio of totals, not a median, because the answer's time is a total, and a slow batch (the system
        stealing the core a moment) would have slowed plain decoding just as much."""
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else 1.0

    @property
    def stale(self) -> bool:
        """The machine ran much faster than measured, throughout a long answer: the measurement was made
        under load, and is worth making again."""
        return len(self.ratios) >= 8 and self.load < STALE

    def shifted(self) -> float:
        """How much this answer's speed changed between its first and second half (1.0: steady)."""
        n = len(self.ratios)
        if n < 8:
            return 1.0
        a, b = statistics.median(self.ratios[: n // 2]), statistics.median(self.ratios[n // 2 :])
        return max(a, b) / max(1e-9, min(a, b))

    def bound(self) -> float:
        """The most this answer's sources could gain per cycle at full acceptance (the cost model's bound)."""
        v = {n: interpolate(self.curve, n) / self.curve[0][1] for n in range(1, v_max() + 1)}
        best = 1.0
        for source in self.sources:
            kind = KINDS[self.kinds[source]]
            c = self.c.get(source, 0.0) if kind.decodes else 0.0  # a lookup costs no model step
            best = max(best, *((k + 1) / (k * c + v[k + 1]) for k in range(1, kind.k_max + 1)))
        return best

    def judge(self, stats: Stats, step: Step) -> Stats:
        """`stats` (already counting `step`) with the plain step, the machine's cap and, where no speed-up
        can be claimed, why not."""
        stats = replace(stats, machine_cap=self.machine_cap)
        if stats.cycles <= 1:  # the prefill: nothing to compare yet
            return stats
        if not self.curve:
            return replace(stats, plain_step_s=None, speedup_note="no plain step was measured on this machine yet")
        predicted = interpolate(self.curve, step.drafted + 1)
        if predicted > 0:
            self.ratios.append(step.verify_s / predicted)
            self.measured_s += step.verify_s
            self.predicted_s += predicted
        self.work_s += step.draft_s + step.verify_s
        if step.source is not None and step.kind is not None:
            self.sources.add(step.source)
            self.kinds[step.source] = step.kind
        load = self.load
        overhead = max(0.0, stats.decode_s - self.work_s) / (stats.cycles - 1)
        plain = replace(stats, plain_step_s=self.curve[0][1] * load + overhead, speedup_note=None, load=None)
        if not LOAD_BAND[0] <= load <= LOAD_BAND[1]:
            why = f"this machine ran {load:.1f}× as slowly as measured (another program?): no fair comparison"
            return replace(plain, speedup_note=why, load=round(load, 2))
        if self.shifted() > SHIFT:
            why = f"the machine's speed changed during this answer (by {self.shifted():.1f}×): no fair comparison"
            return replace(plain, speedup_note=why)
        claim = plain.speedup
        if claim is not None and claim > self.bound() * BOUND_SLACK:
            why = f"{claim:.1f}× would exceed what this machine's measured costs allow ({self.bound():.2f}×)"
            return replace(plain, speedup_note=why)
        return plain
