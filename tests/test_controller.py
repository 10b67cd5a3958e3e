"""The online controller and its draft sources: the cost model's choices, n-gram drafts (exact, greedy and
sampled), the first token before any draft work, Stop during a draft's catch-up, and long token pieces."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from runtime.decode import speculative
from runtime.decode.controller import EXPLORE_SHARE, Controller, CycleOutcome, Offer, ngram_key
from runtime.decode.estimates import CostShape, Estimates, SourceStats, Timing, expected_tokens, speedup, upper_bound
from runtime.decode.llama_backend import LlamaBackend, LoadOptions
from runtime.decode.ngram import NgramIndex
from runtime.decode.sampling import SamplingParams, warp
from runtime.decode.speculative import NGRAM, Decoding, SpecConfig, generate_steps
from runtime.engine.engine import ChatOptions, Engine, EngineSettings
from runtime.models.cache import ModelDir
from tests.conftest import engine_on_copy
from tests.micro_model import MicroSpec, write_micro_gguf
from tests.test_speculative import (
    N_SAMPLES,
    N_TEETH,
    SAMPLED,
    assert_same_as_plain_greedy,
    chi2_critical,
    chi2_statistic,
    expected_joint,
    load,
)

STEP = 0.100  # a parent step of 100 ms, for the cost tables below


def table(verify: dict[int, float], sources: dict[str, tuple[str, list[float], float]]) -> Estimates:
    """Estimates as if measured: verify seconds by batch size; per source its kind, acceptance, step seconds."""
    est = Estimates()
    for n, seconds in verify.items():
        est.verify[n] = Timing([seconds] * 5)
    for name, (kind, accept, step_s) in sources.items():
        src = est.source(name, kind)
        src.accept, src.step = list(accept), Timing([step_s] * 5)
    return est


VERIFY = {n: STEP * (1 + 0.15 * (n - 1)) for n in range(1, 14)}


def test_nothing_pays_so_the_controller_runs_plain_steps() -> None:
    # A draft costing 0.9 of a parent step with 50% acceptance (the 135M demo's situation).
    est = table(VERIFY, {"q4_k_m": ("tier", [0.5] * 8, 0.09)})
    decision = Controller(est).plan_cycle([Offer("q4_k_m", "tier", 8)], remaining=200)
    assert (decision.source, decision.k) == (None, 0)
    assert decision.rate == pytest.approx(1 / STEP)


def test_a_draft_that_cannot_pay_even_if_all_were_accepted_is_not_weighed_and_nothing_else_changes() -> None:
    # The demo's Q4_K_M on a build where it is about as dear as F16: even perfect acceptance cannot pay.
    dear = table(VERIFY, {"q4_k_m": ("tier", [1.0] * 8, 0.09), NGRAM: ("ngram", [0.1] * 12, 0.0002)})
    controller = Controller(dear)
    offers = [Offer("q4_k_m", "tier", 8), Offer(NGRAM, NGRAM, 10)]
    assert controller.ceiling(offers[0], STEP) <= 1.03 / STEP < controller.ceiling(offers[1], STEP)
    assert controller.plan_cycle(offers, remaining=200).source != "q4_k_m"
    assert set(controller._hopeless) == {"q4_k_m"}  # not weighed again for a while; the n-gram source is
    # The same plans as weighing every source every cycle, for drafts dear and cheap, accurate and not.
    for step_s in (0.01, 0.03, 0.06, 0.09, 0.12):
        for a in (0.2, 0.6, 0.95, 1.0):
            est = table(VERIFY, {"q4_k_m": ("tier", [a] * 8, step_s), NGRAM: ("ngram", [a / 2] * 12, 0.0002)})
            skipping, weighing = Controller(copy.deepcopy(est)), Controller(copy.deepcopy(est))
            weighing._hopeless_now = lambda *_: False  # type: ignore[method-assign]
            for remaining in (8, 200, 200):
                assert skipping.plan_cycle(offers, remaining) == weighing.plan_cycle(offers, remaining)


def test_a_cheap_accurate_draft_gets_a_long_k_and_a_better_one_wins() -> None:
    est = table(VERIFY, {"q4_k_m": ("tier", [0.9] * 8, 0.03), NGRAM: ("ngram", [0.97] * 12, 0.0002)})
    controller = Controller(est)
    tier_only = controller.plan_cycle([Offer("q4_k_m", "tier", 8)], remaining=200)
    assert tier_only.source == "q4_k_m" and tier_only.k >= 3
    # The predicted rate is the cost model's own closed form (constant acceptance, c = 0.3).
    want = speedup(0.9, tier_only.k, 0.3, 1 + 0.15 * tier_only.k) / STEP
    assert tier_only.rate == pytest.approx(want, rel=1e-6)
    both = controller.plan_cycle([Offer(NGRAM, NGRAM, 10), Offer("q4_k_m", "tier", 8)], remaining=200)
    assert both.source == NGRAM and both.k >= 6  # near-free and more accurate
    # No match this cycle: the n-gram source offers nothing, and the tier draft takes over.
    assert controller.plan_cycle([Offer(NGRAM, NGRAM, 0), Offer("q4_k_m", "tier", 8)], 200).source == "q4_k_m"


def test_a_catch_up_the_answer_cannot_repay_is_skipped() -> None:
    est = table(VERIFY, {"q4_k_m": ("tier", [0.9] * 8, 0.03)})
    est.sources["q4_k_m"].prefill = Timing([0.004] * 5)
    behind = Offer("q4_k_m", "tier", 8, catch_up=2000)  # 8 s of catch-up
    assert Controller(est).plan_cycle([behind], remaining=8).source is None  # a short answer: not worth it
    assert Controller(est).plan_cycle([behind], remaining=2000).source == "q4_k_m"  # a long one: worth it


def test_the_first_cycle_is_plain_and_timings_resist_one_outlier() -> None:
    controller = Controller()
    assert controller.plan_cycle([Offer("q4_k_m", "tier", 8)], 100).source is None  # nothing timed yet
    for seconds in (0.1, 0.1, 0.1):
        controller.record(CycleOutcome(None, "tier", 0, 0, 0.0, seconds))
    controller.record(CycleOutcome(None, "tier", 0, 0, 0.0, 5.0))  # another program stole the CPU once
    assert controller.estimates.step_s() == pytest.approx(0.1)


def test_acceptance_is_learned_per_position() -> None:
    controller = Controller()
    for _ in range(40):  # position 1 always accepted, position 2 always rejected
        controller.record(CycleOutcome(NGRAM, NGRAM, 3, 1, 0.0001, 0.12))
    accept = controller.estimates.source(NGRAM, NGRAM).accept
    assert accept[0] > 0.95 and accept[1] < 0.05 and len(accept) == 3
    assert expected_tokens(accept[:2]) == pytest.approx(1 + accept[0] + accept[0] * accept[1])


def test_ngram_acceptance_is_kept_per_match_length() -> None:
    # Long matches (quoted code being copied) are accepted, short ones (common words in prose) are not: one
    # shared estimate would refuse both; per match length the long ones are drafted far and the short not.
    controller = Controller(table(VERIFY, {}))
    for _ in range(30):
        controller.record(CycleOutcome(NGRAM, NGRAM, 8, 8, 0.0001, VERIFY[9], key=ngram_key(4)))
        controller.record(CycleOutcome(NGRAM, NGRAM, 2, 0, 0.0001, VERIFY[3], key=ngram_key(2)))
    long = controller.plan_cycle([Offer(NGRAM, NGRAM, 12, key=ngram_key(4))], remaining=200)
    assert long.source == NGRAM and long.k >= 8
    assert controller.plan_cycle([Offer(NGRAM, NGRAM, 12, key=ngram_key(2))], remaining=200).source is None
    # Never-measured match lengths start from their own priors: the longer the match, the further it drafts.
    fresh = Controller(table(VERIFY, {}))
    short, long = (fresh.plan_cycle([Offer(NGRAM, NGRAM, 12, key=ngram_key(n))], remaining=200) for n in (2, 4))
    assert long.source == NGRAM and long.k > short.k and long.rate > short.rate


def test_a_draft_refused_on_weak_evidence_is_explored_and_on_strong_evidence_is_not() -> None:
    # Estimates say the draft agrees 40% of the time, which would not pay: on two cycles' evidence that may be
    # bad luck, so its upper bound still beats plain and it is tried; on 300 cycles it is not.
    est = table(VERIFY, {"q4_k_m": ("tier", [0.4] * 8, 0.03)})
    src = est.sources["q4_k_m"]
    caught_up = Offer("q4_k_m", "tier", 8, catch_up=1)
    src.seen = [2.0] * 8
    # Before any token was produced nothing may be risked on a try: the first answer is never slower for it.
    assert Controller(copy.deepcopy(est)).plan_cycle([caught_up], remaining=200).source is None
    est.tokens = 1000  # answers so far allow tries that could lose 30 steps
    weak = Controller(est).plan_cycle([caught_up], remaining=200)
    assert weak.source == "q4_k_m" and weak.explore and weak.k >= 1
    src.seen = [300.0] * 8
    strong = Controller(est).plan_cycle([caught_up], remaining=200)
    assert strong.source is None and not strong.explore
    # Far behind with a short answer left: even the upper bound cannot repay the catch-up.
    src.seen = [2.0] * 8
    src.prefill = Timing([0.004] * 5)
    assert Controller(est).plan_cycle([Offer("q4_k_m", "tier", 8, catch_up=2000)], remaining=8).source is None


def test_tries_lose_at_most_their_share_of_the_tokens_produced() -> None:
    # A draft that always fails, on weak evidence each answer (its refusals fade): over many answers the
    # steps lost to trying it stay within EXPLORE_SHARE of the tokens produced, plus one try's worst case.
    est = table(VERIFY, {"q4_k_m": ("tier", [0.4] * 8, 0.03)})
    for _ in range(50):
        est.sources["q4_k_m"].seen = [2.0] * 8
        c = Controller(est)
        for _ in range(40):
            d = c.plan_cycle([Offer("q4_k_m", "tier", 8, catch_up=1)], remaining=200)
            k = d.k if d.source else 0
            verify = est.verify_s(k + 1) or 0.1
            c.record(CycleOutcome(d.source, "tier", k, 0, 0.03 * k, verify))
    step = est.step_s() or 0.1
    assert 0 < est.explore_loss <= EXPLORE_SHARE * est.tokens + (8 * 0.03 + (est.verify_s(9) or 0)) / step


def test_evidence_fades_between_answers_so_an_old_refusal_is_retried() -> None:
    src = SourceStats("tier", accept=[0.3] * 4, seen=[60.0] * 4, prior=0.9)
    bound0 = upper_bound(src.accept[0], src.evidence(0))
    for _ in range(15):
        src.fade()
    assert src.seen[0] < 60.0 * 0.05 and src.accept[0] > 0.55  # back towards the prior (the probe's 0.9)
    assert upper_bound(src.accept[0], src.evidence(0)) > bound0 + 0.3


def test_the_verify_curve_is_monotone_and_noise_at_one_size_cannot_switch_a_source_off() -> None:
    shape = CostShape(STEP, {n: 1 + 0.15 * (n - 1) for n in range(1, 17)}, {"q4_k_m": 0.3}, {}, {"q4_k_m": 0.9})
    est = Estimates()
    est.seed(shape)
    before = Controller(est).plan_cycle([Offer("q4_k_m", "tier", 8, catch_up=1)], remaining=200)
    assert before.source == "q4_k_m" and not before.explore
    est.record_verify(before.k + 1, 10 * STEP)  # one batch slowed 10 times by another program
    est.record_verify(before.k + 1, 8 * STEP)
    curve = est.v(16)
    assert all(curve[n] <= curve[n + 1] for n in range(1, 16))
    after = Controller(est).plan_cycle([Offer("q4_k_m", "tier", 8, catch_up=1)], remaining=200)
    assert after.source == "q4_k_m" and not after.explore


def test_ngram_lookup_finds_the_latest_longest_match() -> None:
    index = NgramIndex()
    seq = [1, 2, 3, 4, 9, 9, 1, 2, 3, 5, 7, 1, 2, 3]
    assert index.lookup(seq, 3) == [5, 7, 1]  # the latest "1 2 3" continues with 5 7 1
    assert index.lookup([*seq, 5], 2) == [7, 1]  # incremental: one more token
    assert index.lookup([8, 8, 6], 4) == []  # a new sequence rebuilds the index; no earlier match
    assert index.lookup([8, 8, 6, 8, 8], 4) == [6, 8, 8]


# --- on real models ---------------------------------------------------------------------------------------


def seeded(step_s: float = 0.001) -> Estimates:
    """Estimates that know a parent step, so the controller may draft from the second cycle on."""
    est = Estimates()
    est.verify[1] = Timing([step_s] * 5)
    return est


@pytest.fixture(scope="module")
def lookup_prompt(micro_model: ModelDir) -> tuple[LlamaBackend, list[int]]:
    """A prompt in which most likely first answer tokens appeared before, each followed by the parent's own
    favourite next token: the second token is then an n-gram proposal, accepted or rejected."""
    parent = load(micro_model, "f16", n_ctx=256)
    base = parent.tokenize("Once upon a time")
    last = base[-1]
    follow: dict[int, int] = {}
    for _ in range(4):  # the candidates depend on the prompt they are part of: settle them
        prompt = base + [t for c, y in follow.items() for t in (c, y, last)]
        parent.truncate(0)
        p1 = warp(parent.decode(prompt, [len(prompt) - 1])[0], SAMPLED, prompt)
        for c in map(int, np.flatnonzero(p1)):
            parent.truncate(len(prompt))
            follow[c] = int(np.argmax(parent.decode([c], [0])[0]))
    return parent, base + [t for c, y in follow.items() for t in (c, y, last)]


def test_ngram_drafts_are_exact_in_greedy_mode(micro_model: ModelDir) -> None:
    # A random micro model falls into a loop after ~140 greedy tokens: from then on the answer repeats
    # itself, n-gram lookup proposes from its own earlier output, and proposals are accepted.
    parent = load(micro_model, "f16", n_ctx=1024)
    prompt = parent.tokenize("Once upon a time")
    gen = generate_steps(
        parent,
        prompt,
        Decoding.drafting(SpecConfig(k=4), controller=Controller(seeded(), fixed_k=4), params=SamplingParams()),
    )
    out: list[int] = []
    steps = []
    for step in gen:
        out.extend(step.tokens)
        steps.append(step)
        if len(out) >= 240:
            break
    gen.close()
    lookups = [s for s in steps if s.source == NGRAM]
    assert sum(s.accepted for s in lookups) > 0 and any(s.accepted < s.drafted for s in lookups)
    assert_same_as_plain_greedy(parent, prompt, out, 240)


def ngram_first_tokens(parent: LlamaBackend, prompt: list[int], n_samples: int) -> tuple[dict, int]:
    counts: dict[tuple[int, ...], int] = {}
    proposed = 0
    for i in range(n_samples):
        params = SamplingParams(**{**SAMPLED.__dict__, "seed": i})
        controller = Controller(seeded(), fixed_k=2)
        out: list[int] = []
        decoding = Decoding.drafting(SpecConfig(k=2), controller=controller, params=params)
        for step in generate_steps(parent, prompt, decoding):
            out.extend(step.tokens)
            proposed += step.source == NGRAM
            if len(out) >= 2:
                break
        counts[tuple(out[:2])] = counts.get(tuple(out[:2]), 0) + 1
    return counts, proposed


@pytest.mark.slow
def test_sampled_ngram_drafts_match_the_parent_distribution(lookup_prompt) -> None:
    parent, prompt = lookup_prompt
    expected = expected_joint(parent, prompt, SAMPLED)
    counts, proposed = ngram_first_tokens(parent, prompt, N_SAMPLES)
    assert proposed > N_SAMPLES // 2  # the second token really was an n-gram proposal most of the time
    stat, df = chi2_statistic(counts, expected, N_SAMPLES)
    assert df >= 10
    assert stat < chi2_critical(df), f"chi2 {stat:.1f} over {df} df"


@pytest.mark.slow
def test_accepting_every_ngram_proposal_fails_the_same_test(lookup_prompt, monkeypatch) -> None:
    """The test has teeth: a loop that trusted the lookup instead of verifying it is caught."""
    import runtime.decode.speculative as spec_module

    parent, prompt = lookup_prompt
    monkeypatch.setattr(spec_module, "verify_sampled", lambda p, q, token, rng: (True, token))
    expected = expected_joint(parent, prompt, SAMPLED)
    counts, _ = ngram_first_tokens(parent, prompt, N_TEETH)  # 600 samples: 2,519 against 73.5 on 40 df
    stat, df = chi2_statistic(counts, expected, N_TEETH)
    assert stat > chi2_critical(df)


def record_calls(backend: LlamaBackend, name: str, log: list[str]) -> None:
    real = backend.decode

    def decode(tokens, logit_rows=(), max_rows=None):
        log.append(name)
        return real(tokens, logit_rows, max_rows)

    backend.decode = decode  # type: ignore[method-assign]


def test_the_first_token_comes_before_any_draft_work(micro_model: ModelDir) -> None:
    parent, draft = load(micro_model, "f16"), load(micro_model, "q4_k_m")
    calls: list[str] = []
    record_calls(parent, "parent", calls)
    record_calls(draft, "draft", calls)
    prompt = parent.tokenize("Write a short story about a robot who learns to paint.")
    # A controller that already knows the machine and must draft (fixed k) still starts with the parent.
    gen = generate_steps(
        parent,
        prompt,
        Decoding.drafting(
            SpecConfig(k=3, ngram=False), draft, controller=Controller(seeded(), fixed_k=3), params=SamplingParams()
        ),
    )
    first = next(gen)
    assert calls == ["parent"] and len(first.tokens) == 1 and first.source is None
    second = next(gen)
    gen.close()
    assert second.source == "draft" and calls[1] == "draft"  # the draft catches up only afterwards


@pytest.fixture(scope="module")
def engine(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory):
    """An Engine on a private copy of the demo cache: the estimates its answers save stay with this module."""
    with engine_on_copy(demo_model, tmp_path_factory.mktemp("controller"), EngineSettings(n_ctx=2048)) as e:
        yield e


def test_stop_reaches_the_drafts_catch_up(engine: Engine) -> None:
    long_prompt = "Summarize this: " + "The quick brown fox jumps over the lazy dog. " * 120
    draft = engine.backend("q4_k_m")
    cancel = threading.Event()
    real = draft.decode

    def decode(tokens, logit_rows=(), max_rows=None):
        if len(tokens) > 100:  # the draft's catch-up on the long prompt: the user presses Stop now
            cancel.set()
        return real(tokens, logit_rows, max_rows)

    draft.decode = decode  # type: ignore[method-assign]
    try:
        chunks = list(
            engine.stream_chat(
                [{"role": "user", "content": long_prompt}], ChatOptions(max_tokens=64, draft="q4_k_m", k=3), cancel
            )
        )
    finally:
        draft.decode = real  # type: ignore[method-assign]
    stats = chunks[-1].stats
    assert cancel.is_set() and stats.stop_reason == "cancelled" and stats.tokens <= 2
    assert draft.n_past < stats.prompt_tokens - 1  # stopped inside the catch-up, not after it
    again = list(engine.stream_chat([{"role": "user", "content": "Say yes."}], ChatOptions(max_tokens=8)))
    assert again[-1].stats.tokens > 0 and again[-1].stats.stop_reason in ("eos", "max_tokens")


class DecodeClock:
    """The decode loop's clock (runtime.decode.speculative's `time`), moved only by the models' decodes, each by
    what it is set to cost: the loop's timings, and so everything the controller measures, are the same on every
    CPU under any load, while the models, the loop and the controller run for real."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def charge(self, backend: LlamaBackend, seconds: Callable[[int], float]) -> Callable[[], None]:
        """Each decode of `backend` moves the clock by `seconds(batch size)`; returns the undo."""
        real = backend.decode

        def decode(tokens, logit_rows=(), max_rows=None):
            self.now += seconds(len(tokens))
            return real(tokens, logit_rows, max_rows)

        backend.decode = decode  # type: ignore[method-assign]
        return lambda: setattr(backend, "decode", real)


@pytest.mark.slow
def test_a_draft_as_slow_as_the_parent_does_not_pay(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A draft step that costs more than a parent step never pays, however often it agrees: once the controller
    has measured it (an answer drafting with a fixed k), its own measurements say to run plain steps, and the
    next answer does. Whether the demo's real Q4_K_M pays depends on the CPU (it did on a Xeon with AMX, not on
    an EPYC), and a real wait in each draft decode made the measured ratio depend on the machine's load too
    (the parent's step is timed while other programs run): here the loop's clock moves by set costs instead,
    the parent's as this machine's probe measured them and the draft's at 1.5 parent steps per decode."""
    prompt = [{"role": "user", "content": "Write a Python function that reverses a string, with type hints."}]
    greedy = SamplingParams()  # the greedy estimates are the ones read below
    costs, _ = engine.costs("f16", ["q4_k_m"])
    step = costs.step_s

    def parent_s(n: int) -> float:  # the probe's curve; past its largest batch, a step per token (prefills)
        return step * costs.v.get(n, float(n))

    clock = DecodeClock()
    monkeypatch.setattr(speculative, "time", clock)
    undo = [clock.charge(engine.backend("f16"), parent_s), clock.charge(engine.backend("q4_k_m"), lambda n: 1.5 * step)]
    try:
        list(engine.stream_chat(prompt, ChatOptions(preset="exact", max_tokens=16, draft="none", sampling=greedy)))
        est = engine.estimates("f16", greedy=True)
        assert est.step_s() == pytest.approx(step)  # the parent's step, measured by the loop
        list(engine.stream_chat(prompt, ChatOptions(max_tokens=32, draft="q4_k_m", k=3, sampling=greedy)))
        src = est.source("q4_k_m", "tier")
        c = (src.step.estimate() or 0) / (est.step_s() or 1)
        assert len(src.step) > 0 and c == pytest.approx(1.5), c  # it was tried, and its cost measured
        decision = Controller(est).plan_cycle([Offer("q4_k_m", "tier", 8)], remaining=200)
        assert decision.source is None, (c, src.accept)
        certain = copy.deepcopy(est)  # however often it agrees: at full acceptance, too
        certain.sources["q4_k_m"].accept = [1.0] * 8
        assert Controller(certain).plan_cycle([Offer("q4_k_m", "tier", 8)], remaining=200).source is None
        last = list(engine.stream_chat(prompt, ChatOptions(max_tokens=48, draft="q4_k_m", sampling=greedy)))[-1]
    finally:
        for restore in undo:
            restore()
    # Within the answer too: plain steps (n-gram lookup, which costs nothing, may still propose).
    assert last.stats.tokens > 16 and last.stats.drafted_by("tier") == 0, last.stats


@pytest.mark.slow
def test_a_token_piece_longer_than_256_bytes_round_trips(tmp_path: Path, demo_gguf: Path) -> None:
    path = write_micro_gguf(tmp_path / "long.gguf", demo_gguf, MicroSpec(n_layer=1), token_texts={300: "a" * 300})
    backend = LlamaBackend(path, LoadOptions(n_ctx=64))
    try:
        assert backend.token_bytes(300) == b"a" * 300
        assert backend.detokenize([300, 300]) == "a" * 600
    finally:
        backend.close()
