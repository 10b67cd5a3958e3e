"""Size limits for the JSON schemas a request may hold, checked before any grammar compiler sees them.

llguidance's compile time grows about quadratically with a schema's size (1,000 properties 0.08 s, 16,000 11.6 s),
its validator overflows a thread's stack near 28,000 properties, and its Earley parser refuses a row of more than
2,000 items mid-answer: about four per optional property of one object (500 optional properties pass, 1,000 fail
at the first key) and one per `anyOf` branch. The limits below keep every schema far inside those bounds, in the
spirit of OpenAI's published ones (5,000 properties, 1,000 enum values, bounded nesting), so a hostile schema is
a 400 naming its size instead of a stalled server, a crash or a failure in the middle of an answer.

`SchemaBudget` counts across one request: the `response_format` schema and every tool's parameters together;
an MCP server's tool is counted on its own (runtime.mcp.listing leaves it out with the error's `reason`). In the
shared base, so that the grammar (runtime.decode) and the MCP listing (runtime.mcp) hold one copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.errors import UserError

MAX_NODES = 10_000  # objects (subschemas and their keyword objects) in all of a request's schemas
MAX_PROPERTIES = 5_000  # OpenAI's limit: properties of all objects together
MAX_OPTIONAL = 400  # per object: llguidance's parser row limit is reached near 500
MAX_BRANCHES = 500  # per anyOf / oneOf / allOf: one parser row item each (limit 2,000, shared with optional keys)
MAX_ENUM = 1_000  # OpenAI's limit: enum values of all schemas together
MAX_DEPTH = 64  # JSON nesting of a schema document (each subschema level is about two)


class SchemaTooLarge(UserError, ValueError):
    """A schema over one of the limits; the message names the limit and the count, for the request. `reason`
    says it of one schema on its own, as what it "is" or "has" ("is nested more than 64 levels deep")."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


def _tally(used: int, more: int, limit: int, what: str) -> int:
    """`used + more` of a request-wide count, or SchemaTooLarge naming `what` once it passes `limit`."""
    used += more
    if used > limit:
        raise SchemaTooLarge(f"the request's schemas hold more than {limit} {what}",
                             f"holds more than {limit:,} {what}")
    return used


@dataclass
class SchemaBudget:
    """What one request's schemas have used of the limits so far."""

    nodes: int = 0
    properties: int = 0
    enum_values: int = 0

    def check(self, schema: Any) -> None:
        """Count `schema` against the budget (no recursion: depth is what is being limited); raises
        `SchemaTooLarge` naming the first limit it passes."""
        stack: list[tuple[Any, int]] = [(schema, 1)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise SchemaTooLarge(f"the schema is nested more than {MAX_DEPTH} levels deep",
                                     f"is nested more than {MAX_DEPTH} levels deep")
            if isinstance(node, Mapping):
                self.nodes = _tally(self.nodes, 1, MAX_NODES, "objects")
                self._count_keywords(node)
                stack.extend((v, depth + 1) for v in node.values())
            elif isinstance(node, list):
                stack.extend((v, depth + 1) for v in node)

    def _count_keywords(self, node: Mapping[str, Any]) -> None:
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            self.properties = _tally(self.properties, len(properties), MAX_PROPERTIES, "properties")
            required = node.get("required")
            named = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
            optional = len(properties.keys() - named)
            if optional > MAX_OPTIONAL:
                raise SchemaTooLarge(
                    f"an object has {optional} optional properties; at most {MAX_OPTIONAL} (list the rest in "
                    "'required', or split the object)",
                    f"has an object with more than {MAX_OPTIONAL} optional properties",
                )
        for key in ("anyOf", "oneOf", "allOf"):
            branches = node.get(key)
            if isinstance(branches, list) and len(branches) > MAX_BRANCHES:
                raise SchemaTooLarge(f"an {key} has {len(branches)} branches; at most {MAX_BRANCHES}",
                                     f"has an {key} of more than {MAX_BRANCHES} branches")
        enum = node.get("enum")
        if isinstance(enum, list):
            self.enum_values = _tally(self.enum_values, len(enum), MAX_ENUM, "enum values")
