"""OpenAI's chat-completions shapes: a request checked field by field into SpecQuant's own types, and the
responses (whole, streamed chunks, errors) built from the Engine's Chunks.

Every field OpenAI defines is either honoured, accepted at the value that means "not used" (`n: 1`,
`logprobs: false`), or refused with a 400 naming it: nothing is silently ignored. `null` counts as absent,
as the official clients send it.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from runtime.decode.grammar import Grammar, GrammarError
from runtime.decode.sampling import SEED_MAX
from runtime.engine.chat import ChatOptions, Chunk, Message, answer_facts
from runtime.errors import UserError
from runtime.models.cache import TIERS
from runtime.plan.policy import DRAFT_CHOICES, PRESET_NAMES
from runtime.plan.router import LEVELS

DEFAULT_PORT = 8088  # `specquant serve` and the window's local API server
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_STOPS = 4
# One request may not hold the engine: at most this many messages and characters of content (the body's
# 1 MiB cap bounds the bytes; these bound the work of rendering and fitting the chat).
MAX_MESSAGES = 1000
MAX_CONTENT_CHARS = 400_000
# OpenAI fields we cannot honour, with the values that mean "not used" (accepted as such).
NOT_USED: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "tools": ([],),
    "tool_choice": ("none",),
    "parallel_tool_calls": (False, True),  # only means something with tools, which are refused
    "functions": ([],),
    "function_call": ("none",),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "logit_bias": ({},),
    "modalities": (["text"],),
    "store": (False,),
    "audio": (),
    "prediction": (),
    "web_search_options": (),
    "reasoning_effort": (),
    "metadata": (),
    "service_tier": ("auto", "default"),
}
HONOURED = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop",
    "stream", "stream_options", "user",  # user: the caller's own tag for its users, nothing to do here
    "response_format",
    "top_k", "min_p", "specquant",  # our extensions
}
SPECQUANT_FIELDS = ("level", "preset", "parent", "draft", "allow_lossy")
_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
FINISH_REASON = {"eos": "stop", "stop": "stop", "max_tokens": "length", "length": "length"}


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
    for name, value in given.items():
        if name in HONOURED:
            continue
        if name not in NOT_USED:
            raise ApiError(400, f"unrecognized request argument: {name}", name)
        if value not in NOT_USED[name]:
            raise ApiError(400, f"{name}={_short(value)} is not supported by SpecQuant", name, code="unsupported")
    model = _typed(given, "model", str)
    if "messages" not in given:
        raise ApiError(400, "missing required parameter: messages", "messages")
    messages = _messages(given["messages"])

    max_tokens = _integer(given, "max_completion_tokens", 1, n_ctx) or _integer(given, "max_tokens", 1, n_ctx)
    overrides = dict(base.sampling_overrides)
    for name, lo, hi in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0), ("min_p", 0.0, 1.0)):
        value = _number(given, name, lo, hi)
        if value is not None:
            overrides[name] = value
    for name, hi in (("top_k", 2**31 - 1), ("seed", SEED_MAX)):
        value = _integer(given, name, 0, hi)
        if value is not None:
            overrides[name] = value
    stream = bool(_typed(given, "stream", bool))
    stream_options = _typed(given, "stream_options", dict) or {}
    if stream_options and not stream:
        raise ApiError(400, "stream_options is only allowed with stream: true", "stream_options")
    unknown = set(stream_options) - {"include_usage"}
    if unknown:
        raise ApiError(400, f"unrecognized stream option: {sorted(unknown)[0]}", "stream_options")
    include_usage = bool(_typed(stream_options, "include_usage", bool, "stream_options.include_usage"))

    changes: dict[str, Any] = {"sampling_overrides": tuple(overrides.items()), "stop": _stops(given)}
    if max_tokens is not None:
        changes["max_tokens"] = max_tokens
    changes.update(_specquant(given))
    grammar = _response_format(given)
    if grammar is not None:
        changes["grammar"] = grammar
    try:
        options = replace(base, **changes)
    except UserError as e:  # the runtime's own checks (a sampling value out of range, a preset's rules)
        raise ApiError(400, str(e)) from None
    return ChatCall(model, messages, options, stream, include_usage)


def _response_format(given: dict[str, Any]) -> Grammar | None:
    """`response_format`: text (None), any JSON object, or a JSON schema. `strict: true` (OpenAI's structured
    outputs) enforces every keyword or refuses the schema with a 400 naming what is unsupported; without it,
    keywords the grammar engine cannot enforce are ignored, as OpenAI's non-strict mode does."""
    fmt = _typed(given, "response_format", dict)
    if fmt is None:
        return None
    kind = fmt.get("type")
    extra = sorted(set(fmt) - {"type", "json_schema"})
    if extra:
        raise ApiError(400, f"unrecognized response_format field: {extra[0]}", f"response_format.{extra[0]}")
    try:
        if kind == "text":
            return None
        if kind == "json_object":
            return Grammar.json_object()
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            where = "response_format.json_schema"
            if not isinstance(spec, dict):
                raise ApiError(400, f"{where} must be an object with a name and a schema", where)
            name = spec.get("name")
            if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
                raise ApiError(400, f"{where}.name must be 1-64 letters, digits, _ or -", f"{where}.name")
            unknown = sorted(set(spec) - {"name", "schema", "strict", "description"})
            if unknown:
                raise ApiError(400, f"unrecognized {where} field: {unknown[0]}", f"{where}.{unknown[0]}")
            strict = spec.get("strict") or False
            if not isinstance(strict, bool):
                raise ApiError(400, f"{where}.strict must be true or false", f"{where}.strict")
            schema = spec.get("schema", {})
            if not isinstance(schema, dict):
                raise ApiError(400, f"{where}.schema must be a JSON schema object", f"{where}.schema")
            try:
                return Grammar.from_json_schema(schema, strict=strict)
            except GrammarError as e:
                raise ApiError(400, str(e), f"{where}.schema", code="unsupported_schema") from None
    except RecursionError:  # a schema nested too deep for the compiler
        raise ApiError(400, "response_format is nested too deeply", "response_format") from None
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema, not {_short(kind)}",
                   "response_format.type")


def _messages(value: Any) -> list[Message]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "messages must be a non-empty array of messages", "messages")
    if len(value) > MAX_MESSAGES:
        raise ApiError(400, f"messages holds {len(value)} messages; at most {MAX_MESSAGES}", "messages")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ApiError(400, f"{where} must be an object with a role and content", where)
        extra = sorted(k for k, v in m.items() if v is not None and k not in ("role", "content"))
        if extra:
            raise ApiError(400, f"{where}.{extra[0]} is not supported by SpecQuant", f"{where}.{extra[0]}")
        role = m.get("role")
        if role not in ROLES:
            raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}, not {_short(role)}", f"{where}.role")
        out.append({"role": ROLES[role], "content": _content(m.get("content"), f"{where}.content")})
    total = sum(len(m["content"]) for m in out)
    if total > MAX_CONTENT_CHARS:
        raise ApiError(400, f"the messages hold {total} characters; at most {MAX_CONTENT_CHARS}", "messages")
    if out[-1]["role"] != "user":
        raise ApiError(400, "the last message must be from the user", f"messages[{len(out) - 1}].role")
    return out


def _content(value: Any, where: str) -> str:
    """A string, or text parts joined (an image or audio part is refused)."""
    if isinstance(value, str):
        return _unicode(value, where)
    if isinstance(value, list) and value:
        texts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}[{j}] must be a text part; SpecQuant reads text only", f"{where}[{j}]")
            texts.append(_unicode(part["text"], f"{where}[{j}].text"))
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
    return tuple(_unicode(x, "stop") for x in stops)


def _unicode(text: str, where: str) -> str:
    """`text` if it is valid Unicode. JSON may spell a lone UTF-16 surrogate ("\\ud800"), which no tokenizer
    can encode: refused here rather than failing inside the answer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = f"\\u{ord(text[e.start]):04x}"
        raise ApiError(400, f"{where} holds a lone surrogate ({bad}): not valid Unicode text", where) from None
    return text


def _specquant(given: dict[str, Any]) -> dict[str, Any]:
    ext = _typed(given, "specquant", dict) or {}
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
    lossy = _typed(ext, "allow_lossy", bool, "specquant.allow_lossy")
    if lossy is not None:
        out["allow_lossy"] = lossy
    return out


def _typed(obj: dict[str, Any], name: str, kind: type, param: str | None = None) -> Any:
    value = obj.get(name)
    if value is None:
        return None
    # bool is an int in Python, not in JSON: `"max_tokens": true` is a wrong type.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ApiError(400, f"{param or name} must be {_KIND_WORDS[kind]}, not {_short(value)}", param or name)
    return value


_KIND_WORDS = {str: "a string", bool: "true or false", dict: "an object", int: "an integer", float: "a number"}


def _integer(obj: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    value = _typed(obj, name, int)
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


def completion(call_id: str, model: str, text: str, last: Chunk, created: int | None = None) -> dict[str, Any]:
    return {
        "id": call_id,
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": FINISH_REASON.get(last.stats.stop_reason or "", "stop"),
                "logprobs": None,
            }
        ],
        "usage": usage(last),
        "specquant": api_facts(last),
    }


def stream_chunk(
    call_id: str, model: str, created: int, delta: dict[str, str], finish: Chunk | None = None
) -> dict[str, Any]:
    """One `chat.completion.chunk`; the one with `finish` (the last Chunk) carries usage and the facts."""
    out: dict[str, Any] = {
        "id": call_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": None if finish is None else FINISH_REASON.get(finish.stats.stop_reason or "", "stop"),
                "logprobs": None,
            }
        ],
    }
    if finish is not None:
        out["usage"] = usage(finish)
        out["specquant"] = api_facts(finish)
    return out


def usage_chunk(call_id: str, model: str, created: int, last: Chunk) -> dict[str, Any]:
    """`stream_options.include_usage`: the last chunk, with no choices and the usage."""
    return {
        "id": call_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(last),
        "specquant": api_facts(last),
    }
