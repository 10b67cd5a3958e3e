"""Request parsing off the event loop: threads with a large stack, and a deadline.

A request's JSON schemas are compiled while it is parsed (runtime.api.requests), and compiling is native code
(llguidance) that neither yields to asyncio nor can be interrupted. On the event loop a large schema would
stall every other client, `/health` included; on a thread with the default stack a deep one could overflow it
and take the process down. So parsing runs here: on a few threads of their own, each with a stack far larger
than any schema within runtime.schema_limits needs, and a request whose parse outlasts its deadline is
answered with a 400 at once (the thread finishes the work and drops it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
STACK_BYTES = 256 << 20  # reserved address space, not memory: pages are touched only as the stack grows
THREADS = 2  # one slow parse leaves another free; more would only compete with the engine for the cores


class TooSlow(Exception):
    """A parse did not finish within its deadline."""


class ParseThreads:
    """A small pool of daemon threads with large stacks; `run` awaits a call on one of them."""

    def __init__(self, threads: int = THREADS, stack_bytes: int = STACK_BYTES) -> None:
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        # threading.stack_size applies to threads started after it is set, process-wide: set it only around
        # the start of ours (under a lock, so two pools cannot interleave) and put the old value back.
        with _stack_lock:
            previous = threading.stack_size(stack_bytes)
            try:
                for i in range(threads):
                    thread = threading.Thread(target=self._serve, name=f"specquant-parse-{i}", daemon=True)
                    thread.start()
                    self._threads.append(thread)
            finally:
                threading.stack_size(previous)

    async def run(self, deadline_s: float, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on a pool thread; its exception is raised here; `TooSlow` after `deadline_s`."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._work.put((lambda: fn(*args), future))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), deadline_s)
        except asyncio.TimeoutError:
            future.cancel()  # not started yet: it never will be; started: its result is dropped
            raise TooSlow(f"took longer than {deadline_s:g} s") from None

    def close(self) -> None:
        for _ in self._threads:
            self._work.put(None)

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            call, future = item
            if not future.set_running_or_notify_cancel():  # abandoned while it waited
                continue
            try:
                future.set_result(call())
            except BaseException as e:  # the caller decides what an error means
                future.set_exception(e)


_stack_lock = threading.Lock()
