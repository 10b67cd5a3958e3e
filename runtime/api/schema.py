"""OpenAI's chat-completions and (legacy) completions shapes: a request checked field by field into SpecQuant's
own types, and the responses (whole, streamed chunks, errors) built from the Engine's Chunks.

Every field OpenAI defines is either honoured, accepted at the value that means "not used" (`n: 1`,
`logprobs: false`), accepted and ignored where it cannot change the answer (`IGNORED`: caching hints, tags),
or refused with a 400 naming it. `null` counts as absent, as the official clients send it.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from runtime.decode.grammar import Grammar, GrammarError
from runtime.decode.sampling import SEED_MAX
from runtime.decode.schema_limits import SchemaBudget, SchemaTooLarge
from runtime.engine.chat import ChatOptions, Chunk, Message, TokenChoice, answer_facts
from runtime.engine.tools import CHOICES, NAME, CallDelta, Tool, ToolRequest, assemble
from runtime.errors import UserError
from runtime.models.cache import TIERS
from runtime.plan.policy import DRAFT_CHOICES, PRESET_NAMES
from runtime.plan.router import LEVELS

DEFAULT_PORT = 8088  # `specquant serve` and the window's local API server
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
MAX_STOPS = 4
# One request may not hold the engine: at most this many messages and characters of content (the body's
# 1 MiB cap bounds the bytes; these bound the work of rendering and fitting the chat).
MAX_MESSAGES = 1000
MAX_CONTENT_CHARS = 400_000
# OpenAI fields we cannot honour, with the values that mean "not used" (accepted as such).
NOT_USED: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "functions": ([],),  # the deprecated form of `tools`
    "function_call": ("none",),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "logit_bias": ({},),
    "modalities": (["text"],),
    "audio": (),
    "prediction": (),
    "web_search_options": (),
    "reasoning_effort": (),
    "moderation": (),  # OpenAI's moderation may block the answer
    "service_tier": ("auto", "default", "flex", "scale", "priority", "fast"),  # how OpenAI queues it, not what
    "verbosity": ("medium",),  # OpenAI's default; low or high would change the answer's length
}
# Fields that do not change the answer, accepted (their type checked) and ignored: caching hints and tags for
# OpenAI's own bookkeeping (stored completions, abuse monitoring). Nothing is stored here.
IGNORED: dict[str, type] = {
    "prompt_cache_key": str,
    "prompt_cache_options": dict,
    "prompt_cache_retention": str,
    "safety_identifier": str,
    "metadata": dict,
    "store": bool,
}
HONOURED = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop",
    "stream", "stream_options", "user",  # user: the caller's own tag for its users, nothing to do here
    "response_format", "tools", "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs",
    "top_k", "min_p", "specquant",  # our extensions
    *IGNORED,
}
MAX_TOOLS = 128  # OpenAI's own limit
MAX_TOP_LOGPROBS = 20
SPECQUANT_FIELDS = ("level", "preset", "parent", "draft", "allow_lossy", "trim")
FINISH_REASON = {"eos": "stop", "stop": "stop", "max_tokens": "length", "length": "length"}
# `name` (a participant's name; LangChain sends it for named messages, and a tool's name on its results) is
# accepted and not shown to the model: most templates have no place for it, and text a template writes
# outside a message's content is read as its markup (runtime.engine.markup), so a name must not get there.
MESSAGE_FIELDS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "tool_calls", "refusal", "name"},
    "tool": {"role", "content", "tool_call_id", "name"},
}


class ApiError(Exception):
    """An HTTP error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ChatCall:
    """One chat-completions request in SpecQuant's terms."""

    model: str | None  # None: the server's model
    messages: list[Message]
    options: ChatOptions
    stream: bool
    include_usage: bool


def parse_chat(body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
    """Check `body` (decoded JSON) and build the request on top of the server's `base` options."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    given = {k: v for k, v in body.items() if v is not None}
    check_fields(given, HONOURED)
    for name, kind in IGNORED.items():
        typed(given, name, kind)
    model = typed(given, "model", str)
    if "messages" not in given:
        raise ApiError(400, "missing required parameter: messages", "messages")
    messages = _messages(given["messages"])
    max_tokens = integer(given, "max_completion_tokens", 1, n_ctx) or integer(given, "max_tokens", 1, n_ctx)
    stream, include_usage = stream_flags(given)
    changes = sampling_changes(given, base, max_tokens)
    budget = SchemaBudget()  # the limits count the response format's schema and every tool's together
    grammar = _response_format(given, budget)
    if grammar is not None:
        changes["grammar"] = grammar
    request = _tools(given, messages, budget)
    if request is not None:
        if grammar is not None and request.callable:
            raise ApiError(400, "response_format together with tools is not supported by SpecQuant: use one, or "
                           "tool_choice: none", "response_format", code="unsupported")
        changes["tools"] = request
    if typed(given, "logprobs", bool):
        changes["logprobs"] = integer(given, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
    elif given.get("top_logprobs"):
        raise ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs")
    return ChatCall(model, messages, build_options(base, changes), stream, include_usage)


def check_fields(
    given: dict[str, Any], honoured: set[str], not_used: dict[str, tuple[Any, ...]] = NOT_USED
) -> None:
    for name, value in given.items():
        if name in honoured:
            continue
        if name not in not_used:
            raise ApiError(400, f"unrecognized request argument: {name}", name)
        if value not in not_used[name]:
            raise ApiError(400, f"{name}={_short(value)} is not supported by SpecQuant", name, code="unsupported")


def build_options(base: ChatOptions, changes: dict[str, Any]) -> ChatOptions:
    try:
        return replace(base, **changes)
    except UserError as e:  # the runtime's own checks (a sampling value out of range, a preset's rules)
        raise ApiError(400, str(e)) from None


def stream_flags(given: dict[str, Any]) -> tuple[bool, bool]:
    """`stream` and `stream_options.include_usage`."""
    stream = bool(typed(given, "stream", bool))
    stream_options = typed(given, "stream_options", dict) or {}
    if stream_options and not stream:
        raise ApiError(400, "stream_options is only allowed with stream: true", "stream_options")
    # include_obfuscation: OpenAI pads its chunks against length side channels; a local server has none to pad.
    unknown = set(stream_options) - {"include_usage", "include_obfuscation"}
    if unknown:
        raise ApiError(400, f"unrecognized stream option: {sorted(unknown)[0]}", "stream_options")
    typed(stream_options, "include_obfuscation", bool, "stream_options.include_obfuscation")
    return stream, bool(typed(stream_options, "include_usage", bool, "stream_options.include_usage"))


def sampling_changes(given: dict[str, Any], base: ChatOptions, max_tokens: int | None) -> dict[str, Any]:
    """The sampling fields, stop strings, the token budget and our `specquant` options, as ChatOptions changes."""
    overrides = dict(base.sampling_overrides)
    for name, lo, hi in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0), ("min_p", 0.0, 1.0)):
        value = _number(given, name, lo, hi)
        if value is not None:
            overrides[name] = value
    for name, hi in (("top_k", 2**31 - 1), ("seed", SEED_MAX)):
        value = integer(given, name, 0, hi)
        if value is not None:
            overrides[name] = value
    changes: dict[str, Any] = {"sampling_overrides": tuple(overrides.items()), "stop": _stops(given)}
    if max_tokens is not None:
        changes["max_tokens"] = max_tokens
    changes.update(_specquant(given))
    return changes


def _response_format(given: dict[str, Any], budget: SchemaBudget) -> Grammar | None:
    """`response_format`: text (None), any JSON object, or a JSON schema. `strict: true` (OpenAI's structured
    outputs) enforces every keyword or refuses the schema with a 400 naming what is unsupported; without it,
    keywords the grammar engine cannot enforce are ignored, as OpenAI's non-strict mode does."""
    fmt = typed(given, "response_format", dict)
    if fmt is None:
        return None
    kind = fmt.get("type")
    extra = sorted(set(fmt) - {"type", "json_schema"})
    if extra:
        raise ApiError(400, f"unrecognized response_format field: {extra[0]}", f"response_format.{extra[0]}")
    if kind == "text":
        return None
    if kind == "json_object":
        return Grammar.json_object()
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        where = "response_format.json_schema"
        if not isinstance(spec, dict):
            raise ApiError(400, f"{where} must be an object with a name and a schema", where)
        _name(spec.get("name"), f"{where}.name")
        unknown = sorted(set(spec) - {"name", "schema", "strict", "description"})
        if unknown:
            raise ApiError(400, f"unrecognized {where} field: {unknown[0]}", f"{where}.{unknown[0]}")
        strict = spec.get("strict") or False
        if not isinstance(strict, bool):
            raise ApiError(400, f"{where}.strict must be true or false", f"{where}.strict")
        return _schema_grammar(spec.get("schema", {}), strict, f"{where}.schema", budget)
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema, not {_short(kind)}",
                   "response_format.type")


def _name(value: Any, where: str) -> str:
    """A schema's or a function's name, by OpenAI's rule."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ApiError(400, f"{where} must be 1-64 letters, digits, _ or -", where)
    return value


def _schema_grammar(schema: Any, strict: bool, where: str, budget: SchemaBudget | None = None) -> Grammar:
    """The grammar of a request's JSON schema (a response_format's, a tool's parameters), or a 400 naming
    `where` with llguidance's words for what it cannot enforce, or the limit it is over."""
    if not isinstance(schema, dict):
        raise ApiError(400, f"{where} must be a JSON schema object", where)
    try:
        return Grammar.from_json_schema(schema, strict=strict, budget=budget)
    except SchemaTooLarge as e:
        raise ApiError(400, f"{where}: {e}", where, code="schema_too_large") from None
    except GrammarError as e:
        raise ApiError(400, f"{where}: {e}", where, code="unsupported_schema") from None
    except RecursionError:  # a schema nested too deep for the compiler
        raise ApiError(400, f"{where} is nested too deeply", where) from None


def _messages(value: Any) -> list[Message]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "messages must be a non-empty array of messages", "messages")
    if len(value) > MAX_MESSAGES:
        raise ApiError(400, f"messages holds {len(value)} messages; at most {MAX_MESSAGES}", "messages")
    out: list[Message] = []
    call_ids: set[str] = set()  # the calls made so far: a tool's result must answer one of them
    total = 0
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ApiError(400, f"{where} must be an object with a role and content", where)
        role = m.get("role")
        if role not in ROLES:
            raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}, not {_short(role)}", f"{where}.role")
        role = ROLES[role]
        extra = sorted(k for k, v in m.items() if v is not None and k not in MESSAGE_FIELDS[role])
        if extra:
            raise ApiError(400, f"{where}.{extra[0]} is not supported by SpecQuant", f"{where}.{extra[0]}")
        message: Message = {"role": role}
        if role == "assistant" and m.get("tool_calls") is not None:
            message["tool_calls"] = _past_calls(m["tool_calls"], f"{where}.tool_calls")
            call_ids.update(c["id"] for c in message["tool_calls"])
        if role == "assistant" and m.get("content") is None:  # OpenAI's own replies may say nothing
            message["content"] = ""
        else:
            message["content"] = _content(m.get("content"), f"{where}.content")
        typed(m, "name", str, f"{where}.name")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ApiError(400, f"{where}.tool_call_id must name the call this result answers",
                               f"{where}.tool_call_id")
            if call_id not in call_ids:
                raise ApiError(400, f"{where}.tool_call_id {_short(call_id)} answers no earlier assistant "
                               "tool_calls", f"{where}.tool_call_id")
            message["tool_call_id"] = call_id
        total += len(message["content"]) + sum(len(c["function"]["arguments"]) for c in message.get("tool_calls", ()))
        out.append(message)
    if total > MAX_CONTENT_CHARS:
        raise ApiError(400, f"the messages hold {total} characters; at most {MAX_CONTENT_CHARS}", "messages")
    return out  # it may end with any role: after an assistant's or a system message comes a new assistant turn



def _past_calls(value: Any, where: str) -> list[dict[str, Any]]:
    """An assistant's earlier `tool_calls`, checked: [{"id", "type": "function", "function": {"name",
    "arguments"}}]."""
    if not isinstance(value, list) or not value:
        raise ApiError(400, f"{where} must be a non-empty array of tool calls", where)
    calls = []
    for j, call in enumerate(value):
        at = f"{where}[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or call.get("type") != "function" or not isinstance(function, dict):
            raise ApiError(400, f'{at} must be {{"id", "type": "function", "function": {{"name", "arguments"}}}}', at)
        extra = sorted(set(call) - {"id", "type", "function"}) or sorted(set(function) - {"name", "arguments"})
        if extra:
            raise ApiError(400, f"{at} has an unrecognized field: {extra[0]}", at)
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise ApiError(400, f"{at}.id must be a non-empty string", f"{at}.id")
        name, arguments = _name(function.get("name"), f"{at}.function.name"), function.get("arguments")
        if not isinstance(arguments, str):
            raise ApiError(400, f"{at}.function.arguments must be a string (the arguments' JSON text)",
                           f"{at}.function.arguments")
        arguments = valid_unicode(arguments, f"{at}.function.arguments")
        calls.append({"id": call["id"], "type": "function", "function": {"name": name, "arguments": arguments}})
    return calls


def _tools(given: dict[str, Any], messages: list[Message], budget: SchemaBudget) -> ToolRequest | None:
    """`tools`, `tool_choice` and `parallel_tool_calls`; None when the request has no tools (a chat that
    only shows past calls still gets a ToolRequest, so they render as the model expects)."""
    value = given.get("tools")
    choice = given.get("tool_choice")
    parallel = typed(given, "parallel_tool_calls", bool)
    if value is None or value == []:
        if choice not in (None, "none", "auto"):
            raise ApiError(400, "tool_choice needs tools", "tool_choice")
        if any(m["role"] == "tool" or m.get("tool_calls") for m in messages):
            return ToolRequest((), "none")
        return None
    return tool_request(value, choice, True if parallel is None else parallel, budget)


def tool_request(value: Any, choice: Any, parallel: bool = True, budget: SchemaBudget | None = None) -> ToolRequest:
    """OpenAI's `tools` (a non-empty list) and `tool_choice` (None: auto), checked: a 400 names the field at
    fault. The benchmark's tools workload reads its prompts' tools with this too."""
    if not isinstance(value, list) or not value:
        raise ApiError(400, "tools must be an array of functions", "tools")
    if len(value) > MAX_TOOLS:
        raise ApiError(400, f"tools holds {len(value)} tools; at most {MAX_TOOLS}", "tools")
    budget = budget or SchemaBudget()
    tools = [_tool(t, f"tools[{i}]", budget) for i, t in enumerate(value)]
    names = [t.name for t in tools]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ApiError(400, f"tools names {twice[0]!r} more than once", "tools")
    if choice is None:
        choice = "auto"
    elif isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if choice.get("type") != "function" or not isinstance(name, str) or set(choice) != {"type", "function"}:
            raise ApiError(400, 'tool_choice must be auto, none, required or {"type": "function", "function": '
                           '{"name": ...}}', "tool_choice")
        if name not in names:
            raise ApiError(400, f"tool_choice names {_short(name)}, which is not in tools ({', '.join(names)})",
                           "tool_choice")
        choice = name
    elif choice not in CHOICES:
        raise ApiError(400, f"tool_choice must be auto, none, required or a function, not {_short(choice)}",
                       "tool_choice")
    return ToolRequest(tuple(tools), choice, parallel)


def _tool(value: Any, where: str, budget: SchemaBudget) -> Tool:
    function = value.get("function") if isinstance(value, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(function, dict):
        raise ApiError(400, f'{where} must be {{"type": "function", "function": {{"name", ...}}}}', where)
    extra = sorted(set(value) - {"type", "function"})
    if extra:
        raise ApiError(400, f"unrecognized {where} field: {extra[0]}", f"{where}.{extra[0]}")
    extra = sorted(k for k, v in function.items() if v is not None and k not in
                   ("name", "description", "parameters", "strict"))
    if extra:
        raise ApiError(400, f"unrecognized {where}.function field: {extra[0]}", f"{where}.function.{extra[0]}")
    where = f"{where}.function"
    name = _name(function.get("name"), f"{where}.name")
    description = typed(function, "description", str, f"{where}.description")
    strict = typed(function, "strict", bool, f"{where}.strict") or False
    tool = Tool(name, description and valid_unicode(description, f"{where}.description"), strict=strict)
    if function.get("parameters") is not None:
        tool = replace(tool, parameters=function["parameters"])
    _schema_grammar(tool.parameters, strict, f"{where}.parameters", budget)  # refused here (naming the tool)
    return tool


def _content(value: Any, where: str) -> str:
    """A string, or text parts joined (an image or audio part is refused)."""
    if isinstance(value, str):
        return valid_unicode(value, where)
    if isinstance(value, list) and value:
        texts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}[{j}] must be a text part; SpecQuant reads text only", f"{where}[{j}]")
            texts.append(valid_unicode(part["text"], f"{where}[{j}].text"))
        return "".join(texts)
    raise ApiError(400, f"{where} must be a string or an array of text parts", where)


def _stops(given: dict[str, Any]) -> tuple[str, ...]:
    stop = given.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(400, "stop must be a non-empty string or an array of them", "stop")
    if len(stops) > MAX_STOPS:
        raise ApiError(400, f"stop holds {len(stops)} strings; at most {MAX_STOPS}", "stop")
    return tuple(valid_unicode(x, "stop") for x in stops)


def valid_unicode(text: str, where: str) -> str:
    """`text` if it is valid Unicode. JSON may spell a lone UTF-16 surrogate ("\\ud800"), which no tokenizer
    can encode: refused here rather than failing inside the answer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = f"\\u{ord(text[e.start]):04x}"
        raise ApiError(400, f"{where} holds a lone surrogate ({bad}): not valid Unicode text", where) from None
    return text


def _specquant(given: dict[str, Any]) -> dict[str, Any]:
    ext = typed(given, "specquant", dict) or {}
    unknown = sorted(set(ext) - set(SPECQUANT_FIELDS))
    if unknown:
        raise ApiError(400, f"unknown specquant option {unknown[0]!r}: use {', '.join(SPECQUANT_FIELDS)}", "specquant")
    choices = {"level": ("auto", *LEVELS), "preset": PRESET_NAMES, "parent": TIERS, "draft": DRAFT_CHOICES}
    out: dict[str, Any] = {}
    for name, allowed in choices.items():
        value = ext.get(name)
        if value is None:
            continue
        if value not in allowed:
            words = f"specquant.{name} must be one of {', '.join(allowed)}, not {_short(value)}"
            raise ApiError(400, words, f"specquant.{name}")
        out[name] = value
    lossy = typed(ext, "allow_lossy", bool, "specquant.allow_lossy")
    if lossy is not None:
        out["allow_lossy"] = lossy
    # Whatever the server's own options say: a chat too long for the context is a 400, as OpenAI's, unless the
    # request asks for its oldest turns to be dropped (the answer's `dropped_turns` says how many were).
    out["trim"] = bool(typed(ext, "trim", bool, "specquant.trim"))
    return out


def typed(obj: dict[str, Any], name: str, kind: type, param: str | None = None) -> Any:
    value = obj.get(name)
    if value is None:
        return None
    # bool is an int in Python, not in JSON: `"max_tokens": true` is a wrong type.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ApiError(400, f"{param or name} must be {_KIND_WORDS[kind]}, not {_short(value)}", param or name)
    return value


_KIND_WORDS = {str: "a string", bool: "true or false", dict: "an object", int: "an integer", float: "a number"}


def integer(obj: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    value = typed(obj, name, int)
    if value is not None and not lo <= value <= hi:
        raise ApiError(400, f"{name}={value} is out of range: {lo} to {hi}", name)
    return value


def _number(obj: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(400, f"{name} must be a number, not {_short(value)}", name)
    if not lo <= value <= hi:
        raise ApiError(400, f"{name}={value} is out of range: {lo:g} to {hi:g}", name)
    return float(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --- responses ------------------------------------------------------------------------------------------
# What one client must not learn of another's: how much of its prompt the shared KV cache already held.
PRIVATE_FACTS = ("reused_tokens",)


def api_facts(last: Chunk) -> dict[str, Any]:
    """The answer's `specquant` object for API clients: the window's facts, less what tells of other chats."""
    return {k: v for k, v in answer_facts(last).items() if k not in PRIVATE_FACTS}


def new_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(last: Chunk) -> dict[str, int]:
    s = last.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.tokens, "total_tokens": s.prompt_tokens + s.tokens}


def finish_reason(last: Chunk, called: bool = False) -> str:
    """OpenAI's finish_reason: "tool_calls" when an answer that ended by itself made calls."""
    reason = FINISH_REASON.get(last.stats.stop_reason or "", "stop")
    return "tool_calls" if called and reason == "stop" else reason


def logprobs_content(choices: Sequence[TokenChoice]) -> list[dict[str, Any]]:
    """`logprobs.content`: each token's text, log-probability, bytes and its `top_logprobs`."""
    return [
        {
            "token": c.text,
            "logprob": c.logprob,
            "bytes": list(c.bytes),
            "top_logprobs": [{"token": t, "logprob": x, "bytes": list(b)} for t, b, x in c.top],
        }
        for c in choices
    ]


def call_deltas(deltas: Sequence[CallDelta]) -> list[dict[str, Any]]:
    """`delta.tool_calls`: a call's first piece has its id, type and name; later ones add to its arguments."""
    out = []
    for d in deltas:
        item: dict[str, Any] = {"index": d.index}
        function: dict[str, str] = {"arguments": d.arguments}
        if d.id is not None:
            item |= {"id": d.id, "type": "function"}
            function = {"name": d.name or "", **function}
        out.append(item | {"function": function})
    return out


def completion(
    call_id: str,
    model: str,
    text: str,
    last: Chunk,
    created: int | None = None,
    calls: Sequence[CallDelta] = (),
    logprobs: Sequence[TokenChoice] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        message["tool_calls"] = assemble(calls)
    return {
        "id": call_id,
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(last, bool(calls)),
                "logprobs": None if logprobs is None else {"content": logprobs_content(logprobs)},
            }
        ],
        "usage": usage(last),
        "specquant": api_facts(last),
    }


def stream_chunk(
    call_id: str,
    model: str,
    created: int,
    delta: dict[str, Any],
    finish: Chunk | None = None,
    logprobs: Sequence[TokenChoice] | None = None,
    called: bool = False,
) -> dict[str, Any]:
    """One `chat.completion.chunk`; the one with `finish` (the last Chunk) carries our facts. Never usage: as
    OpenAI's, only the extra last chunk of `include_usage` has it (a client adds up every usage it sees)."""
    out: dict[str, Any] = {
        "id": call_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": None if finish is None else finish_reason(finish, called),
                "logprobs": None if logprobs is None else {"content": logprobs_content(logprobs)},
            }
        ],
    }
    if finish is not None:
        out["specquant"] = api_facts(finish)
    return out


def usage_chunk(piece: dict[str, Any], last: Chunk) -> dict[str, Any]:
    """`stream_options.include_usage`: after the stream's last `piece`, one like it with no choices and the
    usage (the facts are on the finishing chunk already)."""
    head = {k: piece[k] for k in ("id", "object", "created", "model")}
    return head | {"choices": [], "usage": usage(last)}
