"""McpHost: the user's MCP servers, started when a chat needs their tools, and their tools called with limits.

One background thread runs an asyncio loop; each server lives in one task there that opens the SDK's `Client`
(a child process over stdio, or a streamable HTTP connection), lists the tools and keeps the session open
until it is stopped. Front ends call the host from any thread: `tools()` starts what is not running and
returns OpenAI function tools, `call()` runs one tool with a time-out and a cancel event.

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
import sys
import threading
import time
import weakref
from collections.abc import Coroutine, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal, TextIO, TypeVar

import anyio
from mcp import Client, MCPError, types

from runtime.mcp.config import RESERVED, McpConfig, ServerConfig, missing_command
from runtime.mcp.connection import client_info, open_transport, stderr_file, stderr_tail, trim
from runtime.mcp.listing import Listing, Names, SkippedTool, build_listing, skipped_lines
from runtime.mcp.results import RESULT_LIMIT, ToolResult, content_text, cut_text
from runtime.terminal_text import visible

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # anyio's dependency there

log = logging.getLogger(__name__)

State = Literal["stopped", "starting", "ready", "failed"]
CALL_TIMEOUT = 60.0  # seconds a tool call may take
START_TIMEOUT = 30.0  # seconds from launch to a listed set of tools (npx may download the server first)
CLOSE_TIMEOUT = 8.0  # runtime.mcp.stdio shuts down within ~5 s: 0.5 s flush, 2 s to exit, 2 s after SIGTERM
_POLL_S = 0.05  # how often a waiting caller looks at its cancel event
_T = TypeVar("_T")


@dataclass(frozen=True)
class ServerStatus:
    """Where one server stands; `reason` says why it is failed (or stopped: "disabled", "not started yet")."""

    state: State
    reason: str = ""
    tools: int = 0  # tools offered (listed and usable)


class _Server:
    """One server's live parts; its fields change only on the host's loop."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        reason = "disabled in mcp.json" if config.disabled else "not started yet"
        self.status = ServerStatus("stopped", reason)  # replaced whole, so other threads read a consistent one
        self.restart_on_use = False  # after a crash, not after a failed start (that waits for `restart`)
        self.listed: list[types.Tool] = []
        self.client: Client | None = None
        self.task: asyncio.Task[None] | None = None
        self.settled: asyncio.Event | None = None  # set once a start ends: ready or failed
        self.wake: anyio.Event | None = None  # stop asked, or the connection closed
        self.end_reason: str | None = None  # why the connection ended, where it was not a plain exit
        self.stopping = False
        self.stderr: TextIO | None = None

    @property
    def name(self) -> str:
        return self.config.name


class McpHost:
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
        self._servers = {c.name: _Server(c) for c in configs}
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

    def _pick(self, names: Iterable[str] | None) -> list[_Server]:
        if names is None:
            return [s for s in self._servers.values() if not s.config.disabled]
        return [self._servers[n] for n in names if n in self._servers]

    def _run(self, coroutine: Coroutine[Any, Any, _T], timeout: float) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _start_all(self, servers: Iterable[_Server]) -> None:
        await asyncio.gather(*(self._start(s) for s in servers))

    async def _start(self, server: _Server) -> None:
        """Start one server unless it runs, is disabled, or failed to start (until `restart`); wait for it."""
        if server.config.disabled or self._closed:
            return
        state = server.status.state
        if state == "stopped" or (state == "failed" and server.restart_on_use):
            if server.task is not None:  # the last life is still ending (a crash just seen)
                await self._stop(server)
            server.settled = asyncio.Event()
            self._set(server, ServerStatus("starting"))
            server.task = asyncio.create_task(self._serve(server), name=f"mcp {server.name}")
        if server.settled is not None and server.status.state == "starting":
            await server.settled.wait()

    async def _serve(self, server: _Server) -> None:
        """One server's life: connect, list, wait for stop or a dropped connection, disconnect."""
        config = server.config
        server.stopping, server.restart_on_use, server.wake = False, False, anyio.Event()
        server.end_reason = None
        log.info("starting MCP server %s: %s", server.name, config.summary())
        with contextlib.ExitStack() as files:
            if config.command is not None:  # its stderr is kept apart from ours, for the reason of a failure
                server.stderr = files.enter_context(stderr_file())
            try:
                await self._live(server)
            except _StartFailed as e:
                self._failed(server, str(e))
            except Exception as e:  # whatever the SDK raises: this server's failure, not the host's
                if server.status.state == "starting":
                    self._failed(server, _describe(e))
                else:  # a fault while disconnecting
                    log.debug("MCP server %s: %s while stopping", server.name, _describe(e))
            finally:
                server.client, server.task, server.stderr = None, None, None
                if server.status.state in ("starting", "ready"):
                    self._set(server, ServerStatus("stopped", "stopped"))
                # A crashed or stopped server's tools stay offered (the next call starts it again); those of
                # a server that could not start again go.
                if server.listed and server.status.state == "failed" and not server.restart_on_use:
                    server.listed = []
                    self._relist()
                if server.settled is not None:
                    server.settled.set()

    async def _live(self, server: _Server) -> None:
        if server.name.strip().casefold() == RESERVED:  # would share the built-in tools' approvals
            raise _StartFailed(f"the name {RESERVED!r} is SpecQuant's own tools: give the server another name")
        if (problem := missing_command(server.config)) is not None:
            raise _StartFailed(problem)
        assert server.wake is not None
        # One scope for the whole life, so every context below is entered and left inside it. A start that
        # takes too long is failed at once (the waiters go on), then cancelled: ending the child takes a while.
        with anyio.CancelScope() as scope:
            expiry = asyncio.get_running_loop().call_later(self.start_timeout, self._start_expired, server, scope)
            try:
                async with AsyncExitStack() as stack:
                    assert server.wake is not None
                    transport = await open_transport(
                        server.config, stack, server.stderr, functools.partial(self._ended, server)
                    )
                    client = await stack.enter_async_context(Client(transport, client_info=client_info()))
                    listed = await _list_tools(client)
                    expiry.cancel()
                    server.client, server.listed = client, listed
                    self._set(server, ServerStatus("ready"))
                    self._relist()
                    log.info("MCP server %s is ready with %d tools", server.name, len(listed))
                    for line in skipped_lines(s for s in self._listing.skipped if s.server == server.name):
                        log.info("%s", visible(line))  # one per server; the CLI and the window show them
                    if server.settled is not None:
                        server.settled.set()
                    await server.wake.wait()
                    server.client = None
                    if not server.stopping:
                        self._crashed(server, server.end_reason or _gone(server.config))
            finally:
                expiry.cancel()

    def _start_expired(self, server: _Server, scope: anyio.CancelScope) -> None:
        if server.status.state == "starting":
            self._failed(server, f"it did not start within {self.start_timeout:g} s")
            if server.settled is not None:
                server.settled.set()
            scope.cancel()

    async def _call(self, server: _Server, tool: str, args: dict[str, Any], timeout: float) -> tuple[str, bool]:
        if server.status.state != "ready":
            await self._start_all([server])
        client = server.client
        if server.status.state != "ready" or client is None:
            return f"The tool's server {server.name!r} is not running: {server.status.reason}.", True
        try:
            with anyio.fail_after(timeout):
                result = await client.call_tool(tool, args)
        except TimeoutError:
            return f"The call timed out after {timeout:g} s.", True
        except MCPError as e:
            if e.code == types.CONNECTION_CLOSED:
                why = server.end_reason or f"{_gone(server.config)} during a call"
                self._crashed(server, why)
                return (f"The tool's server {server.name!r} stopped during the call: {why} (it will be started "
                        "again on the next call).", True)
            return f"The server answered with an error ({e.code}): {e.message}", True
        except Exception as e:  # an invalid reply, an output that fails its schema: this call only
            return f"The call failed: {_describe(e)}", True
        finally:
            trim(server.stderr)
        return content_text(result), bool(result.is_error)

    async def _stop(self, server: _Server) -> None:
        task = server.task
        if task is None:
            return
        server.stopping = True
        if server.wake is not None:
            server.wake.set()
        if server.status.state == "starting":
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 1.0)

    async def _stop_all(self, timeout: float) -> None:
        tasks = [s.task for s in self._servers.values() if s.task is not None]
        for server in self._servers.values():
            server.stopping = True
            if server.wake is not None:
                server.wake.set()
            if server.status.state == "starting" and server.task is not None:
                server.task.cancel()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:  # an HTTP server that does not answer its session's end, say
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)

    def _set(self, server: _Server, status: ServerStatus) -> None:
        server.status = status

    def _ended(self, server: _Server, reason: str | None) -> None:
        """The transport's read side ended (on the loop): wake the server's life, with the reason if any."""
        if reason is not None and not server.stopping:
            server.end_reason = reason
        if server.wake is not None:
            server.wake.set()

    def _failed(self, server: _Server, reason: str) -> None:
        tail = stderr_tail(server.stderr)
        # Shown in the window and on the terminal: a server's own text (its errors) with control characters escaped.
        reason = visible(f"{reason} (stderr: {tail})" if tail else reason)
        log.warning("MCP server %s failed: %s", server.name, reason)
        self._set(server, ServerStatus("failed", reason))

    def _crashed(self, server: _Server, reason: str) -> None:
        """A server that was ready is gone: failed, started again on next use."""
        if server.status.state != "ready":
            return
        self._failed(server, reason)
        server.restart_on_use = True
        if server.wake is not None:
            server.wake.set()  # the life task leaves its contexts, which ends the process if still there

    def _relist(self) -> None:
        ready = [(s.name, s.listed) for s in self._servers.values() if s.listed]
        self._listing = build_listing(ready, self._names)
        offered: dict[str, int] = {}
        for server, _ in self._listing.routes.values():
            offered[server] = offered.get(server, 0) + 1
        for s in self._servers.values():
            if s.status.state == "ready":
                self._set(s, ServerStatus("ready", "", offered.get(s.name, 0)))


class _StartFailed(Exception):
    """A server that cannot be started, with the reason in one line."""


def _stop_loop(loop: asyncio.AbstractEventLoop) -> None:
    with contextlib.suppress(RuntimeError):  # already closed
        loop.call_soon_threadsafe(loop.stop)


def _close_at_exit(ref: weakref.ref[McpHost]) -> None:
    host = ref()
    if host is not None:
        host.close()


async def _list_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a server whose pages never end cannot hold the start forever
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


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


def _gone(config: ServerConfig) -> str:
    return "the server exited" if config.command is not None else "the connection to the server closed"


def _describe(e: BaseException) -> str:
    """One line for an exception, the innermost of an exception group (anyio's task groups wrap them)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, MCPError):
        return "the connection closed" if e.code == types.CONNECTION_CLOSED else f"error {e.code}: {e.message}"
    if isinstance(e, FileNotFoundError) and e.filename:
        return f"{e.filename!r} was not found"
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
