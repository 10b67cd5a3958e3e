"""OpenAI's chat-completions request, checked field by field into SpecQuant's own types (`ChatCall`): its
messages, `response_format` and `tools` here, the fields both endpoints share in runtime.api.fields.

Every field OpenAI defines is either honoured, accepted at the value that means "not used" (`n: 1`,
`logprobs: false`), accepted and ignored where it cannot change the answer (`IGNORED`: caching hints, tags),
or refused with a 400 naming it. `null` counts as absent, as the official clients send it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from runtime.api.fields import (
    build_options,
    check_fields,
    integer,
    sampling_changes,
    short,
    stream_flags,
    typed,
    valid_unicode,
)
from runtime.api.responses import ApiError
from runtime.decode.grammar import Grammar, GrammarError
from runtime.engine import thinking
from runtime.engine.options import ChatOptions, Message
from runtime.engine.tools import CHOICES, NAME, Tool, ToolRequest
from runtime.errors import UserError
from runtime.schema_limits import SchemaBudget, SchemaTooLarge

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
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
    "reasoning_effort", "chat_template_kwargs",  # a thinking model's budget; on/off as llama-server takes it
    *IGNORED,
}
MAX_TOOLS = 128  # OpenAI's own limit
MAX_TOP_LOGPROBS = 20
# `name` (a participant's name; LangChain sends it for named messages, and a tool's name on its results) is
# accepted and not shown to the model: most templates have no place for it, and text a template writes
# outside a message's content is read as its markup (runtime.engine.markup), so a name must not get there.
MESSAGE_FIELDS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "tool_calls", "refusal", "name", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id", "name"},
}


@dataclass(frozen=True)
class ChatCall:
    """One request (chat or text completions) in SpecQuant's terms."""

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
    check_fields(given, HONOURED, NOT_USED)
    for name, kind in IGNORED.items():
        typed(given, name, kind)
    model = typed(given, "model", str)
    if "messages" not in given:
        raise ApiError(400, "missing required parameter: messages", "messages")
    messages = _messages(given["messages"])
    # More than the context is cut to it, as llama-server does: the answer stops at the context's end with
    # finish_reason "length" (OpenCode asks for 32,000 whatever the context).
    asked = integer(given, "max_completion_tokens", 1, 2**31 - 1) or integer(given, "max_tokens", 1, 2**31 - 1)
    max_tokens = None if asked is None else min(asked, n_ctx)
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
    changes |= thinking_changes(given.get("reasoning_effort"), _enable_thinking(given), "reasoning_effort")
    if typed(given, "logprobs", bool):
        changes["logprobs"] = integer(given, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
    elif given.get("top_logprobs"):
        raise ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs")
    return ChatCall(model, messages, build_options(base, changes), stream, include_usage)


def thinking_changes(effort: Any, enable: bool | None, where: str) -> dict[str, Any]:
    """A thinking model's options from `reasoning_effort` (none, minimal, low, medium, high, or a token
    count) and an explicit on/off; a model that does not think ignores them."""
    changes: dict[str, Any] = {}
    if effort is not None:
        if isinstance(effort, bool) or not isinstance(effort, str | int):
            raise ApiError(400, f"{where} must be one of {', '.join(thinking.EFFORT_BUDGETS)} or a token count",
                           where)
        try:
            budget = thinking.budget_for(effort)
        except UserError as e:
            raise ApiError(400, str(e), where) from None
        if budget == 0:
            changes["enable_thinking"] = False
        elif budget is not None:
            changes["thinking_budget"] = budget
    if enable is not None:
        changes["enable_thinking"] = enable
    return changes


def _enable_thinking(given: dict[str, Any]) -> bool | None:
    """llama-server's `chat_template_kwargs: {"enable_thinking": false}`, the one template variable taken."""
    kwargs = typed(given, "chat_template_kwargs", dict)
    if not kwargs:
        return None
    unknown = sorted(set(kwargs) - {"enable_thinking"})
    if unknown:
        raise ApiError(400, f"chat_template_kwargs.{unknown[0]} is not supported by SpecQuant: only "
                       "enable_thinking", f"chat_template_kwargs.{unknown[0]}")
    return typed(kwargs, "enable_thinking", bool, "chat_template_kwargs.enable_thinking")


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
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema, not {short(kind)}",
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
            raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}, not {short(role)}", f"{where}.role")
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
        if role == "assistant" and m.get("reasoning_content") is not None:  # its thought, for the template
            message["reasoning_content"] = _content(m["reasoning_content"], f"{where}.reasoning_content")
            total += len(message["reasoning_content"])
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ApiError(400, f"{where}.tool_call_id must name the call this result answers",
                               f"{where}.tool_call_id")
            if call_id not in call_ids:
                raise ApiError(400, f"{where}.tool_call_id {short(call_id)} answers no earlier assistant "
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
            raise ApiError(400, f"tool_choice names {short(name)}, which is not in tools ({', '.join(names)})",
                           "tool_choice")
        choice = name
    elif choice not in CHOICES:
        raise ApiError(400, f"tool_choice must be auto, none, required or a function, not {short(choice)}",
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


