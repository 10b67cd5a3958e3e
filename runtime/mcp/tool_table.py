"""A small JSON file of tool names per MCP server, shared by the window and the CLI: the Always-allow choices
(runtime.mcp.approval) and the tools turned off (runtime.mcp.switches).

    {"version": 1, "<key>": {"files": ["write_file"], "built-in": ["search_documents"]}}

It is read afresh each time (small, and another process may change it under a running turn) and written
atomically, under a lock, only when a change changed it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from runtime.atomic import write_text_atomic
from runtime.errors import UserError
from runtime.paths import private_dir

log = logging.getLogger("specquant.mcp")

VERSION = 1
T = TypeVar("T")


class ToolTable:
    """`path`'s table under `key`. `unreadable` ends the log line when the file cannot be read (what that
    means for the user); `what` names the table in the one-line error when it cannot be saved."""

    def __init__(self, path: Path, key: str, what: str, unreadable: str) -> None:
        self.path, self.key, self.what, self.unreadable = path, key, what, unreadable
        self._lock = threading.Lock()

    def read(self) -> dict[str, frozenset[str]]:
        """Each server's tools; empty when the file is missing, or cannot be read (logged)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("%s cannot be read, so %s: %s", self.path, self.unreadable, e)
            return {}
        table = data.get(self.key) if isinstance(data, dict) else None
        if not isinstance(table, dict):
            return {}
        return {
            server: frozenset(t for t in tools if isinstance(t, str))
            for server, tools in table.items()
            if isinstance(server, str) and isinstance(tools, list)
        }

    def update(self, change: Callable[[dict[str, set[str]]], T]) -> T:
        """Apply `change` to a copy of the table (servers to sets of tools) and save it if it changed; what
        `change` returns. UserError when it cannot be saved."""
        with self._lock:
            before = self.read()
            table = {s: set(t) for s, t in before.items()}
            result = change(table)
            after = {s: frozenset(t) for s, t in table.items() if t}
            if after != before:
                self._write(after)
            return result

    def _write(self, table: dict[str, frozenset[str]]) -> None:
        data = {"version": VERSION, self.key: {s: sorted(t) for s, t in sorted(table.items())}}
        try:
            private_dir(self.path.parent)
            write_text_atomic(self.path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        except OSError as e:
            raise UserError(f"{self.path}: cannot save the {self.what}: {e}") from None
