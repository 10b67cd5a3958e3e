"""An answer read off its JobReader (runtime.engine.reader) for a client: each Chunk, a Failure as the HTTP
error it means, and the answer whole or as server-sent events in its dialect's shape (runtime.api.dialects).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from runtime.api.dialects import Dialect, Event
from runtime.api.requests import ChatCall
from runtime.api.responses import ApiError
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


async def events(reader: JobReader, first: Chunk, dialect: Dialect, model: str, call: ChatCall) -> AsyncIterator[Event]:
    """The answer as server-sent events in its dialect's shape, from `first` to its end; an error mid-stream
    becomes the stream's last events. The reader is closed when the stream ends or is left."""
    shape = dialect.stream(model, call)
    try:
        for event in shape.start(first):
            yield event
        chunk = first
        while True:
            for event in shape.piece(chunk):
                yield event
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
        reader.close()
    for event in tail:
        yield event
