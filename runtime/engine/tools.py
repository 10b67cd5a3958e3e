"""Tool calls (OpenAI's `tools` and `tool_choice`) as text a model writes and a grammar holds it to.

A model calls a tool in the form its chat template teaches: the Hermes form of Qwen2.5 (and many others),
one block per call,

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

or Llama 3.x's, one call that is the whole answer: `{"name": "get_weather", "parameters": {"city": "Paris"}}`.

* `syntax_for(template)`: which form, and whether the template renders tools itself (it has a `tools` section,
  as Qwen2.5's and Llama 3.x's have); else the tools go into the system prompt as `GENERIC_PROMPT` says, in
  the Hermes form (the demo's SmolLM2 template has no tools section), and past calls and results are
  written out as text.
* `prepare(messages, request, syntax)`: the chat and the tools as the template should see them.
* `call_grammar(request, opener, closer)`: the Lark grammar for the answer. Once a call starts, everything but
  the arguments is fixed (the wrapper, the tool's name where only one fits), so those tokens are forced, free
  drafts for the speculative loop; the arguments follow the tool's parameter schema. `auto` lets the model
  write text, and a call only after it (a lazy trigger, as llguidance's structural tags do); `required` and a
  named function start with the call.
* `CallParser`: splits the streamed answer into content and `CallDelta`s (OpenAI's `delta.tool_calls`), each
  call whole once it is complete: a call cut off at the token limit is dropped.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.decode.grammar import Grammar, Whitespace, lark_json
from runtime.engine.call_formats import (
    CLOSER,
    GENERIC,
    HERMES,
    ID_LENGTH,
    ID_SLOT,
    LLAMA3,
    NAME_START,
    OPENER,
    CallFormat,
    call_text,
    detect,
    short_id,
)

__all__ = ["CLOSER", "GENERIC", "HERMES", "LLAMA3", "OPENER", "CallSyntax", "call_text", "syntax_for"]

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for function names
CHOICES = ("auto", "none", "required")  # or a function's name

GENERIC_PROMPT = """You can call functions to help with the user's request. To call one, answer with this and \
nothing after it (one block per call):
<tool_call>
{{"name": <function-name>, "arguments": <arguments-json-object>}}
</tool_call>
A function's result comes back in <tool_response></tool_response> tags. The functions you can call:
<tools>
{tools}
</tools>"""
# Phi-4-mini reads its tools from the system message's `tools` field and is told the form of a call here.
PHI4_PROMPT = 'To use a tool, respond in this format: <|tool_call|>{"name": "foo", "arguments": {"a": 1}}<|/tool_call|>'


@dataclass(frozen=True)
class Tool:
    """One function a model may call: its name, what it does and its parameters' JSON schema."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False

    def as_openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolRequest:
    """The tools of one request and how they may be used: `choice` is auto, none, required or a tool's name."""

    tools: tuple[Tool, ...]
    choice: str = "auto"
    parallel: bool = True  # more than one call in an answer
    whitespace: Whitespace = "bounded"  # inside the arguments

    @property
    def callable(self) -> tuple[Tool, ...]:
        """The tools the answer may call."""
        if self.choice == "none":
            return ()
        if self.choice in CHOICES:
            return self.tools
        return tuple(t for t in self.tools if t.name == self.choice)


# Mistral's call ends with its id: `, "id": "abcDEF123"}` (as Lark terms)
ID_TAIL = json.dumps(', "id": "') + " CALL_ID " + json.dumps('"}')

CallSyntax = CallFormat  # the name the engine and the answer plan use
syntax_for = detect


def prepare(
    messages: Sequence[dict[str, Any]], request: ToolRequest, syntax: CallSyntax
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The chat and the `tools` argument for the template. With `choice: none` the tools are not shown (the
    model is not to call them); past calls and results are shown either way."""
    shown = [t.as_openai() for t in request.tools] if request.choice != "none" else []
    if syntax.own:
        out = []
        for m in messages:
            if m.get("tool_calls") and syntax.calls_as_text:
                m = {k: v for k, v in m.items() if k != "tool_calls"} | {"content": _said_and_calls(m, syntax)}
            elif m.get("tool_calls"):  # Qwen's template writes `arguments | tojson`: an object, not a JSON text
                calls = [_call_with_object(c, syntax) for c in m["tool_calls"]]
                m = {**m, "tool_calls": calls}
            if syntax.call_id and m.get("tool_call_id"):
                m = {**m, "tool_call_id": short_id(m["tool_call_id"])}
            out.append(m)
        return out, shown or None
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            out.append({"role": "assistant", "content": _said_and_calls(m, syntax)})
        elif m["role"] == "tool":
            text = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("tool_results"):  # one user turn holds consecutive results
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + text}
            else:
                out.append({"role": "user", "content": text, "tool_results": True})
        else:
            out.append(m)
    out = [{k: v for k, v in m.items() if k != "tool_results"} for m in out]
    if shown and syntax.tools_in_system:  # Phi-4-mini's own template renders this field
        system = out[0] if out and out[0]["role"] == "system" else {"role": "system", "content": ""}
        said = system["content"]
        system = {**system, "content": f"{said}\n{PHI4_PROMPT}" if said else PHI4_PROMPT,
                  "tools": json.dumps([t["function"] for t in shown], ensure_ascii=False)}
        out = [system, *out[1:]] if out and out[0]["role"] == "system" else [system, *out]
    elif shown:
        prompt = GENERIC_PROMPT.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in shown))
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out, None


def _said_and_calls(message: dict[str, Any], syntax: CallSyntax) -> str:
    """An assistant message's text and then its calls, as the model writes them."""
    calls = "\n".join(call_text(c["function"]["name"], c["function"]["arguments"], syntax, c.get("id", ""))
                      for c in message["tool_calls"])
    said = message.get("content") or ""
    return f"{said}\n{calls}" if said else calls


def _call_with_object(call: dict[str, Any], syntax: CallSyntax) -> dict[str, Any]:
    function = dict(call["function"])
    with contextlib.suppress(TypeError, ValueError):  # checked by the API; else rendered as it is
        function["arguments"] = json.loads(function["arguments"])
    out = {**call, "function": function}
    if syntax.call_id:  # Mistral's templates refuse any id but 9 letters or digits
        out["id"] = short_id(call.get("id") or function.get("name", ""))
    return out


def call_grammar(request: ToolRequest, syntax: CallSyntax, opener: str = "", closer: str = "") -> Grammar | None:
    """The answer's grammar, or None when no tool may be called (`call_lark`'s text, compiled)."""
    source = call_lark(request, syntax, opener, closer)
    return None if source is None else Grammar.from_lark(source)


def call_lark(request: ToolRequest, syntax: CallSyntax, opener: str = "", closer: str = "") -> str | None:
    """The answer's grammar in llguidance's Lark, or None when no tool may be called. `opener`/`closer` are
    Lark terms for the syntax's opener and closer: a special token (`<[151657]>`) or a quoted string.

    Under `auto` the model may write text instead; a call starts at its trigger and is held to its form from
    there on. A quoted opener needs a lazy trigger to tell the start of a call from the model's own text; a
    special token does not (no text can spell it). An anchored format's calls, and Hermes's bare call, come
    first or not at all: text is then whatever does not start like one."""
    tools = request.callable
    if not tools:
        return None
    opener = opener if syntax.opener and opener else json.dumps(syntax.opener)
    closer = closer if syntax.closer and closer else json.dumps(syntax.closer)
    lines = ["%llguidance {}"]
    tail = '"}"'
    if syntax.call_id:
        tail = ID_TAIL
        lines.append(f"CALL_ID: /[a-zA-Z0-9]{{{ID_LENGTH}}}/")
    for i, tool in enumerate(tools):
        lines.append(f"fn_{i}: {json.dumps(syntax.head(tool.name).lstrip())} args_{i} {tail}")
        lines.append(f"args_{i}: %json {lark_json(tool.parameters, tool.strict, request.whitespace)}")
    call = " | ".join(f"fn_{i}" for i in range(len(tools)))
    lines.append(f"call: {call}")
    many = request.parallel and syntax.several
    if syntax.anchored:
        if syntax.array:
            block = '"[" call (", " call)* "]"' if many else '"[" call "]"'
        else:
            block = "call" + (f" {closer}" if syntax.closer else "")
        lead = f"{opener} " if syntax.opener else ""
        lines.append(f"start: {lead}{block}" if request.choice != "auto" else f"start: TEXT | {lead}{block}")
        # Text must not start like a call, nor with the opener's spelling where the vocabulary lacks its token
        # (the lexer takes the longest match: text that could go on past the opener would swallow it).
        start = _regex(("[" if syntax.array else "") + NAME_START[:7])
        if syntax.opener and opener.startswith('"'):
            start = f"({_regex(syntax.opener)}|{start})"
        lines.append(f"TEXT: /(.|\\n)*/ & ~/{start}(.|\\n)*/")
        return "\n".join(lines)
    pad = json.dumps(syntax.pad)
    lines.append(f"body: {pad} call {pad} {closer}")
    # After the last call, a line break may come before the end: models trained on "\n<tool_call>" between
    # calls often write one, and it must not force another call.
    more = f'("\\n" {opener} body)* "\\n"?' if many else '"\\n"?'
    bare = ""
    if syntax.bare:  # Qwen2.5-Coder's call, untagged, as the whole answer: any layout, maybe in a ```json fence
        for i, tool in enumerate(tools):
            lines.append(f"BARE_{i}: /{_LOOSE_LEAD}{_LOOSE_NAME.format(name=_regex(tool.name), key=syntax.key)}/")
            lines.append(f"bare_{i}: BARE_{i} args_{i} BARE_END")
        lines.append(r"BARE_END: /[ \t\n]{0,20}\}([ \t\n]{0,20}\})?(\n```)?\n?/")
        bare = " | " + " | ".join(f"bare_{i}" for i in range(len(tools)))
    if request.choice != "auto":
        lines.append(f"start: {opener} body {more}")
    elif opener.startswith('"'):  # lazy: the text ends at the first opener, which starts the call
        lines.append(f"head[lazy]: TEXT {opener}")
        lines.append(f"start: TEXT | head body {more}{bare}")
    else:
        lines.append(f"start: TEXT | TEXT {opener} body {more}{bare}")
    text = r"TEXT: /(.|\n)*/"
    lines.append(text + (f" & ~/{_LOOSE_LEAD}(.|\\n)*/" if syntax.bare else ""))
    return "\n".join(lines)


# A bare call's start as the model lays it out (llama.cpp's Hermes trigger), in Lark's and in Python's regex.
# Its braces may be doubled: Qwen2.5-Coder's template shows the call as `{{"name": ..., "arguments": ...}}`
# (a Jinja escape its authors left in), and the model copies it (issue 50's run).
_LOOSE_LEAD = r'(```(json)?\n)?[ \t\n]{0,20}\{([ \t\n]{0,20}\{)?[ \t\n]{0,20}"name"'
_LOOSE_NAME = r'[ \t]{{0,4}}:[ \t]{{0,4}}"{name}"[ \t\n]{{0,20}},[ \t\n]{{0,20}}"{key}"[ \t]{{0,4}}:[ \t]{{0,4}}'
_LOOSE_TAIL = re.compile(r"[ \t\n]{0,20}\}([ \t\n]{0,20}\})?")


def _regex(text: str) -> str:
    """`text` as a literal inside a Lark `/.../` regex."""
    return "".join("\\" + c if c in r"\.^$|?*+()[]{}/" else c for c in text)


# --- the answer, split -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallDelta:
    """A tool call in OpenAI's `delta.tool_calls` shape: the parser sends each call whole, once it is complete
    (its id, name and arguments in one piece); `assemble` also joins calls sent in several pieces."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class CallParser:
    """Feeds on the answer's text; returns the content to show and the tool calls completed so far.

    The grammar fixes the calls' form, so this reads exactly that form; text that does not follow it (no
    grammar: `choice: none`) stays content. A call goes out only once it is complete, never in pieces: an
    answer cut at the token limit inside a call (`final` before its end) drops that call, so no client can
    take a half-written call, or its arguments repaired into valid JSON, for one the model made. A control
    token (`[TOOL_CALLS]`) is not in the text; its spelling is skipped where a vocabulary lacks the token.
    """

    def __init__(self, syntax: CallSyntax = GENERIC, calls_only: bool = False) -> None:
        self.syntax = syntax
        # tool_choice required or a function: the answer is calls alone, so what a cut leaves of a call's opener
        # is its wrapper, not content (under auto it may be the model's own text).
        self.calls_only = calls_only
        self.shape = syntax if syntax.anchored else None  # anchored: where the answer's first call starts
        self.head = _head(syntax)
        self.buffer = ""
        self.calls = 0
        self.text = False  # an anchored answer began as text, so it is all content
        self.started = False  # the start (a bare call or not) is decided
        self.in_call = False
        self.name: str | None = None  # the current call's name, once its head is read

    def feed(self, text: str, final: bool = False) -> tuple[str, list[CallDelta]]:
        self.buffer += text
        if not self.started and not self._start(final):
            return "", []
        if self.shape is not None:
            return self._anchored(final)
        return self._wrapped(final)

    def _start(self, final: bool) -> bool:
        """Decide, once the answer's start is known, whether it is a bare call (Hermes's untagged form)."""
        if self.syntax.anchored or not self.syntax.bare or self.calls_only:
            self.started = True
            return True
        if re.match(_LOOSE_LEAD, self.buffer):
            self.shape, self.head = self.syntax.bare_format, _head(self.syntax.bare_format)
        elif _may_lead(self.buffer) and not final:
            return False  # may still become a call
        self.started = True
        return True

    # --- a call after the model's text, each in its wrapper (Hermes) ---
    def _wrapped(self, final: bool) -> tuple[str, list[CallDelta]]:
        content, deltas = "", []
        while True:
            if not self.in_call:
                found, content = self._content(content, final)
                if not found:
                    break
                self.in_call, self.name = True, None
            delta = self._call(final)
            if delta is None:
                break
            deltas.append(delta)
            self.in_call = False
        if final and self.in_call:  # cut off inside a call (or before its name): nothing to call
            self.in_call, self.buffer = False, ""
        return content, deltas

    def _content(self, content: str, final: bool) -> tuple[bool, str]:
        """Move text before a call into `content`; whether a call starts at the buffer's start now."""
        opener = self.syntax.opener
        at = self.buffer.find(opener)
        if at >= 0:
            before = self.buffer[:at]
            content += before.rstrip("\n") if self.calls == 0 else before.strip("\n")
            self.buffer = self.buffer[at + len(opener) :]
            return True, content
        cut = len(self.buffer) - (0 if final else _partial_suffix(self.buffer, opener))
        while not final and cut > 0 and self.buffer[cut - 1] == "\n":  # may come before a call
            cut -= 1
        piece = self.buffer[:cut]
        if (self.calls or self.calls_only) and final:  # only a break, or a call cut off, can follow a call
            piece = piece.strip("\n")
            piece = "" if opener.startswith(piece) else piece
        self.buffer = self.buffer[cut:]
        return False, content + piece

    # --- calls that are the answer (Llama 3.x, Mistral, Granite, Phi-4-mini, Hermes's bare call) ---
    def _anchored(self, final: bool) -> tuple[str, list[CallDelta]]:
        shape = self.shape
        assert shape is not None
        deltas = []
        while not self.text:
            if not self.in_call:
                if self.calls and not shape.array:
                    self._skip(shape.closer)
                    self._skip(shape.opener)  # a vocabulary without the token spells it
                    if not self.buffer.startswith(shape.start):
                        break  # nothing follows a call but the end
                else:
                    state = self._block_start(final)
                    if state is None:
                        break
                    if not state:
                        self.text = True
                        break
                self.in_call, self.name = True, None
            delta = self._call(final)
            if delta is None:
                break
            deltas.append(delta)
            self.in_call = False
        if self.text:
            content, self.buffer = self.buffer, ""
            return content, deltas
        if final:  # after the calls only the end (or a call cut off): nothing is content
            self.in_call, self.buffer = False, ""
        return "", deltas

    def _block_start(self, final: bool) -> bool | None:
        """At the start of the answer or after a call in an array: whether a call follows (None: not known yet)."""
        shape = self.shape
        assert shape is not None
        if self.calls:  # inside an array: ", " and the next call, or "]" and the end
            for word, more in ((", ", True), ("]", False)):
                if self.buffer.startswith(word):
                    self.buffer = self.buffer[len(word) :]
                    if not more:
                        self.buffer = self.buffer.strip()
                        return None if not self.buffer else False
                    return True
            return None
        if shape.loose:  # Hermes's bare call: `_start` found its lead
            return True
        rest = self.buffer
        if shape.opener and rest.startswith(shape.opener):
            rest = rest[len(shape.opener) :]
        elif shape.opener and shape.opener.startswith(rest) and rest and not final:
            return None
        start = ("[" if shape.array else "") + shape.start
        if rest.startswith(start):
            self.buffer = rest[1:] if shape.array else rest
            return True
        if start.startswith(rest) and not final:
            return None
        if self.calls_only:  # cut off before the call's name: its wrapper, not content
            self.buffer = ""
            return None
        return False

    def _skip(self, word: str) -> None:
        if word and self.buffer.startswith(word):
            self.buffer = self.buffer[len(word) :]

    # --- one call ---
    def _call(self, final: bool) -> CallDelta | None:
        """The current call once it is complete (its head, arguments and tail are in the buffer)."""
        if self.name is None:
            m = self.head.match(self.buffer)
            if m is None:
                return None
            rest = self.buffer[m.end() :]
            if self.shape is not None and self.shape.loose:  # the head's last spaces may still grow
                if not rest.lstrip(" \t\n"):
                    return None
                rest = rest.lstrip(" \t\n")
            self.name, self.buffer = m.group("name"), rest
        found = self._end_of_call(self.buffer, final)
        if found is None:
            return None
        end, after = found
        delta = CallDelta(self.calls, f"call_{uuid.uuid4().hex[:24]}", self.name, self.buffer[:end])
        self.buffer = self.buffer[after:]
        self.calls += 1
        return delta

    def _end_of_call(self, args: str, final: bool) -> tuple[int, int] | None:
        """Where the current call's arguments end in `args` and where its tail ends, once both are there. At the
        answer's end a tail cut short counts: the grammar fixes every character after the arguments (but an
        id's letters, which only have to be there)."""
        try:
            end = _DECODER.raw_decode(args)[1]
        except ValueError:
            return None
        if end == len(args) and args[-1:].isdigit() and not final:
            return None  # a number may go on ("12" of "123")
        rest = args[end:]
        if self.shape is not None and self.shape.loose:
            m = _LOOSE_TAIL.match(rest)
            if m is not None:
                return end, end + m.end()
            return (end, len(args)) if final and not rest.strip() else None
        tail = _visible(self.shape or self.syntax)
        n = _tail_match(rest, tail)
        if n is not None:
            return end, end + n
        if final and _tail_prefix(rest, tail) and not (self.syntax.call_id and len(rest) < len(tail) - 2):
            return end, len(args)
        return None


_DECODER = json.JSONDecoder()


def _head(syntax: CallSyntax) -> re.Pattern[str]:
    """A call's text up to its arguments, with the name as group 1."""
    if syntax.loose:
        return re.compile(_LOOSE_LEAD + _LOOSE_NAME.format(name="(?P<name>[A-Za-z0-9_-]{1,64})", key=syntax.key))
    start = syntax.start if not syntax.array else NAME_START
    return re.compile(re.escape(start) + r'(?P<name>[A-Za-z0-9_-]{1,64})", "' + re.escape(syntax.key) + '": ')


def _may_lead(text: str) -> bool:
    """Whether `text` may still grow into a bare call's start (`_LOOSE_LEAD`)."""
    for fence in ("```json\n", "```\n"):
        if text.startswith(fence):
            text = text[len(fence) :]
            break
        if fence.startswith(text):
            return True
    else:
        if text.startswith("`"):
            return False
    text = text.lstrip(" \t\n")
    if not text:
        return True
    if not text.startswith("{"):
        return False
    text = text[1:].lstrip(" \t\n")
    if text.startswith("{"):  # the doubled brace of Qwen2.5-Coder's template
        text = text[1:].lstrip(" \t\n")
    return '"name"'.startswith(text)


def _visible(syntax: CallSyntax) -> str:
    """A call's tail as the text shows it: an anchored format's closer may be a control token (not shown)."""
    return syntax.tail.removesuffix(syntax.closer) if syntax.anchored and syntax.closer else syntax.tail


def _tail_match(text: str, tail: str) -> int | None:
    """The length of `tail` at the start of `text` (`ID_SLOT`: any letter or digit), if it is all there."""
    if len(text) < len(tail) or not _tail_prefix(text[: len(tail)], tail):
        return None
    return len(tail)


def _tail_prefix(text: str, tail: str) -> bool:
    """Whether `text` is a start of `tail` (or all of it)."""
    if len(text) > len(tail):
        return False
    return all(t == c or (t == ID_SLOT and c.isascii() and c.isalnum()) for t, c in zip(tail, text, strict=False))


def _partial_suffix(text: str, word: str) -> int:
    """The length of the longest end of `text` that starts `word` (held back: it may become `word`)."""
    for n in range(min(len(word) - 1, len(text)), 0, -1):
        if word.startswith(text[-n:]):
            return n
    return 0


def assemble(deltas: Sequence[CallDelta]) -> list[dict[str, Any]]:
    """Whole calls in OpenAI's `message.tool_calls` shape from their streamed pieces."""
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        new = {"id": d.id, "type": "function", "function": {"name": d.name, "arguments": ""}}
        call = calls.setdefault(d.index, new)
        call["function"]["arguments"] += d.arguments
    return [calls[i] for i in sorted(calls)]
