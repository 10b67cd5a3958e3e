"""The default preset's calibration (#61): each frontier preset's speed against plain Q4_K_M, paired per run;
a real calibration of the demo model, measured by the engine thread when idle, and what the default then picks."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from runtime.engine import thread as engine_thread
from runtime.engine.calibrate import CONFIGS, FILE, PLAIN_Q4, calibrate, load_or_calibrate, ratios_vs_q4, stored
from runtime.engine.engine import ChatOptions, Engine
from runtime.engine.thread import EngineThread
from runtime.models.cache import DEMO_NAME, ModelDir
from runtime.plan.policy import FRONTIER, PRECISION, frontier_pick
from tests.conftest import copy_of_demo


def test_ratios_pair_each_run_with_plain_q4s_run_of_the_same_prompt_and_round() -> None:
    rates = {PLAIN_Q4: [10.0, 20.0, 40.0], "exact": [5.0, 10.0, 30.0], "balanced": [10.0, 0.0, 40.0],
             "fast": [11.0, 22.0, 40.0]}
    ratios = ratios_vs_q4(rates)
    assert ratios == {"exact": 0.5, "balanced": 1.0, "fast": 1.1}  # a run that failed (0.0) is left out
    assert frontier_pick({"vs_q4": ratios})[0] == "balanced"


def test_a_calibration_stopped_for_a_request_saves_nothing(demo_cache: Path) -> None:
    engine = Engine(DEMO_NAME)
    try:
        assert load_or_calibrate(engine, stop=lambda: True) is None
        assert not (engine.model.path / FILE).exists() and not engine.calibrated
        # Another machine's, or an older format's, calibration is not this machine's.
        (engine.model.path / FILE).write_text(json.dumps({"format": 1, "key": engine.machine_key(), "vs_q4": {}}))
        assert stored(engine) is None and not engine.calibrated
    finally:
        engine.close()


@pytest.mark.slow
def test_demo_calibration_measured_when_idle_decides_the_default(
    demo_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real calibration on this machine, in a private copy of the demo cache. Which preset wins depends on
    the CPU, so the test reads the measurement: the default takes the most precise preset whose measured speed
    is at least plain Q4_K_M's (fast where none is), and answers with it."""
    monkeypatch.setattr(engine_thread, "CALIBRATE_IDLE_S", 0.0)
    runner = EngineThread(calibrate_when_idle=True)
    try:
        ask = [{"role": "user", "content": "What is AI?"}]
        first = list(runner.stream_chat(ask, ChatOptions(max_tokens=4), model=DEMO_NAME))
        assert first[-1].choice.preset == "fast"  # before the measurement: fast, at once
        path = ModelDir(demo_cache, DEMO_NAME).path / FILE
        deadline = time.monotonic() + 600
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        result = json.loads(path.read_text())
        measured, vs_q4 = result["measured"], result["vs_q4"]
        assert set(measured) == set(CONFIGS) and set(vs_q4) == set(FRONTIER)
        assert all(m["tok_per_s"] > 0 and len(m["samples"]) == 6 for m in measured.values()), measured
        assert measured["fast"]["acceptance"] is None or 0 <= measured["fast"]["acceptance"] <= 1
        pick = result["default"]
        assert pick == frontier_pick(result)[0]
        keeps_up = [p for p in FRONTIER if (vs_q4[p] or 0) >= 1.0]
        if keeps_up:  # the most precise of those that kept up with plain Q4_K_M here
            assert pick == max(keeps_up, key=lambda p: PRECISION[FRONTIER[p][0]]), vs_q4
        else:
            assert pick == "fast", vs_q4
        after = list(runner.stream_chat(ask, ChatOptions(max_tokens=4), model=DEMO_NAME))
        choice = after[-1].choice
        assert (choice.preset, choice.parent) == (pick, FRONTIER[pick][0])
        if keeps_up:  # with every draft source that pays, and its measured speed in the status line
            assert choice.ngram and choice.vs_q4 == vs_q4[pick]
        else:  # even the free drafts lost to plain Q4_K_M here: Q4_K_M plainly
            assert not choice.ngram and choice.vs_q4 == 1.0
    finally:
        runner.close()


@pytest.mark.slow
def test_calibrate_directly_measures_every_configuration(demo_model: ModelDir, tmp_path: Path) -> None:
    root = copy_of_demo(demo_model, tmp_path / "cache")
    engine = Engine(DEMO_NAME, root=root)
    try:
        result = calibrate(engine, rounds=1, max_tokens=12)
        assert result is not None and result["format"] == 2 and result["key"] == engine.machine_key()
        assert all(len(m["samples"]) == 3 for m in result["measured"].values())
    finally:
        engine.close()
