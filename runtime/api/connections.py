"""uvicorn's h11 protocol with the limits a connection needs so that idle or stalled clients cannot hold the
server (docs/api.md, "Security"):

- a request's head must arrive whole within `header_timeout_s` of the connection opening (or of the last
  response, between keep-alive requests), else the connection is closed: uvicorn itself has no such limit
  once any byte has come, so a socket that sends nothing, or a head a byte at a time, was held for ever;
- when a new connection would reach uvicorn's `limit_concurrency` (beyond which it answers 503), the
  oldest idle connection (no request in flight) is dropped to make room; one with a request in flight is
  never dropped for this;
- each connection's kernel send buffer is set to SEND_BUFFER (the kernel otherwise grows it to megabytes)
  and the transport's own buffer to WRITE_BUFFER, so a client that stops reading blocks the server's sends
  after a few hundred KiB at most: sse-starlette's send time-out (the server's stall_s) then cancels the
  answer, and a connection whose sends stay blocked for stall_s is aborted, freeing its slot.

Only portable socket options are used (SO_SNDBUF exists on Linux, macOS and Windows). Linux's SIOCOUTQ
would tell the unacknowledged bytes, but only on Linux, only by polling each socket, and an acknowledgement
still means the client's kernel took the data, not that the client read it; bounding the server's own
buffers makes "the sends are blocked" mean "the client has stopped taking data" everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("specquant.server")
SEND_BUFFER = 64 * 1024  # bytes of kernel send buffer per connection (Linux doubles it for bookkeeping)
WRITE_BUFFER = 16 * 1024  # the transport's high-water mark: beyond it uvicorn's sends wait for the client


class GuardedH11(H11Protocol):
    """H11Protocol with a header time-out, an idle-connection limit and a write-stall limit; `protocol()`
    makes the class with the server's time-outs."""

    header_timeout_s: float = 10.0
    stall_s: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting_since = 0.0  # loop time since when it has had no request in flight
        self.head_timer: asyncio.TimerHandle | None = None
        self.stall_timer: asyncio.TimerHandle | None = None

    # --- asyncio's Protocol interface ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):  # an option a platform refuses only costs the early stall
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        transport.set_write_buffer_limits(high=WRITE_BUFFER)
        self._await_head()
        self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        # The client has not taken what was sent: if it takes nothing more for stall_s it has gone.
        super().pause_writing()
        if self.stall_timer is None:
            self.stall_timer = self.loop.call_later(self.stall_s, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.stall_timer is not None:
            self.stall_timer.cancel()
            self.stall_timer = None

    # --- uvicorn's hooks -----------------------------------------------------------------------------
    def handle_events(self) -> None:
        super().handle_events()
        if self.in_flight() and self.head_timer is not None:  # a whole head has come: its request runs
            self.head_timer.cancel()
            self.head_timer = None

    def on_response_complete(self) -> None:
        # Armed before uvicorn handles a pipelined request (which disarms it again in handle_events).
        if not self.transport.is_closing():
            self._await_head()
        super().on_response_complete()

    # --- the limits ----------------------------------------------------------------------------------
    def in_flight(self) -> bool:
        """Whether a request is being answered here (uvicorn's own test in its graceful shutdown)."""
        return self.cycle is not None and not self.cycle.response_complete

    def _await_head(self) -> None:
        self.waiting_since = self.loop.time()
        if self.head_timer is not None:
            self.head_timer.cancel()
        self.head_timer = self.loop.call_later(self.header_timeout_s, self._head_late)

    def _head_late(self) -> None:
        self.head_timer = None
        if not self.in_flight() and not self.transport.is_closing():
            log.debug("closing a connection that sent no whole request head within %g s", self.header_timeout_s)
            self.transport.close()

    def _stalled(self) -> None:
        self.stall_timer = None
        log.debug("aborting a connection whose client took no data for %g s", self.stall_s)
        self.transport.abort()  # close() would wait for the unsent data for ever

    def _make_room(self) -> None:
        """At the connection limit, drop the oldest idle connections so this one can be served."""
        limit = self.limit_concurrency
        if limit is None:
            return
        while len(self.connections) >= limit:
            idle = [
                c for c in self.connections
                if c is not self and isinstance(c, GuardedH11) and (not c.in_flight() or c.transport.is_closing())
            ]
            if not idle:
                return  # every other connection is being answered: uvicorn's 503 says "later"
            oldest = min(idle, key=lambda c: c.waiting_since)
            log.debug("dropping the oldest idle connection to make room for a new one")
            # Counted out now, not when asyncio reports it lost: this connection's request must not see it.
            self.connections.discard(oldest)
            oldest.transport.abort()

    def _cancel_timers(self) -> None:
        for timer in (self.head_timer, self.stall_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.stall_timer = None


def protocol(header_timeout_s: float, stall_s: float) -> type[GuardedH11]:
    """The protocol class for uvicorn.Config(http=...) with these time-outs."""
    return type("GuardedH11", (GuardedH11,), {"header_timeout_s": header_timeout_s, "stall_s": stall_s})
