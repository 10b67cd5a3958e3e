"""What keeps web pages out of the local API: a server on 127.0.0.1 is reachable by every page the user
opens, so loopback alone is no boundary (llama-server, Ollama and Jupyter each learned this).

- **Host.** On a loopback bind only a loopback name is accepted (`127.0.0.1`, `localhost`, `[::1]`, with
  or without the port). A page that rebinds its own domain's DNS to 127.0.0.1 still sends its domain as the
  Host, so it is refused before it can start, read or list anything.
- **Origin.** A request that names an Origin not given with `--cors-origin` is refused: browsers send one
  with every cross-site request, so no page can use the API unless the user named it.
- **Content type.** A POST must say `application/json`: an HTML form can only send `text/plain`,
  `multipart/form-data` or `application/x-www-form-urlencoded`, never that, without a CORS preflight.

Starlette's TrustedHostMiddleware answers in plain text and cannot read an IPv6 Host with a port; the API's
errors are OpenAI's shape, so the checks are these few lines.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from runtime.api.error_shapes import error_response
from runtime.api.responses import ApiError

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})


def host_name(host: str) -> str:
    """The name in a Host header, without its port, lower-cased ("[::1]:8088" -> "[::1]")."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end > 0 else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def refusal(method: str, headers: Headers, loopback: bool, origins: Iterable[str]) -> ApiError | None:
    """Why this request may not be served, or None."""
    host = headers.get("host", "")
    if loopback and host_name(host) not in LOOPBACK_HOSTS:
        shown = host[:60] or "none"
        words = f"Host {shown!r} is not this computer's loopback name: use http://127.0.0.1 or http://localhost"
        return ApiError(421, words, code="host_not_allowed")
    origin = headers.get("origin")
    if origin is not None and origin not in origins:
        words = f"requests from {origin[:80]!r} are refused: start the server with --cors-origin {origin[:80]}"
        return ApiError(403, words + " to let that page use the API", code="origin_not_allowed")
    if method == "POST":
        kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "application/json":
            words = f"Content-Type {kind or 'none'!r}: send the request body as application/json"
            return ApiError(415, words, code="unsupported_media_type")
    return None


class BrowserGuard:
    """ASGI middleware refusing, in the API's error shape (runtime.api.error_shapes), the requests `refusal` names."""

    def __init__(self, app: ASGIApp, loopback: bool, origins: Iterable[str] = ()) -> None:
        self.app, self.loopback, self.origins = app, loopback, frozenset(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = refusal(scope["method"], Headers(scope=scope), self.loopback, self.origins)
            if error is not None:
                await error_response(scope["path"], error)(scope, receive, send)
                return
        await self.app(scope, receive, send)
