"""The server's request log: each request's method, raw path, status and time, never its headers or body."""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("specquant.server")


class RequestLog:
    """Logs each request's method, path, status and time; never its headers or body. A request whose client
    left before its response ended is logged as cancelled (with the status it had begun, if any), not as the
    status nobody received."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500
        begun = ended = left = False  # the response's status sent; its last byte sent; the client gone first

        async def send_status(message: Message) -> None:
            nonlocal status, begun, ended
            if message["type"] == "http.response.start" and not left:
                status, begun = message["status"], True
            elif message["type"] == "http.response.start":
                status = message["status"]
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                ended = True
            await send(message)

        async def receive_watched() -> Message:
            nonlocal left
            message = await receive()
            if message["type"] == "http.disconnect" and not ended:
                left = True
            return message

        try:
            await self.app(scope, receive_watched, send_status)
        finally:
            ms = (time.perf_counter() - started) * 1000
            if left:
                when = f"after {status} began" if begun else "before the answer began"
                log.info("%s %s cancelled %.0f ms (the client left %s)", scope["method"], raw_path(scope), ms, when)
            else:
                log.info("%s %s %d %.0f ms", scope["method"], raw_path(scope), status, ms)


def raw_path(scope: Scope) -> str:
    """The path as the client sent it, still percent-encoded and without control characters: a decoded
    "%0A" would start a forged log line."""
    raw = scope.get("raw_path") or scope["path"].encode()
    text = raw.decode("ascii", "backslashreplace")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)[:200]
