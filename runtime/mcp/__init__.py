"""MCP servers as tools for a chat: the config file, the host that runs them, and the approval policy.

No Qt and no engine here: the CLI, the window and the tests use the same pieces (docs/tools.md, "MCP servers").
"""

from runtime.mcp.approval import ApprovalPolicy, Approvals, CallRequest, Decision, Verdict
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

__all__ = [
    "RESULT_LIMIT", "ApprovalPolicy", "Approvals", "CallRequest", "Decision", "Listing", "McpConfig", "McpHost",
    "ServerConfig", "ServerStatus", "SkippedTool", "ToolResult", "Verdict", "add_server", "check_snippet",
    "config_path", "load_config", "remove_server",
]
