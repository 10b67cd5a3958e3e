"""Connections that send nothing, send a head a byte at a time, or stop reading cannot hold the server
(runtime/api/connections.py): first against uvicorn with the guarded protocol and a tiny ASGI app (the
mechanics, fast), then against the real app answering with the demo model (issue #40's two reports)."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from runtime.api.connections import protocol
from runtime.models.cache import ModelDir
from tests.conftest import copy_of_demo
from tests.test_server import greedy, in_process, was_cancelled

GUARD_S = 30.0  # a hang guard for every wait below, never a speed test
HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


class App:
    """A tiny ASGI app: "/" answers "ok"; "/hold" answers once `release` is set; "/stream" sends 16 KiB
    pieces until the client goes (or `total` bytes); each request's path is noted in `started`."""

    def __init__(self, total: int = 1 << 40) -> None:
        self.release = threading.Event()
        self.started: list[str] = []
        self.total = total
        self.streams_ended = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.started.append(scope["path"])
        if scope["path"] == "/hold":
            while not self.release.is_set():
                await asyncio.sleep(0.02)
        if scope["path"] != "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        sent, piece = 0, b"x" * 16384
        while not gone.is_set() and sent < self.total:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            sent += len(piece)
            await asyncio.sleep(0)  # uvicorn's send to a lost client returns at once: let `watch` see it
        await send({"type": "http.response.body", "body": b""})
        watcher.cancel()
        self.streams_ended += 1


@contextlib.contextmanager
def serving(app: App, limit: int | None = None, header_timeout_s: float = 1.0, stall_s: float = 1.0):
    """uvicorn with the guarded protocol on 127.0.0.1 in a thread: (port, the uvicorn Server)."""
    config = uvicorn.Config(
        app, http=protocol(header_timeout_s, stall_s), limit_concurrency=limit, lifespan="off", log_config=None,
        access_log=False, timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started)
        yield sock.getsockname()[1], server
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def wait_for(condition: Any, timeout: float = GUARD_S) -> float:
    """Seconds until `condition()` holds (`timeout`: a hang guard)."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, "condition never held"
        time.sleep(0.02)
    return time.monotonic() - start


def connections(server: uvicorn.Server) -> int:
    return len(server.server_state.connections)


def closed_by_server(c: socket.socket, within: float) -> bool:
    """Whether the server has closed `c` (end of stream or a reset) within `within` seconds; reads and drops
    what the server sent before."""
    return bytes_until_closed(c, within) is not None


def bytes_until_closed(c: socket.socket, within: float) -> int | None:
    """How many bytes `c` received before the server closed it, or None if it is still open after `within`
    seconds without data."""
    c.settimeout(within)
    received = 0
    try:
        while piece := c.recv(65536):
            received += len(piece)
        return received
    except (ConnectionResetError, BrokenPipeError):
        return received
    except TimeoutError:
        return None


def get(port: int, path: str = "/") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD_S)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


# --- the mechanics, with a tiny app ------------------------------------------------------------------
def test_a_socket_that_sends_nothing_is_closed_after_the_header_timeout_but_a_request_in_flight_is_not() -> None:
    app = App()
    with serving(app, header_timeout_s=1.0) as (port, server):
        with socket.create_connection(("127.0.0.1", port)) as held:
            held.sendall(HEAD.replace(b"GET /", b"GET /hold"))
            wait_for(lambda: app.started == ["/hold"])
            start = time.monotonic()
            with socket.create_connection(("127.0.0.1", port)) as c:
                assert closed_by_server(c, GUARD_S)
                assert time.monotonic() - start >= 0.9  # the time-out ended it, not something at once
            time.sleep(0.2)  # the held request is now older than the time-out, and still answered
            app.release.set()
            held.settimeout(GUARD_S)
            reply = b""
            while not reply.endswith(b"ok"):
                piece = held.recv(4096)
                assert piece, reply
                reply += piece
            assert reply.startswith(b"HTTP/1.1 200")
        wait_for(lambda: connections(server) == 0)


def test_a_head_sent_a_byte_at_a_time_or_after_a_kept_alive_answer_is_closed_too() -> None:
    with serving(App(), header_timeout_s=1.0) as (port, server):
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.sendall(b"GET / HTTP/1.1\r\n")
            start = time.monotonic()
            while not closed_by_server(slow, 0.2):  # each new byte would restart a per-read time-out
                assert time.monotonic() - start < GUARD_S, "a trickled head kept its connection open"
                with contextlib.suppress(OSError):
                    slow.sendall(b"X")
        with socket.create_connection(("127.0.0.1", port)) as kept:
            kept.sendall(HEAD)
            reply = b""
            while not reply.endswith(b"ok"):
                reply += kept.recv(4096)
            assert reply.startswith(b"HTTP/1.1 200")
            kept.sendall(b"GET / HT")  # the next head starts, and never ends
            assert closed_by_server(kept, GUARD_S)
        wait_for(lambda: connections(server) == 0)


def test_the_oldest_idle_connection_makes_room_but_one_in_flight_is_never_dropped() -> None:
    app = App()
    with serving(app, limit=4, header_timeout_s=GUARD_S) as (port, server):  # the limit alone makes room
        held = socket.create_connection(("127.0.0.1", port))
        held.sendall(HEAD.replace(b"GET /", b"GET /hold"))
        wait_for(lambda: app.started == ["/hold"])
        idle = []
        for n in range(2, 4):  # with the held one: 3 connections, below the limit of 4
            idle.append(socket.create_connection(("127.0.0.1", port)))
            wait_for(lambda n=n: connections(server) == n)
        try:
            # A 4th would reach the limit (uvicorn answers 503 there): the oldest idle one goes instead.
            assert get(port) == (200, b"ok")
            assert closed_by_server(idle[0], GUARD_S)
            # A flood: each new idle one drops the oldest; the request in flight stays.
            flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
            assert connections(server) <= 4
            assert closed_by_server(flood[0], GUARD_S)
            app.release.set()
            reply = b""
            held.settimeout(GUARD_S)
            while not reply.endswith(b"ok"):
                piece = held.recv(4096)
                assert piece, reply
                reply += piece
            assert reply.startswith(b"HTTP/1.1 200")
            for c in flood:
                c.close()
        finally:
            held.close()
            for c in idle:
                c.close()


def test_a_client_that_stops_reading_is_aborted_after_stall_s_and_one_that_reads_slowly_is_not() -> None:
    app = App()
    with serving(app, stall_s=1.0, header_timeout_s=GUARD_S) as (port, server):
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(("127.0.0.1", port))
        try:
            c.sendall(HEAD.replace(b"GET /", b"GET /stream"))
            # Never read: the server's small buffers fill, its sends block, and after stall_s it aborts.
            wait_for(lambda: app.streams_ended == 1 and connections(server) == 0)
        finally:
            c.close()

    app = App(total=512 * 1024)
    with serving(app, stall_s=1.0, header_timeout_s=GUARD_S) as (port, server):
        c = socket.create_connection(("127.0.0.1", port))
        try:
            c.sendall(HEAD.replace(b"GET /", b"GET /stream"))
            got, start = b"", time.monotonic()
            c.settimeout(GUARD_S)
            while not got.endswith(b"0\r\n\r\n"):  # the chunked body's end
                piece = c.recv(65536)
                assert piece, len(got)
                got += piece
                time.sleep(0.05)  # slow, but reading: never blocked for stall_s
                assert time.monotonic() - start < GUARD_S
            assert len(got) > 512 * 1024
        finally:
            c.close()


# --- the real app, with the demo model ------------------------------------------------------------------
@pytest.fixture(scope="module")
def conn_cache(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_of_demo(demo_model, tmp_path_factory.mktemp("connections") / "cache")


def post(url: str, payload: dict[str, Any]) -> tuple[int, Any]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(payload), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_seventy_idle_sockets_do_not_keep_real_clients_out(conn_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A long header time-out: the idle limit alone must make room (the sockets stay open on their side).
    with in_process(conn_cache, monkeypatch, header_timeout_s=120.0) as url:
        host, port = url.removeprefix("http://").split(":")
        idle = [socket.create_connection((host, int(port)), timeout=GUARD_S) for _ in range(70)]
        try:
            health = http.client.HTTPConnection(host, int(port), timeout=GUARD_S)
            health.request("GET", "/health")
            r = health.getresponse()
            assert r.status == 200, r.read()
            health.close()
            status, body = post(url, greedy("Say hello.", 4))
            assert status == 200, body
            assert closed_by_server(idle[0], GUARD_S)  # the oldest made room
        finally:
            for c in idle:
                c.close()


def test_a_stalled_stream_with_logprobs_frees_the_engine_after_stall_s(
    conn_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended: list[Any] = []
    # The listening socket keeps the kernel's own send buffer (no `sndbuf`): the server must bound it.
    with in_process(conn_cache, monkeypatch, n_ctx=8192, ended=ended, stall_s=1.0) as url:
        host, port = url.removeprefix("http://").split(":")
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect((host, int(port)))
        ask = greedy("Write a very long story about a dragon and a knight.", 4000, stream=True)
        body = json.dumps(ask | {"logprobs": True, "top_logprobs": 20}).encode()
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        try:
            c.sendall(head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            # Never read. Before, the kernel's send buffer grew to megabytes and took the answer for minutes.
            wait_for(lambda: bool(ended), timeout=60)
            assert was_cancelled(ended[0], 4000), ended[0]
            # What was sent before the stall was noticed: the server's small buffers and the client's 4 KiB,
            # whatever the CPU's speed (the kernel's own sizing let megabytes through).
            sent = bytes_until_closed(c, GUARD_S)
            assert sent is not None and sent < 512 * 1024, (sent, ended[0].stats.tokens)
        finally:
            c.close()
        status, answer = post(url, greedy("hi", 4))
        assert status == 200, answer
