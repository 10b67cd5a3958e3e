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
* `CallParser` (runtime.engine.call_parser): splits the streamed answer into content and `CallDelta`s (OpenAI's
  `delta.tool_calls`), each call whole once it is complete: a call cut off at the token limit is dropped.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.decode.grammar import Grammar, Whitespace, lark_json
from runtime.engine.call_formats import (
    CLOSER,
    GENERIC,
    HERMES,
    ID_LENGTH,
    LLAMA3,
    LOOSE_LEAD,
    LOOSE_NAME,
    NAME_START,
    OPENER,
    CallFormat,
    call_text,
    detect,
    short_id,
)
from runtime.engine.call_parser import CallDelta, CallParser, assemble_calls

__all__ = ["CLOSER", "GENERIC", "HERMES", "LLAMA3", "OPENER", "CallDelta", "CallParser", "CallSyntax", "assemble_calls",
           "call_text", "syntax_for"]

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
    # A call that fails runtime.engine.call_check goes out as its text (the API); False: as a call, for a
    # caller that refuses it itself and tells the model why (the tool loop).
    refused_as_text: bool = True
    # The answer is streamed to an API client: a checked call that its format's own opener token began streams
    # its arguments as they are written (runtime.engine.call_parser); False: each call goes out whole.
    streamed: bool = False

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


def prepare_tools(
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
            lines.append(f"BARE_{i}: /{LOOSE_LEAD}{LOOSE_NAME.format(name=_regex(tool.name), key=syntax.key)}/")
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
    lines.append(text + (f" & ~/{LOOSE_LEAD}(.|\\n)*/" if syntax.bare else ""))
    return "\n".join(lines)


def _regex(text: str) -> str:
    """`text` as a literal inside a Lark `/.../` regex."""
    return "".join("\\" + c if c in r"\.^$|?*+()[]{}/" else c for c in text)
