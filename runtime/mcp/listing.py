"""What servers list, made into OpenAI function tools: names unique across servers, schemas checked.

A model sees one flat list of functions, so each tool is named `server__tool`, held to OpenAI's rule for
function names (`[A-Za-z0-9_-]{1,64}`); `Listing.routes` maps each name back to its server and tool. The names
come from a `Names` table that lives as long as the host: a name, once given to one server's tool, never
stands for another, so a name from an earlier listing cannot reach another server's tool after its own
server went (`s__t__u` is both `s`'s `t__u` and `s__t`'s `u`: the table, not the text, says which).

A tool that cannot be offered is left out with the reason, and the server's other tools stay: an input schema
that is not a valid JSON-schema object (the grammar that holds a call to it could not be built), one nested
deeper or larger than the grammar's limits (runtime.schema_limits, counted for the tool on its own), a
description or schema text that would fill the model's context, or a name longer than MCP allows.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from mcp import types

from runtime.schema_limits import SchemaBudget, SchemaTooLarge

SEPARATOR = "__"
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64  # OpenAI's limit on a function's name
MAX_TOOL_NAME = 128  # MCP's limit on a tool's name
MAX_DESCRIPTION = 8_000  # characters: the longest real tools' descriptions are a few thousand
MAX_SCHEMA_TEXT = 32_000  # characters of the input schema as JSON (about 8,000 tokens of prompt)
MAX_TOOLS = 128  # OpenAI's limit on one request's tools
MAX_ALL_TEXT = 256_000  # characters of all the tools offered (descriptions and schemas) together
FULL = f"{MAX_TOOLS} tools are offered already, the most a chat takes"


@dataclass(frozen=True)
class SkippedTool:
    """A tool a server listed that is not offered to the model, and why."""

    server: str
    tool: str
    reason: str


@dataclass(frozen=True)
class Listing:
    """The tools offered: OpenAI `tools` entries, each name's (server, tool), and what was left out."""

    tools: tuple[dict[str, Any], ...] = ()
    routes: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    skipped: tuple[SkippedTool, ...] = ()


def skipped_lines(skipped: Iterable[SkippedTool], shown: int = 3) -> list[str]:
    """One line per server for the tools it listed that are not offered (a server may list 20,000): how many,
    the first `shown` with why, and the rest's commonest reason. The window's Tools panel lists each."""
    by_server: dict[str, list[SkippedTool]] = {}
    for s in skipped:
        by_server.setdefault(s.server, []).append(s)
    lines = []
    for server, tools in by_server.items():
        parts = [f"{t.tool[:60]!r}: {t.reason[:200]}" for t in tools[:shown]]
        rest = tools[shown:]
        if rest:
            reason, n = Counter(t.reason for t in rest).most_common(1)[0]
            parts.append(f"{len(rest):,} more ({n:,} of them: {reason[:200]})")
        count = f"{len(tools):,} tool{'s' * (len(tools) != 1)}"
        lines.append(f"MCP server {server!r}: {count} left out: {'; '.join(parts)}")
    return lines


class Names:
    """The offered name of each (server, tool), kept for the host's life: a name is never given to another."""

    def __init__(self) -> None:
        self._given: dict[tuple[str, str], str] = {}
        self._taken: set[str] = set()

    def name(self, server: str, tool: str) -> str:
        key = (server, tool)
        if key not in self._given:
            self._given[key] = exposed_name(server, tool, self._taken)
            self._taken.add(self._given[key])
        return self._given[key]


def tool_problem(tool: types.Tool) -> str | None:
    """Why `tool` cannot be offered to the model (None if it can)."""
    if not tool.name or len(tool.name) > MAX_TOOL_NAME:
        return f"its name is {len(tool.name)} characters long (1 to {MAX_TOOL_NAME})"
    description = tool.description or tool.title or ""
    if len(description) > MAX_DESCRIPTION:
        return f"its description is {len(description):,} characters long; at most {MAX_DESCRIPTION:,}"
    return schema_problem(tool.input_schema)


def schema_problem(schema: Any) -> str | None:
    """Why `schema` cannot be a tool's parameters (None if it can): a valid JSON schema for an object, within
    the grammar's limits and MAX_SCHEMA_TEXT."""
    if not isinstance(schema, dict):
        return "its input schema is not a JSON object"
    if schema.get("type", "object") != "object":
        return f"its input schema describes {str(schema.get('type'))[:40]!r}, not an object"
    # Size first, without recursion: a schema nested 10,000 deep would overflow the validator's stack.
    too_large = size_problem(schema)
    if too_large:
        return f"its input schema {too_large}"
    try:
        size = len(json.dumps(schema, ensure_ascii=False))
    except (TypeError, ValueError):
        return "its input schema is not JSON"
    if size > MAX_SCHEMA_TEXT:
        return f"its input schema is {size:,} characters of JSON; at most {MAX_SCHEMA_TEXT:,}"
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.path)[:100] or "the top"
        return f"its input schema is not a valid JSON schema ({e.message[:200]} at {where})"
    except RecursionError:  # a deep `$ref` chain, say
        return "its input schema is nested too deeply to check"
    return None


def size_problem(schema: Any) -> str | None:
    """What of the grammar's limits `schema` passes (as "is nested more than 64 levels deep"), or None: the
    chat's own count (runtime.schema_limits), so a tool offered here is one the chat can compile."""
    try:
        SchemaBudget().check(schema)
    except SchemaTooLarge as e:
        return e.reason
    return None


def exposed_name(server: str, tool: str, taken: set[str]) -> str:
    """`server__tool` with characters OpenAI does not allow as `_`, at most 64 long (a long one ends in a
    short hash of the whole), and not in `taken` (a numbered suffix where two collide)."""
    base = _NOT_ALLOWED.sub("_", f"{server}{SEPARATOR}{tool}")
    if len(base) > MAX_NAME:
        digest = hashlib.sha1(f"{server}\0{tool}".encode()).hexdigest()[:8]
        base = f"{base[: MAX_NAME - 9]}_{digest}"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base[: MAX_NAME - len(str(n)) - 1]}_{n}"
    return name


def build_listing(listed: Iterable[tuple[str, Iterable[types.Tool]]], names: Names | None = None) -> Listing:
    """The OpenAI tools for each (server, its listed tools), in the order given; `names`: the host's table of
    offered names (a fresh one names them in this order)."""
    names = names or Names()
    tools: list[dict[str, Any]] = []
    routes: dict[str, tuple[str, str]] = {}
    skipped: list[SkippedTool] = []
    text = 0  # characters of the tools offered so far
    for server, server_tools in listed:
        seen: set[str] = set()
        for tool in server_tools:
            if tool.name in seen:
                skipped.append(SkippedTool(server, tool.name[:MAX_TOOL_NAME], "the server lists it twice"))
                continue
            seen.add(tool.name)
            if len(tools) >= MAX_TOOLS:  # said before its schema is checked: 20,000 checks took 48 s
                skipped.append(SkippedTool(server, tool.name[:MAX_TOOL_NAME], FULL))
                continue
            problem = tool_problem(tool)
            size = 0 if problem else len(tool.description or tool.title or "") + len(json.dumps(tool.input_schema))
            if not problem and text + size > MAX_ALL_TEXT:
                problem = f"the tools offered before it fill {text:,} characters of the prompt already"
            if problem:
                skipped.append(SkippedTool(server, tool.name[:MAX_TOOL_NAME], problem))
                continue
            text += size
            name = names.name(server, tool.name)
            routes[name] = (server, tool.name)
            function: dict[str, Any] = {"name": name}
            description = tool.description or tool.title
            if description:
                function["description"] = description
            function["parameters"] = tool.input_schema
            tools.append({"type": "function", "function": function})
    return Listing(tuple(tools), routes, tuple(skipped))
