"""The window's MCP host and its lifetime (#43): created when a chat with tools first answers (or a server is
started in the Tools panel), replaced when mcp.json changes (the old one closes once the turn that uses it
ends), and closed with the window. It also holds the one switch store (runtime.mcp.switches) the Tools panel
writes and every turn reads, and makes a chat's `ToolSetup` (runtime.chat.toolbox) for its conversation.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from runtime.mcp.switches import ToolSwitches

if TYPE_CHECKING:
    from app.settings import AppSettings
    from runtime.chat.toolbox import ToolSetup
    from runtime.mcp import McpHost

CLOSE_JOIN_S = 5.0  # at close: how long a host closing off the GUI thread may take to end


class ToolHostControl:
    """The host of mcp.json's servers (None until first used, or without servers) and the switches."""

    def __init__(self) -> None:
        self.host: McpHost | None = None
        self.switches = ToolSwitches()
        self._retiring: McpHost | None = None  # replaced while a turn still uses it: closed when the turn ends
        self._closers: list[threading.Thread] = []

    def ensure(self) -> McpHost | None:
        """The host, created on first use (None without servers); UserError for a file that cannot be read."""
        if self.host is None:
            from runtime.mcp import McpHost, load_config

            config = load_config()
            self.host = McpHost(config) if config.servers else None
        return self.host

    def retire(self, in_use: McpHost | None) -> None:
        """mcp.json changed: the next use builds a new host; the old one closes now, or after the turn that
        uses it (`in_use`: the host of the turn in flight)."""
        host, self.host = self.host, None
        if host is None:
            return
        if host is in_use:
            self._retiring = host
        else:
            self._close_later(host)

    def turn_ended(self) -> None:
        if self._retiring is not None:
            self._close_later(self._retiring)
            self._retiring = None

    def setup(self, settings: AppSettings) -> ToolSetup:
        """A chat's tools: the window's host (it outlives the chat), the Settings' approvals, the switches. The
        approval question is the turn's to put (app.turn_runner); whether the documents search is offered is
        the conversation's policy (runtime.chat.documents)."""
        from runtime.chat.toolbox import ToolSetup

        return ToolSetup(self.ensure(), settings.tool_approval, None, self.switches, settings.tool_first_choice,
                         settings.tool_rounds)

    def close(self) -> None:
        """At the window's close: every host ends (bounded: the SDK ends even a server that ignores it
        within ~8 s)."""
        for host in (self.host, self._retiring):
            if host is not None:
                host.close()
        for closer in self._closers:
            closer.join(CLOSE_JOIN_S)

    def _close_later(self, host: McpHost) -> None:
        """Close a host off the GUI thread: a stubborn server takes seconds to end."""
        closer = threading.Thread(target=host.close, name="mcp-close", daemon=True)
        closer.start()
        self._closers.append(closer)
