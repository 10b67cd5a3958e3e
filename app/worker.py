"""The window's workers: the engine thread (runtime.engine.thread) and the converter's QThread. Signals
carry their results.

The GUI thread never runs inference or conversion. Each request has its own cancel Event, set directly from
the GUI thread (an Event is thread-safe), so Stop reaches the loop within one verify cycle even while the
worker is busy, and a late Stop can never cancel the next request.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QThread, QTimer, Signal, Slot

from runtime.engine.options import ChatOptions, EngineSettings
from runtime.engine.reader import Failure, JobReader, Status, is_final
from runtime.engine.thread import EngineThread
from runtime.errors import Cancelled, SpecQuantError, readable

log = logging.getLogger("specquant.app")

DELIVER_MS = (66, 250)  # the range of the time between two batches of streamed Chunks (each is one redraw)
GUI_SHARE = 0.02  # while an answer streams, the GUI thread may spend this share of its time; batches space out


class Pace:
    """How long the GUI waits between two batches: long enough that the GUI thread's CPU time (drawing text,
    chart and status bar, a cost that varies with the machine, the answer's length and the window's size)
    stays near GUI_SHARE of the time, within DELIVER_MS. Measured with the GUI thread's own CPU clock."""

    def __init__(self) -> None:
        self.interval_ms = float(DELIVER_MS[0])
        self.share: float | None = None  # smoothed CPU share of the GUI thread while answers stream
        self._mark: tuple[float, float] | None = None

    def restart(self) -> None:
        """An answer begins: the time since the last one was idle and says nothing."""
        self._mark = (time.perf_counter(), time.thread_time())

    def tick(self) -> int:
        """On the GUI thread, at each batch: the interval until the next one, in ms."""
        now = (time.perf_counter(), time.thread_time())
        if self._mark is not None and now[0] - self._mark[0] > 0.01:  # not the first batch, flushed at once
            share = (now[1] - self._mark[1]) / (now[0] - self._mark[0])
            # Smoothed: Windows' thread clock ticks in 15.6 ms steps, so one interval alone reads 0 or a lot.
            self.share = share if self.share is None else 0.7 * self.share + 0.3 * share
            # The cost of a batch is about constant, so the share falls as 1/interval: one step converges.
            wanted = self.interval_ms * self.share / GUI_SHARE
            self.interval_ms = min(max(wanted, DELIVER_MS[0]), DELIVER_MS[1])
        self._mark = now
        return round(self.interval_ms)


@dataclass
class ChatRequest:
    id: int
    model: str
    settings: EngineSettings
    messages: list[dict[str, str]]
    options: ChatOptions
    cancel: threading.Event = field(default_factory=threading.Event)


class EngineWorker(QObject):
    """The window's side of `runtime.engine.thread.EngineThread`: submits its requests to the engine thread
    (shared with the local API server, in one queue) and turns what comes back into signals for the GUI.

    Streamed Chunks reach the GUI in batches, paced by `Pace` (the first of an answer at once): on two cores a
    queued signal and a redraw per verify cycle cost the answer ~7% of its speed, because the GUI thread's
    time is taken from a compute thread that the other one then waits for at ggml's barrier. A batch holds
    every Chunk, in order; a final event (last Chunk, failure, status) first flushes what waits.
    """

    status = Signal(int, str)  # request id, what is happening before the first token (loading, calibrating)
    chunks = Signal(int, object)  # request id, a list of runtime.engine.engine.Chunk in order (none of them the last)
    finished = Signal(int, object)  # request id, the last Chunk (done=True)
    failed = Signal(int, str, str)  # request id, a one-line reason ("" when stopped by the user), Failure.kind
    _wake = Signal(bool)  # engine thread → GUI: Chunks wait in the inbox (True: flush at once)
    final = Signal(int, object)  # emitted on the engine thread: a Status, Failure or the last Chunk (queued)

    def __init__(self, runner: EngineThread) -> None:
        super().__init__()
        self.runner = runner
        self._lock = threading.Lock()
        self._inbox: list[tuple[int, Any]] = []  # (request id, Chunk) not yet delivered
        self._woken = False  # a flush is on its way; no second wake-up until it ran
        self._started: set[int] = set()  # requests whose first Chunk went out
        self.pace = Pace()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.flush)
        self._wake.connect(self._on_wake)
        self.final.connect(self._on_final)

    def generate(self, request: ChatRequest) -> None:
        """Post `request` (Stop: its `cancel`); what comes back goes out as signals."""
        reader = JobReader(self.runner, on_event=functools.partial(self._deliver, request.id))
        try:
            reader.post(request.model, request.settings, request.messages, request.options, cancel=request.cancel,
                        bounded=False)
        except SpecQuantError as e:
            self.failed.emit(request.id, readable(e), "internal")

    def _deliver(self, request_id: int, event: Any) -> None:
        """On the engine thread (the reader's callback): a signal emitted here is queued to the window's thread."""
        if isinstance(event, Status) or is_final(event):
            self.final.emit(request_id, event)
            return
        with self._lock:
            self._inbox.append((request_id, event))
            if self._woken:
                return
            self._woken = True
            first = request_id not in self._started
            self._started.add(request_id)
        self._wake.emit(first)

    def _on_wake(self, first: bool) -> None:
        if first:
            self.pace.restart()
            self.flush()
        elif not self._timer.isActive():
            self._timer.start(round(self.pace.interval_ms))

    def flush(self) -> None:
        """On the GUI thread: deliver every waiting Chunk, one `chunks` signal per request."""
        with self._lock:
            inbox, self._inbox, self._woken = self._inbox, [], False
        self._timer.stop()
        if inbox:
            self.pace.tick()
        for request_id, group in itertools.groupby(inbox, key=lambda item: item[0]):
            self.chunks.emit(request_id, [chunk for _, chunk in group])

    def _on_final(self, request_id: int, event: Any) -> None:
        self.flush()
        if not isinstance(event, Status):  # the request ended
            with self._lock:
                self._started.discard(request_id)
        if isinstance(event, Status):
            self.status.emit(request_id, event.text)
        elif isinstance(event, Failure):
            self.failed.emit(request_id, event.reason, event.kind)
        else:
            self.finished.emit(request_id, event)


@dataclass(frozen=True)
class ConvertJob:
    # One object, not (str, str, bool) arguments: PySide6 6.12 mis-counts references to a bool passed
    # through a queued connection, and the interpreter then aborts at exit ("bool_dealloc").
    source: str
    name: str = ""
    allow_requant: bool = False
    download: bool = False  # a Hugging Face repo id: download it first, reporting Progress("download", bytes)


class ConvertWorker(QObject):
    """Runs `converters.convert` (its quantizer in a child process) and reports progress."""

    progress = Signal(object)  # converters.convert.Progress
    done = Signal(str)  # model name
    failed = Signal(str)  # a readable one-line reason; "" when cancelled

    def __init__(self) -> None:
        super().__init__()
        self.cancel = threading.Event()

    @Slot(object)
    def run(self, job: ConvertJob) -> None:
        from converters.convert import Progress, convert
        from converters.sources import download

        self.cancel.clear()
        try:
            if job.download:
                # Its own phase, so its bytes and ETA show; convert() then finds the files in the HF cache.
                download(
                    job.source, lambda done, total: self.progress.emit(Progress("download", done, total)), self.cancel
                )
            manifest = convert(
                job.source, name=job.name or None, allow_requant=job.allow_requant, on_progress=self.progress.emit,
                cancel=self.cancel,
            )
        except Cancelled:
            self.failed.emit("")
        except Exception as e:
            log.debug("conversion failed", exc_info=True)
            self.failed.emit("" if self.cancel.is_set() else readable(e))
        else:
            self.done.emit(manifest["name"])


def start_thread(worker: QObject, name: str) -> QThread:
    """Move `worker` onto a new running thread that deletes nothing on its own (the owner waits for it)."""
    thread = QThread()
    thread.setObjectName(name)
    worker.moveToThread(thread)
    thread.start()
    return thread
