"""How the host reaches one server: a child process over stdio (runtime.mcp.stdio) or a streamable HTTP
connection, watched for its end, and the child's stderr kept apart (its tail explains a failure)."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TextIO

import anyio
import httpx2
from mcp import types
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from runtime.mcp.config import ServerConfig
from runtime.mcp.stdio import stdio_transport
from runtime.terminal_text import visible

STDERR_TAIL = 400  # characters of a failed server's stderr kept in its reason
STDERR_MAX = 1 << 20  # bytes of a server's stderr kept on disk before the file starts over

OnEnd = Callable[[str | None], None]  # the server's side ended: None for an exit or a close, else why


async def open_transport(
    config: ServerConfig, stack: AsyncExitStack, stderr: TextIO | None, on_end: OnEnd
) -> Transport:
    """The transport for `config` (entered later by its Client), calling `on_end` once the server's side
    ends; an HTTP client with the entry's headers is entered on `stack`."""
    if config.command is not None:
        return stdio_transport(
            config.name, config.command, list(config.args), dict(config.env), stderr or sys.stderr, on_end
        )
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers=dict(config.headers), timeout=httpx2.Timeout(30.0, read=300.0))
    )
    return _watched(streamable_http_client(config.url or "", http_client=http), on_end)


@functools.cache
def client_info() -> types.Implementation:
    """How we introduce ourselves to a server (the SDK's default says "mcp")."""
    try:
        version = importlib.metadata.version("specquant")
    except importlib.metadata.PackageNotFoundError:
        version = "0"
    return types.Implementation(name="specquant", version=version)


@asynccontextmanager
async def _watched(transport: Transport, on_end: OnEnd) -> AsyncIterator[tuple[Any, Any]]:
    """`transport`, with `on_end` called once its read side ends: how the host learns that a connection
    dropped between calls too."""
    async with transport as (read, write):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def forward() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                pass
            finally:
                on_end(None)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(forward)
            try:
                yield receive, write
            finally:
                tasks.cancel_scope.cancel()


def stderr_file() -> TextIO:
    """A file for a child's stderr. On POSIX it appends (O_APPEND on the descriptor the child shares), so the
    child writes at the end even after the host read the tail or started the file over."""
    stream = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 (the caller closes it)
    if sys.platform != "win32":
        import fcntl

        flags = fcntl.fcntl(stream.fileno(), fcntl.F_GETFL)
        fcntl.fcntl(stream.fileno(), fcntl.F_SETFL, flags | os.O_APPEND)
    return stream  # type: ignore[return-value]


def trim(stream: TextIO | None) -> None:
    """Start a chatty server's stderr file over once it passes STDERR_MAX: only its tail is ever read. (Not on
    Windows, where the child's writes do not append.)"""
    if stream is None or sys.platform == "win32":
        return
    with contextlib.suppress(OSError, ValueError):
        if os.fstat(stream.fileno()).st_size > STDERR_MAX:
            os.ftruncate(stream.fileno(), 0)


def stderr_tail(stream: TextIO | None) -> str:
    """The last few lines a server wrote to stderr, on one line."""
    if stream is None:
        return ""
    with contextlib.suppress(OSError, ValueError):
        raw = stream.buffer  # the child wrote to the file itself: only its tail is read, however long it is
        size = raw.seek(0, os.SEEK_END)
        raw.seek(max(0, size - 4 * STDERR_TAIL))
        text = raw.read().decode("utf-8", "replace")[-STDERR_TAIL:]
        # Shown in the window and on the terminal: the server's control characters as escapes.
        return visible(" | ".join(line.strip() for line in text.strip().splitlines() if line.strip()))
    return ""
