"""Reading a request's fields, for both endpoints: each field's type and range (a 400 naming it), the fields
that cannot be honoured, the stream flags, and the sampling, stop and `specquant` options that become
ChatOptions. `null` counts as absent, as the official clients send it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from runtime.api.responses import ApiError
from runtime.decode.sampling import SEED_MAX
from runtime.documents.grounding import DEFAULT_TOP, MAX_TOP, Grounding
from runtime.engine.options import ChatOptions
from runtime.errors import UserError
from runtime.models.cache import TIERS
from runtime.plan.policy import DRAFT_CHOICES, PRESET_NAMES
from runtime.plan.router import LEVELS

MAX_STOPS = 4
SPECQUANT_FIELDS = ("level", "preset", "parent", "draft", "allow_lossy", "trim", "documents", "documents_top")


def check_fields(given: dict[str, Any], honoured: set[str], not_used: dict[str, tuple[Any, ...]]) -> None:
    """Every field is honoured, or not used at a value that means so; else a 400 naming it."""
    for name, value in given.items():
        if name in honoured:
            continue
        if name not in not_used:
            raise ApiError(400, f"unrecognized request argument: {name}", name)
        if value not in not_used[name]:
            raise ApiError(400, f"{name}={short(value)} is not supported by SpecQuant", name, code="unsupported")


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
        value = number(given, name, lo, hi)
        if value is not None:
            overrides[name] = value
    for name, hi in (("top_k", 2**31 - 1), ("seed", SEED_MAX)):
        value = integer(given, name, 0, hi)
        if value is not None:
            overrides[name] = value
    changes: dict[str, Any] = {"sampling_overrides": tuple(overrides.items()), "stop": stops(given)}
    if max_tokens is not None:
        changes["max_tokens"] = max_tokens
    changes.update(specquant_changes(given))
    return changes

def stops(given: dict[str, Any]) -> tuple[str, ...]:
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


def specquant_changes(given: dict[str, Any]) -> dict[str, Any]:
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
            words = f"specquant.{name} must be one of {', '.join(allowed)}, not {short(value)}"
            raise ApiError(400, words, f"specquant.{name}")
        out[name] = value
    lossy = typed(ext, "allow_lossy", bool, "specquant.allow_lossy")
    if lossy is not None:
        out["allow_lossy"] = lossy
    # Whatever the server's own options say: a chat too long for the context is a 400, as OpenAI's, unless the
    # request asks for its oldest turns to be dropped (the answer's `dropped_turns` says how many were).
    out["trim"] = bool(typed(ext, "trim", bool, "specquant.trim"))
    grounding = documents(ext)
    if grounding is not None:
        out["documents"] = grounding
    return out


def documents(ext: dict[str, Any]) -> Grounding | None:
    """`specquant.documents`: a collection's name, or true for every collection, to answer from the server
    user's documents (runtime.documents.grounding); `documents_top`: how many passages (1-20, default 4). With
    no `documents_top`, a collection that fits the context goes in whole; with one, passages always."""
    which = ext.get("documents")
    top = ext.get("documents_top")
    if which is None or which is False:
        if top is not None:
            raise ApiError(400, "specquant.documents_top needs specquant.documents", "specquant.documents_top")
        return None
    if not (which is True or (isinstance(which, str) and which.strip())):
        words = f"specquant.documents must be a collection's name or true, not {short(which)}"
        raise ApiError(400, words, "specquant.documents")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= MAX_TOP):
        words = f"specquant.documents_top must be an integer from 1 to {MAX_TOP}, not {short(top)}"
        raise ApiError(400, words, "specquant.documents_top")
    return Grounding(None if which is True else which, top or DEFAULT_TOP, whole=top is None)


def typed(obj: dict[str, Any], name: str, kind: type, param: str | None = None) -> Any:
    value = obj.get(name)
    if value is None:
        return None
    # bool is an int in Python, not in JSON: `"max_tokens": true` is a wrong type.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ApiError(400, f"{param or name} must be {_KIND_WORDS[kind]}, not {short(value)}", param or name)
    return value


_KIND_WORDS = {str: "a string", bool: "true or false", dict: "an object", int: "an integer", float: "a number"}


def integer(obj: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    value = typed(obj, name, int)
    if value is not None and not lo <= value <= hi:
        raise ApiError(400, f"{name}={value} is out of range: {lo} to {hi}", name)
    return value


def number(obj: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(400, f"{name} must be a number, not {short(value)}", name)
    if not lo <= value <= hi:
        raise ApiError(400, f"{name}={value} is out of range: {lo:g} to {hi:g}", name)
    return float(value)


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

