"""A server's child process over stdio: newline-delimited JSON-RPC on its stdin and stdout.

Our own transport, not the SDK's `stdio_client`, because a hostile or broken server must not be able to:

* silence itself: bytes that are not UTF-8 become U+FFFD (a line that is then not JSON-RPC is dropped with
  one log line, no traceback), and if reading fails anyway, or a line grows past MAX_LINE, `on_end` is
  called with the reason, so the host fails the server and its calls fail at once instead of timing out;
* hide its exit: a server whose stdout stays open in a child it left behind is still seen to exit;
* leave processes behind: each server runs in a process group of its own (a Job Object on Windows), and the
  whole group is ended when the transport closes, even after the server itself exited politely (SIGTERM,
  then SIGKILL after GRACE_S); then whatever left the group (a setsid() grandchild) and still descends from
  it or carries its mark is ended too (runtime.mcp.tree).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import anyio.to_thread
from mcp import types
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

import runtime.mcp.tree as tree
from runtime.terminal_text import visible

log = logging.getLogger(__name__)

MAX_LINE = 16 << 20  # bytes of one JSON-RPC line; a result is cut to 16,000 characters anyway
GRACE_S = 2.0  # for the server to exit once its input closes, and for its group to exit after SIGTERM
FLUSH_S = 0.5  # for messages already accepted to reach the server before its input closes
_POLL_S = 0.1  # how often the server's exit and, while it ends, its group are looked at
SHOWN = 200  # characters of a line that is not JSON-RPC shown in the log

End = Callable[[str | None], None]  # called once the read side ends: None for an exit, else what went wrong


@asynccontextmanager
async def stdio_transport(
    name: str, command: str, args: list[str], env: dict[str, str], errlog: TextIO, on_end: End
) -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) of the server `name` run as `command args` with `env` over the default
    environment; its stderr goes to `errlog`. `on_end` is called once when its output ends or cannot be read."""
    mark = tree.new_mark()
    process = await _spawn(command, args, get_default_environment() | env | {tree.MARK: mark}, errlog)
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done, reader_done = anyio.Event(), anyio.Event()
    ended = closing = False

    def end(reason: str | None) -> None:
        nonlocal ended
        if not ended:
            ended = True
            on_end(reason)

    async def read() -> None:
        reason: str | None = None
        try:
            reason = await _read_lines(name, process.stdout, to_session)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as e:
            if not closing:  # else our own shutdown closed the pipe or the session
                reason = f"its output could not be read ({type(e).__name__})"
        except Exception as e:  # the reader must never die in silence: the host hears why
            log.debug("MCP server %s: reading its output failed", name, exc_info=True)
            reason = f"its output could not be read ({type(e).__name__}: {e})"
        finally:
            reader_done.set()
            end(reason)  # first, so the host knows why before the session sees the end
            to_session.close()

    async def watch_exit() -> None:
        # A child of the server can hold its stdout open after the server exited: EOF alone is not enough.
        while process.returncode is None:
            await anyio.sleep(_POLL_S)
        with anyio.move_on_after(FLUSH_S):  # what it wrote last is read first
            await reader_done.wait()
        end(None)
        to_session.close()  # the session sees the end; pending requests fail at once

    async def write() -> None:
        try:
            async with from_session:
                async for message in from_session:
                    line = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(line.encode("utf-8", "replace"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            if not closing:  # the server stopped reading: the session must not wait on it
                end("it stopped reading its input")
                to_session.close()
        finally:
            writer_done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        tasks.start_soon(watch_exit)
        try:
            yield read_stream, write_stream
        finally:
            closing = True
            # Shielded and bounded: a cancelled caller must not leave the process (or its group) behind.
            with anyio.CancelScope(shield=True):
                read_stream.close()
                write_stream.close()
                with anyio.move_on_after(FLUSH_S):
                    await writer_done.wait()
                await _stop(name, process, mark)
                for stream in (read_stream, write_stream, to_session, from_session):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


async def _read_lines(name: str, stdout: Any, to_session: Any) -> str | None:
    """Hand each JSON-RPC line to the session until the output ends (None) or a line is too long (why)."""
    buffer = bytearray()
    warned = False
    async for chunk in stdout:
        start = len(buffer)
        buffer += chunk
        while (newline := buffer.find(b"\n", start)) >= 0:
            line = bytes(buffer[:newline])
            del buffer[: newline + 1]
            start = 0
            message = _message(line)
            if message is not None:
                await to_session.send(message)
            elif line.strip():
                # One line each, no traceback: a server that prints to stdout must not flood the terminal.
                level = logging.DEBUG if warned else logging.WARNING
                more = "" if warned else " (dropped; more such lines are logged only with -v)"
                log.log(level, "MCP server %s wrote a line that is not JSON-RPC%s: %s", name, more,
                        visible(line[:SHOWN].decode("utf-8", "replace")))
                warned = True
        if len(buffer) > MAX_LINE:
            return f"it wrote a line longer than {MAX_LINE >> 20} MiB"
    return None


def _message(line: bytes) -> SessionMessage | None:
    """The JSON-RPC message on `line` (bytes that are not UTF-8 replaced), or None. A reply that is JSON but
    not a valid message becomes an error for its request, which then fails at once instead of timing out."""
    text = line.decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError:
        pass
    # pydantic's JSON parser stops at 200 levels of nesting (a hostile tool schema reaches that), Python's
    # does not: one deep tool must cost that tool (runtime.mcp.listing), not the whole listing.
    data: Any = None
    try:
        data = json.loads(text)
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data, by_name=False))
    except (ValueError, RecursionError):
        pass
    if isinstance(data, dict) and ("result" in data or "error" in data) and _is_id(data.get("id")):
        error = types.ErrorData(code=types.INTERNAL_ERROR, message="the server's reply is not valid JSON-RPC")
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=data["id"], error=error))
    return None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


async def _spawn(command: str, args: list[str], env: dict[str, str], errlog: TextIO) -> Any:
    if sys.platform == "win32":  # a Job Object holds the server and its children (the SDK's, as it is)
        from mcp.os.win32.utilities import create_windows_process, get_windows_executable_command

        command = await anyio.to_thread.run_sync(get_windows_executable_command, command)
        return await create_windows_process(command, args, env, errlog)
    # A session of its own: the server and whatever it starts share one process group, ended as one.
    return await anyio.open_process([command, *args], env=env, stderr=errlog, start_new_session=True)


async def _stop(name: str, process: Any, mark: str) -> None:
    """Close the server's input, give it GRACE_S to exit, then end its whole group and what left it
    (always: an exited server may have left children), bounded in time."""
    before = await anyio.to_thread.run_sync(tree.survivors, process.pid, mark) if sys.platform != "win32" else []
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    with anyio.move_on_after(GRACE_S):
        while process.returncode is None:
            await anyio.sleep(_POLL_S / 10)
    if sys.platform == "win32":
        from mcp.os.win32.utilities import close_process_job, terminate_windows_process_tree

        if process.returncode is None:
            await terminate_windows_process_tree(process)
        close_process_job(process)  # kills what is left in the job (its children)
    else:
        await _end_group(name, process)
        await tree.end_tree(name, process.pid, mark, before)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()
    # asyncio's transport would otherwise wait for a pipe a survivor still holds (and warn at exit).
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    if transport is not None:
        with contextlib.suppress(Exception):
            transport.close()


async def _end_group(name: str, process: Any) -> None:
    """SIGTERM to the server's process group, SIGKILL to what is left after GRACE_S."""
    group = process.pid  # the leader of its own session: pid == pgid, even once the leader is gone
    if not _signal_group(group, signal.SIGTERM):
        return
    with anyio.move_on_after(GRACE_S):
        while _signal_group(group, 0):
            _ = process.returncode  # lets the loop reap the leader, which keeps the group alive until then
            await anyio.sleep(_POLL_S / 10)
        return
    log.info("MCP server %s: its processes ignored SIGTERM for %g s, killing them", name, GRACE_S)
    _signal_group(group, signal.SIGKILL)


def _signal_group(group: int, sig: int) -> bool:
    """Send `sig` to the group; False once no process of it is left."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member that is a zombie, or not ours: the group is still there
        return True
    return True
