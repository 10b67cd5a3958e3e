"""`specquant serve` under a mixed hostile load: idle sockets that send nothing, streaming clients, and
hostile schemas, together, for a while (SPECQUANT_LOAD_S, default 45 s; 600 for a soak run). `/health` keeps
answering quickly, nothing is a 5xx, the server's memory stays flat, and every well-formed request is
answered. The figures of a run are printed (docs/api.md, "Under load", quotes one)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from runtime.models.cache import ModelDir
from tests.conftest import copy_of_demo
from tests.test_api_overload import properties, with_schema, with_tool
from tests.test_server import Served

pytestmark = pytest.mark.slow
SECONDS = float(os.environ.get("SPECQUANT_LOAD_S", "45"))
IDLE, STREAMS = 64, 8
HOSTILE = [
    json.dumps(with_schema(properties(30_000))).encode(),
    json.dumps(with_tool(properties(8_000))).encode(),
    json.dumps(with_schema({"anyOf": [properties(1, f"b{i}_") for i in range(3_000)]})).encode(),
    json.dumps(with_schema({"anyOf": [properties(400, "k"), properties(400, "j")]})).encode(),  # fails mid-answer
]


@pytest.fixture(scope="module")
def server(demo_model: ModelDir, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(copy_of_demo(demo_model, tmp_path_factory.mktemp("load") / "cache"), "--max-queue", "32")
    yield s
    assert s.stop() == 0, s.stderr()


class Load:
    """What the load's threads saw."""

    def __init__(self, base: str) -> None:
        self.host, port = base.removeprefix("http://").split(":")
        self.port = int(port)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.statuses: dict[str, list[int]] = {"stream": [], "hostile": [], "health": []}
        self.health_s: list[float] = []
        self.errors: list[str] = []
        self.idle_reopened = 0
        self.resets = {"stream": 0, "hostile": 0, "health": 0}

    def record(self, kind: str, status: int) -> None:
        with self.lock:
            self.statuses[kind].append(status)

    def request(self, kind: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes] | None:
        """(status, body); None for a new connection reset before its first byte, counted per kind: a
        connection whose head has not arrived yet is idle to the server, and the oldest idle one makes room at
        the connection limit, so under this flood a fresh client's connection now and then goes (clients
        retry a reset of a new connection; so do this test's, of every kind)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            conn.request(method, path, body, {"Content-Type": "application/json"} if body else {})
            r = conn.getresponse()
            return r.status, r.read()
        except ConnectionResetError:
            with self.lock:
                self.resets[kind] += 1
            return None
        finally:
            conn.close()

    def idle(self) -> None:
        """IDLE connections that never send a byte, opened again whenever the server closes one."""
        sockets: list[socket.socket] = []
        while not self.stop.is_set():
            alive = []
            for s in sockets:
                try:
                    closed = s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    s.close()
                else:
                    alive.append(s)
            self.idle_reopened += len(sockets) - len(alive) if sockets else 0
            while len(alive) < IDLE:
                alive.append(socket.create_connection((self.host, self.port)))
            sockets = alive
            self.stop.wait(0.5)
        for s in sockets:
            s.close()

    def stream(self, i: int) -> None:
        body = {"messages": [{"role": "user", "content": f"Count from {i} to {i + 20}."}], "temperature": 0,
                "max_tokens": 24, "stream": True}
        while not self.stop.is_set():
            try:
                answer = self.request("stream", "POST", "/v1/chat/completions", json.dumps(body).encode())
            except OSError as e:
                self.errors.append(f"stream: {e}")
                continue
            if answer is None:
                continue
            status, data = answer
            self.record("stream", status)
            if status != 200 or not data.rstrip().endswith(b"data: [DONE]"):
                self.errors.append(f"stream {status}: {data[-200:]!r}")

    def hostile(self) -> None:
        n = 0
        while not self.stop.is_set():
            answer = self.request("hostile", "POST", "/v1/chat/completions", HOSTILE[n % len(HOSTILE)])
            if answer is not None:
                self.record("hostile", answer[0])
                n += 1
            self.stop.wait(0.5)

    def health(self) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            answer = self.request("health", "GET", "/health")
            if answer is not None:
                with self.lock:
                    self.health_s.append(time.perf_counter() - started)
                self.record("health", answer[0])
            self.stop.wait(0.2)


def test_idle_sockets_streams_and_hostile_schemas_together(server: Served) -> None:
    load = Load(server.base)
    proc = psutil.Process(server.proc.pid)
    assert server.post({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})[0] == 200  # loaded
    threads = [threading.Thread(target=load.idle), threading.Thread(target=load.hostile),
               threading.Thread(target=load.health)]
    threads += [threading.Thread(target=load.stream, args=(i,)) for i in range(STREAMS)]
    for t in threads:
        t.start()
    try:
        load.stop.wait(SECONDS / 4)  # warmed up: every kind of request has run
        rss_start = proc.memory_info().rss
        load.stop.wait(SECONDS * 3 / 4)
        rss_end = proc.memory_info().rss
    finally:
        load.stop.set()
        for t in threads:
            t.join(180)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert server.proc.poll() is None, server.stderr()
    figures = {
        "seconds": SECONDS,
        "answered": len(load.statuses["stream"]),
        "hostile": len(load.statuses["hostile"]),
        "health": len(load.health_s),
        "health_median_ms": round(1000 * statistics.median(load.health_s), 1),
        "health_p99_ms": round(1000 * sorted(load.health_s)[int(0.99 * (len(load.health_s) - 1))], 1),
        "health_max_ms": round(1000 * max(load.health_s), 1),
        "idle_closed_by_server": load.idle_reopened,
        "resets": load.resets,
        "rss_mb": [round(rss_start / 2**20), round(rss_end / 2**20)],
    }
    print("load figures:", json.dumps(figures))
    assert not load.errors, load.errors[:5]
    assert set(load.statuses["stream"]) == {200} and set(load.statuses["health"]) == {200}
    assert set(load.statuses["hostile"]) == {400}, load.statuses["hostile"]
    assert len(load.statuses["stream"]) >= STREAMS and len(load.statuses["hostile"]) >= len(HOSTILE)
    for kind, resets in load.resets.items():  # rare, and retried: the streams' rule, for every kind of client
        assert resets <= max(2, len(load.statuses[kind]) // 100), figures
    # /health within 100 ms: 99 of 100 probes, and every one within a second (a 2-core machine running the
    # engine and this test's clients saw one probe of 590 at 152 ms).
    assert figures["health_p99_ms"] < 100 and figures["health_max_ms"] < 1000, figures
    assert rss_end <= rss_start * 1.1, figures
