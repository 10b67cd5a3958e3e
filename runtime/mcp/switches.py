"""The one switch store: which tools are turned off, per server and tool, in one small JSON file beside
`mcp.json`.

A tool that is off is neither offered to the model nor run, whichever front end runs the turn: the window's
Tools panel writes the file, and the chat layer's toolbox (runtime.chat.toolbox) reads it for the window, the
CLI and every other front end alike. The file holds only what is off, so a server's new tools are on until
the user says otherwise.

    {"version": 1, "off": {"files": ["write_file"], "built-in": ["search_documents"]}}
"""

from __future__ import annotations

from pathlib import Path

from runtime.mcp.tool_table import ToolTable
from runtime.paths import config_dir

FILE_NAME = "mcp-tools.json"
# What the model reads when it calls a tool that was turned off after the turn began.
SWITCHED_OFF = "This tool is turned off in the Tools panel, so this call did not run."


class ToolSwitches:
    """The tools turned off, read afresh each time (the file is small, and may change under a running turn)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or config_dir() / FILE_NAME
        self._table = ToolTable(self.path, "off", "tool switches", "every tool is on")

    def off(self) -> dict[str, frozenset[str]]:
        """Each server's tools that are off. A file that cannot be read turns nothing off (and is logged)."""
        return self._table.read()

    def is_on(self, server: str, tool: str) -> bool:
        return tool not in self.off().get(server, frozenset())

    def turn(self, server: str, tool: str, on: bool) -> None:
        """Turn one server's tool on or off."""

        def change(table: dict[str, set[str]]) -> None:
            tools = table.setdefault(server, set())
            if on:
                tools.discard(tool)
            else:
                tools.add(tool)

        self._table.update(change)

    def forget(self, server: str) -> None:
        """Drop a removed server's switches (a new server by that name starts with every tool on)."""
        self._table.update(lambda table: table.pop(server, None))
