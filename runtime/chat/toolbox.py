"""The tools a turn offers: MCP servers' tools (runtime.mcp) and the built-in ones, less those turned off in
the one switch store (runtime.mcp.switches), with the approval policy as their approver.

Every front end's conversation (runtime.chat.conversation) builds its turn's toolbox here (`open_toolbox`),
so a tool turned off in the window is off for the CLI and the API too: it is not offered to the model, and a
call to it (a switch turned off while the turn ran) is refused without running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.engine.tool_loop import DEFAULT_ROUNDS, Toolbox, ToolCall, ToolResult
from runtime.engine.tools import Tool
from runtime.mcp.approval import ApprovalAnswer, ApprovalPolicy, CallRequest
from runtime.mcp.switches import SWITCHED_OFF, ToolSwitches

if TYPE_CHECKING:
    from runtime.chat.documents import SearchOffer
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


@dataclass(frozen=True)
class ToolSetup:
    """A conversation's tools (runtime.chat.conversation): its front end's MCP host (None: no server
    configured), the approval `mode` (ask, all, none) and who is asked (`ask`; None: nobody, so "ask" denies),
    the one switch store, the first answer's tool_choice, answers per turn, seconds per call, and whether the
    conversation owns the host (closes it with itself: the CLI's) or the front end does (the window's)."""

    host: McpHost | None
    mode: str = "ask"
    ask: Callable[[CallRequest], ApprovalAnswer] | None = None
    switches: ToolSwitches = field(default_factory=ToolSwitches)
    first_choice: str = "auto"
    max_rounds: int = DEFAULT_ROUNDS
    timeout: float = CALL_TIMEOUT_S
    owns_host: bool = False


def open_toolbox(
    setup: ToolSetup, search: SearchOffer | None = None, ask: Callable[[CallRequest], ApprovalAnswer] | None = None
) -> McpToolbox:
    """The toolbox of one turn: `setup`'s servers and switches, approvals by its mode asking `ask` (None:
    `setup.ask`), and `search_documents` when the documents policy offers it (`search`). The documents'
    Library is opened here, on the caller's thread (one thread at a time uses it), and closed with the
    toolbox; the host is not: it outlives the turn (runtime.chat.conversation.Conversation.close)."""
    builtin: list[Toolbox] = []
    library = None
    if search is not None:
        from runtime.documents.library import Library
        from runtime.engine.document_tool import DocumentSearch

        library = Library(search.index)
        builtin.append(DocumentSearch(library, search.collection, search.top))
    policy = ApprovalPolicy(setup.mode, ask or setup.ask)
    box = McpToolbox(setup.host, policy, builtin, setup.timeout, setup.switches, owns_host=False)
    if library is not None:
        box.closers.append(library.close)
    return box
