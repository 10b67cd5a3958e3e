"""Anthropic's Messages request (`POST /v1/messages` and `/v1/messages/count_tokens`), checked and turned into
the chat-completions request it means; runtime.api.requests then reads that as it reads every chat, so both
get the same message and schema limits, tool grammars and `specquant` options (llama.cpp's server converts
Anthropic's requests to OpenAI's the same way). A 400 names Anthropic's field (`messages.1.content.0.type`).

Content blocks: text; `tool_use` in assistant turns (the calls made); `tool_result` in user turns (each a tool
message answering its call; `is_error` is said in its text). Earlier `thinking` blocks become the turn's
`reasoning_content`, which a thinking model's template keeps or drops (runtime.engine.thinking);
`redacted_thinking` is dropped. `thinking` (`enabled` with `budget_tokens`, `disabled`, `adaptive`) is a
thinking model's budget or its switch; a model that does not think ignores it. A `system` message inside
`messages` (Claude Code's mid-conversation system turns) is a system turn at that place. Images, documents and
server tools are refused, and so are `container` and `mcp_servers`. `context_management` is accepted: its
`clear_thinking_*` edits drop earlier turns' thoughts as asked, other edits (clearing tool results on
Anthropic's side) are ignored. `cache_control` anywhere, `metadata`, `service_tier`, `output_config.effort`
and the routing and tracking fields (`IGNORED`) cannot change what this server answers: accepted and ignored.

Claude Code's first system block is an attribution line (`x-anthropic-billing-header: cc_version=...;
cch=...;`) that changes with every version, session and even request: it is left out of the prompt, so that
the prompt cache serves every request (llama.cpp's server does the same).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from runtime.api.anthropic_context import clear_thinking, strip_billing
from runtime.api.fields import short, typed, valid_unicode
from runtime.api.requests import MAX_MESSAGES, ChatCall, parse_chat
from runtime.api.responses import ApiError
from runtime.engine.options import ChatOptions

# Caching, routing and tracking for Anthropic's own service: nothing to do here.
IGNORED = ("cache_control", "diagnostics", "inference_geo", "speed", "user_profile_id", "workspace_id")
MESSAGE_FIELDS = {
    "model", "messages", "system", "tools", "tool_choice", "thinking", "output_format", "output_config",
    "context_management", "specquant", *IGNORED,
}  # fmt: skip
# temperature, top_p and top_k: newer Anthropic SDKs no longer offer them (send them in extra_body); older
# clients and Claude Code may still send them, and they are honoured.
ANSWER_FIELDS = {
    "max_tokens", "stop_sequences", "stream", "temperature", "top_p", "top_k", "metadata", "service_tier",
}  # fmt: skip
TOOL_FIELDS = {"type", "name", "description", "input_schema", "strict", "cache_control", "allowed_callers",
               "defer_loading", "eager_input_streaming", "input_examples"}  # the last five: hints, ignored
REFUSED = ("container", "mcp_servers")  # Anthropic's hosted features
MAX_STOP_SEQUENCES = 16  # each is looked for after every token
CHOICES = {"auto": "auto", "any": "required", "none": "none"}  # Anthropic's tool_choice types as OpenAI's


def parse_messages(body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
    """A `/v1/messages` request as a ChatCall. `max_tokens` is required; above the context it is cut to the
    context (Claude Code asks for 32,000; the answer can never be longer anyway)."""
    given = _object(body, MESSAGE_FIELDS | ANSWER_FIELDS)
    if given.get("max_tokens") is None:
        raise ApiError(400, "max_tokens: Field required", "max_tokens")
    max_tokens = typed(given, "max_tokens", int)
    if max_tokens < 1:
        raise ApiError(400, f"max_tokens: must be at least 1, not {max_tokens}", "max_tokens")
    chat = _chat(given)
    if chat["messages"][-1]["role"] == "assistant":
        # Anthropic continues a last assistant message (a "prefill"); this engine writes a new turn instead,
        # which would be a different answer: refused rather than answered otherwise.
        raise ApiError(400, "messages: a last assistant message (a prefill to continue) is not supported by "
                       "SpecQuant: end with a user message", "messages")
    chat["max_tokens"] = min(max_tokens, n_ctx)
    for name in ("stream", "temperature", "top_p", "top_k"):
        if name in given:
            chat[name] = given[name]
    typed(given, "metadata", dict)
    call = _parse_chat(chat, base, n_ctx)
    options = replace(call.options, stop=_stop_sequences(given.get("stop_sequences")))
    return replace(call, options=options)


def parse_count(body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
    """A `/v1/messages/count_tokens` request as a ChatCall whose answer is one token: the prompt is built and
    tokenized exactly as `/v1/messages` would (template, tools, system), and its length is the count."""
    given = _object(body, MESSAGE_FIELDS)
    chat = _chat(given)
    chat["max_tokens"] = 1
    chat["specquant"] = {**chat.get("specquant", {}), "draft": "none"}  # no draft to load for one token
    return _parse_chat(chat, base, n_ctx)


def _object(body: Any, fields: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    given = {k: v for k, v in body.items() if v is not None}
    for name in given:
        if name in REFUSED:
            raise ApiError(400, f"{name}: not supported by SpecQuant", name)
        if name not in fields:
            raise ApiError(400, f"{name}: Extra inputs are not permitted", name)
    return given


def _chat(given: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body of the fields Messages and count_tokens share."""
    typed(given, "model", str)
    thinking = typed(given, "thinking", dict)
    if given.get("service_tier") not in (None, "auto", "standard_only"):
        raise ApiError(400, f"service_tier: must be auto or standard_only, not {short(given['service_tier'])}",
                       "service_tier")
    messages = clear_thinking(_messages(given.get("messages")), typed(given, "context_management", dict))
    system = _system(given.get("system"))
    chat: dict[str, Any] = {"messages": ([{"role": "system", "content": system}] if system else []) + messages}
    if "model" in given:
        chat["model"] = given["model"]
    if thinking:
        chat |= _thinking(thinking)
    if "specquant" in given:
        chat["specquant"] = typed(given, "specquant", dict)
    tools = given.get("tools")
    if tools is not None:
        chat["tools"] = _tools(tools)
    choice = given.get("tool_choice")
    if choice is not None:
        chat["tool_choice"], parallel = _tool_choice(choice)
        if parallel is not None and tools:
            chat["parallel_tool_calls"] = parallel
    fmt = _output_format(given)
    if fmt is not None:
        chat["response_format"] = fmt
    return chat


def _thinking(value: dict[str, Any]) -> dict[str, Any]:
    """`thinking` as the chat request's fields: a budget (`reasoning_effort` as a token count) or thinking off."""
    kind = value.get("type")
    if kind == "disabled":
        _fields(value, {"type"}, "thinking")
        return {"chat_template_kwargs": {"enable_thinking": False}}
    if kind == "adaptive":
        return {}
    if kind != "enabled":
        raise ApiError(400, f"thinking.type: must be enabled, disabled or adaptive, not {short(kind)}", "thinking.type")
    _fields(value, {"type", "budget_tokens", "display"}, "thinking")
    budget = value.get("budget_tokens")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ApiError(400, "thinking.budget_tokens: must be a whole number of tokens, at least 1",
                       "thinking.budget_tokens")
    return {"reasoning_effort": budget}


def _parse_chat(chat: dict[str, Any], base: ChatOptions, n_ctx: int) -> ChatCall:
    """runtime.api.requests' reading of the converted request, its 400s naming Anthropic's fields."""
    try:
        return parse_chat(chat, base, n_ctx)
    except ApiError as e:
        param = e.param and _anthropic_param(e.param)
        message = e.message.replace(e.param, param) if e.param and param else e.message
        raise ApiError(e.status, message, param, e.kind, e.code, e.headers) from None


def _anthropic_param(param: str) -> str:
    """An OpenAI field path of the converted request as Anthropic's (tool indexes are kept as they were)."""
    param = re.sub(r"^tools\[(\d+)\]\.function\.parameters", r"tools.\1.input_schema", param)
    param = re.sub(r"^tools\[(\d+)\]\.function\.", r"tools.\1.", param)
    param = param.replace("response_format.json_schema.schema", "output_format.schema")
    return {"stop": "stop_sequences", "parallel_tool_calls": "tool_choice.disable_parallel_tool_use"}.get(param, param)


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "messages: must be a non-empty array of messages", "messages")
    if len(value) > MAX_MESSAGES:
        raise ApiError(400, f"messages: holds {len(value)} messages; at most {MAX_MESSAGES}", "messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(value):
        where = f"messages.{i}"
        if not isinstance(m, dict):
            raise ApiError(400, f"{where}: must be an object with a role and content", where)
        extra = sorted(k for k, v in m.items() if v is not None and k not in ("role", "content"))
        if extra:
            raise ApiError(400, f"{where}.{extra[0]}: Extra inputs are not permitted", f"{where}.{extra[0]}")
        role = m.get("role")
        if role not in ("user", "assistant", "system"):
            raise ApiError(400, f"{where}.role: must be user, assistant or system, not {short(role)}", f"{where}.role")
        if role == "system":  # a system turn at this place (Claude Code's mid-conversation system messages)
            text = _system(m.get("content"), f"{where}.content")
            if text:
                out.append({"role": "system", "content": text})
            continue
        blocks = _blocks(m.get("content"), f"{where}.content")
        out.extend(_assistant(blocks, where) if role == "assistant" else _user(blocks, where))
    return out


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """Content as blocks: a string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise ApiError(400, f"{where}: must be a string or an array of content blocks", where)
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise ApiError(400, f"{where}.{j}: must be a content block with a type", f"{where}.{j}")
    return content


def _text(block: dict[str, Any], where: str) -> str:
    _fields(block, {"type", "text", "cache_control", "citations"}, where)
    text = block.get("text")
    if not isinstance(text, str):
        raise ApiError(400, f"{where}.text: must be a string", f"{where}.text")
    return valid_unicode(text, f"{where}.text")


def _fields(block: dict[str, Any], allowed: set[str], where: str) -> None:
    """Only `allowed` fields (a null one counts as absent: clients send back blocks they parsed, nulls and all)."""
    extra = sorted(k for k, v in block.items() if v is not None and k not in allowed)
    if extra:
        raise ApiError(400, f"{where}.{extra[0]}: Extra inputs are not permitted", f"{where}.{extra[0]}")


def _unsupported(kind: str, where: str) -> ApiError:
    return ApiError(400, f"{where}.type: {short(kind)} blocks are not supported by SpecQuant (it reads text, "
                    "tool_use and tool_result)", f"{where}.type")


def _assistant(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    texts, calls, thoughts = [], [], []
    for j, block in enumerate(blocks):
        at, kind = f"{where}.content.{j}", block["type"]
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "thinking":  # an earlier thought: the template keeps or drops it
            _fields(block, {"type", "thinking", "signature", "cache_control"}, at)
            if not isinstance(block.get("thinking"), str):
                raise ApiError(400, f"{at}.thinking: must be a string", f"{at}.thinking")
            thoughts.append(block["thinking"])
        elif kind == "tool_use":
            _fields(block, {"type", "id", "name", "input", "cache_control", "caller", "toolset_name"}, at)
            for name, want in (("id", str), ("name", str), ("input", dict)):
                if not isinstance(block.get(name), want):
                    words = "an object" if want is dict else "a string"
                    raise ApiError(400, f"{at}.{name}: must be {words}", f"{at}.{name}")
            arguments = json.dumps(block["input"], ensure_ascii=False)  # a lone surrogate stays one: refused
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": arguments}})
        elif kind != "redacted_thinking":  # a thought another model encrypted: nothing to show
            raise _unsupported(kind, at)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return [message]


def _user(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """A user turn as OpenAI's messages: each tool_result a tool message, the text between them user messages,
    in their order."""
    if not blocks:
        raise ApiError(400, f"{where}.content: must hold at least one content block", f"{where}.content")
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        at, kind = f"{where}.content.{j}", block["type"]
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "tool_result":
            if texts:
                out.append({"role": "user", "content": "\n\n".join(texts)})
                texts = []
            out.append(_tool_result(block, at))
        else:
            raise _unsupported(kind, at)
    if texts:
        out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    _fields(block, {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"}, where)
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise ApiError(400, f"{where}.tool_use_id: must name the tool_use this result answers", f"{where}.tool_use_id")
    content = block.get("content", "")
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ApiError(400, f"{where}.content.{k}: must be a text block; SpecQuant reads text only",
                               f"{where}.content.{k}")
            parts.append(_text(part, f"{where}.content.{k}"))
        content = "\n\n".join(parts)
    elif not isinstance(content, str):
        raise ApiError(400, f"{where}.content: must be a string or an array of text blocks", f"{where}.content")
    content = valid_unicode(content, f"{where}.content")
    if typed(block, "is_error", bool, f"{where}.is_error"):  # the model must know the call failed
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _system(value: Any, where: str = "system") -> str:
    """System text (a string or text blocks), without Claude Code's attribution line, which changes per request:
    kept, it would make every prompt differ from its first line on and no prompt cache could serve it."""
    if value is None:
        return ""
    if isinstance(value, str):
        return strip_billing(valid_unicode(value, where))
    if not isinstance(value, list):
        raise ApiError(400, f"{where}: must be a string or an array of text blocks", where)
    texts = []
    for j, block in enumerate(value):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise ApiError(400, f"{where}.{j}: must be a text block", f"{where}.{j}")
        text = strip_billing(_text(block, f"{where}.{j}"))
        if text.strip():
            texts.append(text)
    return "\n\n".join(texts)


def _tools(value: Any) -> list[dict[str, Any]]:
    """Anthropic's client tools as OpenAI's function tools (their `input_schema` the `parameters`)."""
    if not isinstance(value, list):
        raise ApiError(400, "tools: must be an array of tools", "tools")
    out = []
    for i, tool in enumerate(value):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise ApiError(400, f"{where}: must be a tool object", where)
        if tool.get("type") not in (None, "custom"):  # Anthropic's server tools (bash, web search, ...)
            raise ApiError(400, f"{where}.type: {short(tool['type'])} is a server tool; SpecQuant answers with "
                           "client tools (name, description, input_schema) only", f"{where}.type")
        _fields(tool, TOOL_FIELDS, where)
        if not isinstance(tool.get("input_schema"), dict):
            raise ApiError(400, f"{where}.input_schema: Field required (a JSON schema object)", f"{where}.input_schema")
        function = {k: tool[k] for k in ("name", "description", "strict") if tool.get(k) is not None}
        out.append({"type": "function", "function": function | {"parameters": tool["input_schema"]}})
    return out


def _tool_choice(value: Any) -> tuple[Any, bool | None]:
    """OpenAI's tool_choice and parallel_tool_calls for Anthropic's tool_choice."""
    if not isinstance(value, dict) or value.get("type") not in (*CHOICES, "tool"):
        raise ApiError(400, "tool_choice: must be {\"type\": auto, any, tool (with a name) or none}", "tool_choice")
    kind = value["type"]
    _fields(value, {"type", "name", "disable_parallel_tool_use"} if kind == "tool" else
            {"type", "disable_parallel_tool_use"}, "tool_choice")
    disable = typed(value, "disable_parallel_tool_use", bool, "tool_choice.disable_parallel_tool_use")
    parallel = None if disable is None else not disable
    if kind == "tool":
        name = value.get("name")
        if not isinstance(name, str):
            raise ApiError(400, "tool_choice.name: Field required", "tool_choice.name")
        return {"type": "function", "function": {"name": name}}, parallel
    return CHOICES[kind], parallel


def _output_format(given: dict[str, Any]) -> dict[str, Any] | None:
    """Structured outputs: `output_format` (or `output_config.format`) `{"type": "json_schema", "schema"}`, as
    a strict response_format: every keyword enforced, or a 400 naming what cannot be."""
    config = typed(given, "output_config", dict) or {}
    _fields(config, {"format", "effort"}, "output_config")
    fmt, where = given.get("output_format"), "output_format"
    if fmt is None and config.get("format") is not None:
        fmt, where = config["format"], "output_config.format"
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise ApiError(400, f'{where}: must be {{"type": "json_schema", "schema": {{...}}}}', where)
    _fields(fmt, {"type", "schema"}, where)
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"], "strict": True}}


def _stop_sequences(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise ApiError(400, "stop_sequences: must be an array of non-empty strings", "stop_sequences")
    if len(value) > MAX_STOP_SEQUENCES:
        raise ApiError(400, f"stop_sequences: holds {len(value)} strings; at most {MAX_STOP_SEQUENCES}",
                       "stop_sequences")
    return tuple(valid_unicode(s, "stop_sequences") for s in value)
