"""A simulated machine for the controller: per-cycle timings and acceptances drawn from a fixed table.

It stands in for llama.cpp only where the controller's *choices* are under test (no model can give a known
acceptance and cost); the loop around it follows runtime.decode.speculative's bookkeeping: the first cycle is the
prefill, a tier draft falls behind while it is not used and catches up (one batch) before proposing.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from runtime.decode.controller import NGRAM, Controller, CostShape, CycleOutcome, CyclePlan, Estimates, Offer, ngram_key

STEP = 0.1  # seconds of one plain parent step


@dataclass(frozen=True)
class SimTier:
    a: float  # per-position acceptance
    c: float  # draft step over a parent step
    prefill: float = 0.05  # a caught-up token over a parent step


@dataclass(frozen=True)
class SimMachine:
    v: dict[int, float]  # verify batch n -> seconds over a step
    tiers: dict[str, SimTier] = field(default_factory=dict)
    ngram_match: float = 0.0  # share of the answer that repeats the prompt (n-gram lookup finds a match there)
    ngram_a: float = 0.0  # per-position acceptance of an n-gram proposal inside such a span
    span: int = 24  # mean length of a repeated span, in tokens
    noise: float = 0.15  # every timing is off by up to this much, uniformly

    def shape(self, rng: random.Random) -> CostShape:
        """What a probe would report: the true costs, each off by the noise."""
        jitter = lambda x: x * rng.uniform(1 - self.noise, 1 + self.noise)  # noqa: E731
        return CostShape(
            STEP,
            {n: (1.0 if n == 1 else jitter(x)) for n, x in self.v.items()},
            {t: jitter(s.c) for t, s in self.tiers.items()},
            {t: jitter(s.prefill) for t, s in self.tiers.items()},
        )


Policy = Callable[[list[Offer], int], CyclePlan]


def fixed(source: str | None, k: int) -> Callable[[Estimates], Policy]:
    """The policy that always drafts k tokens from `source` when it can (else a plain step)."""

    def make(_: Estimates) -> Policy:
        def plan_cycle(offers: list[Offer], remaining: int) -> CyclePlan:
            for o in offers:
                if o.name == source and o.max_k > 0:
                    return CyclePlan(source, min(k, o.max_k), 0.0, 0.0)
            return CyclePlan(None, 0, 0.0, 0.0)

        return plan_cycle

    return make


def controller(estimates: Estimates) -> tuple[Policy, Callable[[CycleOutcome], None]]:
    c = Controller(estimates)
    return c.plan_cycle, c.record


def simulate(
    machine: SimMachine,
    make_policy: Callable[[Estimates], Policy] | None,
    estimates: Estimates,
    seed: int,
    answers: int = 200,
    answer_tokens: int = 128,
    prompt_tokens: int = 100,
) -> dict[str, float]:
    """Decode tokens per second over `answers` answers (each after its prefill), and the share of cycles
    that drafted. `make_policy` None: the real Controller, learning into `estimates`."""
    rng = random.Random(seed)
    tokens = cycles = drafting = 0
    seconds = 0.0
    for _ in range(answers):
        if make_policy is None:
            decide, record = controller(estimates)
        else:
            decide, record = make_policy(estimates), (lambda _facts: None)
        produced, behind = 1, prompt_tokens + 1  # the prefill's token; the draft has seen nothing
        # Which positions of the answer repeat the prompt: spans of mean length `span`, a share ngram_match.
        repeated, inside = [], False
        enter = machine.ngram_match / max(1e-9, 1 - machine.ngram_match) / machine.span
        for _ in range(answer_tokens + 1):
            flip = 1 / machine.span if inside else enter
            inside = inside != (rng.random() < flip)
            repeated.append(inside)
        while produced < answer_tokens:
            offers = []
            match = repeated[produced]
            run = next((i for i in range(produced, answer_tokens + 1) if not repeated[i]), answer_tokens) - produced
            if machine.ngram_match:
                offers.append(Offer(NGRAM, NGRAM, min(12, run) if match else 0, key=ngram_key(3)))
            for name, t in machine.tiers.items():
                offers.append(Offer(name, "tier", 8, catch_up=behind, size_ratio=t.c))
            horizon = min(answer_tokens - produced, max(produced, 48))
            d = decide(offers, horizon)
            jitter = lambda x: x * rng.uniform(1 - machine.noise, 1 + machine.noise)  # noqa: E731
            k = d.k if d.source is not None else 0
            a = machine.ngram_a if d.source == NGRAM else machine.tiers[d.source].a if d.source else 0.0
            accepted = 0
            while accepted < k and rng.random() < a:
                accepted += 1
            if d.source == NGRAM:  # a proposal ends where the repeated span does
                accepted = min(accepted, run)
            draft_s = catch_up_s = 0.0
            caught_up = 0
            if d.source == NGRAM:
                draft_s = jitter(0.0002)
            elif d.source is not None:
                t = machine.tiers[d.source]
                caught_up = behind
                catch_up_s = jitter(STEP * (t.c if behind <= 2 else t.prefill * behind))
                draft_s = catch_up_s + sum(jitter(STEP * t.c) for _ in range(k - 1))
            verify_s = jitter(STEP * machine.v[k + 1])
            kind = NGRAM if d.source == NGRAM else "tier"
            key = ngram_key(3) if d.source == NGRAM else None
            record(CycleOutcome(d.source, kind, k, accepted, draft_s, verify_s, caught_up, catch_up_s, key))
            n = min(accepted + 1, answer_tokens - produced)
            produced += n
            tokens += n
            seconds += draft_s + verify_s
            cycles += 1
            drafting += d.source is not None
            if d.source is not None and d.source != NGRAM:
                behind = 2 if accepted == k else 1
            else:
                behind += accepted + 1
    return {"tok_per_s": tokens / seconds, "drafting": drafting / cycles}


def best_fixed(machine: SimMachine, seed: int, **kw: int) -> tuple[str, float]:
    """The best single (source, k), in hindsight, on the same draws."""
    options: list[tuple[str | None, int]] = [(None, 0)]
    options += [(name, k) for name in machine.tiers for k in range(1, 9)]
    if machine.ngram_match:
        options += [(NGRAM, k) for k in range(1, 13)]
    best = ("plain", 0.0)
    for source, k in options:
        rate = simulate(machine, fixed(source, k), Estimates(), seed, **kw)["tok_per_s"]
        if rate > best[1]:
            best = (f"{source or 'plain'}:k{k}", rate)
    return best
