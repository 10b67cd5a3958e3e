"""One request must never take the server down: hostile JSON schemas (the 409 KB one that overflowed
llguidance's stack, parser-limit schemas, slow ones) are 400s naming the field, compiled off the event loop
with a deadline, and no grammar error costs the engine its loaded models."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runtime.api.offload import ParseThreads, TooSlow
from runtime.decode.grammar import Grammar
from runtime.decode.sampling import SamplingParams
from runtime.engine.answer import Chunk
from runtime.engine.engine import EngineSettings
from runtime.engine.options import ChatOptions
from runtime.engine.thread import EngineThread, Failure, Job
from tests.test_api_hostile import assert_error, raw
from tests.test_server import DEMO, Served, greedy, in_process


def properties(n: int, prefix: str = "k", required: bool = False) -> dict[str, Any]:
    names = [f"{prefix}{i}" for i in range(n)]
    return {"type": "object", "properties": {name: {} for name in names}, **({"required": names} if required else {})}


def with_schema(schema: dict[str, Any]) -> dict[str, Any]:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    return greedy("Give me a JSON object.", 16, response_format=fmt)


def with_tool(schema: dict[str, Any]) -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    return greedy("Call f.", 16, tools=[tool])


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (with_schema(properties(30_000)), "response_format.json_schema.schema", "more than 5000 properties"),
        (with_tool(properties(30_000)), "tools[0].function.parameters", "more than 5000 properties"),
        (with_schema(properties(8_000)), "response_format.json_schema.schema", "more than 5000 properties"),
        (with_schema(properties(1_000)), "response_format.json_schema.schema", "1000 optional properties"),
        (with_schema({"anyOf": [properties(1, f"b{i}_") for i in range(3_000)]}), "response_format.json_schema.schema",
         "3000 branches"),
    ],
    ids=["crash-409KB", "tool-crash", "optional-8000", "optional-1000", "anyOf-3000"],
)
def test_a_hostile_schema_is_a_400_and_the_server_lives(api_server: Served, body: dict, param: str, words: str) -> None:
    """The first case killed the process (a stack overflow in llguidance's validator on the event loop);
    the others were 500s that dropped the engine, or a 400 carrying a Rust backtrace."""
    data = json.dumps(body).encode()
    status, _, answer = api_server.post(data)
    assert status == 400, answer
    assert_error(answer, "schema_too_large")
    assert answer["error"]["param"] == param and words in answer["error"]["message"], answer
    assert "\n" not in answer["error"]["message"] and "panick" not in answer["error"]["message"]
    assert api_server.proc.poll() is None
    assert api_server.post(greedy("Say hi.", 4))[0] == 200


def test_a_parser_limit_mid_answer_is_a_user_error_and_the_engine_stays(demo_cache: Path) -> None:
    """A schema within the limits that llguidance gives up on once the answer starts (two objects of 400
    optional keys in an anyOf: 3,198 parser items at the first key) fails that answer with a one-line reason;
    the engine, its models loaded, answers the next request."""
    events: list[Any] = []
    runner = EngineThread(max_queue=4)
    try:
        settings = EngineSettings(n_ctx=1024, n_threads=2)
        plain = ChatOptions(max_tokens=4, sampling=SamplingParams())
        messages = [{"role": "user", "content": "Give me a JSON object."}]

        def answer(options: ChatOptions) -> Any:
            done = threading.Event()

            def sink(event: Any) -> None:
                if isinstance(event, Failure) or (isinstance(event, Chunk) and event.done):
                    events.append(event)
                    done.set()

            runner.submit(Job(DEMO, settings, messages, options, sink))
            assert done.wait(120)
            return events[-1]

        assert isinstance(answer(plain), Chunk)
        engine = runner.engine
        schema = {"anyOf": [properties(400, "k"), properties(400, "j")]}
        failed = answer(ChatOptions(max_tokens=8, sampling=SamplingParams(), grammar=Grammar.from_json_schema(schema)))
        assert isinstance(failed, Failure) and failed.kind == "user", failed
        assert "too complex to follow this answer" in failed.reason and "\n" not in failed.reason
        assert runner.engine is engine  # kept, models loaded
        assert isinstance(answer(plain), Chunk)
    finally:
        runner.close(30)


def test_a_parse_past_its_deadline_is_a_400(demo_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = json.dumps(with_schema(properties(3_000, required=True))).encode()
    with in_process(demo_cache, monkeypatch, parse_deadline_s=0.001) as url:
        status, _, answer = raw(url, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        assert status == 400, answer
        assert_error(answer, "schema_too_large")
        assert "took longer than 0.001 s to compile" in answer["error"]["message"]
        status, _, health = raw(url, "GET", "/health")
        assert status == 200 and health["status"] == "ok"


def test_parse_threads_leave_the_event_loop_free_and_keep_the_stack_size() -> None:
    before = threading.stack_size()
    pool = ParseThreads(threads=1)
    assert threading.stack_size() == before  # other threads keep the default
    release = threading.Event()

    async def main() -> tuple[int, float]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while not release.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        with pytest.raises(TooSlow):
            await pool.run(0.2, release.wait, 30)  # blocks its thread, not the loop
        waited = time.monotonic() - started
        release.set()
        await ticker
        assert await pool.run(5, sum, [1, 2, 3]) == 6  # the thread is free again for the next parse
        with pytest.raises(ZeroDivisionError):
            await pool.run(5, lambda: 1 // 0)
        return ticks, waited

    ticks, waited = asyncio.run(main())
    pool.close()
    assert ticks > 10 and waited < 25
