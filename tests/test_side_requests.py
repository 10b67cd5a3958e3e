"""Short side requests go first (issue #60): a title or a count queued behind long answers is served before
the waiting long ones (runtime.engine.side_requests), a long one is passed a bounded number of times, and
through the API a short request sent after two long ones is answered before the second, with the `openai`
client in threads on the demo model."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from runtime.engine.options import ChatOptions, EngineSettings
from runtime.engine.reader import Job
from runtime.engine.side_requests import MAX_JUMPS, SIDE_MAX_TOKENS, SIDE_PROMPT_CHARS, JumpCounts, is_side
from runtime.engine.tools import Tool, ToolRequest
from tests.test_server import DEMO, Served


def job(max_tokens: int, content: str = "Title this chat: how do I sort a list?", **options: Any) -> Job:
    return Job(DEMO, EngineSettings(), [{"role": "user", "content": content}],
               ChatOptions(max_tokens=max_tokens, **options), sink=lambda _: None)


def test_what_a_side_request_is() -> None:
    assert is_side(job(SIDE_MAX_TOKENS)) and is_side(job(1))
    assert not is_side(job(SIDE_MAX_TOKENS + 1))  # an answer to write
    assert not is_side(job(8, "x" * (SIDE_PROMPT_CHARS + 1)))  # a long prompt to read
    parts = [{"type": "text", "text": "x" * (SIDE_PROMPT_CHARS + 1)}]
    assert not is_side(job(8, parts))  # text parts count as well
    assert not is_side(job(8, tools=ToolRequest((Tool("f"),))))  # the tools' schemas join the prompt
    assert is_side(job(8, tools=ToolRequest((), "none")))  # earlier calls shown, none offered


def test_side_jobs_pass_the_waiting_long_ones_and_keep_their_own_order() -> None:
    counts, pending = JumpCounts(), collections.deque[Any]()
    long1, long2, side1, side2, long3 = job(512), job(512), job(16), job(32), job(100)
    for j in (long1, long2):
        assert counts.enqueue(pending, j) == 0
    assert counts.enqueue(pending, side1) == 2
    assert counts.enqueue(pending, side2) == 2
    assert counts.enqueue(pending, long3) == 0
    assert list(pending) == [side1, side2, long1, long2, long3]


def test_a_long_job_is_passed_at_most_max_jumps_times() -> None:
    counts, pending = JumpCounts(), collections.deque[Any]()
    long = job(512)
    counts.enqueue(pending, long)
    sides = [job(8) for _ in range(MAX_JUMPS + 2)]
    for s in sides:
        counts.enqueue(pending, s)
    assert list(pending) == [*sides[:MAX_JUMPS], long, *sides[MAX_JUMPS:]]
    later = job(512)
    counts.enqueue(pending, later)
    counts.enqueue(pending, side := job(8))
    assert list(pending)[-2:] == [side, later]  # a newer long job has its own jumps to give


def test_a_queued_control_item_is_never_passed() -> None:
    counts, pending = JumpCounts(), collections.deque[Any]()

    def unload() -> None:
        pass

    long = job(512)
    pending.append(unload)
    counts.enqueue(pending, long)
    counts.enqueue(pending, side := job(8))
    assert list(pending) == [unload, side, long]


# --- through the API ---------------------------------------------------------------------------------------
# A long answer that cannot end early: a JSON array of many strings, cut by its token limit.
MANY = {"type": "json_schema", "json_schema": {"name": "items", "strict": True, "schema": {
    "type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}, "minItems": 1000}},
    "required": ["items"], "additionalProperties": False}}}


def wait_for(server: Served, what: str, check: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check(server.health()):
        assert time.monotonic() < deadline, f"{what}: {server.health()}"
        time.sleep(0.02)


def test_a_short_request_after_two_long_ones_is_answered_before_the_second(api_server: Served) -> None:
    client = api_server.client().with_options(timeout=600)  # three answers in a row on a busy CPU
    api_server.wait_idle(120)
    finished: list[str] = []
    reasons: dict[str, str] = {}
    errors: list[BaseException] = []

    def ask(name: str, content: str, max_tokens: int, **extra: Any) -> None:
        try:
            r = client.chat.completions.create(model=DEMO, messages=[{"role": "user", "content": content}],
                                               max_tokens=max_tokens, temperature=0, **extra)
            reasons[name] = r.choices[0].finish_reason
            finished.append(name)
        except BaseException as e:  # the assertion below names it
            errors.append(e)

    def start(*args: Any, **extra: Any) -> threading.Thread:
        t = threading.Thread(target=ask, args=args, kwargs=extra)
        t.start()
        return t

    # The first runs while the others are queued (a few milliseconds' work: 200 tokens outlast it anywhere).
    threads = [start("long 1", "List fruits.", 200, response_format=MANY)]
    wait_for(api_server, "the first long answer never started", lambda h: h["busy"])
    threads.append(start("long 2", "List colors.", SIDE_MAX_TOKENS + 1, response_format=MANY))
    wait_for(api_server, "the second long answer never queued", lambda h: h["waiting"] == 1)
    threads.append(start("title", "Give this chat a title of three words: how do I sort a list in Python?", 16))
    for t in threads:
        t.join(900)
    assert not errors, errors
    assert reasons["long 1"] == reasons["long 2"] == "length"  # both were long: cut by their token limits
    assert finished == ["long 1", "title", "long 2"], finished  # the running answer was not interrupted
