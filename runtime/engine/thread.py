"""One thread owns the Engine and answers chats in order: the window and the API server both submit here.

Requests wait in a bounded queue (`QueueFull` when it is full), in order, except that a short side request (a
title, a count: runtime.engine.side_requests) passes the long ones waiting, a few times each at most. Each
`Job` has its own cancel Event, which anyone may set from any thread: a waiting job is then skipped, a
running one stops within one verify cycle. Results go to the job's `sink` on the worker thread, so a sink
must only hand them on, never block; front ends read them through a `runtime.engine.reader.JobReader`
(where Job, Status and Failure live). The
thread keeps up to `max_models` Engines, one per model (1 by default: a job for another model unloads the
last one); a job for a model not loaded first unloads the least recently used beyond that, and an Engine that
has answered nothing for `idle_unload_s` is unloaded between jobs. An Engine is rebuilt only when a job asks
for other settings; successive turns of one conversation therefore reuse its KV prefix. Loads and unloads
happen on this thread, between jobs: an answer in flight never waits on another model's load except in
its turn in the queue.

Nothing one job does can end the thread: an error in the engine fails that job, a sink that raises abandons
its own job (cancelled, the engine kept), and the next job is answered. `release` and `close` wait a bounded
time, so a stuck load cannot freeze their caller.
"""

from __future__ import annotations

import collections
import logging
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from runtime.engine.engine import ChatOptions, Chunk, Engine, EngineSettings, Message
from runtime.engine.interface import ChatEngine, LoadedEngine
from runtime.engine.process import open_engine
from runtime.engine.reader import Failure, Job, JobReader, Status, failure_of
from runtime.engine.side_requests import JumpCounts
from runtime.errors import Cancelled, SpecQuantError, UserError

# Job, Status and Failure are runtime.engine.reader's, named here too: the thread is where jobs go.
__all__ = ["CLOSE_TIMEOUT_S", "RELEASE_TIMEOUT_S", "EngineThread", "Failure", "Job", "QueueFull", "Status"]

log = logging.getLogger("specquant.worker")

RELEASE_TIMEOUT_S = 60.0  # loading a large model from a slow disk cannot be interrupted: allow it to end
# Idle time after a default-preset answer before this machine's speeds are measured (the window, the API
# server): a person reading the answer is not kept waiting, and a new request stops the measurement.
CALIBRATE_IDLE_S = 20.0
CLOSE_TIMEOUT_S = 30.0  # at exit: the thread is a daemon, so one that does not end within this dies with us


class QueueFull(SpecQuantError):
    """The queue holds `max_queue` waiting jobs already; `retry_after_s` is when a place may be free."""

    def __init__(self, waiting: int, retry_after_s: int) -> None:
        super().__init__(f"{waiting} requests are waiting already; try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s


MEASURING = "Measuring this machine's speed with this model (once; up to a minute)…"


def reading_text(tokens: int, rate: float | None, documents: bool) -> str:
    """The wait before the first words, once the prompt is built: "Reading 3,412 tokens of your documents and
    the conversation (about 40 s)…"; the time only where the machine's reading speed is known and it is long."""
    what = "your documents and the conversation" if documents else "the conversation"
    estimate = tokens / rate if rate else 0.0
    about = f" (about {estimate:.0f} s)" if estimate >= 2 else ""
    return f"Reading {tokens:,} tokens of {what}{about}…"


class EngineThread(ChatEngine):
    """A thread with one Engine and a queue of jobs. `max_queue`: waiting jobs allowed (None: no bound).
    The window and the API post `Job`s through their JobReaders; `stream_chat` (the ChatEngine Protocol) is
    the same queue read by a caller on its own thread."""

    def __init__(
        self,
        max_queue: int | None = None,
        name: str = "specquant-engine",
        max_models: int = 1,
        idle_unload_s: float | None = None,
        calibrate_when_idle: bool = False,
    ) -> None:
        if max_queue is not None and max_queue < 1:
            raise UserError(f"queue size {max_queue} must be at least 1")
        if max_models < 1:
            raise UserError(f"models kept loaded {max_models} must be at least 1")
        self.max_queue = max_queue
        self.max_models = max_models
        self.idle_unload_s = idle_unload_s  # None: an idle model stays loaded
        # After a default-preset answer of a model not yet measured here, measure it between jobs (the window,
        # the API server): until then the default answers `fast` rather than make anyone wait (#61).
        self.calibrate_when_idle = calibrate_when_idle
        self._calibrate_due: dict[str, float] = {}  # model name: when (time.monotonic) it is measured if idle
        # The loaded Engines by model name, least recently used first, with when each last finished a job.
        self._engines: collections.OrderedDict[str, LoadedEngine] = collections.OrderedDict()
        self._snapshot: tuple[LoadedEngine, ...] = ()  # the same, for other threads (replaced whole, never changed)
        self._last_used: dict[str, float] = {}
        self._fresh: LoadedEngine | None = None  # opened for the running job, which has not ended yet
        self._pending: collections.deque[Job | Callable[[], None]] = collections.deque()
        self._jumps = JumpCounts()  # side jobs go before long ones, each passed a bounded number of times
        self._running: Job | None = None
        self._cond = threading.Condition()
        self._closed = False
        self._durations: collections.deque[float] = collections.deque(maxlen=16)  # seconds per finished job
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # --- any thread --------------------------------------------------------------------------------
    def submit(self, job: Job, bounded: bool = True) -> Job:
        """Queue `job` behind the others (a side job before the long ones). `bounded=False` (the window's own
        messages, one at a time) ignores `max_queue`, which is for clients of the API."""
        with self._cond:
            if self._closed:
                raise SpecQuantError("the engine has shut down")
            self._withdraw_cancelled()
            waiting = sum(isinstance(j, Job) for j in self._pending)
            if bounded and self.max_queue is not None and waiting >= self.max_queue:
                raise QueueFull(waiting, self._retry_after())
            self._jumps.enqueue(self._pending, job)
            self._cond.notify()
        return job

    def stream_chat(
        self,
        messages: Sequence[Message],
        options: ChatOptions | None = None,
        cancel: threading.Event | None = None,
        *,
        model: str | None = None,
        settings: EngineSettings | None = None,
    ) -> Iterator[Chunk]:
        """Queue one answer (bounded) and yield its Chunks here; a Failure is raised as the error it reports
        (Cancelled, UserError, ModelError, WorkerError, SpecQuantError). Leaving early cancels the job."""
        reader = JobReader(self)  # posted at the first next(), as a generator does its work
        reader.post(model, settings or EngineSettings(), list(messages), options or ChatOptions(), cancel=cancel)
        yield from reader.chunks()

    @property
    def waiting(self) -> int:
        with self._cond:
            self._withdraw_cancelled()
            return sum(isinstance(j, Job) for j in self._pending)

    def _withdraw_cancelled(self) -> None:
        """Take cancelled jobs out of the queue at once (caller holds the lock): abandoned requests must never
        fill it. Each still gets its Failure, as if the worker had skipped it."""
        gone = [j for j in self._pending if isinstance(j, Job) and j.cancel.is_set()]
        for j in gone:
            self._pending.remove(j)
            _tell(j, Failure("", "cancelled"))

    @property
    def busy(self) -> bool:
        return self._running is not None

    @property
    def engine(self) -> LoadedEngine | None:
        """The most recently used Engine (None before the first load)."""
        engines = self._snapshot
        return engines[-1] if engines else None

    @property
    def loaded(self) -> list[str]:
        """The models loaded now, least recently used first."""
        return [e.model.name for e in self._snapshot]

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def cancel_all(self) -> None:
        """Cancel the running job and every waiting one (each still gets its Failure or last Chunk)."""
        with self._cond:
            jobs = [j for j in self._pending if isinstance(j, Job)]
            if self._running is not None:
                jobs.append(self._running)
        for j in jobs:
            j.cancel.set()

    def release(self, cancel: bool = True, timeout: float | None = RELEASE_TIMEOUT_S) -> None:
        """Unload the models (before a model's files are deleted or rewritten); returns once they are.

        Raises UserError if the engine thread has not got to it within `timeout` s (a load that cannot be
        interrupted): the caller must then leave the files alone. The unload still happens when it gets there.
        """
        if cancel:
            self.cancel_all()
        done = threading.Event()

        def drop() -> None:
            try:
                self._drop_engine()
            finally:
                done.set()

        with self._cond:
            if self._closed:
                return
            if not self._thread.is_alive():  # cannot happen (the loop survives its items); no one to wait for
                self._drop_engine()
                return
            self._pending.appendleft(drop)  # before the waiting jobs: they were cancelled (or keep their turn)
            self._cond.notify()
        if not done.wait(timeout):
            raise UserError(f"the engine is still busy after {timeout:g} s and has not unloaded its models; try again")

    def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> bool:
        """Cancel everything, free the models on the worker thread, and end it; whether it ended in `timeout` s
        (if not, it is a daemon thread, left to end on its own or with the process)."""
        self.cancel_all()
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():  # only with a timeout
            log.warning("the engine thread did not end within %s s; leaving it to finish on its own", timeout)
            return False
        return True

    # --- the worker thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    if self._cond.wait(self._next_idle_check()):
                        continue
                    self._pending.append(self._unload_idle)  # between jobs, on this thread: none is running
                if not self._pending:  # closed and drained
                    break
                item = self._pending.popleft()
                self._running = item if isinstance(item, Job) else None
            try:
                item() if not isinstance(item, Job) else self._run(item)
            except Exception:  # a bug in one item (its sink, an unload) must not end the thread for every later job
                log.warning("the engine thread survived an error in one request", exc_info=True)
            finally:
                self._running = None
        try:
            self._drop_engine()
        except Exception:
            log.warning("could not free the models at shutdown", exc_info=True)

    def _run(self, job: Job) -> None:
        started = time.monotonic()
        try:
            _check(job, "before the answer started")
            engine = self._engine_for(job)
            # Loading cannot be interrupted from here; a Stop during it is honoured as soon as it ends (what was
            # loaded is kept for the next request), before any token.
            _check(job, "while the model was loading")
            # The window's wait says what takes the time before the first words (after a load, the prompt).
            documents = job.options.documents is not None
            if documents:
                _tell(job, Status("Searching your documents…"))
            else:
                _tell(job, Status("Reading the conversation…"))

            def reading(tokens: int, rate: float | None) -> None:
                _tell(job, Status(reading_text(tokens, rate, documents), reading=True))

            # The machine-cost probe runs inside the answer's plan, whatever the preset (and again when an answer
            # showed its costs were measured under load): its wait is said, not "Reading…" (#63).
            measurements = getattr(engine, "measurements", None)  # an engine in its own process says nothing
            if measurements is not None:
                measurements.on_measuring = lambda: _tell(job, Status(MEASURING))
            try:
                for chunk in engine.stream_chat(job.messages, job.options, job.cancel, on_reading=reading):
                    _tell(job, chunk)
            finally:
                if measurements is not None:
                    measurements.on_measuring = None
        except Cancelled:  # a Stop needs no reason (the window shows none)
            _tell(job, Failure("", "cancelled"))
        except Exception as e:  # the worker must survive anything and say what happened
            failure = failure_of(e)  # a lost worker (kind "worker"): the next job starts anew, there or here
            fresh = self._fresh
            if fresh is not None and failure.kind == "model" and self._engines.get(fresh.model.name) is fresh:
                self._drop_engine(fresh.model.name)  # it never loaded: its slot is free for a working model
            if failure.kind == "internal":
                log.debug("generation failed", exc_info=True)
                damaged = job.model or (self.engine.model.name if self.engine is not None else None)
                if damaged is not None:  # a damaged or half-loaded engine is rebuilt for the next job
                    self._drop_engine(damaged)
            _tell(job, failure)
        else:
            self._durations.append(time.monotonic() - started)
            self._calibrate_later(job)
        finally:
            self._fresh = None
            if self.engine is not None:  # the job's model (the most recently used): its idle clock starts now
                self._last_used[self.engine.model.name] = time.monotonic()

    def _calibrate_later(self, job: Job) -> None:
        """After a default-preset answer of a model not yet measured here: measure it once the engine has been
        idle CALIBRATE_IDLE_S (the clock restarts with every answer)."""
        engine = self.engine
        if not self.calibrate_when_idle or job.options.preset != "auto" or not isinstance(engine, Engine):
            return
        if not engine.calibrated:
            self._calibrate_due[engine.model.name] = time.monotonic() + CALIBRATE_IDLE_S

    def _calibrate_idle(self) -> None:
        """Measure the models whose idle time has come; a request that arrives stops the measurement between
        two of its runs (nothing is saved: the next idle spell measures again)."""
        now = time.monotonic()
        for name, due in list(self._calibrate_due.items()):
            engine = self._engines.get(name)
            if due > now and engine is not None:
                continue
            self._calibrate_due.pop(name)
            if isinstance(engine, Engine) and not engine.calibrated:
                log.info("measuring %s's presets on this machine for the default (once)", name)
                engine.calibration(stop=self._has_pending)

    def _has_pending(self) -> bool:
        """Whether a request waits, or the thread is closing: a measurement stops for either."""
        with self._cond:
            return bool(self._pending) or self._closed

    def _engine_for(self, job: Job) -> LoadedEngine:
        """The job's model's Engine, loaded if need be (the least recently used unloaded to make room)."""
        name = job.model or (self.engine.model.name if self.engine is not None else None)
        e = self._engines.get(name) if name is not None else None
        if e is not None and e.settings == job.settings:
            self._engines.move_to_end(e.model.name)
            self._snapshot = tuple(self._engines.values())
            return e
        if e is not None:  # the same model with other settings
            self._drop_engine(e.model.name)
        _tell(job, Status(f"Loading {job.model or 'the model'}…"))
        # An Engine checks its files (manifest, tier sizes) and loads its tiers at its first answer: opened
        # before the least recently used goes, a model that cannot load evicts no working one. With RPC
        # workers the old one's connections go first.
        engine = None if job.settings.rpc else open_engine(job.model, job.settings)
        while len(self._engines) >= self.max_models:
            oldest = next(iter(self._engines))
            log.info("unloading %s to make room for %s", oldest, job.model or "the model")
            self._drop_engine(oldest)
        engine = engine or open_engine(job.model, job.settings)
        self._drop_engine(engine.model.name)  # only when `job.model` was None and named it another way
        self._fresh = engine  # until it answers: a load that fails takes no slot (_run)
        self._engines[engine.model.name] = engine
        self._snapshot = tuple(self._engines.values())
        return engine

    def _drop_engine(self, name: str | None = None) -> None:
        """Unload model `name`'s Engine, or every Engine (None)."""
        names = list(self._engines) if name is None else [name] if name in self._engines else []
        for n in names:
            engine = self._engines.pop(n)  # forgotten even if closing it fails: the next job builds anew
            self._snapshot = tuple(self._engines.values())
            self._last_used.pop(n, None)
            engine.close()

    def _next_idle_check(self) -> float | None:
        """Seconds until the next loaded model has been idle for `idle_unload_s`, or until a measurement is due
        (None: no such check)."""
        now = time.monotonic()
        deadlines = list(self._calibrate_due.values())
        if self.idle_unload_s is not None and self._engines:
            deadlines.append(min(self._last_used.get(n, now) for n in self._engines) + self.idle_unload_s)
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _unload_idle(self) -> None:
        self._calibrate_idle()
        if self.idle_unload_s is None:
            return
        now = time.monotonic()
        for name in list(self._engines):
            if now - self._last_used.get(name, now) >= self.idle_unload_s:
                log.info("unloading %s: idle for %g s", name, self.idle_unload_s)
                self._drop_engine(name)

    def _retry_after(self) -> int:
        """Seconds until a place is free: when the running job ends, about one typical job (median of the
        recent ones; 5 s before any has finished)."""
        return max(1, round(statistics.median(self._durations) if self._durations else 5.0))


def _check(job: Job, when: str) -> None:
    if job.cancel.is_set():
        raise Cancelled(f"stopped {when}")


def _tell(job: Job, event: Any) -> None:
    """Hand `event` to the job's sink. A sink that raises has lost its reader (a bug on the other side): the
    job is cancelled, so its answer stops within a cycle with the engine intact, and the error is logged."""
    try:
        job.sink(event)
    except Exception:
        if not job.cancel.is_set():
            log.warning("request %d: its receiver failed; stopping it", job.id, exc_info=True)
        job.cancel.set()
