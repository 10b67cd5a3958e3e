"""The local API against what web pages and broken clients send: real HTTP to a real `specquant serve` on
127.0.0.1 (a forged Host, a foreign Origin, a form post, JSON that used to break a job, a message flood,
abandoned requests), and an in-process server with short deadlines for a stalled body and a stalled
reader. Each gets its status in OpenAI's error shape, and the next normal request is answered."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.api.requests import MAX_CONTENT_CHARS, MAX_MESSAGES
from runtime.models.cache import ModelDir
from tests.conftest import copy_of_demo
from tests.test_server import DEMO, Served, greedy, in_process, was_cancelled

EVIL = "evil.example"


@pytest.fixture(scope="module")
def hostile_cache(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_of_demo(demo_model, tmp_path_factory.mktemp("hostile") / "cache")


@pytest.fixture(scope="module")
def server(hostile_cache: Path) -> Iterator[Served]:
    """A server whose queue holds 2 (the slow flood and queue tests). The quick tests refuse hostile input
    whatever the queue and use the session's `api_server` (tests/conftest.py): one server start fewer."""
    s = Served(hostile_cache, "--max-queue", "2")
    yield s
    assert s.stop() == 0, s.stderr()


def raw(url: str, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None):
    """(status, headers, body: decoded if JSON) from the server at `url`, with exactly the headers given
    (http.client adds no Host when one is)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request(method, path, body, headers or {})
        r = conn.getresponse()
        data = r.read()
        kind = r.headers.get("content-type", "")
        return r.status, r.headers, json.loads(data) if kind.startswith("application/json") else data
    finally:
        conn.close()


def assert_error(body: Any, code: str | None = None) -> None:
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert "Traceback" not in json.dumps(body)
    if code:
        assert body["error"]["code"] == code, body


def still_answers(s: Served) -> None:
    status, _, body = s.post(greedy("What is 2+2?", 4))
    assert status == 200 and body["choices"][0]["message"]["content"], body


def test_a_page_with_another_host_is_refused_even_after_dns_rebinding(api_server: Served) -> None:
    port = api_server.base.rsplit(":", 1)[1]
    chat = json.dumps(greedy("hi", 4)).encode()
    for host in (f"{EVIL}:{port}", EVIL, f"127.0.0.1.{EVIL}:{port}", ""):
        for method, path, body in (
            ("GET", "/v1/models", None),
            ("GET", "/health", None),
            ("POST", "/v1/chat/completions", chat),
        ):
            headers = {"Host": host, "Content-Type": "application/json"}
            status, _, answer = raw(api_server.base, method, path, body, headers)
            assert status == 421, (host, path, answer)
            assert_error(answer, "host_not_allowed")
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "LOCALHOST"):
        assert raw(api_server.base, "GET", "/v1/models", headers={"Host": host})[0] == 200, host


@pytest.mark.slow
def test_a_foreign_origin_and_a_form_post_are_refused(server: Served) -> None:
    chat = json.dumps(greedy("hi", 4)).encode()
    origin = {"Host": "127.0.0.1", "Origin": f"http://{EVIL}"}
    status, headers, body = raw(server.base, "GET", "/v1/models", headers=origin)
    assert status == 403 and "access-control-allow-origin" not in headers
    assert_error(body, "origin_not_allowed")
    assert "--cors-origin" in body["error"]["message"]
    as_json = origin | {"Content-Type": "application/json"}
    status, _, body = raw(server.base, "POST", "/v1/chat/completions", chat, as_json)
    assert status == 403
    # What an HTML form can send without a preflight: never application/json.
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Host": "127.0.0.1"} | ({"Content-Type": kind} if kind else {})
        status, _, body = raw(server.base, "POST", "/v1/chat/completions", chat, headers)
        assert status == 415, (kind, body)
        assert_error(body, "unsupported_media_type")
    headers = {"Host": "127.0.0.1", "Content-Type": "application/json; charset=utf-8"}
    assert raw(server.base, "POST", "/v1/chat/completions", chat, headers)[0] == 200


def test_a_named_origin_is_served_with_cors(hostile_cache: Path) -> None:
    s = Served(hostile_cache, "--cors-origin", "http://ok.example")
    try:
        ok = {"Host": "127.0.0.1", "Origin": "http://ok.example"}
        status, headers, _ = raw(s.base, "GET", "/v1/models", headers=ok)
        assert status == 200 and headers["access-control-allow-origin"] == "http://ok.example"
        preflight = ok | {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
        status, headers, _ = raw(s.base, "OPTIONS", "/v1/chat/completions", headers=preflight)
        assert status == 200 and headers["access-control-allow-origin"] == "http://ok.example"
        assert raw(s.base, "GET", "/v1/models", headers={"Host": "127.0.0.1", "Origin": f"http://{EVIL}"})[0] == 403
    finally:
        assert s.stop() == 0, s.stderr()


DEEP = 100_000
BREAKERS = [
    (b'{"messages": [{"role": "user", "content": "hi"}], "seed": -1}', "seed", "out of range"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "seed": 18446744073709551616}', "seed", "out of range"),
    (b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages[0].content", "lone surrogate"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "stop": ["\\udfff"]}', "stop", "lone surrogate"),
    (b'{"messages": ' + b"[" * DEEP + b"]" * DEEP + b"}", None, "nested too deeply"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": ' + b"9" * 5000 + b"}", None, "out of range"),
]


@pytest.mark.parametrize(
    ("payload", "param", "words"), BREAKERS, ids=["seed-1", "seed2^64", "surrogate", "stop-surrogate", "deep", "digits"]
)
@pytest.mark.slow
def test_valid_json_that_broke_a_job_is_a_400_and_the_model_stays_loaded(
    server: Served, payload: bytes, param: str | None, words: str
) -> None:
    status, _, body = server.post(payload)
    assert status == 400, body
    assert_error(body)
    assert body["error"]["param"] == param and words in body["error"]["message"], body
    assert server.health()["model"] == DEMO
    still_answers(server)


@pytest.mark.slow
def test_a_message_flood_is_refused_and_abandoned_requests_leave_the_queue(server: Served) -> None:
    flood = {"messages": [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)}
    status, _, body = server.post(flood)
    assert status == 400 and f"at most {MAX_MESSAGES}" in body["error"]["message"]
    huge = {"messages": [{"role": "user", "content": "x " * (MAX_CONTENT_CHARS // 2 + 1)}]}
    status, _, body = server.post(huge)
    assert status == 400 and f"at most {MAX_CONTENT_CHARS}" in body["error"]["message"]

    # One long answer runs; two more wait (the queue holds 2); their clients go away.
    host, port = server.base.removeprefix("http://").split(":")
    long = json.dumps(greedy("Write a very long story about a dragon.", 2000, stream=True))
    running = http.client.HTTPConnection(host, int(port), timeout=60)
    running.request("POST", "/v1/chat/completions", long, {"Content-Type": "application/json"})
    response = running.getresponse()
    assert response.status == 200
    waiting = []
    for _ in range(2):
        c = socket.create_connection((host, int(port)))
        body = json.dumps(greedy("hi", 4)).encode()
        head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        c.sendall(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        waiting.append(c)
    deadline = time.monotonic() + 30
    while server.health()["waiting"] < 2:
        assert time.monotonic() < deadline, server.health()
        time.sleep(0.02)
    assert server.post(greedy("hi", 4))[0] == 429  # full
    for c in waiting:
        c.close()  # abandoned while waiting
    deadline = time.monotonic() + 60  # a guard against a hang
    while server.health()["waiting"]:  # they leave the queue at once, not when the long answer ends:
        assert time.monotonic() < deadline, server.health()
        time.sleep(0.02)
    assert server.health()["busy"]  # the long answer is still running
    running.sock.close()
    running.close()
    server.wait_idle(timeout=300)  # its client went away too (tests/test_server.py: it is cancelled)
    still_answers(server)


def test_the_log_shows_the_raw_path_so_no_line_can_be_forged(api_server: Served) -> None:
    status, _, _ = raw(api_server.base, "GET", "/v1/models%0AGET%20/forged%20200", headers={"Host": "127.0.0.1"})
    assert status == 404
    deadline = time.monotonic() + 60  # the server logs a request once its answer has gone (a hang guard)
    while "/v1/models%0AGET%20/forged%20200 404" not in (log := api_server.stderr()):
        assert time.monotonic() < deadline, log
        time.sleep(0.05)
    assert not any(line.startswith("GET /forged") for line in log.splitlines())


@pytest.mark.slow
def test_api_clients_are_not_told_how_much_of_another_chat_is_cached(server: Served) -> None:
    secret = [{"role": "user", "content": "My account number is 12345678. Remember it."}]
    server.post({"messages": secret, "temperature": 0, "max_tokens": 4})
    _, _, body = server.post({"messages": secret, "temperature": 0, "max_tokens": 4})
    assert "reused_tokens" not in body["specquant"]


def test_health_needs_the_key_beyond_loopback_and_a_stalled_body_gets_408(
    hostile_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Configured for a non-loopback bind (served here on 127.0.0.1): /health says nothing without the key.
    with in_process(hostile_cache, monkeypatch, host="192.0.2.1", api_key="sesame", body_deadline_s=1.0) as url:
        status, _, body = raw(url, "GET", "/health")
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        assert raw(url, "GET", "/health", headers={"Authorization": "Bearer sesame"})[0] == 200
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as c:  # the timeout: a hang guard
            c.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Authorization: Bearer sesame\r\nContent-Length: 100\r\n\r\n{"mess'
            )
            reply = b""
            while b"}}" not in reply:  # the whole error body (headers and body may come apart)
                piece = c.recv(65536)
                assert piece, reply
                reply += piece
            text = reply.decode()
            assert text.startswith("HTTP/1.1 408"), text
            assert "did not arrive within 1 s" in text  # the body deadline ended it, not a socket's timeout


@pytest.mark.slow
def test_a_reader_that_stops_reading_does_not_hold_the_engine(
    hostile_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended: list[Any] = []
    with in_process(hostile_cache, monkeypatch, sndbuf=4096, n_ctx=8192, ended=ended, stall_s=1.0) as url:
        host, port = url.removeprefix("http://").split(":")
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect((host, int(port)))
        body = json.dumps(greedy("Write a very long story about a dragon and a knight.", 8000, stream=True)).encode()
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        c.sendall(head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        try:
            # Never read: once the socket's small buffers and the transport's 64 KiB are full, the server's
            # send blocks, and after stall_s the answer is cancelled: it ends short of its 8000 tokens, while
            # the client is still connected (so it was the stalled reader, not a disconnect, that ended it).
            deadline = time.monotonic() + 300  # a guard against a hang, not a speed test
            while not ended:
                assert time.monotonic() < deadline, raw(url, "GET", "/health")
                time.sleep(0.2)
            assert was_cancelled(ended[0], 8000), ended[0]
        finally:
            c.close()
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.request("POST", "/v1/chat/completions", json.dumps(greedy("hi", 4)), {"Content-Type": "application/json"})
        assert conn.getresponse().status == 200
        conn.close()


# --- the other dialects (issue #54): Anthropic's /v1/messages and OpenAI's /v1/responses ------------------------
HI = [{"role": "user", "content": "hi"}]
HUGE = b'{"messages": [{"role": "user", "content": "' + b"x" * (3 << 19) + b'"}], "max_tokens": 4}'  # 1.5 MiB
MESSAGES_BREAKERS = [
    (b'{"messages": [', 400, "not valid JSON"),
    (b"[]", 400, "must be a JSON object"),
    (b'{"messages": "hi", "max_tokens": 4}', 400, "messages: must be a non-empty array"),
    (json.dumps({"messages": HI}).encode(), 400, "max_tokens: Field required"),
    (json.dumps({"messages": HI, "max_tokens": True}).encode(), 400, "max_tokens must be an integer"),
    (json.dumps({"messages": HI, "max_tokens": 0}).encode(), 400, "max_tokens: must be at least 1"),
    (json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}], "max_tokens": 4}).encode(),
     400, "messages.0.content.0.text: must be a string"),
    (b'{"messages": [{"role": "user", "content": "a\\ud800b"}], "max_tokens": 4}', 400, "lone surrogate"),
    (b'{"messages": ' + b"[" * DEEP + b"]" * DEEP + b"}", 400, "nested too deeply"),
    (json.dumps({"messages": HI * (MAX_MESSAGES + 1), "max_tokens": 4}).encode(), 400, f"at most {MAX_MESSAGES}"),
    (json.dumps({"messages": HI, "max_tokens": 4, "tools": [{"name": "f", "input_schema": {
        "type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(6000)}}}]}).encode(), 400,
     "tools.0.input_schema"),
    (HUGE, 413, "over 1024 KiB"),
]


def anthropic_error(body: Any, kind: str) -> str:
    """The message of an error in Anthropic's shape, after checking the shape."""
    assert isinstance(body, dict) and body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind and "Traceback" not in json.dumps(body), body
    return body["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_anthropic_endpoints_refuse_hostile_input_in_anthropic_shape(api_server: Served, path: str) -> None:
    json_post = {"Host": "127.0.0.1", "Content-Type": "application/json"}
    for payload, status, words in MESSAGES_BREAKERS:
        if path.endswith("count_tokens"):  # it has no max_tokens
            if "max_tokens" in words:
                continue
            payload = payload.replace(b', "max_tokens": 4', b"")
        got, _, body = raw(api_server.base, "POST", path, payload, json_post)
        kind = "request_too_large" if status == 413 else "invalid_request_error"
        assert got == status and words in anthropic_error(body, kind), (payload[:80], body)
    # The guard's refusals take the same shape.
    port = api_server.base.rsplit(":", 1)[1]
    hi = json.dumps({"messages": HI, "max_tokens": 4}).encode()
    got, _, body = raw(api_server.base, "POST", path, hi, json_post | {"Host": f"{EVIL}:{port}"})
    assert got == 421 and "loopback" in anthropic_error(body, "invalid_request_error")
    got, _, body = raw(api_server.base, "POST", path, hi, json_post | {"Origin": f"http://{EVIL}"})
    assert got == 403 and "--cors-origin" in anthropic_error(body, "permission_error")
    got, _, body = raw(api_server.base, "POST", path, hi, {"Host": "127.0.0.1", "Content-Type": "text/plain"})
    assert got == 415 and "application/json" in anthropic_error(body, "invalid_request_error")
    assert api_server.health()["model"] == DEMO
    still_answers(api_server)


def test_the_responses_endpoint_refuses_hostile_input_in_openai_shape(api_server: Served) -> None:
    json_post = {"Host": "127.0.0.1", "Content-Type": "application/json"}
    for payload, status, param, words in [
        (b'{"input": [', 400, None, "not valid JSON"),
        (b'{"input": 5}', 400, "input", "must be a string or a non-empty array"),
        (b'{"input": "hi", "max_output_tokens": "4"}', 400, "max_output_tokens", "must be an integer"),
        (b'{"input": "a\\ud800b"}', 400, "input", "lone surrogate"),
        (b'{"input": [{"type": "function_call_output", "output": "x"}]}', 400, "input[0].call_id", "must name"),
        (b'{"input": "hi", "previous_response_id": "resp_1"}', 400, "previous_response_id", "stores no responses"),
        (json.dumps({"input": HI * (MAX_MESSAGES + 1)}).encode(), 400, "input", f"at most {MAX_MESSAGES}"),
        (HUGE.replace(b'"messages"', b'"input"'), 413, None, "over 1024 KiB"),
    ]:
        got, _, body = raw(api_server.base, "POST", "/v1/responses", payload, json_post)
        assert got == status, (payload[:80], body)
        assert_error(body)
        assert body["error"]["param"] == param and words in body["error"]["message"], body
    still_answers(api_server)


def test_anthropic_clients_may_send_the_key_as_x_api_key(hostile_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with in_process(hostile_cache, monkeypatch, api_key="sesame") as url:
        empty = json.dumps({"messages": []}).encode()  # a 400 once the key is right: no answer is needed
        for headers, status in [({}, 401), ({"x-api-key": "wrong"}, 401), ({"x-api-key": "sesame"}, 400),
                                ({"Authorization": "Bearer sesame"}, 400)]:
            headers |= {"Host": "127.0.0.1", "Content-Type": "application/json"}
            got, _, body = raw(url, "POST", "/v1/messages", empty, headers)
            kind = "authentication_error" if status == 401 else "invalid_request_error"
            assert got == status and anthropic_error(body, kind), (headers, body)
        headers = {"Host": "127.0.0.1", "x-api-key": "sesame", "Content-Type": "application/json"}
        got, _, body = raw(url, "POST", "/v1/responses", json.dumps({"input": []}).encode(), headers)
        assert got == 400 and body["error"]["param"] == "input", body  # the key counts on every endpoint
