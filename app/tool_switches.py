"""Which tools the Tools panel turned off, per server and tool, in one small JSON file beside `mcp.json`.

A tool that is off is not offered to the model. The file holds only what is off, so a server's new tools are
on until the user says otherwise. No Qt here: the panel writes it, the tool loop's toolbox reads it.

    {"version": 1, "off": {"files": ["write_file"], "built-in": ["search_documents"]}}
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path

from runtime.atomic import write_text_atomic
from runtime.errors import UserError
from runtime.paths import config_dir

log = logging.getLogger("specquant.app")

FILE_NAME = "mcp-tools.json"
_VERSION = 1


class ToolSwitches:
    """The tools turned off, read afresh each time (the file is small, and may change under a running turn)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or config_dir() / FILE_NAME
        self._lock = threading.Lock()

    def off(self) -> dict[str, frozenset[str]]:
        """Each server's tools that are off. A file that cannot be read turns nothing off (and is logged)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("%s cannot be read, so every tool is on: %s", self.path, e)
            return {}
        table = data.get("off") if isinstance(data, dict) else None
        if not isinstance(table, dict):
            return {}
        return {
            server: frozenset(t for t in tools if isinstance(t, str))
            for server, tools in table.items()
            if isinstance(server, str) and isinstance(tools, list)
        }

    def is_on(self, server: str, tool: str) -> bool:
        return tool not in self.off().get(server, frozenset())

    def turn(self, server: str, tool: str, on: bool) -> None:
        """Turn one server's tool on or off."""
        with self._lock:
            table = {s: set(t) for s, t in self.off().items()}
            tools = table.setdefault(server, set())
            if on:
                tools.discard(tool)
            else:
                tools.add(tool)
            self._write(table)

    def forget(self, server: str) -> None:
        """Drop a removed server's switches (a new server by that name starts with every tool on)."""
        with self._lock:
            table = {s: set(t) for s, t in self.off().items() if s != server}
            self._write(table)

    def _write(self, table: Mapping[str, set[str]]) -> None:
        data = {"version": _VERSION, "off": {s: sorted(t) for s, t in sorted(table.items()) if t}}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        except OSError as e:
            raise UserError(f"{self.path}: cannot save the tool switches: {e}") from None
