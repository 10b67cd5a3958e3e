"""The tools a turn offers: MCP servers' tools (runtime.mcp) and the built-in ones, less those turned off in
the one switch store (runtime.mcp.switches), with the approval policy as their approver.

Every front end builds its toolbox here (`open_toolbox`), so a tool turned off in the window is off for the
CLI and the API too: it is not offered to the model, and a call to it (a switch turned off while the turn
ran) is refused without running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.engine.tool_loop import Toolbox, ToolCall, ToolResult
from runtime.engine.tools import Tool
from runtime.mcp.approval import ApprovalAnswer, ApprovalPolicy, CallRequest
from runtime.mcp.switches import SWITCHED_OFF, ToolSwitches

if TYPE_CHECKING:
    from runtime.documents.library import Library
    from runtime.mcp.host import McpHost

CALL_TIMEOUT_S = 60.0
BUILTIN = "built-in"  # where a built-in tool runs (runtime.engine.document_tool.SOURCE)


@dataclass(frozen=True)
class ToolSite:
    """Where an offered tool runs: its server (or "built-in") and its own name there."""

    server: str
    tool: str


class McpToolbox:
    """The tools of an McpHost's servers (started on first use), plus `builtin` toolboxes (the documents
    search), under one name space, less the tools `switches` turned off: a built-in tool's name wins over a
    server's of the same name. Each offered name's site is resolved once, when the tools are listed."""

    def __init__(
        self,
        host: McpHost | None,
        policy: ApprovalPolicy,
        builtin: Sequence[Toolbox] = (),
        timeout: float = CALL_TIMEOUT_S,
        switches: ToolSwitches | None = None,
        owns_host: bool = True,
    ) -> None:
        self.host, self.policy, self.builtin, self.timeout = host, policy, tuple(builtin), timeout
        self.switches = switches if switches is not None else ToolSwitches()
        self.owns_host = owns_host  # False: the host outlives the toolbox (the window's, shared by turns)
        self.closers: list[Callable[[], None]] = []  # what the toolbox opened for itself (a documents index)
        self._owner: dict[str, Toolbox] = {}
        self._sites: dict[str, ToolSite] = {}
        self._described: dict[str, str] = {}  # each offered tool's description, for the approval question

    def tools(self) -> Sequence[Tool]:
        """The tools offered now: every server's and built-in tool that is switched on."""
        off = self.switches.off()
        out: list[Tool] = []
        self._owner, self._sites, self._described = {}, {}, {}
        for box in self.builtin:
            for tool in box.tools():
                self._owner[tool.name] = box
                self._sites[tool.name] = ToolSite(box.source(tool.name), tool.name)
                if tool.name not in off.get(self._sites[tool.name].server, ()):
                    out.append(tool)
                    self._described[tool.name] = tool.description or ""
        if self.host is not None:
            for entry in self.host.tools():
                f = entry["function"]
                name = f["name"]
                route = self.host.route(name)
                if name in self._owner or route is None:
                    continue
                site = self._sites[name] = ToolSite(*route)
                if site.tool not in off.get(site.server, ()):
                    out.append(Tool(name, f.get("description"), f.get("parameters") or {"type": "object"}))
                    self._described[name] = str(f.get("description") or "")
        return out

    def where(self, name: str) -> ToolSite:
        """The server and tool an offered name stands for (ToolSite("unknown", name) for a name never offered)."""
        site = self._sites.get(name)
        if site is None and self.host is not None and name not in self._owner:
            route = self.host.route(name)
            site = ToolSite(*route) if route else None
        return site or ToolSite("unknown", name)

    def source(self, name: str) -> str:
        return self.where(name).server

    def call(self, name: str, arguments: dict[str, Any], cancel: threading.Event) -> ToolResult:
        site = self.where(name)
        if not self.switches.is_on(site.server, site.tool):  # turned off while the turn ran
            return ToolResult(SWITCHED_OFF, True, 0.0, site.server)
        box = self._owner.get(name)
        if box is not None:
            return box.call(name, arguments, cancel)
        if self.host is None or site.server == "unknown":
            return ToolResult(f"There is no tool named {name!r}.", True)
        return self.host.call(name, arguments, self.timeout, cancel)

    def approve(self, call: ToolCall, source: str) -> bool | str:
        """The policy's verdict on `call` (built-in tools are asked about too: they read the user's files)."""
        site = self.where(call.name)
        described = self._described.get(call.name, "")
        verdict = self.policy.check(CallRequest(site.server, site.tool, call.arguments, call.name, described))
        return True if verdict.allowed else (verdict.message or False)

    def close(self) -> None:
        """Close what this toolbox opened, and its host when it owns it (its servers stop)."""
        for close in self.closers:
            close()
        if self.host is not None and self.owns_host:
            self.host.close()


def open_toolbox(
    host: McpHost | None,
    mode: str,
    ask: Callable[[CallRequest], ApprovalAnswer] | None = None,
    documents: Library | Path | None = None,
    timeout: float = CALL_TIMEOUT_S,
    switches: ToolSwitches | None = None,
    owns_host: bool = True,
) -> McpToolbox:
    """The toolbox of a turn: `host`'s servers (None: none configured), the documents search when `documents`
    (a Library, or the index file to open) is given, approvals by `mode` (ask, all, none) asking `ask`, and
    the switch store's tools left out. The documents' Library (given or opened here) is closed with the
    toolbox, and so is `host` when the toolbox `owns_host`."""
    from runtime.documents.library import Library
    from runtime.engine.document_tool import DocumentSearch

    library = Library(documents) if isinstance(documents, Path) else documents
    builtin: list[Toolbox] = [DocumentSearch(library)] if library is not None else []
    box = McpToolbox(host, ApprovalPolicy(mode, ask), builtin, timeout, switches, owns_host)
    if library is not None:
        box.closers.append(library.close)
    return box
