"""The old home of the API's request and response shapes, now split: request parsing in runtime.api.requests
and runtime.api.fields, response shaping in runtime.api.responses, the default port in runtime.api. These
names stay importable from here for code outside runtime/api that still says `runtime.api.schema`."""

from runtime.api import DEFAULT_PORT
from runtime.api.requests import tool_request
from runtime.api.responses import ApiError

__all__ = ["DEFAULT_PORT", "ApiError", "tool_request"]
