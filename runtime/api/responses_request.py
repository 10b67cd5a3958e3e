"""OpenAI's Responses request (`POST /v1/responses`), stateless: checked and turned into the chat-completions
request it means, which runtime.api.requests reads as every chat is read (the same limits, schema grammars,
tool grammars and `specquant` options). A 400 names the Responses field (`input[2].call_id`).

`input` is a string or items: messages (`input_text`/`output_text` parts), `function_call` (an earlier call)
and `function_call_output` (its result); earlier `reasoning` items are dropped. `instructions` is the system
message, `text.format` the response format, `max_output_tokens` the token limit, `truncation: "auto"` drops
the oldest turns to fit (`specquant.trim`). Nothing is stored, so `previous_response_id` and `conversation`
are refused with a 400 saying to send the whole conversation. Function tools are read, and so are the
functions of a `namespace` tool (Codex groups its tools so; a call of one names its namespace). Hosted tools
(`web_search`, `file_search`, ...), which only OpenAI's servers can run, are left out of what the model sees,
with one log line, rather than refusing the request. Images and files are refused; `store`, `include`,
`reasoning`, `metadata`, `client_metadata` (Codex's ids and telemetry) and OpenAI's caching and tracking tags
cannot change what this server answers: accepted and ignored.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from runtime.api.fields import short, typed, valid_unicode
from runtime.api.requests import MAX_MESSAGES, NOT_USED, ChatCall, parse_chat
from runtime.api.responses import ApiError
from runtime.engine.options import ChatOptions

PASSED = {"model", "temperature", "top_p", "top_k", "min_p", "stream", "stream_options", "parallel_tool_calls",
          "specquant", "prompt_cache_key", "safety_identifier", "service_tier", "prompt_cache_retention", "user"}
READ = {"input", "instructions", "tools", "tool_choice", "text", "max_output_tokens", "truncation", "store",
        "metadata", "include", "reasoning", "client_metadata"}
STATEFUL = ("previous_response_id", "conversation")
REFUSED = ("background", "prompt", "max_tool_calls", "top_logprobs", "context_management")
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "refusal")
TOOL_FIELDS = {"type", "name", "description", "parameters", "strict", "defer_loading"}
log = logging.getLogger("specquant.server")


@dataclass(frozen=True)
class ResponsesCall(ChatCall):
    """A ChatCall with what the response repeats of its request (OpenAI's response echoes its settings)."""

    echo: dict[str, Any] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)  # a namespace tool's function: its namespace


def parse_responses(body: Any, base: ChatOptions, n_ctx: int) -> ResponsesCall:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    given = {k: v for k, v in body.items() if v is not None}
    for name in given:
        if name in STATEFUL:
            raise ApiError(400, f"{name} is not supported: SpecQuant stores no responses (every response is "
                           "store: false); send the whole conversation in input", name, code="unsupported")
        if name in REFUSED:
            raise ApiError(400, f"{name} is not supported by SpecQuant", name, code="unsupported")
        if name not in PASSED | READ:
            raise ApiError(400, f"unrecognized request argument: {name}", name)
    for name, kind in (("store", bool), ("metadata", dict), ("reasoning", dict), ("instructions", str),
                       ("client_metadata", dict)):
        typed(given, name, kind)
    include = given.get("include", [])
    if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
        raise ApiError(400, "include must be an array of strings", "include")
    chat: dict[str, Any] = {k: v for k, v in given.items() if k in PASSED}
    instructions = given.get("instructions")
    chat["messages"] = ([{"role": "system", "content": instructions}] if instructions else []) + _input(given)
    if "max_output_tokens" in given:
        chat["max_tokens"] = given["max_output_tokens"]
    effort = (given.get("reasoning") or {}).get("effort")
    if effort is not None:  # a thinking model's budget (runtime.engine.thinking); others ignore it
        chat["reasoning_effort"] = effort
    truncation = given.get("truncation", "disabled")
    if truncation not in ("auto", "disabled"):
        raise ApiError(400, f"truncation must be auto or disabled, not {short(truncation)}", "truncation")
    if truncation == "auto":  # OpenAI drops the oldest items to fit: our trim
        chat["specquant"] = {**(typed(given, "specquant", dict) or {}), "trim": True}
    namespaces: dict[str, str] = {}
    if "tools" in given:
        chat["tools"] = _tools(given["tools"], namespaces)
    if "tool_choice" in given:
        chat["tool_choice"] = _tool_choice(given["tool_choice"])
    text = _text(given)
    if text is not None:
        chat["response_format"] = text
    try:
        call = parse_chat(chat, base, n_ctx)
    except ApiError as e:
        param = e.param and _responses_param(e.param)
        message = e.message.replace(e.param, param) if e.param and param else e.message
        raise ApiError(e.status, message, param, e.kind, e.code, e.headers) from None
    echo = {
        "instructions": instructions, "max_output_tokens": given.get("max_output_tokens"),
        "parallel_tool_calls": given.get("parallel_tool_calls", True), "temperature": given.get("temperature"),
        "top_p": given.get("top_p"), "tool_choice": given.get("tool_choice", "auto"),
        "tools": given.get("tools", []), "text": {"format": given.get("text", {}).get("format", {"type": "text"})},
        "truncation": truncation, "metadata": given.get("metadata", {}), "store": False,
    }  # fmt: skip
    return ResponsesCall(call.model, call.messages, call.options, call.stream, call.include_usage, echo, namespaces)


def _responses_param(param: str) -> str:
    """An OpenAI chat field path of the converted request as the Responses API's."""
    param = re.sub(r"^tools\[(\d+)\]\.function\.", r"tools[\1].", param)
    param = param.replace("response_format.json_schema", "text.format").replace("response_format", "text.format")
    return {"max_tokens": "max_output_tokens", "messages": "input"}.get(param, param)


def _input(given: dict[str, Any]) -> list[dict[str, Any]]:
    value = given.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": valid_unicode(value, "input")}]
    if not isinstance(value, list) or not value:
        raise ApiError(400, "input must be a string or a non-empty array of items", "input")
    if len(value) > MAX_MESSAGES:
        raise ApiError(400, f"input holds {len(value)} items; at most {MAX_MESSAGES}", "input")
    out: list[dict[str, Any]] = []
    thought = ""  # an earlier `reasoning` item's text: the next assistant turn's reasoning_content
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{where} must be an item object", where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            out.append(_message(item, where))
        elif kind == "function_call":
            call = _function_call(item, where)
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":  # the calls of one turn, after its text
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        if thought and kind in ("message", "function_call") and out[-1]["role"] == "assistant":
            out[-1]["reasoning_content"], thought = thought, ""  # the turn the thought came before
        if kind in ("message", "function_call"):
            continue
        if kind == "function_call_output":
            _fields(item, {"type", "call_id", "output", "id", "status", "name", "namespace"}, where)
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ApiError(400, f"{where}.call_id must name the function_call this output answers",
                               f"{where}.call_id")
            out.append({"role": "tool", "tool_call_id": call_id, "content": _content(item.get("output"),
                                                                                      f"{where}.output")})
        elif kind == "reasoning":  # a thinking model's earlier thought: its template keeps or drops it
            thought += _reasoning_text(item)
        else:
            raise ApiError(400, f"{where}.type {short(kind)} is not supported by SpecQuant (it reads message, "
                           "function_call and function_call_output items)", f"{where}.type")
    if not out:
        raise ApiError(400, "input holds no message", "input")
    return out


def _reasoning_text(item: dict[str, Any]) -> str:
    """A `reasoning` item's text: its `reasoning_text` content, else its summary's text (malformed parts and an
    encrypted one from another server are nothing to show)."""
    for key in ("content", "summary"):
        parts = item.get(key)
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)] \
            if isinstance(parts, list) else []
        if texts:
            return "\n".join(texts)
    return ""


def _fields(item: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(k for k, v in item.items() if v is not None and k not in allowed)
    if extra:
        raise ApiError(400, f"unrecognized {where} field: {extra[0]}", f"{where}.{extra[0]}")


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    _fields(item, {"type", "role", "content", "id", "status"}, where)
    role = item.get("role")
    if role not in ROLES:
        raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}, not {short(role)}", f"{where}.role")
    return {"role": ROLES[role], "content": _content(item.get("content"), f"{where}.content")}


def _content(value: Any, where: str) -> str:
    """A string, or text parts joined (an image, a file or audio is refused)."""
    if isinstance(value, str):
        return valid_unicode(value, where)
    if not isinstance(value, list):
        raise ApiError(400, f"{where} must be a string or an array of text parts", where)
    texts = []
    for j, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        text = part.get("text", part.get("refusal")) if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(text, str):
            raise ApiError(400, f"{where}[{j}] must be a text part ({', '.join(TEXT_PARTS)}); SpecQuant reads "
                           "text only", f"{where}[{j}]")
        texts.append(valid_unicode(text, f"{where}[{j}].text"))
    return "".join(texts)


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    _fields(item, {"type", "call_id", "name", "arguments", "id", "status", "namespace"}, where)
    for name in ("call_id", "name", "arguments"):
        if not isinstance(item.get(name), str):
            raise ApiError(400, f"{where}.{name} must be a string", f"{where}.{name}")
    function = {"name": item["name"], "arguments": item["arguments"]}
    return {"id": item["call_id"], "type": "function", "function": function}


def _tools(value: Any, namespaces: dict[str, str]) -> list[dict[str, Any]]:
    """Function tools as chat's (`strict` defaults to true, as OpenAI's Responses API does), a namespace's
    functions among them (`namespaces` learns which namespace each is in); hosted tools are left out."""
    if not isinstance(value, list):
        raise ApiError(400, "tools must be an array of tools", "tools")
    out: list[dict[str, Any]] = []
    hosted: list[str] = []
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or not isinstance(kind, str):
            raise ApiError(400, f"{where} must be a tool object with a type", where)
        if kind == "function":
            out.append(_function(tool, where))
        elif kind == "namespace":
            _fields(tool, {"type", "name", "description", "tools"}, where)
            name, functions = tool.get("name"), tool.get("tools")
            if not isinstance(name, str) or not isinstance(functions, list):
                raise ApiError(400, f"{where} must be a namespace with a name and its tools", where)
            for j, function in enumerate(functions):
                at = f"{where}.tools[{j}]"
                if not isinstance(function, dict) or function.get("type", "function") != "function":
                    raise ApiError(400, f"{at} must be a function tool", at)
                out.append(_function(function | {"type": "function"}, at))
                namespaces[out[-1]["function"]["name"]] = name
        else:  # web_search, file_search, code_interpreter, custom, ...: only OpenAI's servers run them
            hosted.append(kind)
    if hosted:
        log.info("left out tools this server cannot run: %s", ", ".join(short(k) for k in sorted(set(hosted))))
    return out


def _function(tool: dict[str, Any], where: str) -> dict[str, Any]:
    _fields(tool, TOOL_FIELDS, where)
    function = {k: tool[k] for k in ("name", "description", "parameters") if tool.get(k) is not None}
    return {"type": "function", "function": function | {"strict": tool.get("strict", True)}}


def _tool_choice(value: Any) -> Any:
    if isinstance(value, str):
        return value  # auto, none, required: checked with the tools
    if isinstance(value, dict) and value.get("type") == "function" and set(value) == {"type", "name"}:
        return {"type": "function", "function": {"name": value["name"]}}
    raise ApiError(400, 'tool_choice must be auto, none, required or {"type": "function", "name": ...}', "tool_choice")


def _text(given: dict[str, Any]) -> dict[str, Any] | None:
    """`text.format` as chat's response_format; `text.verbosity` only at OpenAI's default."""
    text = typed(given, "text", dict)
    if text is None:
        return None
    _fields(text, {"format", "verbosity"}, "text")
    if text.get("verbosity") not in (None, *NOT_USED["verbosity"]):
        raise ApiError(400, f"text.verbosity={short(text['verbosity'])} is not supported by SpecQuant",
                       "text.verbosity", code="unsupported")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise ApiError(400, "text.format must be an object", "text.format")
    if fmt.get("type") != "json_schema":
        return fmt  # text or json_object: checked as chat's
    spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
    extra = sorted(set(fmt) - {"type", *spec})
    if extra:
        raise ApiError(400, f"unrecognized text.format field: {extra[0]}", f"text.format.{extra[0]}")
    return {"type": "json_schema", "json_schema": spec}
