"""An answer read off its JobReader (runtime.engine.reader) for a client: each Chunk, a Failure as the HTTP
error it means, and the answer whole or as server-sent events in its dialect's shape (runtime.api.dialects).

A stream opens (its headers and opening events sent) as soon as its request is accepted: when the engine
says the prompt fits and its reading begins, at its first Chunk, or after `hold_s` at the latest (a queue or a
model load ahead of it), so that a client waiting through a long prefill sees the answer begun, and the
keep-alive events that follow (runtime.api.server), instead of a silent socket it would time out and retry. A
refusal that comes before it opens (a prompt too long for the context) is still the HTTP error it means.

In a stream, a tool call whose arguments went out in pieces and then failed (its check, or a cut inside it:
runtime.engine.call_parser) ends the stream with its dialect's error (`failed_call`), its block never closed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from runtime.api.dialects import Dialect, Event
from runtime.api.requests import ChatCall
from runtime.api.responses import ApiError
from runtime.engine.answer import Chunk
from runtime.engine.reader import Failure, JobReader, Status
from runtime.errors import readable

log = logging.getLogger("specquant.server")


def api_error(failure: Failure, prompt: str) -> ApiError:
    """The HTTP error a job's Failure means. `prompt`: the request's field that a prompt too long for the
    context is blamed on."""
    if failure.kind == "context":  # OpenAI's code: clients look for it to shorten the chat and retry
        return ApiError(400, failure.reason, prompt, code="context_length_exceeded")
    if failure.kind in ("user", "model"):
        return ApiError(400, failure.reason)
    if failure.kind == "cancelled":
        return ApiError(503, "the request was cancelled (the server is stopping)", kind="server_error")
    if failure.kind == "worker":  # a worker down or lost (--rpc): the next request answers here
        return ApiError(503, failure.reason, kind="server_error")
    return ApiError(500, failure.reason, kind="server_error")


async def next_chunk(reader: JobReader, prompt: str, pending: asyncio.Task[Any] | None = None) -> Chunk:
    """The job's next Chunk (`pending`: a read already in flight, taken first); its Failure raised as an
    ApiError (Status events are for the window)."""
    while True:
        if pending is not None:
            event, pending = await pending, None
        else:
            event = await reader.aget()
        if isinstance(event, Failure):
            raise api_error(event, prompt)
        if isinstance(event, Chunk):
            return event


@dataclass
class Opening:
    """Where a stream stood when it opened: its first Chunk if that came first, else the read in flight."""

    first: Chunk | None
    pending: asyncio.Task[Any] | None = None

    def drop(self) -> None:
        """The stream will not run (its client went): stop the read in flight."""
        if self.pending is not None and not self.pending.done():
            self.pending.cancel()


async def opening(reader: JobReader, prompt: str, hold_s: float) -> Opening:
    """Wait until the stream may open: the first Chunk, the engine's word that the prompt is being read, or
    `hold_s` seconds. A Failure before then is raised as its ApiError."""
    deadline = asyncio.get_running_loop().time() + hold_s
    while True:
        # One read in flight, never cancelled while it may hold an event: a read the hold outlasts goes on in
        # the stream, so no event is lost.
        read = asyncio.ensure_future(reader.aget())
        left = deadline - asyncio.get_running_loop().time()
        done, _ = await asyncio.wait({read}, timeout=max(0.0, left))
        if not done:
            return Opening(None, read)
        event = read.result()
        if isinstance(event, Failure):
            raise api_error(event, prompt)
        if isinstance(event, Chunk):
            return Opening(event)
        if isinstance(event, Status) and event.reading:
            return Opening(None)


def prepared(call: ChatCall, body: dict[str, Any]) -> ChatCall:
    """The request as the engine answers it: under its cache key (`cache_key`), and, streamed, with each call
    the model's own opener token begins streaming its arguments (ToolRequest.streamed)."""
    options = dataclasses.replace(call.options, cache_key=cache_key(body))
    if call.stream and options.tools is not None:
        options = dataclasses.replace(options, tools=dataclasses.replace(options.tools, streamed=True))
    return dataclasses.replace(call, options=options)


def cache_key(body: dict[str, Any]) -> str:
    """Which prompt prefixes a request may reuse (ChatOptions.cache_key): API clients never share the window's,
    and a client that names its own cache (`prompt_cache_key`, else `user`) shares only with that name."""
    own = body.get("prompt_cache_key") or body.get("user")
    return f"api:{own}" if isinstance(own, str) else "api"


def failed_call(chunk: Chunk) -> ApiError | None:
    """The error that ends a stream whose call failed after its first pieces went out (None: none did). No
    dialect can take a call back, so the answer fails: clients raise it, and none runs what it had of the call."""
    problem = next((d.problem for d in chunk.calls if d.problem is not None), None)
    if problem is None:
        return None
    words = f"the model's tool call failed after it began streaming: {problem}; nothing of it is a call"
    return ApiError(500, words, kind="server_error", code="invalid_tool_call")


def check_complete(last: Chunk) -> None:
    """An answer stopped by our cancel (the server is stopping, or its client fell behind) is no answer."""
    if last.stats.stop_reason == "cancelled":
        raise ApiError(503, "the answer was cancelled (the server is stopping)", kind="server_error")


async def whole(reader: JobReader, first: Chunk, dialect: Dialect, model: str, call: ChatCall) -> dict[str, Any]:
    """The whole answer, from `first` to its last Chunk."""
    chunks, last = [first], first
    while not last.done:
        last = await next_chunk(reader, dialect.prompt)
        chunks.append(last)
    check_complete(last)
    failed = next((e for e in map(failed_call, chunks) if e is not None), None)  # never, unstreamed: still no call
    if failed is not None:
        raise failed
    return dialect.whole(model, call, chunks)


async def events(
    reader: JobReader, begun: Opening, dialect: Dialect, model: str, call: ChatCall
) -> AsyncIterator[Event]:
    """The answer as server-sent events in its dialect's shape, from its opening to its end; an error mid-stream
    becomes the stream's last events. The reader is closed when the stream ends or is left."""
    shape = dialect.stream(model, call)
    try:
        first = begun.first
        for event in shape.start(first.stats.prompt_tokens if first is not None else None):
            yield event
        chunk = first if first is not None else await next_chunk(reader, dialect.prompt, begun.pending)
        while True:
            for event in shape.piece(chunk):
                yield event
            failed = failed_call(chunk)
            if failed is not None:
                raise failed
            if chunk.done:
                break
            chunk = await next_chunk(reader, dialect.prompt)
        check_complete(chunk)
        tail = shape.end(chunk)
    except ApiError as e:  # the status line has gone already: the error is the stream's last event
        tail = shape.failure(e)
    except Exception as e:
        log.debug("stream failed", exc_info=True)
        tail = shape.failure(ApiError(500, readable(e), kind="server_error"))
    finally:
        begun.drop()
        reader.close()
    for event in tail:
        yield event
