"""What plain decoding would have cost an answer, and when a speed-up over it may be claimed
(runtime/engine/plain_estimate.py), on made-up machines: every timing below is a number, not a measurement,
so each case holds on any CPU under any load.

A machine is a `MachineCosts` as the probe would report it; an answer is a list of `Step`s whose seconds are
that machine's costs times a load factor (1.0: the machine runs as when it was measured), accumulated into
`Stats` as the engine counts them, then judged step by step as the engine does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from runtime.decode.controller import NGRAM, CostShape, Estimates, Timing
from runtime.decode.drafts.tier import KIND as TIER
from runtime.decode.machine_costs import MachineCosts
from runtime.decode.speculative import Step
from runtime.engine.answer import Stats
from runtime.engine.plain_estimate import LOAD_BAND, SHIFT, STALE, PlainEstimate

STEP = 0.020  # one plain parent step on the made-up machine, seconds
TTFT = 0.300  # the first cycle: the prefill and the first token
OVERHEAD = 0.002  # the loop's own work per cycle (sampling, bookkeeping), outside draft and verify
DRAFT = "q4_k_m"
COSTS = MachineCosts(
    step_s=STEP,
    v={n: 1.0 + 0.2 * (n - 1) for n in range(1, 17)},  # each verify row past the first costs 0.2 of a step
    c={DRAFT: 0.3},
    prefill={DRAFT: 0.05},
    acceptance={DRAFT: 0.8},
    rounds=4,
    seconds=1.0,
)


def cycle(
    load: float = 1.0, k: int = 3, accepted: int = 3, source: str | None = DRAFT, draft_s: float | None = None
) -> Step:
    """One cycle on the made-up machine running `load` times as slowly as measured: k drafts from `source`
    (their cost from COSTS unless `draft_s` says otherwise), `accepted` of them kept, and the parent's token."""
    if source is None:
        k = accepted = 0
    verify = STEP * COSTS.v[k + 1] * load
    if draft_s is None:
        draft_s = 0.0 if source in (None, NGRAM) else k * COSTS.c[DRAFT] * STEP * load
    tokens = tuple(range(100, 101 + accepted))
    kind = None if source is None else NGRAM if source == NGRAM else TIER.name
    return Step(tokens, (True,) * accepted + (False,), k, accepted, k, draft_s, verify, source, kind=kind)


def count(stats: Stats, step: Step, elapsed_s: float, decode_s: float) -> Stats:
    """`stats` counting one more cycle, as the engine counts it: the first cycle's tokens and time apart (the
    prefill), `decode_s` the time since it."""
    first = stats.cycles == 0
    return replace(
        stats,
        tokens=stats.tokens + len(step.tokens),
        ttft_s=elapsed_s if first else stats.ttft_s,
        first_tokens=len(step.tokens) if first else stats.first_tokens,
        decode_s=decode_s,
        drafted=stats.drafted + step.drafted,
        accepted=stats.accepted + step.accepted,
        draft_s=stats.draft_s + step.draft_s,
        verify_s=stats.verify_s + step.verify_s,
        cycles=stats.cycles + 1,
    )


def judged(estimate: PlainEstimate, cycles: Sequence[Step]) -> Stats:
    """The answer's Stats after its prefill and `cycles`, judged after every step as the engine does."""
    prefill = Step((99,), (False,), 0, 0, 0, 0.0, TTFT, None)
    stats = estimate.judge(count(Stats(prompt_tokens=20), prefill, TTFT, 0.0), prefill)
    assert stats.plain_step_s is None and stats.speedup_note is None  # nothing to compare after the prefill
    decode_s = 0.0
    for step in cycles:
        decode_s += step.draft_s + step.verify_s + OVERHEAD
        stats = count(stats, step, TTFT + decode_s, decode_s)
        stats = estimate.judge(stats, step)
    return stats


def start(draft: str | None = DRAFT) -> PlainEstimate:
    return PlainEstimate.start(Estimates(), COSTS, draft)


@pytest.mark.parametrize("load", [1.0, 1.8, 0.75])
def test_a_steady_machine_gets_a_claim_at_its_own_speed(load: float) -> None:
    """Another program running throughout (1.8) or a machine a little faster than measured (0.75) scales plain
    decoding alike: the plain step is the measured one times this answer's load, plus the loop's work."""
    estimate = start()
    stats = judged(estimate, [cycle(load) for _ in range(12)])
    assert estimate.load == pytest.approx(load)
    assert stats.speedup_note is None
    assert stats.plain_step_s == pytest.approx(STEP * load + OVERHEAD)
    assert stats.machine_cap == COSTS.caps()[DRAFT]["cap"]
    # Four tokens per cycle for 0.3·3 + v(4) = 2.5 steps: a real gain, below the cost model's bound (1.8).
    want = (TTFT + 48 * (STEP * load + OVERHEAD)) / stats.elapsed_s
    assert stats.speedup == pytest.approx(want) and 1.2 < stats.speedup < estimate.bound()
    assert not estimate.stale


def test_one_stalled_batch_slows_the_plain_estimate_as_it_would_plain_decoding() -> None:
    """The load is a ratio of totals, not a median: a batch stalled 6× (the system took the core a moment)
    would have stalled plain decoding just as much, so it counts in full, and it is no speed change."""
    estimate = start()
    stats = judged(estimate, [cycle(1.0) for _ in range(5)] + [cycle(6.0)] + [cycle(1.0) for _ in range(6)])
    assert estimate.load == pytest.approx(17 / 12) and estimate.shifted() == pytest.approx(1.0)
    assert stats.speedup_note is None
    assert stats.plain_step_s == pytest.approx(STEP * 17 / 12 + OVERHEAD)


def test_plain_decoding_itself_is_claimed_at_about_one() -> None:
    """The same rule on an answer with no drafts: its plain estimate is its own step, so the claim is 1×."""
    estimate = start(None)
    stats = judged(estimate, [cycle(source=None) for _ in range(20)])
    assert stats.speedup_note is None and stats.machine_cap is None
    assert stats.speedup == pytest.approx(1.0)


@pytest.mark.parametrize("load", [LOAD_BAND[1] * 1.2, LOAD_BAND[0] / 1.2])
def test_batches_far_off_the_measurement_get_the_as_slowly_note_and_no_claim(load: float) -> None:
    estimate = start()
    stats = judged(estimate, [cycle(load) for _ in range(12)])
    assert stats.speedup_note is not None and "as slowly as measured" in stats.speedup_note, stats.speedup_note
    assert f"{load:.1f}×" in stats.speedup_note
    assert stats.load == pytest.approx(load, abs=0.01)  # the figure the window names the cause by
    assert stats.speedup is None and stats.saved_s is None
    assert stats.plain_step_s == pytest.approx(STEP * load + OVERHEAD)  # still estimated, just not claimed


def test_just_inside_the_band_is_still_claimed() -> None:
    """The band's edges are where the note starts: just inside them the same answer is claimed."""
    for load in (LOAD_BAND[1] * 0.95, LOAD_BAND[0] * 1.05):
        stats = judged(start(), [cycle(load) for _ in range(12)])
        assert stats.speedup_note is None and stats.speedup is not None, (load, stats.speedup_note)


def test_a_speed_change_between_the_halves_gets_the_speed_changed_note() -> None:
    """Both halves within the band, but the second runs SHIFT·1.2 times as slowly as the first: no fair
    comparison, whichever load the plain estimate used."""
    estimate = start()
    stats = judged(estimate, [cycle(1.0) for _ in range(6)] + [cycle(SHIFT * 1.2) for _ in range(6)])
    assert LOAD_BAND[0] <= estimate.load <= LOAD_BAND[1]
    assert estimate.shifted() == pytest.approx(SHIFT * 1.2)
    assert stats.speedup_note is not None and "speed changed" in stats.speedup_note, stats.speedup_note
    assert f"{SHIFT * 1.2:.1f}×" in stats.speedup_note
    assert stats.speedup is None


def test_a_smaller_change_or_a_short_answer_is_not_a_shift() -> None:
    steady = start()
    stats = judged(steady, [cycle(1.0) for _ in range(6)] + [cycle(SHIFT / 1.1) for _ in range(6)])
    assert stats.speedup_note is None and steady.shifted() == pytest.approx(SHIFT / 1.1)
    short = start()  # under 8 batches, halves say nothing
    stats = judged(short, [cycle(1.0) for _ in range(3)] + [cycle(2.0) for _ in range(3)])
    assert short.shifted() == 1.0 and stats.speedup_note is None


def test_a_claim_beyond_the_cost_models_bound_gets_the_exceed_note() -> None:
    """Drafts that cost nothing although the probe measured c = 0.3: nine tokens per v(9) = 2.6 steps would be
    3.4×, far past what c and v allow at full acceptance (1.8×): the claim is refused, the bound named."""
    estimate = start()
    stats = judged(estimate, [cycle(k=8, accepted=8, draft_s=0.0) for _ in range(12)])
    bound = estimate.bound()
    assert bound == pytest.approx(max((k + 1) / (k * 0.3 + COSTS.v[k + 1]) for k in range(1, 9)))
    assert stats.speedup_note is not None and "would exceed" in stats.speedup_note, stats.speedup_note
    assert f"({bound:.2f}×)" in stats.speedup_note
    assert stats.speedup is None and stats.plain_s is not None and stats.plain_s / stats.elapsed_s > bound * 1.1


def test_ngram_drafts_are_bounded_by_their_own_free_cost() -> None:
    """The same answer from n-gram lookup, which costs nothing, is within its bound: it is claimed."""
    estimate = start()
    stats = judged(estimate, [cycle(k=8, accepted=8, source=NGRAM) for _ in range(12)])
    assert estimate.sources == {NGRAM}
    assert stats.speedup_note is None and stats.speedup is not None and stats.speedup > 2.0


def test_no_measured_step_means_no_claim() -> None:
    """No probe and no plain step timed in this process: nothing to compare with."""
    estimate = PlainEstimate.start(Estimates(), None, DRAFT)
    assert estimate.curve == [] and estimate.machine_cap is None
    stats = judged(estimate, [cycle() for _ in range(6)])
    assert stats.speedup_note == "no plain step was measured on this machine yet"
    assert stats.plain_step_s is None and stats.plain_s is None and stats.speedup is None


def test_before_a_probe_this_processs_own_plain_steps_are_the_measurement() -> None:
    """Without the probe's costs the estimates' own curve is used: plain steps timed here, the draft's c from
    the shape the estimates were seeded with."""
    est = Estimates(shape=CostShape(STEP, COSTS.v, COSTS.c))
    est.verify[1] = Timing([STEP] * 5)
    estimate = PlainEstimate.start(est, None, DRAFT)
    assert estimate.curve[0] == (1, pytest.approx(STEP)) and estimate.c == COSTS.c
    stats = judged(estimate, [cycle(1.3) for _ in range(10)])
    assert stats.speedup_note is None
    assert stats.plain_step_s == pytest.approx(STEP * 1.3 + OVERHEAD)


def test_a_long_answer_much_faster_than_measured_marks_the_costs_stale() -> None:
    fast = start()
    judged(fast, [cycle(STALE * 0.9) for _ in range(8)])
    assert fast.stale
    short = start()  # too few batches to say
    judged(short, [cycle(STALE * 0.9) for _ in range(7)])
    assert not short.stale
    near = start()
    judged(near, [cycle(STALE * 1.1) for _ in range(12)])
    assert not near.stale
