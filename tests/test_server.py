"""`specquant serve`: a real server process on 127.0.0.1 answering with the demo model, driven by the
official `openai` client and by plain HTTP (and the same app in the test's process where the engine's side
of a request must be seen)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from runtime.api.server import Defaults, ServeConfig, Service, url_of, uvicorn_server
from runtime.decode.sampling import SamplingParams
from runtime.engine.answer import Chunk
from runtime.engine.engine import ChatOptions, EngineSettings
from runtime.engine.thread import EngineThread, Failure, Job
from runtime.models.cache import ModelDir
from runtime.plan.policy import FRONTIER
from tests.conftest import REPO, assert_one_line_error, copy_of_demo, run_cli, run_cli_here

DEMO = "smollm2-135m-instruct"
PROMPTS = ["Name three primary colors.", "What is the capital of France?", "Say hello in Spanish.", "What is 2+2?"]


class Served:
    """`specquant serve --port 0 ...` in a child process, its URL read from the first line it prints."""

    def __init__(self, cache: Path, *args: str) -> None:
        self.log = cache.parent / f"serve-{time.monotonic_ns()}.log"
        self.log_file = self.log.open("w")
        self.data = cache.parent / "data"  # its documents index: never the user's (runtime.documents)
        env = dict(os.environ, SPECQUANT_CACHE_DIR=str(cache), SPECQUANT_DATA_DIR=str(self.data))
        command = [sys.executable, "-m", "commands", "serve", "--port", "0", "--threads", "2", *args]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log_file, text=True, cwd=REPO,
                                     env=env)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        assert " on http://127.0.0.1:" in first, (first, self.stderr())
        self.base = first.split(" on ")[1].split()[0].removesuffix("/v1")
        self.proc.stdout.readline()  # the curl example

    def stderr(self) -> str:
        if not self.log_file.closed:
            self.log_file.flush()
        return self.log.read_text()

    def client(self, key: str = "unused") -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.base}/v1", api_key=key, max_retries=0, timeout=120)

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None):
        """(status, headers, decoded JSON body) over plain HTTP."""
        req = urllib.request.Request(f"{self.base}{path}", data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.headers, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.headers, json.loads(e.read())

    def post(self, payload: Any, headers: dict[str, str] | None = None):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} | (headers or {})
        return self.request("POST", "/v1/chat/completions", data, headers)

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/health")[2]

    def wait_idle(self, timeout: float) -> float:
        """Seconds until the engine has no job running or waiting."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            h = self.health()
            if not h["busy"] and not h["waiting"]:
                return time.monotonic() - start
            time.sleep(0.05)
        raise AssertionError(f"still busy after {timeout} s: {self.health()}")

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.log_file.close()


@pytest.fixture(scope="module")
def served_cache(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of its own for the servers of this module (their controller estimates stay here)."""
    return copy_of_demo(demo_model, tmp_path_factory.mktemp("served") / "cache")


@pytest.fixture(scope="module")
def server(served_cache: Path) -> Iterator[Served]:
    s = Served(served_cache)
    yield s
    assert s.stop() == 0, s.stderr()


@contextlib.contextmanager
def in_process(
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    sndbuf: int = 0,
    n_ctx: int = 2048,
    ended: list[Any] | None = None,
    **config: Any,
) -> Iterator[str]:
    """The real app on a loopback socket in this process (ServeConfig as given), with its own engine thread.
    With `ended`, each job's last event (its last Chunk, or a Failure) is appended there as the job ends: what
    became of an answer whose client is gone, seen from the engine's side."""
    monkeypatch.setenv("SPECQUANT_CACHE_DIR", str(cache))
    runner = EngineThread(max_queue=4)
    if ended is not None:
        submit = runner.submit

        def recording(job: Job, bounded: bool = True) -> Job:
            sink = job.sink

            def tell(event: Any) -> None:
                if isinstance(event, Failure) or (isinstance(event, Chunk) and event.done):
                    ended.append(event)
                sink(event)

            job.sink = tell
            return submit(job, bounded)

        runner.submit = recording  # type: ignore[method-assign]
    options = ChatOptions(sampling=SamplingParams())
    defaults = Defaults(DEMO, EngineSettings(n_ctx=n_ctx, n_threads=2), options)
    service = Service(runner, lambda: defaults, ServeConfig(**config))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if sndbuf:  # accepted connections inherit it: a stalled reader blocks the server's sends soon
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn_server(service)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = url_of(sock)
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield url
    finally:
        service.cancel_all()
        server.should_exit = True
        thread.join(30)
        runner.close(30)
        sock.close()


def was_cancelled(event: Any, asked: int) -> bool:
    """A job's last event says its answer was stopped before the `asked` tokens were all made."""
    if isinstance(event, Failure):
        return event.kind == "cancelled"
    return event.stats.stop_reason == "cancelled" and event.stats.tokens < asked


def _wait(condition, timeout: float = 60) -> None:
    """Until `condition()` holds; `timeout` is a guard against a hang, not a speed test."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, "condition never held"
        time.sleep(0.02)


def greedy(content: str, max_tokens: int = 24, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": max_tokens} | extra


def test_openai_client_lists_models_and_chats_whole_and_streamed(server: Served) -> None:
    client = server.client()
    models = client.models.list()
    assert [m.id for m in models.data] == [DEMO]
    assert [t["tier"] for t in models.data[0].model_extra["tiers"]] == ["f16", "q8_0", "q4_k_m"]

    messages = [{"role": "user", "content": PROMPTS[0]}]
    ask = {"model": DEMO, "messages": messages, "temperature": 0, "max_tokens": 24}
    whole = client.chat.completions.create(**ask)
    text = whole.choices[0].message.content
    assert text and whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens <= 24
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    facts = whole.model_extra["specquant"]
    assert facts["level"] in ("low", "medium", "high") and facts["reason"]
    # The default (#61): a frontier preset, fast until the server has measured this machine while idle.
    assert facts["why"].startswith("auto:") and facts["parent"] == FRONTIER[facts["preset"]][0], facts
    assert facts["tok_per_s"] > 0 and facts["ttft_s"] > 0
    assert {"plain_step_s", "plain_s", "speedup", "saved_s", "spec_off"} <= set(facts)  # what speculation bought

    chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        whole.choices[0].finish_reason
    ]


@pytest.mark.slow
def test_greedy_answer_is_the_one_chat_json_gives(server: Served, served_cache: Path) -> None:
    status, _, body = server.post(greedy(PROMPTS[1], 32))
    assert status == 200, body
    flags = ("--temp", "0", "--max-tokens", "32", "--threads", "2")
    chat = run_cli("chat", "--json", "--prompt", PROMPTS[1], *flags, env={"SPECQUANT_CACHE_DIR": str(served_cache)})
    assert chat.returncode == 0, chat.stderr
    out = json.loads(chat.stdout)
    assert body["choices"][0]["message"]["content"] == out["text"]
    assert (body["specquant"]["parent"], body["specquant"]["draft"]) == (out["parent"], out["draft"])
    assert body["usage"]["completion_tokens"] == out["stats"]["tokens"]


@pytest.mark.slow
def test_eight_concurrent_clients_each_get_their_own_complete_answer(server: Served) -> None:
    # The exact preset (F16's words), whose greedy answers these were written against; the default's fast
    # preset may round a near-tie differently between a batched verify and a single step (docs/architecture.md).
    exact = {"preset": "exact"}
    expected = {p: server.post(greedy(p, specquant=exact))[2]["choices"][0]["message"]["content"] for p in PROMPTS}
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            messages = [{"role": "user", "content": PROMPTS[i % 4]}]
            stream = server.client().chat.completions.create(
                model=DEMO, messages=messages, temperature=0, max_tokens=24, stream=True,
                extra_body={"specquant": {"preset": "exact"}},
            )
            results[i] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert {i: results[i] for i in range(8)} == {i: expected[PROMPTS[i % 4]] for i in range(8)}


def test_a_client_that_goes_away_cancels_its_answer_and_the_next_is_answered(
    served_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server in this process, so that the engine's side can be seen: the abandoned answer ends as
    cancelled, short of its 2,000 tokens (not merely soon: a fast machine might finish it soon), and the
    engine answers the next request."""
    ended: list[Any] = []
    with in_process(served_cache, monkeypatch, ended=ended) as url:
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        body = json.dumps(greedy("Write a very long story about a dragon and a knight.", 2000, stream=True))
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        got = b""
        while got.count(b"data:") < 4:  # the answer is streaming
            got += response.read1(4096)
        conn.sock.close()  # the client goes away mid-answer
        conn.close()
        _wait(lambda: bool(ended), timeout=300)  # a guard against a hang
        assert was_cancelled(ended[0], 2000), ended[0]
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        headers = {"Content-Type": "application/json"}
        conn.request("POST", "/v1/chat/completions", json.dumps(greedy(PROMPTS[3])), headers)
        answer = conn.getresponse()
        assert answer.status == 200 and json.loads(answer.read())["choices"][0]["message"]["content"]
        conn.close()
    assert len(ended) == 2 and not was_cancelled(ended[1], 24)


def test_turns_of_one_conversation_are_answered_and_reuse_is_not_reported(server: Served) -> None:
    first = server.post(greedy("Tell me about the moon.", 16))[2]
    turn2 = [
        {"role": "user", "content": "Tell me about the moon."},
        {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
        {"role": "user", "content": "And the sun?"},
    ]
    second = server.post({"messages": turn2, "temperature": 0, "max_tokens": 8})[2]
    assert second["choices"][0]["message"]["content"]
    # The KV prefix is reused (tests/test_engine.py), but an API client is not told how much: that would
    # say how much of another client's chat the cache holds.
    assert "reused_tokens" not in second["specquant"]


@pytest.mark.parametrize(
    ("payload", "status", "param", "words"),
    [
        (b"{not json", 400, None, "not valid JSON"),
        (b"[1, 2]", 400, None, "must be a JSON object"),
        ({"max_tokens": 8}, 400, "messages", "missing required parameter: messages"),
        (greedy("hi") | {"max_tokens": "ten"}, 400, "max_tokens", "must be an integer"),
        (greedy("hi") | {"messages": "hi"}, 400, "messages", "non-empty array"),
        (greedy("hi") | {"temperature": 9}, 400, "temperature", "out of range"),
        (greedy("hi") | {"n": 2}, 400, "n", "n=2 is not supported"),
        (greedy("hi") | {"tools": [{"type": "function", "function": {"name": "f g"}}]}, 400,
         "tools[0].function.name", "letters, digits"),
        (greedy("hi") | {"functions": [{"name": "f"}]}, 400, "functions", "not supported"),
        (greedy("hi") | {"logprobs": True, "top_logprobs": 21}, 400, "top_logprobs", "out of range"),
        (greedy("hi") | {"response_format": {"type": "xml"}}, 400, "response_format.type", "must be text, json"),
        (greedy("hi") | {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, 400,
         "response_format.json_schema.name", "name must be"),
        (greedy("hi") | {"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "strict": True, "schema": {"type": "object", "not": {"type": "null"}}}}}, 400,
         "response_format.json_schema.schema", '"not"'),
        (greedy("hi") | {"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 2}}}}, 400,
         "response_format.json_schema.schema", "minimum (5) is greater than maximum (2)"),
        (greedy("hi") | {"frobnicate": 1}, 400, "frobnicate", "unrecognized request argument"),
        (greedy("hi") | {"max_tokens": 0}, 400, "max_tokens", "out of range"),
        (greedy("hi") | {"specquant": {"parent": "q2_k"}}, 400, "specquant.parent", "must be one of"),
        (greedy("hi") | {"model": "no-such-model"}, 404, "model", "not in the cache"),
        (b'{"messages": "' + b"x" * (1 << 20) + b'"}', 413, None, "over 1024 KiB"),
    ],
)
def test_bad_requests_get_the_right_status_and_an_openai_error(server: Served, payload, status, param, words) -> None:
    got, _, body = server.post(payload)
    assert got == status, body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert words in body["error"]["message"] and body["error"]["param"] == param
    assert "Traceback" not in json.dumps(body)


def test_the_openai_client_sees_typed_errors(server: Served) -> None:
    client = server.client()
    with pytest.raises(openai.NotFoundError, match="no-such-model"):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="n=3"):
        client.chat.completions.create(model=DEMO, messages=[{"role": "user", "content": "hi"}], n=3)
    assert server.request("GET", "/nowhere")[0] == 404


def test_the_specquant_options_choose_the_pair(server: Served) -> None:
    body = server.post(greedy(PROMPTS[0], 8, specquant={"parent": "q8_0", "draft": "none", "level": "high"}))[2]
    facts = body["specquant"]
    assert (facts["parent"], facts["draft"], facts["level"], facts["pair"]) == ("q8_0", None, "high", "Q8_0")


def test_the_request_log_names_no_content(server: Served) -> None:
    secret = "purple-elephant-4711"
    assert server.post(greedy(f"Repeat the word {secret}.", 4))[0] == 200
    log = server.stderr()
    assert "POST /v1/chat/completions 200" in log
    assert secret not in log


@pytest.mark.slow
def test_a_key_is_checked_and_a_full_queue_is_told_when_to_retry(served_cache: Path) -> None:
    s = Served(served_cache, "--api-key", "sesame", "--max-queue", "1")
    try:
        assert s.request("GET", "/v1/models")[0] == 401
        assert s.request("GET", "/v1/models", headers={"Authorization": "Bearer sesame!"})[0] == 401
        assert s.request("GET", "/v1/models", headers={"Authorization": "Bearer sesame"})[0] == 200
        with pytest.raises(openai.AuthenticationError):
            s.client("wrong").models.list()

        # One answer running, one waiting: the third is turned away with Retry-After.
        key = {"Authorization": "Bearer sesame"}
        long = greedy("Write a long story about a ship.", 400)
        running = threading.Thread(target=s.post, args=(long, key))
        running.start()
        _wait(lambda: s.health()["busy"])
        waiting = threading.Thread(target=s.post, args=(greedy("hi", 4), key))
        waiting.start()
        _wait(lambda: s.health()["waiting"] == 1)
        status, headers, body = s.post(greedy("hi", 4), key)
        assert status == 429 and body["error"]["code"] == "queue_full"
        assert int(headers["Retry-After"]) >= 1
        running.join(300)
        waiting.join(300)
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.slow
def test_ctrl_c_while_streaming_cancels_and_exits_0(served_cache: Path) -> None:
    s = Served(served_cache)
    messages = [{"role": "user", "content": "Write a long story about a cat."}]
    stream = iter(s.client().chat.completions.create(model=DEMO, messages=messages, max_tokens=2000, stream=True))
    next(stream), next(stream)  # streaming
    assert s.stop(signal.SIGINT) == 0
    err = s.stderr()
    assert "Traceback" not in err and "failed to decode" not in err, err
    assert err.strip().endswith("stopped")
    with pytest.raises(openai.APIError, match="cancelled"):  # the stream's last event says why it ended
        list(stream)


def test_a_host_beyond_loopback_needs_a_key(demo_cache: Path) -> None:
    # In this process (run_cli_here): `serve` refuses before it binds or loads anything, and this module's servers
    # run it as a child already.
    assert_one_line_error(run_cli_here("serve", "--host", "0.0.0.0"), "--api-key")


def test_a_taken_port_is_one_line(demo_cache: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert_one_line_error(run_cli_here("serve", "--port", str(port)), f"cannot listen on 127.0.0.1:{port}")


# --- the request schema alone (no server) -----------------------------------------------------------------
def parse(**body: Any):
    from runtime.api.requests import parse_chat
    from runtime.engine.engine import ChatOptions

    return parse_chat({"messages": [{"role": "user", "content": "hi"}]} | body, ChatOptions(), n_ctx=4096)


def test_the_schema_reads_text_parts_roles_stops_and_our_options() -> None:
    call = parse(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]},
        ],
        stop=["\n\n", "END"], max_completion_tokens=7, temperature=0.2, top_k=5, seed=3,
        specquant={"preset": "paper", "allow_lossy": True}, n=1, logprobs=False, presence_penalty=0, user="me",
    )
    assert call.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello, world"}]
    o = call.options
    assert (o.stop, o.max_tokens, o.preset, o.allow_lossy) == (("\n\n", "END"), 7, "paper", True)
    assert dict(o.sampling_overrides) == {"temperature": 0.2, "top_k": 5, "seed": 3}
    assert not call.stream and not call.include_usage


def test_the_schema_takes_what_real_clients_send() -> None:
    """Names on messages, a chat that ends with the assistant, an assistant that said nothing, and newer
    fields that cannot change the answer (issue #40); trimming a long chat only when asked."""
    from runtime.engine.engine import ChatOptions

    call = parse(
        messages=[
            {"role": "system", "content": "Be brief.", "name": "rules"},
            {"role": "user", "content": "Hi", "name": "ann"},
            {"role": "assistant", "content": None, "name": "helper"},
        ],
        prompt_cache_key="k", safety_identifier="s", verbosity="medium", store=True, metadata={"a": "b"},
    )
    assert call.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": ""}]  # the names are not shown to the model
    assert call.options.trim is False and ChatOptions().trim is True  # the window and the CLI trim
    assert parse(specquant={"trim": True}).options.trim is True


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages[0].content[0]"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": "hi", "name": ["bob"]}]}, "messages[0].name"),
        ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
        ({"verbosity": "low"}, "verbosity"),
        ({"metadata": "tag"}, "metadata"),
        ({"stream": True, "stream_options": {"include_obfuscation": 1}}, "stream_options.include_obfuscation"),
        ({"specquant": {"trim": "yes"}}, "specquant.trim"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        ({"top_k": 1.5}, "top_k"),
        ({"max_tokens": True}, "max_tokens"),
        ({"specquant": {"turbo": True}}, "specquant"),
    ],
)
def test_the_schema_refuses_what_it_cannot_honour(body: dict[str, Any], param: str) -> None:
    from runtime.api.responses import ApiError

    with pytest.raises(ApiError) as e:
        parse(**body)
    assert e.value.status == 400 and e.value.param == param, e.value.message
