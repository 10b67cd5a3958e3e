"""The API key: with `--api-key KEY` every request but a loopback server's `/health` must send
`Authorization: Bearer KEY`."""

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
    # compare_digest: the time taken does not tell how much of a wrong key was right.
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        what = "missing" if not given else "wrong"
        words = f"{what} API key: send 'Authorization: Bearer KEY'"
        raise ApiError(401, words, kind="authentication_error", code="invalid_api_key")
