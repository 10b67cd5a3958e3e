"""A request's JSON body, read within its limits: at most `cap` bytes (a larger one is drained a little, then
refused with a 413), arriving within `deadline_s` (else a 408), and valid JSON (else a 400 that says why)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request

from runtime.api.responses import ApiError

DRAIN = 4  # an oversized body is read (and dropped) up to this many times the cap before the 413


async def read_json(request: Request, cap: int, deadline_s: float) -> Any:
    too_big = ApiError(413, f"the request body is over {cap // 1024} KiB", code="request_too_large")
    declared = request.headers.get("content-length")
    over = declared is not None and declared.isdigit() and int(declared) > cap
    body = bytearray()

    async def read() -> None:
        async for piece in request.stream():
            if over or len(body) + len(piece) > cap:
                # Read on (discarding) up to DRAIN bytes before answering 413: a client still sending
                # when the connection closes sees a broken pipe, not our answer.
                drained = len(body) + len(piece)
                async for more in request.stream():
                    drained += len(more)
                    if drained > DRAIN * cap:
                        break
                raise too_big
            body.extend(piece)
        if over:  # declared too big, and sent nothing (or hung up)
            raise too_big

    try:
        await asyncio.wait_for(read(), deadline_s)
    except asyncio.TimeoutError:
        words = f"the request body did not arrive within {deadline_s:g} s"
        raise ApiError(408, words, code="request_timeout") from None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    except ValueError as e:  # e.g. an integer of thousands of digits (Python's conversion limit)
        raise ApiError(400, f"the request body holds a value out of range: {e}") from None
