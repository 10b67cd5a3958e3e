"""Workers on their own QThreads: one owns the Engine, one runs the converter. Signals carry the results.

The GUI thread never runs inference or conversion. Each request has its own cancel Event, set directly from
the GUI thread (an Event is thread-safe), so Stop reaches the loop within one verify cycle even while the
worker is busy, and a late Stop can never cancel the next request.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, QThread, Signal, Slot

from runtime.engine import ChatOptions, Engine, EngineSettings
from runtime.errors import Cancelled, SpecQuantError

log = logging.getLogger("specquant.app")


@dataclass
class ChatRequest:
    id: int
    model: str
    settings: EngineSettings
    messages: list[dict[str, str]]
    options: ChatOptions
    cancel: threading.Event = field(default_factory=threading.Event)


def readable(e: BaseException) -> str:
    """One line for a banner: our own errors as they are; anything else with its type, never a traceback."""
    if isinstance(e, SpecQuantError):
        return str(e)
    if isinstance(e, MemoryError):
        return "out of memory: close other programs, pick a smaller model or lower the context size in Settings"
    return f"unexpected {type(e).__name__}: {e}"


class EngineWorker(QObject):
    """Owns one Engine, (re)built when the model or its settings change, and streams answers."""

    status = Signal(int, str)  # request id, what is happening before the first token (loading, calibrating)
    chunk = Signal(int, object)  # request id, runtime.engine.Chunk
    finished = Signal(int, object)  # request id, the last Chunk (done=True)
    failed = Signal(int, str)  # request id, a readable one-line reason

    def __init__(self) -> None:
        super().__init__()
        self.engine: Engine | None = None

    @Slot(object)
    def generate(self, request: ChatRequest) -> None:
        try:
            engine = self._engine_for(request)
            if request.options.preset == "auto" and not engine.calibrated:
                self.status.emit(request.id, "Measuring this machine for the auto preset (once per model)…")
                engine.calibration()
            if request.cancel.is_set():
                raise Cancelled("stopped before the answer started")
            for chunk in engine.stream_chat(request.messages, request.options, request.cancel):
                if chunk.done:
                    self.finished.emit(request.id, chunk)
                else:
                    self.chunk.emit(request.id, chunk)
        except Cancelled:
            self.failed.emit(request.id, "")  # an empty reason: stopped by the user, nothing to show
        except Exception as e:  # a worker must survive anything and say what happened
            log.debug("generation failed", exc_info=True)
            self.failed.emit(request.id, readable(e))
            self._drop_engine()  # a damaged or half-loaded engine is rebuilt on the next request

    def _engine_for(self, request: ChatRequest) -> Engine:
        e = self.engine
        if e is not None and e.model.name == request.model and e.settings == request.settings:
            return e
        self._drop_engine()
        self.status.emit(request.id, f"Loading {request.model}…")
        self.engine = Engine(request.model, request.settings)
        return self.engine

    def _drop_engine(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    @Slot()
    def release(self) -> None:
        """Unload the models (before a model is deleted or converted again)."""
        self._drop_engine()

    @Slot()
    def shutdown(self) -> None:
        """Free the models on this thread, then end it."""
        self._drop_engine()
        QThread.currentThread().quit()


@dataclass(frozen=True)
class ConvertJob:
    # One object, not (str, str, bool) arguments: PySide6 6.12 mis-counts references to a bool passed
    # through a queued connection, and the interpreter then aborts at exit ("bool_dealloc").
    source: str
    name: str = ""
    allow_requant: bool = False


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
        from converters.convert import convert

        self.cancel.clear()
        try:
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
