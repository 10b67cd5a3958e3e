"""The speed presets along the frontier (#61): exact, balanced and fast each answer with their own parent's
greedy tokens, drafts or not; what the default picks before and after this machine is measured; and the
words the status line says."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.plain_words import plain_line
from runtime.decode.sampling import SamplingParams
from runtime.engine.engine import ChatOptions, Engine
from runtime.engine.summary import answer_facts, stats_line
from runtime.models.cache import DEMO_NAME, ModelDir
from runtime.plan.policy import FRONTIER, PRESET_NAMES, choose, frontier_pick, preset_words
from tests.test_speculative import NEAR_TIE, greedy_plain, load

# A continuation with repeats: n-gram and suffix lookup find drafts in it.
TEXT = ("The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
        "The quick brown fox jumps over the lazy dog. The quick")


def assert_parents_greedy(model: ModelDir, parent: str, emitted: tuple[int, ...]) -> None:
    """`emitted` is `parent`'s own plain greedy continuation of TEXT, or departs from it first at a near-tie
    (a batched verify may round those either way, docs/architecture.md)."""
    backend = load(model, parent)
    try:
        prompt = backend.tokenize(TEXT, add_bos=True, special=False)
        plain, rows = greedy_plain(backend, prompt, len(emitted))
        bounded = backend.exact_rows is not None
    finally:
        backend.close()
    if bounded:  # verify batches within the bound compute one-token decoding's rows: no tie tolerance
        assert list(emitted) == plain, f"{parent}: the answer departs from plain greedy"
        return
    for i, (a, b) in enumerate(zip(emitted, plain, strict=True)):
        if a != b:
            top2 = np.sort(rows[i])[-2:]
            assert top2[1] - top2[0] < NEAR_TIE, f"{parent}: token {i} departs from plain greedy, not at a near-tie"
            break


@pytest.mark.parametrize("which", ["demo", "micro"])
@pytest.mark.parametrize("k", [None, 3])  # the controller's choice (drafts only where they pay), or always k
def test_each_preset_answers_with_its_own_parents_greedy_tokens(
    which: str, k: int | None, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from tests.conftest import copy_of_demo

    model: ModelDir = request.getfixturevalue(f"{which}_model")  # only the model this case reads is made
    if which == "demo":
        engine = Engine(DEMO_NAME, root=copy_of_demo(model, tmp_path))
    else:
        import shutil

        shutil.copytree(model.path, tmp_path / model.name)
        engine = Engine(model.name, root=tmp_path)
    try:
        for preset, (parent, draft) in FRONTIER.items():
            options = ChatOptions(preset=preset, k=k, max_tokens=40, sampling=SamplingParams(), raw_prompt=True)
            answer = engine.chat([{"role": "user", "content": TEXT}], options)
            assert (answer.last.choice.parent, answer.last.choice.draft) == (parent, draft), preset
            assert answer.last.choice.ngram and answer.last.choice.preset == preset
            if k is not None and which == "demo":  # a fixed k drafts: the lookups find the repeats
                assert answer.last.stats.drafted > 0, preset
            assert len(answer.token_ids) > 0
            assert_parents_greedy(model, parent, answer.token_ids)
    finally:
        engine.close()


# --- the default's pick, over what a calibration measured (runtime/engine/calibrate.py's `vs_q4`) ---------------
@pytest.mark.parametrize(
    ("vs_q4", "want"),
    [
        ({"exact": 0.49, "balanced": 0.83, "fast": 1.02}, "fast"),  # a 2-core CPU: only fast keeps up
        ({"exact": 0.91, "balanced": 1.0, "fast": 1.1}, "balanced"),  # at least as fast counts
        ({"exact": 1.2, "balanced": 1.3, "fast": 1.4}, "exact"),  # a precise parent verifies cheaply (a GPU)
        ({"exact": None, "balanced": 1.05, "fast": None}, "balanced"),  # a preset that could not be measured
    ],
)
def test_the_default_picks_the_most_precise_preset_at_least_as_fast_as_plain_q4(vs_q4, want) -> None:
    assert frontier_pick({"vs_q4": vs_q4})[0] == want
    c = choose("medium", "auto", calibration={"vs_q4": vs_q4})
    assert (c.parent, c.draft, c.preset) == (*FRONTIER[want], want)
    assert c.vs_q4 == vs_q4[want] and c.ngram


def test_where_even_free_drafts_lose_to_plain_q4_the_default_decodes_q4_plainly() -> None:
    slow = {"vs_q4": {"exact": 0.6, "balanced": 0.8, "fast": 0.97}}
    c = choose("medium", "auto", calibration=slow)
    assert (c.parent, c.draft, c.ngram, c.preset) == ("q4_k_m", None, False, "fast") and "plainly" in c.why
    assert c.vs_q4 == 1.0  # it is plain Q4_K_M
    assert choose("medium", "fast", calibration=slow).ngram  # the fast preset itself keeps its drafts
    assert choose("high", "auto", calibration=slow, asked_precision=True).parent == "f16"


def test_until_measured_the_default_is_fast_and_says_so() -> None:
    for calibration in (None, {}, {"vs_q4": {}}):
        pick, why = frontier_pick(calibration)
        assert pick == "fast" and "until" in why
    c = choose("high", "auto")
    assert (c.parent, c.draft, c.preset, c.vs_q4) == ("q4_k_m", None, "fast", None)
    assert ChatOptions().preset == "auto" and "auto" in PRESET_NAMES


def test_precision_is_spent_where_the_user_asks_for_it() -> None:
    slow_exact = {"vs_q4": {"exact": 0.5, "balanced": 0.8, "fast": 1.1}}
    # The user pins the high level: exact, whatever the speeds; the router's own verdict stays in the floor.
    assert choose("high", "auto", calibration=slow_exact, asked_precision=True).parent == "f16"
    assert choose("high", "auto", calibration=slow_exact).parent == "q4_k_m"
    assert choose("low", "exact").parent == "f16" and choose("low", "balanced").parent == "q8_0"
    # A pinned tier is no longer the preset: the status line does not name one.
    pinned = choose("low", "auto", calibration=slow_exact, parent="f16")
    assert pinned.parent == "f16" and pinned.preset is None


def test_the_paper_table_and_old_flags_still_work() -> None:
    assert choose("low", "paper").parent == "q8_0" and choose("low", "paper").preset is None
    assert choose("low", "auto", allow_lossy=True).preset == "fast"  # accepted, and changes nothing now


# --- the words -------------------------------------------------------------------------------------------------
def test_status_line_words() -> None:
    assert preset_words("fast", 1.23) == "Fast: the Q4_K_M model's words, 1.2× the speed of a plain Q4 file"
    assert preset_words("balanced", 0.8) == "Balanced: the Q8_0 model's words, 0.8× the speed of a plain Q4 file"
    assert preset_words("exact", None) == (
        "Exact: the full model's words (its speed not measured on this computer yet)"
    )
    assert preset_words(None, 1.0) == "" and preset_words("paper", 1.0) == ""
    # The window says it without tier names (#51's plain line).
    facts = {"parent": "q4_k_m", "pair": "Q4_K_M ← n-gram", "tokens": 20, "tok_per_s": 10.0, "drafted": 8,
             "accepted": 4, "speedup": 1.1, "saved_s": 0.2, "preset": "fast", "vs_q4": 1.23}
    assert plain_line(facts, "one two three four five six seven eight nine ten") == (
        "Fast: the 4-bit copy's words, 1.2× the speed of a plain 4-bit copy · 5.0 words/s"
    )
    assert plain_line(facts | {"preset": "exact", "vs_q4": None}, "").startswith(
        "Exact: the full model's words (its speed not measured")
    assert plain_line(facts | {"preset": None}, "").startswith("Quick answer")  # pinned tiers: as before


def test_a_default_answer_before_calibration_says_fast_in_plain_words(demo_cache: Path) -> None:
    engine = Engine(DEMO_NAME)
    try:
        answer = engine.chat([{"role": "user", "content": "What is AI?"}], ChatOptions(max_tokens=4))
        facts = answer_facts(answer.last)
        assert (facts["parent"], facts["preset"]) == ("q4_k_m", "fast")
        assert facts["preset_words"] == "Fast: the Q4_K_M model's words (its speed not measured on this computer yet)"
        assert facts["preset_words"] in stats_line(facts, detail=True)
        assert "fast until this computer's speeds are measured" in facts["why"]
        exact = engine.chat([{"role": "user", "content": "What is AI?"}], ChatOptions(preset="exact", max_tokens=4))
        assert answer_facts(exact.last)["preset_words"].startswith("Exact: the full model's words")
    finally:
        engine.close()
