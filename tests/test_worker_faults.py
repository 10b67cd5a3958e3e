"""Faults around a worker and the answering child, done for real on 127.0.0.1 (issue #30).

An error inside the child, a Stop during a busy stream, a listener that accepts and never answers, one that
trickles, and a tensor cache with truncated and foreign files: each as a user would meet it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.decode.sampling import SamplingParams
from runtime.engine.engine import EngineSettings
from runtime.engine.options import ChatOptions
from runtime.engine.process import EngineProcess
from runtime.errors import UserError
from runtime.machine import rpc, rpc_cache
from runtime.models.cache import DEMO_NAME
from tests.conftest import assert_one_line_error, run_cli
from tests.test_rpc import PROMPT, Worker, chat_json

GREEDY = ChatOptions(max_tokens=400, sampling=SamplingParams(), level="high")


@pytest.fixture
def child(demo_cache: Path) -> Iterator[EngineProcess]:
    """The answering child as `--rpc` runs it (runtime.engine.process), here without a worker: the faults
    below are the child's own, and a worker's upload would only add time."""
    engine = EngineProcess(DEMO_NAME, EngineSettings(n_ctx=512, n_threads=2))
    yield engine
    engine.close()


@pytest.mark.slow
def test_an_error_in_the_child_arrives_at_once_as_its_own_line(child: EngineProcess) -> None:
    pid = child._proc.pid
    long = " ".join(["The quick brown fox jumps over the lazy dog."] * 200)  # far beyond 512 tokens
    # The child's own error, as its own message (not timed: were it lost, the parent would wait for the child
    # to fall silent, kill it and raise a WorkerError, "sent nothing for ... s", and another child would follow).
    with pytest.raises(UserError, match=r"the prompt is \d+ tokens; the context holds 512") as e:
        child.chat([{"role": "user", "content": long}], GREEDY)
    assert "\n" not in str(e.value)
    # The child was not killed for it: the same one answers the next request.
    answer = child.chat([{"role": "user", "content": PROMPT}], ChatOptions(max_tokens=8, sampling=SamplingParams()))
    assert answer.text and child._proc.pid == pid


@pytest.mark.slow
def test_a_stop_during_a_busy_stream_reaches_the_child_within_a_cycle(child: EngineProcess) -> None:
    """Chunks arrive back to back, so the pipe is never silent: Stop must still reach the child."""
    cancel = threading.Event()
    at_cancel, last = None, None
    story = [{"role": "user", "content": "Write a very long story about a dragon who learns to bake bread."}]
    for chunk in child.stream_chat(story, GREEDY, cancel):
        last = chunk
        if at_cancel is None and chunk.stats.tokens >= 8:
            at_cancel = chunk.stats.tokens
            cancel.set()
    assert at_cancel is not None and last is not None
    # Stop reached the child mid-answer: it ended cancelled, short of the 400 tokens asked for. How many tokens
    # came after the 8th depends on how soon this process read that chunk (the child streams on meanwhile, and
    # another program on the cores delays the reader, not the child), so no tighter count holds on every machine.
    assert last.stats.stop_reason == "cancelled", last.stats
    assert at_cancel <= last.stats.tokens < GREEDY.max_tokens, (at_cancel, last.stats)
    # And the child is ready for the next request at once.
    assert child.chat(story, ChatOptions(max_tokens=4, sampling=SamplingParams())).text


def _silent_listener(trickle_s: float | None = None) -> tuple[str, socket.socket]:
    """A real listener on 127.0.0.1 that accepts every connection and never answers (with `trickle_s`: one
    byte every so often, never a whole reply)."""
    srv = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def run() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            held.append(conn)
            if trickle_s is not None:
                threading.Thread(target=_trickle, args=(conn, trickle_s), daemon=True).start()

    threading.Thread(target=run, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}", srv


def _trickle(conn: socket.socket, every: float) -> None:
    try:
        while True:
            time.sleep(every)
            conn.sendall(b"\x00")
    except OSError:
        pass


@pytest.mark.slow
def test_a_listener_that_never_answers_is_one_line_after_the_probes_deadline(demo_cache: Path) -> None:
    ep, srv = _silent_listener()
    with srv:
        proc = run_cli("chat", "--rpc", ep, "--prompt", PROMPT, timeout=60)  # a hang guard
    assert_one_line_error(proc, ep, "did not answer within 5 s")  # the probe's own deadline ended it


@pytest.mark.slow
def test_a_listener_that_trickles_bytes_cannot_stretch_the_probe() -> None:
    """A byte every 0.5 s would restart a per-recv timeout for ever; the probe's deadline is for all of it."""
    ep, srv = _silent_listener(trickle_s=0.5)
    raised: list[BaseException] = []

    def probe() -> None:
        try:
            rpc.probe_endpoint(ep, timeout=2)
        except BaseException as e:
            raised.append(e)

    with srv:
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        prober.join(60)  # with a per-recv timeout the trickle would keep it waiting for ever: a hang guard
        assert not prober.is_alive(), "the probe is still waiting on a listener that trickles bytes"
    assert len(raised) == 1 and isinstance(raised[0], rpc.WorkerError), raised
    assert f"the worker at {ep} accepted the connection but did not answer within 2 s" in str(raised[0])


# --- the worker's tensor cache ----------------------------------------------------------------------------
def _fnv_reference(data: bytes) -> int:
    """ggml-rpc.cpp's fnv_hash, byte by byte."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_the_cache_hash_is_ggml_rpcs_fnv1a(tmp_path: Path) -> None:
    for n in (1, 2, 255, 10_007, (1 << 22) + 3):  # the last crosses the hasher's chunk boundary
        data = os.urandom(n)
        (tmp_path / "f").write_bytes(data)
        assert rpc_cache.fnv1a64(tmp_path / "f") == _fnv_reference(data), n


def _wait_verified(cache: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while any((cache / rpc_cache.PENDING).iterdir()):
        assert time.monotonic() < deadline, list((cache / rpc_cache.PENDING).iterdir())
        time.sleep(0.1)


@pytest.mark.slow
def test_a_truncated_or_foreign_cache_file_is_never_served(demo_cache: Path, tmp_path: Path) -> None:
    """ggml writes the tensors it receives under their hash and would load a truncated one as is. A real
    worker fills its cache; then a write cut short (a worker killed mid-write), a file whose bytes do not
    match its name and a temporary file are found at the next start: all are deleted before ggml could load
    them, and the answer through the worker is still the parent's own."""
    worker = Worker(tmp_path / "worker-cache")
    cache = worker.cache / "specquant" / "rpc"
    try:
        assert chat_json("--rpc", worker.endpoint, "--placement", "remote")["text"]
    finally:
        worker.stop()
    entries = sorted((p for p in cache.iterdir() if rpc_cache._is_entry(p.name)), key=lambda p: p.stat().st_size)
    assert entries, list(cache.iterdir())
    big = entries[-1]
    size = big.stat().st_size
    # ggml names an entry by the FNV-1a of its bytes: what the verification recomputes.
    assert rpc_cache.fnv1a64(big) == int(big.name, 16)

    foreign = cache / "0123456789abcdef"
    foreign.write_bytes(big.read_bytes()[: size // 2])
    (cache / f"{big.name}.tmp").write_bytes(b"partial")
    with big.open("r+b") as f:  # the real entry cut short in place, as a worker killed mid-write leaves it
        f.truncate(size // 3)
    worker = Worker(tmp_path / "worker-cache")  # its start sweeps the cache before ggml's server listens
    try:
        _wait_verified(cache)
        assert not big.exists() and not foreign.exists() and not (cache / f"{big.name}.tmp").exists()
        # ggml loads an entry by its name alone: with the name gone it asks the client for the whole tensor.
        assert rpc.probe_endpoint(worker.endpoint, pings=1).devices
    finally:
        worker.stop()


def test_the_cache_keeps_to_its_quota_oldest_first(tmp_path: Path) -> None:
    cache = tmp_path / "rpc"
    cache.mkdir()
    names = []
    for i in range(4):
        data = os.urandom(1000)
        name = f"{_fnv_reference(data):016x}"
        (cache / name).write_bytes(data)
        os.utime(cache / name, ns=(i * 10**9, (i + 1) * 10**9))  # the first is the oldest
        names.append(name)
    sweep = rpc_cache.prepare_cache(cache, quota=2500)
    assert sorted(sweep.removed) == sorted(names[:2])
    assert sorted(sweep.pending) == sorted(names[2:])  # not verified here before: set aside until hashed
    assert not any(rpc_cache._is_entry(p.name) for p in cache.iterdir())
    assert rpc_cache.verify_pending(cache) == (sorted(names[2:]), [])
    assert sorted(p.name for p in cache.iterdir() if rpc_cache._is_entry(p.name)) == sorted(names[2:])
    # Verified once: the next start trusts them without hashing again.
    assert rpc_cache.prepare_cache(cache, quota=2500).pending == []


def test_the_tensor_cache_is_off_by_default_on_a_network_address() -> None:
    assert rpc.worker_cache(rpc.Endpoint("0.0.0.0", rpc.DEFAULT_PORT)) is None
    assert rpc.worker_cache(rpc.Endpoint("192.168.1.20", rpc.DEFAULT_PORT)) is None
    assert rpc.worker_cache(rpc.Endpoint("127.0.0.1", rpc.DEFAULT_PORT)) == rpc.tensor_cache_dir()
    assert rpc.worker_cache(rpc.Endpoint("0.0.0.0", rpc.DEFAULT_PORT), keep=True) == rpc.tensor_cache_dir()
    assert rpc.worker_cache(rpc.Endpoint("127.0.0.1", rpc.DEFAULT_PORT), keep=False) is None
