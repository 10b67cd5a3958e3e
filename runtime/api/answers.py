"""An answer read off its JobReader (runtime.engine.reader) for a client: each Chunk, a Failure as the HTTP
error it means, and the answer whole or as server-sent events in its dialect's shape (runtime.api.dialects).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from runtime.api.dialects import Dialect
from runtime.api.requests import ChatCall
from runtime.api.responses import ApiError, usage_chunk
from runtime.engine.answer import Chunk
from runtime.engine.reader import Failure, JobReader
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


async def next_chunk(reader: JobReader, prompt: str) -> Chunk:
    """The job's next Chunk; its Failure raised as an ApiError (Status events are for the window)."""
    while True:
        event = await reader.aget()
        if isinstance(event, Failure):
            raise api_error(event, prompt)
        if isinstance(event, Chunk):
            return event


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
    return dialect.whole(model, call, chunks)


async def pieces(
    reader: JobReader, first: Chunk, dialect: Dialect, model: str, call: ChatCall
) -> AsyncIterator[tuple[dict[str, Any], Chunk]]:
    """The pieces of a streamed answer, each with the Chunk it came from."""
    shape = dialect.stream(model, call)
    head = shape.start()
    if head is not None:
        yield head, first
    chunk = first
    while True:
        piece = shape.piece(chunk)
        if piece is not None:
            yield piece, chunk
        if chunk.done:
            break
        chunk = await next_chunk(reader, dialect.prompt)
    check_complete(chunk)
    yield shape.end(chunk), chunk


async def events(
    stream: AsyncIterator[tuple[dict[str, Any], Chunk]], include_usage: bool, finish: Callable[[], None]
) -> AsyncIterator[dict[str, str]]:
    """Server-sent events of `stream`'s pieces, then usage (when asked) and [DONE]; an error mid-stream becomes
    its last event. `finish` runs when the stream ends or is left."""
    try:
        last: tuple[dict[str, Any], Chunk] | None = None
        async for last in stream:
            yield {"data": json.dumps(last[0])}
        if include_usage and last is not None:  # one more chunk: no choices, the usage
            yield {"data": json.dumps(usage_chunk(last[0], last[1]))}
    except ApiError as e:  # the status line has gone already: the error is the stream's last event
        yield {"data": json.dumps(e.body())}
    except Exception as e:
        log.debug("stream failed", exc_info=True)
        yield {"data": json.dumps(ApiError(500, readable(e), kind="server_error").body())}
    finally:
        finish()
    yield {"data": "[DONE]"}
