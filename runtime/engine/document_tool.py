"""The built-in tool "search my documents": an assistant with tools can look passages up itself
(runtime.documents), in whichever collections the user chose."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from runtime.documents.grounding import Citation, source_block
from runtime.documents.library import Library
from runtime.engine.tool_loop import ToolResult
from runtime.engine.tools import Tool
from runtime.errors import UserError

NAME = "search_documents"
SOURCE = "built-in"


class DocumentSearch:
    """A Toolbox with one tool, `search_documents(query)`, over `library` (one collection, or all)."""

    def __init__(self, library: Library, collection: str | None = None, top: int = 4) -> None:
        self.library, self.collection, self.top = library, collection, top
        where = f"the collection {collection!r}" if collection else "the user's documents"
        self.tool = Tool(
            NAME,
            f"Search {where} for passages about a question; returns numbered passages with their file names.",
            # A bounded query: a small model may otherwise write one until the token limit cuts the call off.
            {"type": "object", "properties": {"query": {"type": "string", "maxLength": 200}}, "required": ["query"]},
        )

    def tools(self) -> Sequence[Tool]:
        return (self.tool,)

    def source(self, name: str) -> str:
        return SOURCE

    def call(self, name: str, arguments: dict[str, Any], cancel: threading.Event) -> ToolResult:
        started = time.monotonic()
        query = arguments.get("query")
        if name != NAME or not isinstance(query, str):
            return ToolResult(f"error: call {NAME} with a string `query`", True, 0.0, SOURCE)
        try:
            hits = self.library.search(query, self.collection, self.top)
        except UserError as e:
            return ToolResult(f"error: {e}", True, time.monotonic() - started, SOURCE)
        citations = [Citation.of(n, h) for n, h in enumerate(hits, 1)]
        text = source_block(citations) if citations else "No passage matched."
        return ToolResult(text, False, time.monotonic() - started, SOURCE)
