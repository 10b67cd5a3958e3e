"""MCP servers as tools for a chat: the config file, the host that runs them, and the approval policy.

No Qt and no engine here: the CLI, the window and the tests use the same pieces (docs/tools.md, "MCP servers").
The names below load on first use (PEP 562): the approval policy, the switch store and the result type are
light, while the host brings in the MCP SDK (seconds on a slow disk), which a chat without tools never needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.mcp.approval import ApprovalAnswer, ApprovalPolicy, Approvals, CallRequest, Verdict
    from runtime.mcp.config import (
        McpConfig,
        ServerConfig,
        add_server,
        check_snippet,
        config_path,
        load_config,
        remove_server,
    )
    from runtime.mcp.host import McpHost, ServerStatus
    from runtime.mcp.listing import Listing, SkippedTool
    from runtime.mcp.results import RESULT_LIMIT, ToolResult

_HOME = {
    "ApprovalAnswer": "approval", "ApprovalPolicy": "approval", "Approvals": "approval", "CallRequest": "approval",
    "Verdict": "approval", "McpConfig": "config", "ServerConfig": "config", "add_server": "config",
    "check_snippet": "config", "config_path": "config", "load_config": "config", "remove_server": "config",
    "McpHost": "host", "ServerStatus": "host", "Listing": "listing", "SkippedTool": "listing",
    "RESULT_LIMIT": "results", "ToolResult": "results",
}
__all__ = [
    "RESULT_LIMIT",
    "ApprovalAnswer",
    "ApprovalPolicy",
    "Approvals",
    "CallRequest",
    "Listing",
    "McpConfig",
    "McpHost",
    "ServerConfig",
    "ServerStatus",
    "SkippedTool",
    "ToolResult",
    "Verdict",
    "add_server",
    "check_snippet",
    "config_path",
    "load_config",
    "remove_server",
]


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime.mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"runtime.mcp.{module}"), name)
    globals()[name] = value  # once: later lookups are plain attributes
    return value
