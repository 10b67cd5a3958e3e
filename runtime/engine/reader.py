"""A job for the engine thread, and the one way a front end reads its answer.

A `Job` is one answer for `runtime.engine.thread.EngineThread`; the thread hands its events (`Status`, then
Chunks, the last with done=True, or a `Failure`) to the job's sink on the engine thread. Every front end
reads them through a `JobReader` (llama.cpp's `server_response_reader` is the model): the API server, the
window's worker and `EngineThread.stream_chat` (the CLI). A reader posts the job, hands its events over to its
own thread (a blocking queue, an asyncio loop, or a callback), holds a reader that stopped reading to a
backlog, cancels the job when its reader leaves before the end (Stop, a client gone), and cleans up once.

`failure_of` and `error_of` are the one mapping between errors and Failures, used by the engine thread and by
the pipe of runtime.engine.process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from runtime.engine.answer import Chunk
from runtime.engine.options import ChatOptions, Message
from runtime.errors import Cancelled, ContextTooLong, ModelError, SpecQuantError, UserError, readable
from runtime.machine.rpc import WorkerError

if TYPE_CHECKING:
    from runtime.engine.options import EngineSettings


@dataclass(frozen=True)
class Status:
    """What is happening before the first token (loading a model, measuring the machine). `reading`: the prompt
is built and fits the context, its reading begins (the API opens a stream then: nothing can refuse it now)."""

    text: str
    reading: bool = False


@dataclass(frozen=True)
class Failure:
    """The job ended without a last Chunk. `kind`: cancelled (reason ""), user (bad input), context (a prompt too
    long for the context), model (a model missing or damaged: see the model manager), worker (a worker down or
    lost: runtime.machine.rpc) or internal."""

    reason: str
    kind: str


Event = Status | Chunk | Failure  # what a job's sink receives


@dataclass(eq=False)  # a job is itself, not its fields: it can sit in a set
class Job:
    model: str | None  # a cached model's name; None: the only one, else the demo
    settings: EngineSettings
    messages: list[Message]
    options: ChatOptions
    sink: Callable[[Any], None]  # receives Status, runtime.engine.engine.Chunk (the last has done=True) or Failure
    cancel: threading.Event = field(default_factory=threading.Event)
    id: int = field(default_factory=itertools.count(1).__next__)


_ERRORS: dict[str, type[SpecQuantError]] = {
    "cancelled": Cancelled, "user": UserError, "model": ModelError, "worker": WorkerError, "context": ContextTooLong
}


def failure_of(e: BaseException) -> Failure:
    """The Failure that reports `e` (subclasses first: a ModelError is a UserError too)."""
    for kind, cls in (("cancelled", Cancelled), ("model", ModelError), ("worker", WorkerError),
                      ("context", ContextTooLong), ("user", UserError)):
        if isinstance(e, cls):
            return Failure(readable(e), kind)
    return Failure(readable(e), "internal")


def error_of(failure: Failure) -> SpecQuantError:
    """The error a Failure reports (Cancelled, UserError, ModelError, WorkerError, ContextTooLong or
    SpecQuantError), to be raised where the answer is read."""
    return _ERRORS.get(failure.kind, SpecQuantError)(failure.reason or "stopped")


def is_final(event: Any) -> bool:
    """Whether `event` ends its job: a Failure, or the last Chunk."""
    return isinstance(event, Failure) or (isinstance(event, Chunk) and event.done)


class Submits(Protocol):
    """What a reader posts to (runtime.engine.thread.EngineThread)."""

    def submit(self, job: Job, bounded: bool = True) -> Job: ...


class JobReader:
    """One job's answer, read by one front end.

    The events reach the reader's thread in one of three ways, chosen here: with `on_event`, that callback
    gets each on the engine thread (it must only hand it on, never block); with `loop`, they are handed to
    that asyncio loop (`call_soon_threadsafe`) and awaited with `aget`; otherwise they wait in a queue for
    `get` (or `chunks`). `backlog`: events the reader may leave unread before its job is cancelled (a client
    that stopped reading); the last event still comes, so the reader always sees its answer end.
    `on_close(reader)` runs once, when the reader closes.
    """

    def __init__(
        self,
        runner: Submits,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        on_event: Callable[[Event], None] | None = None,
        backlog: int | None = None,
        on_close: Callable[[JobReader], None] | None = None,
    ) -> None:
        if loop is not None and on_event is not None:
            raise ValueError("a reader takes its events from a loop or a callback, not both")
        self.runner = runner
        self.job: Job | None = None
        self.backlog = backlog
        self._loop = loop
        self._on_event = on_event
        self._on_close = on_close
        self._waiting: queue.SimpleQueue[Event] | None = None
        self._awaiting: asyncio.Queue[Event] | None = None
        if on_event is None:
            if loop is None:
                self._waiting = queue.SimpleQueue()
            else:
                self._awaiting = asyncio.Queue()
        self._lock = threading.Lock()
        self._unread = 0  # events handed over and not yet read
        self._overrun = False  # the backlog was exceeded: nothing more but the last event is handed over
        self._ended = False  # the reader has its job's last event: nothing left to cancel
        self._closed = False
        self._watcher: asyncio.Task[None] | None = None

    # --- the reader's side ----------------------------------------------------------------------------
    def post(
        self,
        model: str | None,
        settings: EngineSettings,
        messages: list[Message],
        options: ChatOptions,
        *,
        cancel: threading.Event | None = None,
        bounded: bool = True,
    ) -> Job:
        """Submit the job (`cancel`: its Stop, else one of its own). The runner's refusal (QueueFull, a thread
        shut down) passes through, the reader then closed with nothing to cancel."""
        # Set before it is queued: the engine thread may answer (and the backlog cancel) before submit returns.
        self.job = job = Job(model, settings, messages, options, self._take, cancel or threading.Event())
        try:
            self.runner.submit(job, bounded)
        except BaseException:
            self._ended = True  # never queued: nothing to cancel
            self.close()
            raise
        return job

    def get(self, timeout: float | None = None) -> Event:
        """The next event, waiting for it (queue.Empty after `timeout` s)."""
        if self._waiting is None:
            raise RuntimeError("this reader's events go to a loop or a callback")
        return self._taken(self._waiting.get(timeout=timeout))

    async def aget(self) -> Event:
        """The next event, awaited on the reader's loop."""
        if self._awaiting is None:
            raise RuntimeError("this reader's events go to a queue or a callback")
        return self._taken(await self._awaiting.get())

    def chunks(self, on_status: Callable[[str], None] | None = None) -> Iterator[Chunk]:
        """The answer's Chunks up to the last, waiting for each; a Failure is raised as its error (`error_of`),
        a Status goes to `on_status` (the window shows it before the first token). The reader closes when this
        ends or is left: leaving early cancels the job."""
        try:
            while True:
                event = self.get()
                if isinstance(event, Failure):
                    raise error_of(event)
                if isinstance(event, Status) and on_status is not None:
                    on_status(event.text)
                if isinstance(event, Chunk):
                    yield event
                    if event.done:
                        return
        finally:
            self.close()

    def close_on(self, gone: Awaitable[Any]) -> None:
        """On the reader's loop: close the reader when `gone` completes (its client went away); closing first
        stops the watch."""

        async def watch() -> None:
            await gone
            self.close()

        self._watcher = asyncio.get_running_loop().create_task(watch())

    def cancel(self) -> None:
        """Stop the answer (any thread): it ends within a cycle, and its last event still comes."""
        if self.job is not None:
            self.job.cancel.set()

    def close(self) -> None:
        """The reader is done (its answer read, or left early): cancel the job if its answer is not over, stop
        watching for the client, run `on_close`. Once; later calls do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ended = self._ended
        if not ended:
            self.cancel()
        watcher = self._watcher
        if watcher is not None and not watcher.done():
            with contextlib.suppress(RuntimeError):  # no running loop: only on the watcher's own loop
                if watcher is not asyncio.current_task():
                    watcher.cancel()
        if self._on_close is not None:
            self._on_close(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> JobReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the engine thread's side --------------------------------------------------------------------------
    def _take(self, event: Event) -> None:
        """The job's sink, on the engine thread: hand `event` over, unless the reader is too far behind."""
        final = is_final(event)
        if self._on_event is not None:
            try:
                self._on_event(event)
            finally:
                if final:
                    self._ended = True
                    self.close()
            return
        with self._lock:
            behind = self.backlog is not None and (self._overrun or self._unread > self.backlog)
            if behind and not final:  # the reader stopped reading: stop its answer, keep no more of it
                self._overrun = True
            else:
                self._unread += 1
        if behind and not final:
            self.cancel()
            return
        if self._waiting is not None:
            self._waiting.put(event)
            return
        assert self._loop is not None and self._awaiting is not None
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is listening any more
            self._loop.call_soon_threadsafe(self._awaiting.put_nowait, event)

    def _taken(self, event: Event) -> Event:
        with self._lock:
            self._unread -= 1
            if is_final(event):
                self._ended = True
        return event
