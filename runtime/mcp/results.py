"""A tool call's outcome as the model will read it: text, whether it failed, how long it took, what was cut.

A result is untrusted text from another program. It goes back to the model as a tool message and nowhere
else: nothing here (or in the host, or the approval policy) reads it for instructions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the SDK's types load with the host, which reads results; a result alone needs none
    from mcp import types

RESULT_LIMIT = 16_000  # characters a result keeps; a model's context is the scarce thing
BLOB_NOTE = 200  # characters of a binary part's description at most


@dataclass(frozen=True)
class ToolResult:
    """One call's outcome, from an MCP server or a built-in tool alike (the tool loop's one result type).
    `text` is what the model sees, whatever it holds (a server's already cut to the limit, with the note
    saying how much was cut); `cut` is how many characters were removed (0: whole); `source` is where the
    tool lives, for the user (an MCP server's name, or "built-in")."""

    text: str
    is_error: bool = False
    elapsed_s: float = 0.0
    source: str = ""
    cut: int = 0

    @property
    def truncated(self) -> bool:
        return self.cut > 0


def content_text(result: types.CallToolResult) -> str:
    """The result's parts as one text: text parts joined, other parts described in a line each; the structured
    content (as JSON) where there is no part at all."""
    parts = [_part_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def cut_text(text: str, limit: int = RESULT_LIMIT) -> tuple[str, int]:
    """`text` cut to `limit` characters with a note saying how much went, and the number of characters cut."""
    if len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    note = (f"\n[... {cut:,} of {len(text):,} characters cut: a tool result keeps at most {limit:,}; ask for "
            "less, e.g. a narrower query or a page of the output]")
    return text[:limit] + note, cut


def _part_text(block: types.ContentBlock) -> str:
    from mcp import types
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, about {len(block.data) * 3 // 4:,} bytes, not shown]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.uri}{f' ({block.name})' if block.name else ''}]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return f"[binary resource: {resource.uri}, {resource.mime_type or 'unknown type'}, not shown]"
    return f"[{getattr(block, 'type', 'unknown')} content, not shown]"[:BLOB_NOTE]
