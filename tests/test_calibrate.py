"""The auto preset: the choice rule on plain numbers, and a real calibration of the demo model."""

from __future__ import annotations

import json

from runtime.engine.calibrate import FILE, calibrate, load_or_calibrate, pick
from runtime.engine.engine import ChatOptions, Engine
from runtime.models.cache import DEMO_NAME, ModelDir
from runtime.plan.policy import LOSSY_FLOORS, STRICT_FLOORS, choose


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


def test_demo_calibration_turns_speculation_off(demo_model: ModelDir, tmp_path) -> None:
    """On the 135M demo a draft costs about as much as the parent: no pair can pay, and auto sees it."""
    engine = Engine(DEMO_NAME, root=demo_model.root)
    try:
        result = calibrate(engine, rounds=2, max_tokens=24)
        assert set(result["measured"]) == {"f16", "q8_0", "q4_k_m", "f16<-q4_k_m", "f16<-q8_0", "q8_0<-q4_k_m"}
        for level, choice in result["choices"]["strict"].items():
            assert choice["parent"] == "f16", level
            assert choice["draft"] is None, (level, result["measured"])
        # Cached in the model's folder and reused while the machine and tiers are the same.
        (demo_model.path / FILE).write_text(json.dumps(result))
        assert load_or_calibrate(engine) == result
        chunks = list(
            engine.stream_chat([{"role": "user", "content": "What is AI?"}], ChatOptions(preset="auto", max_tokens=4))
        )
        assert chunks[-1].choice.draft is None and "auto" in chunks[-1].choice.why
    finally:
        (demo_model.path / FILE).unlink(missing_ok=True)
        engine.close()
