"""MCP servers (runtime.mcp) and the built-in tools as one Toolbox for the tool loop, with the approval policy
as its approver: what the CLI and the window hand to `run_tool_loop`."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from runtime.engine.tool_loop import Toolbox, ToolCall, ToolResult
from runtime.engine.tools import Tool
from runtime.mcp import ApprovalPolicy, CallRequest, McpHost

CALL_TIMEOUT_S = 60.0


class McpToolbox:
    """The tools of an McpHost's servers (started on first use), plus `builtin` toolboxes (the documents
    search), under one name space: a built-in tool's name wins over a server's of the same name."""

    def __init__(
        self,
        host: McpHost | None,
        policy: ApprovalPolicy,
        builtin: Sequence[Toolbox] = (),
        timeout: float = CALL_TIMEOUT_S,
    ) -> None:
        self.host, self.policy, self.builtin, self.timeout = host, policy, tuple(builtin), timeout
        self._owner: dict[str, Toolbox] = {}

    def tools(self) -> Sequence[Tool]:
        out: list[Tool] = []
        self._owner = {}
        for box in self.builtin:
            for tool in box.tools():
                self._owner[tool.name] = box
                out.append(tool)
        if self.host is not None:
            for entry in self.host.tools():
                f = entry["function"]
                if f["name"] not in self._owner:
                    out.append(Tool(f["name"], f.get("description"), f.get("parameters") or {"type": "object"}))
        return out

    def source(self, name: str) -> str:
        box = self._owner.get(name)
        if box is not None:
            return box.source(name)
        route = self.host.route(name) if self.host is not None else None
        return route[0] if route else "unknown"

    def call(self, name: str, arguments: dict[str, Any], cancel: threading.Event) -> ToolResult:
        box = self._owner.get(name)
        if box is not None:
            return box.call(name, arguments, cancel)
        if self.host is None:
            return ToolResult(f"There is no tool named {name!r}.", True)
        r = self.host.call(name, arguments, self.timeout, cancel)
        return ToolResult(r.text, r.is_error, r.elapsed_s, r.server)

    def approve(self, call: ToolCall, source: str) -> bool | str:
        """The policy's verdict on `call` (built-in tools are asked about too: they read the user's files)."""
        route = self.host.route(call.name) if self.host is not None and call.name not in self._owner else None
        server, tool = route if route else (source, call.name)
        verdict = self.policy.check(CallRequest(server, tool, call.arguments, call.name))
        return True if verdict.allowed else (verdict.message or False)

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
