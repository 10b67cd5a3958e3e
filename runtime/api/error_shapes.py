"""An error in the shape of the API its request was for. Under `/v1/messages` clients are Anthropic's (its SDK,
Claude Code): `{"type": "error", "error": {"type", "message"}}` with Anthropic's status codes, so they raise
their usual exceptions and retry what Anthropic says to retry. Everywhere else, OpenAI's (`ApiError.body`).
The guard's refusals, the body limits, a 404 and a 500 all pass through here.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from runtime.api.responses import ApiError

MESSAGES_PATH = "/v1/messages"
# Anthropic's error types by status; any other 4xx is an invalid request, any other 5xx an api_error.
ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
OVERLOADED = 529  # Anthropic's "try again shortly": our 503s (a worker lost, the server stopping) mean that


def is_anthropic(path: str) -> bool:
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def anthropic_status(error: ApiError) -> int:
    return OVERLOADED if error.status == 503 else error.status


def anthropic_body(error: ApiError) -> dict[str, Any]:
    """Anthropic's error object. Its shape has no `param`: the message names the field where one is at fault."""
    status = anthropic_status(error)
    kind = ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def error_response(path: str, error: ApiError) -> JSONResponse:
    """`error` as the response to a request for `path`."""
    if is_anthropic(path):
        return JSONResponse(anthropic_body(error), status_code=anthropic_status(error), headers=error.headers)
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)
