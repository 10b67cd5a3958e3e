"""Child processes: work that may crash, hang or hold memory runs in a spawned child, never in ours.

Spawned, never forked: a fork would copy this process's threads' locks, its OpenMP pool and its mapped
models (Qt and OpenMP are not fork-safe). Two shapes:
- `run`: one call whose one result comes back over a pipe, within a timeout, with `poll` called while it
  works (progress, cancel); a child that hangs is killed, one that dies says how (a signal by name).
- `start` and `stop`: a long-lived child that speaks over a duplex pipe (runtime.engine.process).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from runtime.errors import SpecQuantError

POLL_S = 0.1
EXIT_GRACE_S = 10.0  # after its result, how long a child may take to leave before it is killed


class ChildFailed(SpecQuantError):
    """The child sent no result: it hung past its timeout, was killed by a signal (`signal`, by name), or
    exited without one."""

    def __init__(self, message: str, signal: str | None = None) -> None:
        super().__init__(message)
        self.signal = signal


def signal_name(number: int) -> str:
    """SIGILL (Illegal instruction), or "signal 99" for a number the platform does not name."""
    try:
        sig = signal.Signals(number)
    except ValueError:
        return f"signal {number}"
    return f"{sig.name} ({signal.strsignal(sig) or sig.name})"


def start(
    target: Callable[..., Any],
    args: Sequence[Any],
    *,
    duplex: bool = True,
    daemon: bool = True,
    name: str | None = None,
) -> tuple[BaseProcess, Connection]:
    """Spawn `target(*args, conn)` and return the process and our end of the pipe (the child's end is closed
    here, so our end reads EOF once the child has gone)."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=duplex)
    proc = ctx.Process(target=target, args=(*args, theirs), daemon=daemon, name=name)
    proc.start()
    theirs.close()
    return proc, ours


def stop(proc: BaseProcess, conn: Connection, grace: float = 10.0, farewell: Any = None) -> None:
    """End a child: send `farewell` (if any) and wait `grace` seconds for it to leave, then kill it."""
    if proc.is_alive() and farewell is not None:
        with contextlib.suppress(OSError):
            conn.send(farewell)
        proc.join(grace)
    if proc.is_alive():
        proc.kill()
    proc.join()
    conn.close()


def run_in_child(
    target: Callable[..., Any],
    args: Sequence[Any],
    *,
    timeout: float | None = None,
    poll: Callable[[], None] | None = None,
    daemon: bool = True,
    what: str = "the child process",
) -> Any:
    """Run `target(*args, conn)` in a spawned child and return the one object it sends on `conn`.

    `poll` is called every POLL_S while the child works; whatever it raises (Cancelled) kills the child and
    propagates. ChildFailed, naming `what`, when the child hangs past `timeout` seconds, dies by a signal or
    exits without sending anything."""
    proc, conn = start(target, args, duplex=False, daemon=daemon)
    deadline = None if timeout is None else time.monotonic() + timeout
    result: tuple[Any] | None = None
    try:
        # Read as soon as the result is there: a child blocked on a full pipe would never exit.
        while result is None:
            if poll is not None:
                poll()
            if deadline is not None and time.monotonic() > deadline:
                raise ChildFailed(f"{what} hung for {timeout:.0f} s")
            try:
                if conn.poll(POLL_S):
                    result = (conn.recv(),)
                elif not proc.is_alive() and not conn.poll(0):
                    break
            except (EOFError, OSError):  # the child has gone without a word
                break
        proc.join(EXIT_GRACE_S)  # the result is in: the child is leaving
        code = proc.exitcode or 0
        if code < 0:
            raise ChildFailed(f"{what} was killed by {signal_name(-code)}", signal_name(-code))
        if result is None:
            raise ChildFailed(f"{what} exited with code {code}")
        return result[0]
    finally:
        stop(proc, conn, grace=0)
