"""McpHost: the user's MCP servers, started when a chat needs their tools, and their tools called with limits.

One background thread runs an asyncio loop; each server lives in one task there (`runtime.mcp.server_life`)
that opens the SDK's `Client` (a child process over stdio, or a streamable HTTP connection), lists the tools
and keeps the session open until it is stopped. Front ends call the host from any thread: `tools()` starts
what is not running and returns OpenAI function tools, `call()` runs one tool with a time-out and a cancel
event.

Every fault ends as a state or a result, never as an exception out of the host:

* a server that cannot start (no such command, exits at once, no answer within `start_timeout`) is `failed`
  with the reason, and stays so until `restart()`; the others are unaffected;
* a server that exits, or whose connection drops, during or between calls is `failed` ("exited"), the call's
  result says so, and the next use starts it again;
* a call that takes longer than its time-out, or whose cancel event is set (a Stop in another thread), returns
  at once with a result saying so; the SDK tells the server the request was cancelled;
* a server whose output cannot be read (runtime.mcp.stdio: a line too long, a broken pipe) is `failed` with
  that reason, and a call in flight fails at once instead of waiting for its time-out;
* a reply that is not valid JSON-RPC (bytes that are not UTF-8 included), or a tool that cannot be offered
  (an unusable or oversized schema, a huge description: `skipped()` says which and why), costs that reply or
  that tool only.

Tools are offered as `server__tool`; a table that lives as long as the host maps each name to its (server,
tool), and a name never changes hands (runtime.mcp.listing.Names). `close()` (also run at interpreter exit)
stops every server within a bounded time: each child's input is closed, then its whole process group (what
it started included) is terminated and killed, each wait bounded.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import json
import logging
import threading
import time
import weakref
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from runtime.mcp.config import McpConfig, ServerConfig
from runtime.mcp.listing import Listing, Names, SkippedTool
from runtime.mcp.results import RESULT_LIMIT, ToolResult, cut_text
from runtime.mcp.server_life import CLOSE_TIMEOUT as CLOSE_TIMEOUT
from runtime.mcp.server_life import Server, ServerLives
from runtime.mcp.server_life import ServerStatus as ServerStatus

log = logging.getLogger(__name__)

CALL_TIMEOUT = 60.0  # seconds a tool call may take
START_TIMEOUT = 30.0  # seconds from launch to a listed set of tools (npx may download the server first)
_POLL_S = 0.05  # how often a waiting caller looks at its cancel event
_T = TypeVar("_T")


class McpHost(ServerLives):
    """The servers of one `mcp.json` and their tools; safe to use from any thread.

    `tools()` lists the OpenAI function tools of the servers named (all enabled ones by default), starting
    them first; `call(name, arguments)` runs one and returns a ToolResult. Names are `server__tool`.
    """

    def __init__(
        self,
        servers: McpConfig | Mapping[str, ServerConfig] | Iterable[ServerConfig],
        *,
        start_timeout: float = START_TIMEOUT,
        result_limit: int = RESULT_LIMIT,
    ) -> None:
        if isinstance(servers, McpConfig):
            configs = list(servers.servers.values())
        elif isinstance(servers, Mapping):
            configs = list(servers.values())
        else:
            configs = list(servers)
        self.start_timeout = start_timeout
        self.result_limit = result_limit
        self._servers = {c.name: Server(c) for c in configs}
        self._names = Names()  # offered name of each (server, tool), never reused for another
        self._listing = Listing()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-host", daemon=True)
        self._thread.start()
        # Through a weak reference: the exit hook must not keep a dropped host alive. A host dropped without
        # running servers (their tasks would hold it) only needs its loop thread ended.
        self._at_exit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._at_exit)
        self._finalizer = weakref.finalize(self, _stop_loop, self._loop)
        self._finalizer.atexit = False  # at exit, `_close_at_exit` closes the host properly

    # --- what front ends call --------------------------------------------------------------------------

    def status(self) -> dict[str, ServerStatus]:
        """Each server's state, in the file's order."""
        return {name: s.status for name, s in self._servers.items()}

    def start(self, names: Iterable[str] | None = None) -> dict[str, ServerStatus]:
        """Start the servers named (all enabled ones by default) that are not running, and wait until each is
        ready or failed (at most `start_timeout`, all at once)."""
        wanted = self._pick(names)
        if not self._closed:
            try:
                self._run(self._start_all(wanted), self.start_timeout + 2 * CLOSE_TIMEOUT)
            except concurrent.futures.TimeoutError:  # the states say where each one is
                log.warning("MCP servers still starting after %g s", self.start_timeout + 2 * CLOSE_TIMEOUT)
        return {s.name: s.status for s in wanted}

    def tools(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The OpenAI function tools of the servers named (all enabled ones by default), started as needed."""
        ready = {name for name, status in self.start(names).items() if status.state == "ready"}
        listing = self.listing()
        return [t for t in listing.tools if listing.routes[t["function"]["name"]][0] in ready]

    def listing(self) -> Listing:
        """The tools of the servers that are ready: entries, names back to (server, tool), and tools skipped."""
        return self._listing

    def skipped(self) -> list[SkippedTool]:
        """The tools of ready servers that are not offered to the model, each with its server and the reason."""
        return list(self._listing.skipped)

    def route(self, name: str) -> tuple[str, str] | None:
        """The (server, tool) that a tool name offered to the model stands for."""
        return self._listing.routes.get(name)

    def call(
        self,
        name: str,
        arguments: str | Mapping[str, Any] | None = None,
        timeout: float = CALL_TIMEOUT,
        cancel: threading.Event | None = None,
    ) -> ToolResult:
        """Run one tool (by its offered name) with `arguments` (a JSON text as the model wrote it, or a mapping).

        Returns within about `timeout` seconds, or within ~0.05 s of `cancel` being set; a fault of any kind
        is a result with `is_error`, never an exception.
        """
        began = time.monotonic()

        def done(text: str, is_error: bool = True, server: str = "") -> ToolResult:
            text, cut = cut_text(text, self.result_limit)
            return ToolResult(text, is_error, time.monotonic() - began, server, cut)

        route = self.route(name)
        if route is None and any(s.status.state == "stopped" for s in self._pick(None)):
            self.start()  # a call before any listing (a chat resumed): the servers' tools name the route
            route = self.route(name)
        if route is None:
            return done(f"There is no tool named {name!r}.")
        server_name, tool = route
        args, problem = _arguments(arguments)
        if problem:
            return done(problem, server=server_name)
        if self._closed:
            return done("The tools have been shut down.", server=server_name)
        server = self._servers[server_name]
        future = asyncio.run_coroutine_threadsafe(self._call(server, tool, args, timeout), self._loop)
        # The loop enforces the time-out; this is the backstop if the loop itself is stuck.
        deadline = began + timeout + self.start_timeout + CLOSE_TIMEOUT + 1.0
        while True:
            finished, _ = concurrent.futures.wait([future], timeout=_POLL_S)
            if finished:
                break
            if cancel is not None and cancel.is_set():
                future.cancel()  # cancels the task on the loop; the SDK tells the server
                return done("The call was cancelled by the user.", server=server_name)
            if time.monotonic() > deadline:
                future.cancel()
                return done(f"The call timed out after {timeout:g} s.", server=server_name)
        try:
            text, is_error = future.result()
        except concurrent.futures.CancelledError:
            return done("The call was cancelled.", server=server_name)
        except Exception as e:  # a bug in the host: still a result, with a traceback in the log
            log.exception("MCP call %s failed", name)
            return done(f"The call failed: {type(e).__name__}: {e}", server=server_name)
        return done(text, is_error, server_name)

    def restart(self, name: str) -> ServerStatus:
        """Stop the server if it runs, and start it again (a failed one too); its new status."""
        server = self._servers[name]
        if not self._closed:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                self._run(self._stop(server), CLOSE_TIMEOUT + 2.0)
                server.restart_on_use = True
                self._run(self._start_all([server]), self.start_timeout + 2 * CLOSE_TIMEOUT)
        return server.status

    def stop(self, name: str) -> None:
        """Stop one server (a later use starts it again)."""
        if not self._closed:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                self._run(self._stop(self._servers[name]), CLOSE_TIMEOUT + 2.0)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop every server and the loop; returns within about `timeout` seconds even if a server ignores it."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        self._finalizer.detach()
        with contextlib.suppress(Exception):
            self._run(self._stop_all(timeout), timeout + 1.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> McpHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- on the loop -------------------------------------------------------------------------------------

    def _pick(self, names: Iterable[str] | None) -> list[Server]:
        if names is None:
            return [s for s in self._servers.values() if not s.config.disabled]
        return [self._servers[n] for n in names if n in self._servers]

    def _run(self, coroutine: Coroutine[Any, Any, _T], timeout: float) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)


def _stop_loop(loop: asyncio.AbstractEventLoop) -> None:
    with contextlib.suppress(RuntimeError):  # already closed
        loop.call_soon_threadsafe(loop.stop)


def _close_at_exit(ref: weakref.ref[McpHost]) -> None:
    host = ref()
    if host is not None:
        host.close()


def _arguments(arguments: str | Mapping[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """The call's arguments as an object, or the problem the model should read."""
    if arguments is None or arguments == "":
        return {}, None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            return {}, f"The arguments are not valid JSON: {e.msg} at character {e.pos}."
    if not isinstance(arguments, Mapping):
        return {}, "The arguments must be a JSON object."
    return dict(arguments), None
