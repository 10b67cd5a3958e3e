"""The speed-up over plain decoding that the CLI, the API and the window show is honest: about 1× for plain
decoding itself, never beyond what the machine's measured costs allow, and left out, with the reason, while
another program changes the machine's speed during an answer."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from runtime.decode.sampling import SamplingParams
from runtime.engine.engine import ChatOptions, Engine
from runtime.engine.summary import answer_facts, speedup_text

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper and a storm."}]


@pytest.fixture
def engine(demo_cache: Path):
    e = Engine()
    yield e
    e.close()


def _spin(stop) -> None:  # a busy program on one core
    while not stop.is_set():
        pass


def test_plain_decoding_claims_about_its_own_speed(engine: Engine) -> None:
    list(engine.stream_chat(PROMPT, ChatOptions(max_tokens=8, draft="none", sampling=SamplingParams())))  # warm
    last = engine.chat(PROMPT, ChatOptions(max_tokens=64, draft="none", sampling=SamplingParams())).last
    s = last.stats
    assert s.drafted == 0 and s.plain_step_s is not None
    if s.speedup_note is not None:  # the machine's speed changed under the answer: the reason, no number
        assert s.speedup is None and ("speed changed" in s.speedup_note or "as slowly" in s.speedup_note)
    else:
        assert 0.8 < s.speedup < 1.25, (s.speedup, s.plain_step_s)  # it *is* plain decoding: no gain, no loss
    assert speedup_text(answer_facts(last)) == ""  # and the window claims nothing for it


@pytest.mark.slow
def test_a_claim_never_exceeds_the_cost_models_bound_and_a_loaded_machine_gets_a_reason(engine: Engine) -> None:
    options = ChatOptions(max_tokens=96, k=3, sampling=SamplingParams())
    quiet = engine.chat(PROMPT, options).last.stats
    assert quiet.drafted > 0
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    spinners = [spawn.Process(target=_spin, args=(stop,)) for _ in range(os.cpu_count() or 2)]
    for p in spinners:
        p.start()
    try:
        engine.reset_caches()
        loaded = engine.chat(PROMPT, options).last
    finally:
        stop.set()
        for p in spinners:
            p.join(10)
    s = loaded.stats
    facts = answer_facts(loaded)
    if s.speedup_note is not None:  # the machine slowed under the answer: no number, the reason instead
        assert s.speedup is None and facts["speedup"] is None and speedup_text(facts) == ""
        assert any(why in s.speedup_note for why in ("speed changed", "as slowly", "exceed")), s.speedup_note
    else:  # it kept its speed (more cores than spinners): any claim stays within the measured costs
        assert s.speedup is not None and s.speedup <= 4.0
    # Once the other programs are gone, the next answer claims again.
    # (Another program on this machine could still shift one answer: three chances.)
    again = [engine.chat(PROMPT, options).last.stats for _ in range(3)]
    assert any(a.speedup_note is None and a.speedup is not None for a in again), [a.speedup_note for a in again]
