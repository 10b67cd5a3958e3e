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

OPENER, CLOSER = "<tool_call>", "</tool_call>"
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


@dataclass(frozen=True)
class CallSyntax:
    """How a model writes a call, and whether its chat template renders tools, calls and results itself."""

    own: bool
    opener: str = OPENER  # "": the call is the whole answer (Llama 3.x)
    closer: str = CLOSER
    key: str = "arguments"  # the arguments' key in the call's JSON
    several: bool = True  # more than one call per answer

    @property
    def start(self) -> str:
        """The text of a call up to its name."""
        return ("\n" if self.opener else "") + '{"name": "'

    def head(self, name: str) -> str:
        """The text of a call (after its opener) up to its arguments."""
        return f'{self.start}{name}", "{self.key}": '

    @property
    def tail(self) -> str:
        """The text of a call after its arguments."""
        return "}\n" + self.closer if self.opener else "}"


HERMES = CallSyntax(own=True)
GENERIC = CallSyntax(own=False)
LLAMA3 = CallSyntax(own=True, opener="", closer="", key="parameters", several=False)


def syntax_for(template: str | None) -> CallSyntax:
    """A template with a `tools` section renders them itself: in the Hermes form where it speaks `<tool_call>`
    (Qwen2.5), in Llama 3.x's where it asks for `"parameters"`. Any other gets the generic prompt."""
    if template and "tools" in template:
        if OPENER in template:
            return HERMES
        if '"parameters": ' in template:
            return LLAMA3
    return GENERIC


def call_text(name: str, arguments: Any, syntax: CallSyntax = GENERIC) -> str:
    """One call as the model writes it (arguments as a JSON text or an object)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f"{syntax.opener}{syntax.head(name)}{args}{syntax.tail}"


def prepare(
    messages: Sequence[dict[str, Any]], request: ToolRequest, syntax: CallSyntax
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The chat and the `tools` argument for the template. With `choice: none` the tools are not shown (the
    model is not to call them); past calls and results are shown either way."""
    shown = [t.as_openai() for t in request.tools] if request.choice != "none" else []
    if syntax.own:
        out = []
        for m in messages:
            if m.get("tool_calls"):  # Qwen's template writes `arguments | tojson`: an object, not a JSON text
                calls = [_call_with_object(c) for c in m["tool_calls"]]
                m = {**m, "tool_calls": calls}
            out.append(m)
        return out, shown or None
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = "\n".join(call_text(c["function"]["name"], c["function"]["arguments"], syntax)
                              for c in m["tool_calls"])
            said = m.get("content") or ""
            out.append({"role": "assistant", "content": f"{said}\n{calls}" if said else calls})
        elif m["role"] == "tool":
            text = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("tool_results"):  # one user turn holds consecutive results
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + text}
            else:
                out.append({"role": "user", "content": text, "tool_results": True})
        else:
            out.append(m)
    out = [{k: v for k, v in m.items() if k != "tool_results"} for m in out]
    if shown:
        prompt = GENERIC_PROMPT.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in shown))
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out, None


def _call_with_object(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call["function"])
    with contextlib.suppress(TypeError, ValueError):  # checked by the API; else rendered as it is
        function["arguments"] = json.loads(function["arguments"])
    return {**call, "function": function}


def call_grammar(request: ToolRequest, syntax: CallSyntax, opener: str = "", closer: str = "") -> Grammar | None:
    """The answer's grammar, or None when no tool may be called (`call_lark`'s text, compiled)."""
    source = call_lark(request, syntax, opener, closer)
    return None if source is None else Grammar.from_lark(source)


def call_lark(request: ToolRequest, syntax: CallSyntax, opener: str = "", closer: str = "") -> str | None:
    """The answer's grammar in llguidance's Lark, or None when no tool may be called. `opener`/`closer` are
    Lark terms for the syntax's opener and closer: a special token (`<[151657]>`) or a quoted string. A quoted
    opener needs a lazy trigger under `auto` to tell the start of a call from the model's own text; a special
    token does not (no text can spell it); without an opener, text is whatever does not start like a call."""
    tools = request.callable
    if not tools:
        return None
    lines = ["%llguidance {}"]
    for i, tool in enumerate(tools):
        lines.append(f'fn_{i}: {json.dumps(syntax.head(tool.name).lstrip())} args_{i} "}}"')
        lines.append(f"args_{i}: %json {lark_json(tool.parameters, tool.strict, request.whitespace)}")
    call = " | ".join(f"fn_{i}" for i in range(len(tools)))
    if not syntax.opener:
        lines.append(f"call: {call}")
        lines.append("start: call" if request.choice != "auto" else "start: TEXT | call")
        lines.append(r'TEXT: /(.|\n)*/ & ~/\{"name"(.|\n)*/')
        return "\n".join(lines)
    lines.append(f'body: "\\n" ({call}) "\\n" {closer}')
    # After the last call, a line break may come before the end: models trained on "\n<tool_call>" between
    # calls often write one, and it must not force another call.
    more = f'("\\n" {opener} body)* "\\n"?' if request.parallel and syntax.several else '"\\n"?'
    if request.choice != "auto":
        lines.append(f"start: {opener} body {more}")
    elif opener.startswith('"'):  # lazy: the text ends at the first opener, which starts the call
        lines.append(f"head[lazy]: TEXT {opener}")
        lines.append(f"start: TEXT | head body {more}")
    else:
        lines.append(f"start: TEXT | TEXT {opener} body {more}")
    lines.append(r"TEXT: /(.|\n)*/")
    return "\n".join(lines)


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

    The grammar fixes the calls' wrapper, so this reads exactly that form; text that does not follow it (no
    grammar: `choice: none`) stays content. A call goes out only once it is complete, never in pieces: an
    answer cut at the token limit inside a call (`final` before its end) drops that call, so no client can
    take a half-written call, or its arguments repaired into valid JSON, for one the model made.
    """

    def __init__(self, syntax: CallSyntax = GENERIC, calls_only: bool = False) -> None:
        self.syntax = syntax
        # tool_choice required or a function: the answer is calls alone, so what a cut leaves of a call's opener
        # is its wrapper, not content (under auto it may be the model's own text).
        self.calls_only = calls_only
        self.head = re.compile(re.escape(syntax.start) + r'([A-Za-z0-9_-]{1,64})", "' + syntax.key + '": ')
        self.buffer = ""
        self.calls = 0
        self.text = False  # without an opener: the answer began as text, so it is all content
        self.in_call = False
        self.name: str | None = None  # the current call's name, once its head is read

    def feed(self, text: str, final: bool = False) -> tuple[str, list[CallDelta]]:
        self.buffer += text
        content, deltas = "", []
        while True:
            if not self.in_call:
                found, content = self._content(content, final)
                if not found:
                    break
                self.in_call, self.name = True, None
            if self.name is None:
                m = self.head.match(self.buffer)
                if m is None:
                    break
                self.name, self.buffer = m.group(1), self.buffer[m.end() :]
            end = self._end_of_call(self.buffer, final)
            if end is None:
                break
            deltas.append(CallDelta(self.calls, f"call_{uuid.uuid4().hex[:24]}", self.name, self.buffer[:end]))
            self.buffer = self.buffer[end + len(self.syntax.tail) :]
            self.calls += 1
            self.in_call = False
        if final and self.in_call:  # cut off inside a call (or before its name): nothing to call
            self.in_call, self.buffer = False, ""
        return content, deltas

    def _content(self, content: str, final: bool) -> tuple[bool, str]:
        """Move text before a call into `content`; whether a call starts at the buffer's start now."""
        opener = self.syntax.opener
        if not opener:  # the call is the whole answer, or there is none
            start = self.syntax.start
            if not self.text and not self.calls:
                if self.buffer.startswith(start):
                    return True, content
                if start.startswith(self.buffer) and not final:
                    return False, content  # may still become a call
                if self.calls_only:  # cut off before the call's name
                    self.buffer = ""
                    return False, content
                self.text = True
            if self.calls:  # nothing follows a call but the end
                self.buffer = self.buffer.strip()
            content, self.buffer = content + self.buffer, ""
            return False, content
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

    def _end_of_call(self, args: str, final: bool) -> int | None:
        """Where the current call's arguments end in `args` (its tail follows), if they are complete JSON. At
        the answer's end a tail cut short counts: the grammar fixes every character after the arguments."""
        tail = self.syntax.tail
        if self.syntax.opener:
            start = 0
            while (at := args.find(tail, start)) >= 0:
                if _is_json(args[:at]):
                    return at
                start = at + 1
        if final:
            for at in range(max(0, len(args) - len(tail)), len(args) + 1):
                # A number at the very end may have been cut short ("12" of "123"): not complete.
                open_number = at == len(args) and args[-1:].isdigit()
                if tail.startswith(args[at:]) and not open_number and _is_json(args[:at]):
                    return at
        return None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


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
