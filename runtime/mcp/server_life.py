"""Each MCP server's life on the host's loop (runtime.mcp.host.McpHost runs them): start it (connect, list its
tools), keep it while it is used, notice when it exits or its connection drops, call its tools, stop it. Every
fault ends as the server's `ServerStatus` or a call's result, never as an exception out of the host."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal, TextIO

import anyio
from mcp import Client, MCPError, types

from runtime.mcp.config import RESERVED, ServerConfig, missing_command
from runtime.mcp.connection import client_info, open_transport, stderr_file, stderr_tail, trim
from runtime.mcp.listing import Listing, Names, build_listing, skipped_lines
from runtime.mcp.results import content_text
from runtime.terminal_text import visible

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # anyio's dependency there

log = logging.getLogger("runtime.mcp.host")


State = Literal["stopped", "starting", "ready", "failed"]
CLOSE_TIMEOUT = 8.0  # runtime.mcp.stdio shuts down within ~5 s: 0.5 s flush, 2 s to exit, 2 s after SIGTERM


@dataclass(frozen=True)
class ServerStatus:
    """Where one server stands; `reason` says why it is failed (or stopped: "disabled", "not started yet")."""

    state: State
    reason: str = ""
    tools: int = 0  # tools offered (listed and usable)


class Server:
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


class ServerLives:
    """The loop's side of `McpHost`: each server's life, its calls and its end, and the tools offered from the
    servers that are ready. Runs only on the host's loop; the host's methods hand it work from any thread."""

    start_timeout: float
    _servers: dict[str, Server]
    _names: Names  # offered name of each (server, tool), never reused for another
    _listing: Listing
    _closed: bool

    async def _start_all(self, servers: Iterable[Server]) -> None:
        await asyncio.gather(*(self._start(s) for s in servers))

    async def _start(self, server: Server) -> None:
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

    async def _serve(self, server: Server) -> None:
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

    async def _live(self, server: Server) -> None:
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

    def _start_expired(self, server: Server, scope: anyio.CancelScope) -> None:
        if server.status.state == "starting":
            self._failed(server, f"it did not start within {self.start_timeout:g} s")
            if server.settled is not None:
                server.settled.set()
            scope.cancel()

    async def _call(self, server: Server, tool: str, args: dict[str, Any], timeout: float) -> tuple[str, bool]:
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
                return (
                    f"The tool's server {server.name!r} stopped during the call: {why} (it will be started "
                    "again on the next call).",
                    True,
                )
            return f"The server answered with an error ({e.code}): {e.message}", True
        except Exception as e:  # an invalid reply, an output that fails its schema: this call only
            return f"The call failed: {_describe(e)}", True
        finally:
            trim(server.stderr)
        return content_text(result), bool(result.is_error)

    async def _stop(self, server: Server) -> None:
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

    def _set(self, server: Server, status: ServerStatus) -> None:
        server.status = status

    def _ended(self, server: Server, reason: str | None) -> None:
        """The transport's read side ended (on the loop): wake the server's life, with the reason if any."""
        if reason is not None and not server.stopping:
            server.end_reason = reason
        if server.wake is not None:
            server.wake.set()

    def _failed(self, server: Server, reason: str) -> None:
        tail = stderr_tail(server.stderr)
        # Shown in the window and on the terminal: a server's own text (its errors) with control characters escaped.
        reason = visible(f"{reason} (stderr: {tail})" if tail else reason)
        log.warning("MCP server %s failed: %s", server.name, reason)
        self._set(server, ServerStatus("failed", reason))

    def _crashed(self, server: Server, reason: str) -> None:
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
