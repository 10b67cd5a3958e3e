"""The window's workers: the engine thread (runtime.engine_worker) and the converter's QThread. Signals
carry their results.

The GUI thread never runs inference or conversion. Each request has its own cancel Event, set directly from
the GUI thread (an Event is thread-safe), so Stop reaches the loop within one verify cycle even while the
worker is busy, and a late Stop can never cancel the next request.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from runtime import engine_worker
from runtime.engine import ChatOptions, EngineSettings
from runtime.engine_worker import Failure, Job, Status
from runtime.errors import Cancelled, SpecQuantError, readable

log = logging.getLogger("specquant.app")


@dataclass
class ChatRequest:
    id: int
    model: str
    settings: EngineSettings
    messages: list[dict[str, str]]
    options: ChatOptions
    cancel: threading.Event = field(default_factory=threading.Event)


class EngineWorker(QObject):
    """The window's side of `runtime.engine_worker.EngineWorker`: submits its requests to the engine thread
    (shared with the local API server, in one queue) and turns what comes back into signals for the GUI."""

    status = Signal(int, str)  # request id, what is happening before the first token (loading, calibrating)
    chunk = Signal(int, object)  # request id, runtime.engine.Chunk
    finished = Signal(int, object)  # request id, the last Chunk (done=True)
    failed = Signal(int, str, str)  # request id, a one-line reason ("" when stopped by the user), Failure.kind

    def __init__(self, runner: engine_worker.EngineWorker) -> None:
        super().__init__()
        self.runner = runner

    def generate(self, request: ChatRequest) -> None:
        job = Job(
            request.model, request.settings, request.messages, request.options,
            sink=functools.partial(self._deliver, request.id), cancel=request.cancel,
        )
        try:
            self.runner.submit(job, bounded=False)
        except SpecQuantError as e:
            self.failed.emit(request.id, readable(e), "internal")

    def _deliver(self, request_id: int, event: Any) -> None:
        """On the engine thread: a signal emitted here is queued to the window's thread."""
        if isinstance(event, Status):
            self.status.emit(request_id, event.text)
        elif isinstance(event, Failure):
            self.failed.emit(request_id, event.reason, event.kind)
        elif event.done:
            self.finished.emit(request_id, event)
        else:
            self.chunk.emit(request_id, event)


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
