"""The speculative loop under a grammar: greedy answers equal plain constrained decoding on a micro model whose
tiers disagree often, forced tokens join the batch without a verify row, and constrained sampling keeps the
masked parent's distribution (chi-square)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from runtime.decode.grammar import Constraint, ConstraintError, Grammar, tokenizer_for
from runtime.decode.llama_backend import LlamaBackend
from runtime.decode.sampling import SamplingParams, warp
from runtime.decode.speculative import Decoding, SpecConfig, generate_steps
from runtime.models.cache import ModelDir
from tests.test_speculative import (
    GREEDY,
    NEAR_TIE,
    PROMPT,
    chi2_critical,
    chi2_statistic,
    load,
    record_verifies,
)

# Bounded everywhere, so even a random model's answer ends: enums, a small integer, short strings.
SCHEMA = {
    "type": "object",
    "properties": {
        "role": {"enum": ["administrator", "developer", "viewer"]},
        "level": {"type": "integer", "minimum": 0, "maximum": 99},
        "active": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2},
    },
    "required": ["role", "level", "active", "tags"],
}
N = 96


def plain_constrained(parent: LlamaBackend, prompt: list[int], grammar: Grammar, n: int):
    """One token per decode, masked, argmax: constrained decoding as plain as it gets (no forced batches)."""
    c = grammar.constraint(tokenizer_for(parent))
    parent.truncate(0)
    logits = parent.decode(prompt, [len(prompt) - 1])[0]
    out, rows = [], []
    while len(out) < n and not c.done:
        c.mask_logits(logits)
        rows.append(logits.copy())
        out.append(int(np.argmax(logits)))
        c.consume(out[-1])
        if parent.is_end_of_generation(out[-1]):
            break
        logits = parent.decode([out[-1]], [0])[0]
    return out, rows


def constrained(parent, draft, prompt, grammar, n, params=GREEDY, spec=None):
    c = grammar.constraint(tokenizer_for(parent))
    out, steps = [], []
    for step in generate_steps(parent, prompt, Decoding.drafting(spec, draft, params=params, constraint=c)):
        out.extend(step.tokens)
        steps.append(step)
        if len(out) >= n or any(parent.is_end_of_generation(t) for t in step.tokens):
            break
    return out, steps


@pytest.fixture(scope="module")
def pair(micro_model: ModelDir):
    parent, draft = load(micro_model, "f16"), load(micro_model, "q4_k_m")
    return parent, draft, parent.tokenize(PROMPT)


@pytest.mark.parametrize("whitespace", ["compact", "bounded"])
def test_greedy_constrained_speculation_equals_plain_constrained_decoding(pair, whitespace: str) -> None:
    parent, draft, prompt = pair
    grammar = Grammar.from_json_schema(SCHEMA, whitespace=whitespace)
    calls = record_verifies(parent)
    emitted, steps = constrained(parent, draft, prompt, grammar, N, spec=SpecConfig(k=4))
    drafted, accepted = sum(s.drafted for s in steps), sum(s.accepted for s in steps)
    forced = sum(s.forced for s in steps)
    assert drafted > 0, (drafted, accepted, forced)
    assert forced > 0  # keys, quotes and braces: the grammar decided them

    # Forced tokens were never verify rows: each cycle asked for drafted + 1 rows, however many it forced.
    for (batch, rows), step in zip(calls, steps, strict=False):
        assert len(rows) == step.drafted + 1 and len(batch) >= step.forced + len(rows)
    # ... and each was the only token its grammar state allowed.
    replay = grammar.constraint(tokenizer_for(parent))
    for step in steps:
        for j, tok in enumerate(step.tokens):
            if parent.is_end_of_generation(tok):
                break
            if j < step.forced:
                assert replay.allowed_tokens().tolist() == [tok]
            replay.consume(tok)

    text = parent.detokenize([t for t in emitted if not parent.is_end_of_generation(t)], special=True)
    assert replay.done or len(emitted) >= N
    if replay.done:
        doc = json.loads(text)
        assert set(doc) == set(SCHEMA["required"]) and doc["role"] in SCHEMA["properties"]["role"]["enum"]

    calls.clear()
    plain, plain_rows = plain_constrained(parent, prompt, grammar, N)
    emitted = [t for t in emitted if not parent.is_end_of_generation(t)]  # plain stops once the grammar is done
    n = min(len(plain), len(emitted))
    for i in range(n):
        if emitted[i] != plain[i]:  # only a near-tie may go either way in a batched verify
            top2 = np.sort(plain_rows[i][np.isfinite(plain_rows[i])])[-2:]
            assert top2.size == 2 and top2[1] - top2[0] < NEAR_TIE, f"divergence at {i} is not a near-tie"
            break
    else:
        assert len(plain) == len(emitted) or n == N


def test_ngram_drafts_are_cut_to_what_the_grammar_allows(pair) -> None:
    """A prompt full of answer-like text makes prompt lookup propose; proposals are cut to what the grammar
    allows (a forbidden one would be refused by the constraint when the loop consumes it)."""
    parent, _, _ = pair
    echo = parent.tokenize(PROMPT + '{"role":"viewer","level":7,"active":true,"tags":["a"]} ' * 3)
    grammar = Grammar.from_json_schema(SCHEMA, whitespace="compact")
    emitted, steps = constrained(parent, None, echo, grammar, N, spec=SpecConfig(k=4))
    assert sum(s.drafted for s in steps if s.source == "ngram") > 0
    plain, _ = plain_constrained(parent, echo, grammar, N)
    assert emitted[: len(plain)] == plain[: len(emitted)]


# --- sampling ---------------------------------------------------------------------------------------------
SAMPLED = SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0)
WORDS = Grammar.from_lark(r'start: /[a-z][a-z ]{1,30}/')  # many tokens allowed at every step, none forced
N_SAMPLES = 3000


def expected_joint_masked(parent, prompt, params, grammar) -> dict[tuple[int, int], float]:
    c = grammar.constraint(tokenizer_for(parent))
    parent.truncate(0)
    p1 = warp(c.mask_logits(parent.decode(prompt, [len(prompt) - 1])[0]), params, prompt)
    joint = {}
    for t1 in np.flatnonzero(p1):
        c.consume(int(t1))
        parent.truncate(len(prompt))
        p2 = warp(c.mask_logits(parent.decode([int(t1)], [0])[0]), params, [*prompt, int(t1)])
        c.rollback(1)
        for t2 in np.flatnonzero(p2):
            joint[(int(t1), int(t2))] = float(p1[t1] * p2[t2])
    return joint


def sampled_constrained(parent, draft, prompt, params, grammar, n_samples):
    counts: dict[tuple[int, ...], int] = {}
    for i in range(n_samples):
        p = SamplingParams(**{**params.__dict__, "seed": i})
        try:
            out, _ = constrained(parent, draft, prompt, grammar, 2, p, SpecConfig(k=3, ngram=False))
            key = tuple(out[:2])
        except ConstraintError:  # a forbidden token was emitted: a cell no correct sampler reaches
            key = ("forbidden",)
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.fixture(scope="module")
def sampled_pair(micro_model: ModelDir):
    parent, draft = load(micro_model, "f16", n_ctx=128), load(micro_model, "q4_k_m", n_ctx=128)
    return parent, draft, parent.tokenize("Once upon a time")


@pytest.mark.slow
def test_constrained_sampling_keeps_the_masked_parent_distribution(sampled_pair) -> None:
    parent, draft, prompt = sampled_pair
    expected = expected_joint_masked(parent, prompt, SAMPLED, WORDS)
    counts = sampled_constrained(parent, draft, prompt, SAMPLED, WORDS, N_SAMPLES)
    stat, df = chi2_statistic(counts, expected, N_SAMPLES)
    assert df >= 10
    assert stat < chi2_critical(df), f"chi2 {stat:.1f} over {df} df"


@pytest.mark.slow
def test_unmasked_verify_rows_fail_the_same_test(sampled_pair, monkeypatch) -> None:
    """The test has teeth: a verify that forgets the parent's mask samples forbidden tokens, and is caught."""
    parent, draft, prompt = sampled_pair
    expected = expected_joint_masked(parent, prompt, SAMPLED, WORDS)
    monkeypatch.setattr(Constraint, "mask_rows", lambda self, rows, draft: None)
    counts = sampled_constrained(parent, draft, prompt, SAMPLED, WORDS, 600)
    stat, df = chi2_statistic(counts, expected, 600)
    assert stat > chi2_critical(df)
