"""What servers list, made into OpenAI function tools: names unique across servers, schemas checked.

A model sees one flat list of functions, so each tool is named `server__tool`, held to OpenAI's rule for
function names (`[A-Za-z0-9_-]{1,64}`); `Listing.routes` maps each name back to its server and tool. A tool whose
input schema is not a valid JSON-schema object is left out with the reason: the grammar that holds a call to
its schema could not be built from it, and the other tools of that server stay.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from mcp import types

SEPARATOR = "__"
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64


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


def schema_problem(schema: Any) -> str | None:
    """Why `schema` cannot be a tool's parameters (None if it can): it must be a valid JSON schema for an object."""
    if not isinstance(schema, dict):
        return "its input schema is not a JSON object"
    if schema.get("type", "object") != "object":
        return f"its input schema describes {schema.get('type')!r}, not an object"
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.path) or "the top"
        return f"its input schema is not a valid JSON schema ({e.message} at {where})"
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


def build_listing(listed: Iterable[tuple[str, Iterable[types.Tool]]]) -> Listing:
    """The OpenAI tools for each (server, its listed tools), in the order given (so names are stable)."""
    tools: list[dict[str, Any]] = []
    routes: dict[str, tuple[str, str]] = {}
    skipped: list[SkippedTool] = []
    for server, server_tools in listed:
        seen: set[str] = set()
        for tool in server_tools:
            if tool.name in seen:
                skipped.append(SkippedTool(server, tool.name, "the server lists it twice"))
                continue
            seen.add(tool.name)
            problem = schema_problem(tool.input_schema)
            if problem:
                skipped.append(SkippedTool(server, tool.name, problem))
                continue
            name = exposed_name(server, tool.name, set(routes))
            routes[name] = (server, tool.name)
            function: dict[str, Any] = {"name": name}
            description = tool.description or tool.title
            if description:
                function["description"] = description
            function["parameters"] = tool.input_schema
            tools.append({"type": "function", "function": function})
    return Listing(tuple(tools), routes, tuple(skipped))
