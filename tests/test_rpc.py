"""The parent on another computer through llama.cpp's RPC backend: a real `specquant worker` on 127.0.0.1.

No other address is ever used: the worker binds to loopback, and the one test of `--host 0.0.0.0` checks
that it is refused before anything binds.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from runtime.errors import UserError
from runtime.machine import rpc
from runtime.machine.hardware import Gpu, Inventory
from runtime.plan.placement import PlacementSettings, plan, tier_size
from tests.conftest import REPO, run_cli
from tests.test_cli_runtime import assert_one_line_error

GB = 10**9
QWEN = {"n_layer": 28, "n_embd": 1536, "n_head": 12, "n_head_kv": 2, "head_dim": 128, "n_vocab": 151936}
F16 = tier_size("f16", int(3.56 * GB), QWEN, n_ctx=4096)
Q4 = tier_size("q4_k_m", int(1.12 * GB), QWEN, n_ctx=4096)
PROMPT = "Name three primary colors."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """`specquant worker` in its own process, with its own tensor cache."""

    def __init__(self, cache: Path) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.cache = cache
        env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "commands", "worker", "--port", str(self.port), "--threads", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=REPO,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                rpc.probe_endpoint(self.endpoint, timeout=2, pings=1)
                return
            except rpc.WorkerError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the worker did not start: {self.proc.stdout.read()}") from None
                time.sleep(0.2)

    def cpu_s(self) -> float:
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    w = Worker(tmp_path / "worker-cache")
    yield w
    w.stop()


def chat_json(*args: str) -> dict:
    proc = run_cli("chat", "--prompt", PROMPT, "--temp", "0", "--max-tokens", "24", "--json", *args, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_parent_on_the_worker_answers_as_here_and_the_worker_computes(demo_cache: Path, worker: Worker) -> None:
    local = chat_json("--placement", "cpu")
    before = worker.cpu_s()
    remote = chat_json("--rpc", worker.endpoint, "--placement", "remote")
    assert remote["placement"]["mode"] == "remote" and remote["placement"]["candidate"] == "parent-remote"
    assert remote["placement"]["parent"]["n_gpu_layers"] > 0
    assert remote["text"] == local["text"]  # greedy and exact: the parent's own answer, wherever it runs
    # The worker really computed: its processor time grew by more than the weights' upload costs alone, and
    # it kept the big tensors it received in its cache (by hash) for the next connection.
    assert worker.cpu_s() - before > 0.2
    cached = list((worker.cache / "specquant" / "rpc").rglob("*"))
    assert sum(f.stat().st_size for f in cached if f.is_file()) > 10 * 1024 * 1024


def _read_answer_start(proc: subprocess.Popen, chars: int, timeout: float) -> str:
    """stdout of a running chat until `chars` characters of its answer follow the "> " prompt."""
    seen, deadline = "", time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while "> " not in seen or len(seen.split("> ", 1)[1].strip()) < chars:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise AssertionError(f"no answer in {seen!r}")
        if select.select([fd], [], [], 0.1)[0]:
            seen += os.read(fd, 4096).decode(errors="replace")
    return seen


@pytest.mark.slow
def test_a_worker_killed_mid_answer_is_one_line_and_the_chat_goes_on(demo_cache: Path, worker: Worker) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "commands", "chat", "--rpc", worker.endpoint, "--placement", "remote",
         "--temp", "0", "--max-tokens", "400"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    try:
        proc.stdin.write(b"Write a long story about a dragon who learns to bake bread.\n")
        proc.stdin.flush()
        _read_answer_start(proc, 20, 120)
        worker.stop()  # mid-answer: 400 tokens take several seconds, the first words are out
        proc.stdin.write(f"{PROMPT}\n/quit\n".encode())
        proc.stdin.flush()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    err_lines = err.decode().splitlines()
    assert proc.returncode == 0, err_lines
    errors = [line for line in err_lines if "error" in line]
    assert len(errors) == 1 and worker.endpoint in errors[0], err_lines
    assert "Traceback" not in err.decode()
    # The next turn is answered on this computer, said once, with its stats line.
    assert any("answering on this computer" in line for line in err_lines), err_lines
    assert sum("tok/s" in line for line in err_lines) == 1, err_lines
    assert "red" in out.decode().lower()
    # And a new chat pinned to this computer answers too.
    assert chat_json("--placement", "cpu")["text"]


def test_no_worker_listening_fails_in_one_line(demo_cache: Path) -> None:
    port = free_port()
    # Refused at once by the kernel, and said so: not a wait for a timeout (that message would differ).
    proc = run_cli("chat", "--rpc", f"127.0.0.1:{port}", "--prompt", PROMPT, timeout=60)  # a hang guard
    assert_one_line_error(proc, f"no worker is listening at 127.0.0.1:{port}")


def test_worker_on_a_network_address_needs_allow_network() -> None:
    proc = run_cli("worker", "--host", "0.0.0.0", "--port", str(free_port()), timeout=60)
    assert proc.returncode == 2
    assert_one_line_error(proc, "--allow-network")


def test_a_taken_port_is_one_line(worker: Worker) -> None:
    proc = run_cli("worker", "--port", str(worker.port), timeout=60)
    assert_one_line_error(proc, str(worker.port))


@pytest.mark.parametrize(
    ("text", "needle"),
    [("localhost", "expected HOST:PORT"), ("127.0.0.1:0", "expected HOST:PORT"), ("a:1,a:1", "listed twice")],
)
def test_bad_endpoints_are_one_line(text: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        rpc.parse_endpoints(text)


def _serve_once(reply: bytes) -> tuple[str, threading.Thread]:
    """A listener on 127.0.0.1 that is not a SpecQuant worker: it sends `reply` to the first request."""
    srv = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = srv.accept()
        with conn, srv:
            conn.recv(64)
            conn.sendall(reply)

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    return f"127.0.0.1:{srv.getsockname()[1]}", t


def test_a_listener_that_is_not_a_worker_is_named() -> None:
    ep, t = _serve_once(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with pytest.raises(rpc.WorkerError, match=f"{ep} closed the connection during the RPC handshake"):
        rpc.probe_endpoint(ep, timeout=5)
    t.join(5)


def test_a_worker_of_another_protocol_version_is_named() -> None:
    # HELLO's reply: size, then major.minor.patch and the connection capabilities (ggml-rpc.cpp).
    ep, t = _serve_once((4 + 24).to_bytes(8, "little") + bytes([6, 1, 0, 0]) + bytes(24))
    with pytest.raises(rpc.WorkerError, match=f"the worker at {ep} speaks RPC protocol 6.1.0"):
        rpc.probe_endpoint(ep, timeout=5)
    t.join(5)


def test_the_probe_measures_round_trip_and_speed(worker: Worker) -> None:
    started = time.perf_counter()
    facts = rpc.probe_endpoint(worker.endpoint, speed=True)
    took = time.perf_counter() - started
    assert facts.version.startswith("7.") and facts.devices and facts.devices[0][1] > 0
    # What holds on any machine, however fast or busy: the figures are in seconds and bytes per second, and
    # they fit in the time the probe itself took (8 round trips, then clears of a buffer of at least 16 MiB).
    assert 0 < facts.rtt_s < took
    size = min(rpc.SPEED_PROBE_BYTES, facts.devices[0][0] // 4)
    assert size >= 16 * 1024 * 1024, facts.devices  # a worker on this computer has room for the speed probe
    assert facts.clear_bps > 0 and facts.clear_bps * took >= size


# --- placement with a worker: pure functions of fake inventories ------------------------------------------
def machine(ram_gb: float, worker_gb: float) -> Inventory:
    w = Gpu("worker 127.0.0.1:50052", "rpc", int(worker_gb * GB), int(worker_gb * GB))
    return Inventory("test cpu", 4, int(ram_gb * GB), int(ram_gb * GB), (w,))


def test_a_worker_as_fast_as_here_is_not_used() -> None:
    p = plan(machine(16, 64), F16, Q4, PlacementSettings(rpc_rtt_s=0.0005))
    assert p.candidate == "cpu-only" and "not predicted" in p.reason


def test_a_faster_worker_runs_the_parent_and_over_a_slow_network_the_draft_stays_here() -> None:
    """Each draft step on a worker pays a round trip: near, it drafts there too; far, the draft stays here."""
    near = plan(machine(16, 64), F16, Q4, PlacementSettings(rpc_rtt_s=0.0005, rpc_bandwidth=100 * GB))
    assert near.mode == "remote" and near.candidate == "all-remote"
    far = plan(machine(16, 64), F16, Q4, PlacementSettings(rpc_rtt_s=0.030, rpc_bandwidth=100 * GB))
    assert far.mode == "remote" and far.candidate == "parent-remote" and far.draft is not None
    assert far.parent.n_gpu_layers == F16.n_layer + 1 and far.draft.n_gpu_layers == 0
    assert "30.00 ms round trip" in far.reason


def test_a_model_too_big_for_here_runs_on_a_worker_with_the_memory() -> None:
    with pytest.raises(UserError, match="not enough memory"):
        plan(Inventory("test cpu", 4, 3 * GB, 3 * GB), F16, Q4)
    p = plan(machine(3, 64), F16, Q4, PlacementSettings(rpc_rtt_s=0.001))
    assert p.mode == "remote" and p.parent.n_gpu_layers == F16.n_layer + 1


def test_remote_pin_without_a_worker_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="no worker is connected"):
        plan(Inventory("test cpu", 4, 16 * GB, 16 * GB), F16, Q4, PlacementSettings(mode="remote"))


def test_speculation_pays_more_as_the_round_trip_grows() -> None:
    """One verify of k+1 tokens pays one round trip; plain decoding pays one per token."""

    def gain(rtt: float) -> float:
        s = PlacementSettings(mode="remote", rpc_rtt_s=rtt, rpc_bandwidth=200 * GB)
        plain, spec = plan(machine(16, 64), F16, None, s), plan(machine(16, 64), F16, Q4, s)
        return plain.predicted_token_s / spec.predicted_token_s

    gains = [gain(rtt) for rtt in (0.0001, 0.001, 0.005)]
    assert gains[0] < gains[1] < gains[2], gains


# --- the window -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_window_answers_on_a_worker_survives_losing_it_and_answers_here(
    qtbot, demo_cache: Path, tmp_path: Path, worker: Worker
) -> None:
    from tests.test_app import ask, open_window

    w = open_window(tmp_path, max_tokens=24, workers=worker.endpoint, placement="remote")
    qtbot.addWidget(w)
    try:
        assert ask(qtbot, w, PROMPT, timeout=120_000)
        assert w.placement.text().startswith("REMOTE")
        worker.stop()
        assert ask(qtbot, w, PROMPT, timeout=120_000) == ""  # the answer failed, the window did not
        assert worker.endpoint in w.banner.message and w.isVisible()
        assert ask(qtbot, w, PROMPT, timeout=120_000)  # answered on this computer
        assert w.placement.text().startswith("CPU")
    finally:
        w.close()


def test_bad_workers_in_the_settings_are_named() -> None:
    from app.settings import AppSettings

    with pytest.raises(UserError, match="'nope'"):
        AppSettings(workers="nope").check()


# --- the API server ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_api_server_answers_on_a_worker_and_says_503_when_it_is_lost(demo_cache: Path, worker: Worker) -> None:
    import openai

    from tests.test_server import Served

    s = Served(demo_cache, "--rpc", worker.endpoint, "--placement", "remote")
    try:
        client = s.client()
        ask = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16}
        first = client.chat.completions.create(temperature=0, **ask)
        assert first.choices[0].message.content
        worker.stop()
        with pytest.raises(openai.InternalServerError) as lost:  # 503: the worker went away
            client.chat.completions.create(temperature=0, **ask)
        assert lost.value.status_code == 503 and worker.endpoint in str(lost.value)
        again = client.chat.completions.create(temperature=0, **ask)  # answered on this computer
        assert again.choices[0].message.content == first.choices[0].message.content
    finally:
        assert s.stop() == 0, s.stderr()
