"""An Engine in a child process, for answers whose layers run on a worker (runtime.machine.rpc).

ggml's RPC client aborts its whole process when a worker dies or stops answering mid-answer. In a child that
abort ends only the child: the caller (`chat`, `serve`, the window) gets one line naming the worker, stays
alive, and its next answer starts a new child: on the workers again, or on this computer alone while they
stay down (`take_notice` says so once). The child owns the Engine and answers one request at a time, as an
Engine does; Chunks and errors come back over a pipe.
Nothing waits forever: a first token within FIRST_TOKEN_TIMEOUT_S (loading a model onto a worker sends
its weights), each later cycle within rpc.STALL_TIMEOUT_S. An error in the child (a prompt too long for the
context, a chat template's error) ends its answer there and then: it reaches the caller at once as its own
line, and the child stays ready for the next request. Stop reaches the child with every Chunk received.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from runtime import child
from runtime.engine.answer import Chunk
from runtime.engine.engine import Engine, EngineSettings
from runtime.engine.interface import ChatEngine, LoadedEngine
from runtime.engine.options import ChatOptions, Message
from runtime.engine.reader import Failure, error_of, failure_of
from runtime.errors import SpecQuantError
from runtime.machine import rpc

FIRST_TOKEN_TIMEOUT_S = 600.0
START_TIMEOUT_S = 120.0
RETRY_S = 30.0  # answering here while a worker is down: how often the next request probes it again
_POLL_S = 0.05


def open_engine(model: str | None, settings: EngineSettings) -> LoadedEngine:
    """An Engine here, or in a child process when workers are named (the same Protocol either way)."""
    return EngineProcess(model, settings) if settings.rpc else Engine(model, settings)


def _send_error(conn: Connection, e: BaseException) -> None:
    """`e` as a Failure's kind and reason: the parent raises the same error (runtime.engine.reader's mapping,
    the engine thread's too)."""
    failure = failure_of(e)
    conn.send(("error", failure.kind, failure.reason))


def _child(model: str | None, settings: EngineSettings, cancel: Any, conn: Connection) -> None:
    """The child's loop: build the Engine, then answer requests until told to close or the pipe ends."""
    rpc.quiet_aborts()  # the parent names the worker that was lost, in one line: ggml's own lines
    logging.getLogger("llama.cpp").setLevel(logging.CRITICAL)  # ("send failed …") would be more
    try:
        engine = Engine(model, settings)
    except BaseException as e:  # everything becomes one line for the parent
        _send_error(conn, e)
        return
    conn.send(("ready", (engine.model, engine.manifest, engine.hardware, engine.workers)))
    try:
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                return
            what = request[0]
            if what == "close":
                return
            try:
                if what == "chat":
                    for chunk in engine.stream_chat(request[1], request[2], cancel):
                        conn.send(("chunk", chunk))
                    conn.send(("end", None))
                elif what == "calibration":
                    conn.send(("value", engine.calibration()))
                elif what == "calibrated":
                    conn.send(("value", engine.calibrated))
                elif what == "reset_caches":
                    engine.reset_caches()
                    conn.send(("value", None))
            except BaseException as e:
                _send_error(conn, e)
    finally:
        engine.close()


class EngineProcess(ChatEngine):
    """A LoadedEngine (runtime.engine.interface) served by an Engine in a child process."""

    def __init__(self, model: str | None, settings: EngineSettings) -> None:
        self.settings = settings
        self._cancel = multiprocessing.get_context("spawn").Event()  # set here, read by the child
        self._lock = threading.Lock()
        self._local: EngineSettings | None = None  # the settings answering here while a worker is down
        self._local_since = 0.0
        self.notice: str | None = None
        self._start(model, settings)

    def _start(self, model: str | None, settings: EngineSettings) -> None:
        self._proc, self._conn = child.start(_child, (model, settings, self._cancel), name="specquant-engine")
        self.model, self.manifest, self.hardware, self.workers = self._result(START_TIMEOUT_S, "start")

    def _ensure_child(self) -> None:
        """After a lost worker the next request starts a new child, which probes the workers again; while a
        worker stays down it answers on this computer alone (if the model fits here), and goes back to the
        workers once they answer a probe again (checked at most every RETRY_S)."""
        if self._local is not None and time.monotonic() - self._local_since > RETRY_S and self._workers_up():
            self._stop_child()
            self._local = None
        if self._proc.is_alive():
            return
        self._conn.close()
        try:
            self._start(self.model.name, self.settings)
        except rpc.WorkerError as e:
            local = replace(
                self.settings,
                rpc=(),
                placement=replace(self.settings.placement, mode="auto")
                if self.settings.placement.mode == "remote"
                else self.settings.placement,
            )
            self._start(self.model.name, local)
            self._local, self._local_since = local, time.monotonic()
            self.notice = f"{e}; answering on this computer until the worker is back"

    def _workers_up(self) -> bool:
        try:
            for ep in self.settings.rpc:
                rpc.probe_endpoint(ep, timeout=2.0, pings=1)
        except rpc.WorkerError:
            self._local_since = time.monotonic()
            return False
        return True

    def take_notice(self) -> str | None:
        """A line for the user about where the last answer ran, once (a worker that was down)."""
        notice, self.notice = self.notice, None
        return notice

    # --- the Engine's methods ------------------------------------------------------------------------
    @property
    def calibrated(self) -> bool:
        return bool(self._ask("calibrated"))

    def calibration(self) -> dict[str, Any] | None:
        return self._ask("calibration")

    def reset_caches(self) -> None:
        self._ask("reset_caches")

    def stream_chat(
        self,
        messages: Sequence[Message],
        options: ChatOptions | None = None,
        cancel: threading.Event | None = None,
        *,
        on_reading: Callable[[int, float | None], None] | None = None,
    ) -> Iterator[Chunk]:
        """The child's answer, one request at a time. As with a JobReader, a caller that leaves before the end
        cancels the answer (here: the child's, read on to its end so the next request starts clean).
        `on_reading` is not called: the prompt is built in the child, which sends Chunks only."""
        with self._lock:
            self._ensure_child()
            self._cancel.clear()
            self._send(("chat", list(messages), options or ChatOptions()))
            timeout, finished = FIRST_TOKEN_TIMEOUT_S, False
            try:
                while True:
                    kind, payload = self._receive(timeout, "answer", cancel)
                    if kind in ("end", "error"):  # the child's answer is over either way: it waits for the next
                        finished = True
                        if kind == "error":
                            raise payload
                        return
                    timeout = rpc.STALL_TIMEOUT_S
                    yield payload
            finally:
                if not finished and self._proc.is_alive():  # a caller that stopped reading: stop the child's
                    self._cancel.set()  # answer too, and read it to its end so the next request starts clean
                    with contextlib.suppress(SpecQuantError):
                        while self._receive(rpc.STALL_TIMEOUT_S, "answer")[0] not in ("end", "error"):
                            pass

    def close(self) -> None:
        self._stop_child()

    def _stop_child(self) -> None:
        child.stop(self._proc, self._conn, grace=10.0, farewell=("close",))

    # --- the pipe ---------------------------------------------------------------------------------------
    def _ask(self, what: str) -> Any:
        with self._lock:
            self._ensure_child()
            self._send((what,))
            return self._result(FIRST_TOKEN_TIMEOUT_S, what)

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._conn.send(message)
        except OSError:
            raise self._lost("ended") from None

    def _result(self, timeout: float, doing: str) -> Any:
        """The payload of the child's next message; its error raised here as ours."""
        kind, payload = self._receive(timeout, doing)
        if kind == "error":
            raise payload
        return payload

    def _receive(self, timeout: float, doing: str, cancel: threading.Event | None = None) -> tuple[str, Any]:
        """The child's next message; its error as ("error", the exception to raise); a child that ended or
        fell silent for `timeout` seconds is a WorkerError naming the worker. `cancel` is passed on to the
        child at every call (every Chunk) and while waiting, so a busy stream cannot hide a Stop."""
        deadline = time.monotonic() + timeout
        if cancel is not None and cancel.is_set():
            self._cancel.set()  # the child stops within one verify cycle and sends its last Chunk
        while not self._conn.poll(_POLL_S):
            if cancel is not None and cancel.is_set():
                self._cancel.set()
            if not self._proc.is_alive() and not self._conn.poll(0):
                raise self._lost("ended")
            if time.monotonic() > deadline:
                self._proc.kill()
                raise self._lost(f"sent nothing for {timeout:g} s during the {doing}")
        try:
            kind, payload, *rest = self._conn.recv()
        except (EOFError, OSError):
            raise self._lost("ended") from None
        if kind == "error":
            return kind, error_of(Failure(rest[0], payload))
        return kind, payload

    def _lost(self, how: str) -> rpc.WorkerError:
        """Which worker was lost, by probing each (the dead one refuses); said in one line."""
        self._proc.join(1)
        for ep in self.settings.rpc:
            try:
                rpc.probe_endpoint(ep, timeout=2.0, pings=1)
            except rpc.WorkerError as e:
                return rpc.WorkerError(f"the answer stopped: {e}")
        names = ", ".join(self.settings.rpc)
        code = self._proc.exitcode
        ended = f" (code {code})" if how == "ended" and code not in (None, rpc.FAULT_EXIT) else ""
        return rpc.WorkerError(f"the answer stopped: the connection to the worker at {names} {how}{ended}")
