"""One way to hold an engine: Engine and EngineThread answer through the same Protocol with the same text;
deciding is a pure function; child processes hang, die and report through one helper."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from runtime import child
from runtime.engine.decision import decide
from runtime.engine.engine import Engine
from runtime.engine.interface import ChatEngine, LoadedEngine
from runtime.engine.options import ChatOptions
from runtime.engine.thread import EngineThread
from runtime.errors import Cancelled, UserError
from runtime.machine.hardware import Inventory
from runtime.models.cache import ModelDir
from runtime.plan.placement import PlacementSettings, _ram_need
from runtime.plan.router import RouterSettings
from tests.conftest import engine_on_copy

GREEDY = ChatOptions(max_tokens=24, sampling_overrides=(("temperature", 0.0),))
ASK = [{"role": "user", "content": "Name three primary colors."}]


@pytest.fixture(scope="module")
def engine(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory):
    """On a private copy of the demo cache: the estimates its answers save stay with this module."""
    with engine_on_copy(demo_model, tmp_path_factory.mktemp("interface")) as e:  # a Job's default settings
        yield e


def test_the_engine_and_its_thread_are_one_protocol_with_one_answer(engine: Engine, demo_cache: Path) -> None:
    thread = EngineThread(max_queue=2)
    try:
        assert isinstance(engine, LoadedEngine) and isinstance(thread, ChatEngine)
        assert not isinstance(thread, LoadedEngine)  # it holds whichever model its jobs ask for
        here = engine.chat(ASK, GREEDY)
        pieces: list[str] = []
        there = thread.chat(ASK, GREEDY, on_text=pieces.append)
        assert there.text == here.text and "".join(pieces) == there.text and there.token_ids == here.token_ids
        with pytest.raises(UserError, match="the chat is empty"):
            thread.chat([], GREEDY)
        # Leaving a stream early cancels its job: the thread is free for the next answer at once.
        stream = thread.stream_chat(ASK, replace(GREEDY, max_tokens=200))
        next(stream)
        stream.close()
        assert thread.chat(ASK, GREEDY).text == here.text
        cancel = threading.Event()
        cancel.set()
        with pytest.raises(Cancelled):
            thread.chat(ASK, GREEDY, cancel)
    finally:
        thread.close()


def test_deciding_is_a_pure_function_of_the_prompt_options_and_machine(engine: Engine) -> None:
    tiers = {t: engine.tier_size(t) for t in engine.manifest["tiers"]}
    roomy = Inventory("test CPU", physical_cores=2, ram_total_bytes=64 * 10**9, ram_available_bytes=64 * 10**9)
    args = (tiers, roomy, PlacementSettings(), RouterSettings())
    first = decide("What is AI?", ChatOptions(), *args)
    assert first == decide("What is AI?", ChatOptions(), *args)  # same facts, same decision
    assert first.route.level == "low" and (first.choice.parent, first.choice.draft) == ("q4_k_m", None)  # fast
    exact = decide("What is AI?", ChatOptions(preset="exact"), *args)
    assert (exact.choice.parent, exact.choice.draft) == ("f16", "q4_k_m")
    pinned = decide("What is AI?", ChatOptions(level="high"), *args)
    assert pinned.route.level == "high" and "the router judged it low" in pinned.route.reason
    # A budget short of F16: precision gives way, and the choice says why (unless the parent is pinned).
    budget = PlacementSettings(max_memory_bytes=int(_ram_need(tiers["q8_0"], 0)) + 1)
    squeezed = decide("What is AI?", ChatOptions(preset="exact"), tiers, roomy, budget, RouterSettings())
    assert squeezed.choice.parent != "f16" and squeezed.placement.parent.tier == squeezed.choice.parent
    assert squeezed.choice.why != exact.choice.why
    # The engine's own decision is this function's, on its machine.
    assert engine.decide("What is AI?", ChatOptions()).route == first.route


# --- child processes (targets at module level: a spawned child imports them) -----------------------------
def _answers(value: int, conn: Connection) -> None:
    conn.send(value * 2)


def _dies(conn: Connection) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _hangs(conn: Connection) -> None:
    time.sleep(60)


def _leaves_silently(conn: Connection) -> None:
    os._exit(3)


def _sends_a_lot(conn: Connection) -> None:
    conn.send(b"x" * (4 << 20))  # more than a pipe holds: read while the child is still sending
    time.sleep(0.2)


def test_a_child_answers_dies_hangs_or_leaves_and_each_is_said() -> None:
    assert child.run_in_child(_answers, (21,)) == 42
    assert len(child.run_in_child(_sends_a_lot, ())) == 4 << 20
    with pytest.raises(child.ChildFailed, match=r"the probe was killed by SIGKILL") as killed:
        child.run_in_child(_dies, (), what="the probe")
    assert killed.value.signal is not None and killed.value.signal.startswith("SIGKILL")
    with pytest.raises(child.ChildFailed, match="exited with code 3"):
        child.run_in_child(_leaves_silently, ())
    with pytest.raises(child.ChildFailed, match="hung for 1 s"):
        child.run_in_child(_hangs, (), timeout=1.0)


def test_whatever_poll_raises_ends_the_child() -> None:
    seen: list[int] = []

    def poll() -> None:
        seen.append(1)
        if len(seen) > 3:
            raise Cancelled("stopped")

    with pytest.raises(Cancelled):
        child.run_in_child(_hangs, (), poll=poll)
    assert len(seen) == 4
    assert not [p for p in __import__("multiprocessing").active_children() if p.is_alive()]
