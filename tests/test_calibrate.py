"""The auto preset: the choice rule on plain numbers, and a real calibration of the demo model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.engine.calibrate import FILE, calibrate, load_or_calibrate, pick
from runtime.engine.engine import ChatOptions, Engine
from runtime.models.cache import DEMO_NAME, ModelDir
from runtime.plan.policy import LOSSY_FLOORS, STRICT_FLOORS, choose
from tests.conftest import copy_of_demo


def m(parent, draft, tps):
    return {"parent": parent, "draft": draft, "tok_per_s": tps}


MEASURED = {
    "f16": m("f16", None, 10.0),
    "q8_0": m("q8_0", None, 17.0),
    "q4_k_m": m("q4_k_m", None, 31.0),
    "f16<-q4_k_m": m("f16", "q4_k_m", 16.0),
    "f16<-q8_0": m("f16", "q8_0", 12.0),
    "q8_0<-q4_k_m": m("q8_0", "q4_k_m", 15.0),  # slower than q8_0 alone: must never be chosen
}


def test_pick_respects_floors_and_switches_off_what_does_not_pay() -> None:
    strict = pick(MEASURED, STRICT_FLOORS)
    assert {lvl: c["config"] for lvl, c in strict.items()} == dict.fromkeys(("low", "medium", "high"), "f16<-q4_k_m")
    lossy = pick(MEASURED, LOSSY_FLOORS)
    assert lossy["low"]["config"] == "q4_k_m"
    assert lossy["medium"]["config"] == "q8_0"  # q8_0<-q4_k_m measured slower: speculation off
    assert lossy["high"]["config"] == "f16<-q4_k_m"


def test_auto_choice_comes_from_the_calibration() -> None:
    calibration = {"choices": {"strict": pick(MEASURED, STRICT_FLOORS), "lossy": pick(MEASURED, LOSSY_FLOORS)}}
    c = choose("medium", "auto", calibration=calibration, allow_lossy=True)
    assert (c.parent, c.draft) == ("q8_0", None)
    c = choose("medium", "auto", calibration=calibration)
    assert (c.parent, c.draft) == ("f16", "q4_k_m")


@pytest.mark.slow
def test_demo_calibration_switches_off_what_does_not_pay_here(demo_model: ModelDir, tmp_path: Path) -> None:
    """A real calibration of the demo on this machine, in a private copy of the demo cache (its answers and the
    calibration are saved in the model's folder). Whether a draft pays on the 135M demo depends on the CPU (not
    on an EPYC, yes on a Xeon with AMX), so the test reads the measurement first: each level takes the fastest
    measured configuration at F16 precision, speculation is on only where this machine measured that it pays,
    and the auto preset answers with that choice."""
    root = copy_of_demo(demo_model, tmp_path / "cache")
    engine = Engine(DEMO_NAME, root=root)
    try:
        result = calibrate(engine, rounds=2, max_tokens=24)
        measured = result["measured"]
        assert set(measured) == {"f16", "q8_0", "q4_k_m", "f16<-q4_k_m", "f16<-q8_0", "q8_0<-q4_k_m"}
        assert all(m["tok_per_s"] > 0 for m in measured.values()), measured
        exact = {name: m["tok_per_s"] for name, m in measured.items() if m["parent"] == "f16"}
        fastest = max(exact, key=exact.__getitem__)
        for level, choice in result["choices"]["strict"].items():
            assert choice["parent"] == "f16", level
            assert choice["config"] == fastest, (level, measured)
            if choice["draft"] is None:  # speculation off: no pair measured faster than plain F16 here
                assert all(exact[name] <= exact["f16"] for name in exact), measured
            else:  # speculation on: its pair measured faster than plain F16 here
                assert exact[choice["config"]] > exact["f16"], measured
        # Cached in the model's folder and reused while the machine and tiers are the same.
        (ModelDir(root, DEMO_NAME).path / FILE).write_text(json.dumps(result))
        assert load_or_calibrate(engine) == result
        chunks = list(
            engine.stream_chat([{"role": "user", "content": "What is AI?"}], ChatOptions(preset="auto", max_tokens=4))
        )
        level = chunks[-1].route.level
        want = result["choices"]["strict"][level]
        assert (chunks[-1].choice.parent, chunks[-1].choice.draft) == (want["parent"], want["draft"])
        assert "auto" in chunks[-1].choice.why
    finally:
        engine.close()


def test_auto_answers_plain_where_the_calibration_found_that_no_draft_pays(demo_cache: Path) -> None:
    """The other branch of the test above on every machine: a calibration (this machine's key, made-up speeds)
    in which every pair measured slower than F16 alone; auto then drafts with no tier."""
    engine = Engine(DEMO_NAME)
    try:
        slow_pairs = {**MEASURED, "f16<-q4_k_m": m("f16", "q4_k_m", 9.0), "f16<-q8_0": m("f16", "q8_0", 8.0)}
        calibration = {
            "key": engine.machine_key(),
            "measured": slow_pairs,
            "choices": {"strict": pick(slow_pairs, STRICT_FLOORS), "lossy": pick(slow_pairs, LOSSY_FLOORS)},
        }
        (engine.model.path / FILE).write_text(json.dumps(calibration))
        assert load_or_calibrate(engine)["choices"] == calibration["choices"]
        chunks = list(
            engine.stream_chat([{"role": "user", "content": "What is AI?"}], ChatOptions(preset="auto", max_tokens=4))
        )
        assert (chunks[-1].choice.parent, chunks[-1].choice.draft) == ("f16", None)
        assert "auto" in chunks[-1].choice.why
    finally:
        engine.close()
