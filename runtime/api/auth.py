"""The API key: with `--api-key KEY` every request but a loopback server's `/health` must send
`Authorization: Bearer KEY` (OpenAI's clients) or `x-api-key: KEY` (Anthropic's)."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from runtime.api.responses import ApiError


def authorize(request: Request, key: str | None) -> None:
    """Nothing when no key is set or the request sends it; else a 401 saying whether it was missing or wrong."""
    if not key:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    sent = token.strip() if scheme.lower() == "bearer" else None
    if sent is None and "x-api-key" in request.headers:  # Anthropic's clients send it so (Claude Code too)
        sent = given = request.headers["x-api-key"].strip()
    # compare_digest: the time taken does not tell how much of a wrong key was right.
    if sent is None or not hmac.compare_digest(sent.encode(), key.encode()):
        what = "missing" if not given else "wrong"
        words = f"{what} API key: send 'Authorization: Bearer KEY' (or 'x-api-key: KEY')"
        raise ApiError(401, words, kind="authentication_error", code="invalid_api_key")
