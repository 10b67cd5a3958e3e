"""Whether a tool call the model wrote is one it was offered: the one check every call passes before anyone sees
it (the API's answers, the tool loop's approval and run).

A call passes when its name is one of the offered tools and its arguments are a JSON object that validates
against that tool's parameter schema (the `jsonschema` package, the schema's own draft, Draft 2020-12 where it
names none; `format` is an annotation, as that draft says). The grammar already holds the model to both, but
leniently (a keyword llguidance does not support is ignored), and a call is no command because the grammar
was meant to make it one: this check is what decides. A call that fails it is returned as text by the API
(runtime.engine.call_parser) and refused, with the reason, by the tool loop (runtime.engine.tool_loop).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jsonschema

if TYPE_CHECKING:
    from runtime.engine.tools import Tool

REASON_LIMIT = 300  # characters of a validator's message in a reason


def name_problem(name: str | None, tools: Sequence[Tool]) -> str | None:
    """Why no call of `name` may go out whatever its arguments (no such tool offered), or None. A streamed answer
    asks this before a call's first piece goes out (runtime.engine.call_parser)."""
    if any(t.name == name for t in tools):
        return None
    offered = ", ".join(t.name for t in tools[:20]) + (", ..." if len(tools) > 20 else "")
    return f"there is no tool named {str(name)[:80]!r} (the tools offered: {offered or 'none'})"


def call_problem(name: str | None, arguments: str, tools: Sequence[Tool]) -> str | None:
    """Why a call of `name` with `arguments` (a JSON text) may not go out, or None when it may."""
    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        return name_problem(name, tools)
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        return f"the arguments of {tool.name} are not JSON"
    if not isinstance(value, dict):
        return f"the arguments of {tool.name} are not a JSON object"
    try:
        validator = _validator(json.dumps(tool.parameters, sort_keys=True))
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except Exception as e:  # an invalid schema, an unresolvable $ref, one nested too deep: never passed unchecked
        return f"the parameter schema of {tool.name} cannot be checked: {str(e).splitlines()[0][:REASON_LIMIT]}"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    at = f" at {where[:100]}" if where else ""
    return f"the arguments of {tool.name} do not match its schema{at}: {error.message[:REASON_LIMIT]}"


@functools.lru_cache(maxsize=64)
def _validator(schema_text: str) -> Any:
    """A validator for the schema (as sorted JSON text: the cache's key), its draft's class, checked once."""
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)
