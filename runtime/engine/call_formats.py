"""How each model family writes a tool call, told from its chat template (as llama.cpp's server tells them).

* `hermes` (Qwen2.5, Qwen2.5-Coder, Qwen3, SmolLM3, Hermes 2/3):
  `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, or the bare `{"name": ..., "arguments": ...}`
  as the whole answer;
* `llama3` (Llama 3.1, 3.2, 3.3): `{"name": ..., "parameters": ...}` as the whole answer;
* `mistral` (Mistral 7B v0.3, Nemo, Small): `[TOOL_CALLS][{"name": ..., "arguments": ..., "id": "abcDEF123"}]`;
* `granite` (Granite 3.x): `<|tool_call|>[{"name": ..., "arguments": ...}]`;
* `phi4` (Phi-4-mini): `<|tool_call|>{"name": ..., "arguments": ...}<|/tool_call|>`;
* `generic` (any other template: Gemma 3, SmolLM2, ...): the Hermes form, taught by our own system prompt.

A call's opener may be a control token (`[TOOL_CALLS]`, Phi's `<|tool_call|>`), which the answer's text does not
show; such formats are `anchored`: the call is the answer's start or there is none. Hermes's calls may follow
the model's own text; its bare form (Qwen2.5-Coder answers so, pretty-printed and often in a ```json fence) is
recognised at the start only, as llama.cpp's trigger pattern for Hermes does.

Where the vocabulary has the opener as a token of its own (Qwen's `<tool_call>`, a user-defined token; Mistral's
`[TOOL_CALLS]`), only that token opens a call: the answer's text shows it as `OPENER_MARK`, which no decoded
text can hold, and text that merely spells the opener (copied from a document, a message, a tool's result)
stays text (runtime.engine.call_parser).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace

OPENER, CLOSER = "<tool_call>", "</tool_call>"
NAME_START = '{"name": "'
ID_SLOT = "\0"  # one letter or digit of a Mistral call id, in `CallFormat.tail`
ID_LENGTH = 9  # Mistral's templates refuse any other
# The opener token as the answer's text shows it to the call parser: a lone surrogate, which UTF-8 decoding
# (errors="replace") never yields, so no text the model writes, and no text it copies, can spell it.
OPENER_MARK = "\udfff"

# A bare call's start as the model lays it out (llama.cpp's Hermes trigger), in Lark's and in Python's regex.
# Its braces may be doubled: Qwen2.5-Coder's template shows the call as `{{"name": ..., "arguments": ...}}`
# (a Jinja escape its authors left in), and the model copies it (issue 50's run).
LOOSE_LEAD = r'(```(json)?\n)?[ \t\n]{0,20}\{([ \t\n]{0,20}\{)?[ \t\n]{0,20}"name"'
LOOSE_NAME = r'[ \t]{{0,4}}:[ \t]{{0,4}}"{name}"[ \t\n]{{0,20}},[ \t\n]{{0,20}}"{key}"[ \t]{{0,4}}:[ \t]{{0,4}}'


@dataclass(frozen=True)
class CallFormat:
    """How a model writes a call, and whether its chat template renders tools, calls and results itself."""

    own: bool  # the template renders the tools, past calls and results itself
    opener: str = OPENER  # "": nothing before the call's JSON (Llama 3.x)
    closer: str = CLOSER
    key: str = "arguments"  # the arguments' key in the call's JSON
    several: bool = True  # more than one call per answer
    name: str = "hermes"
    pad: str = "\n"  # between the opener and the JSON, and the JSON and the closer
    array: bool = False  # the calls are one JSON array after the opener
    call_id: bool = False  # each call ends with `"id": "<9 letters or digits>"`
    anchored: bool = False  # calls are the answer's start or there are none
    bare: bool = False  # the call's JSON without the wrapper, as the whole answer, is a call too
    loose: bool = False  # (a bare call) any whitespace in its JSON, and a ```json fence around it
    tools_in_system: bool = False  # the tools go into the system message's `tools` field (Phi-4-mini)
    calls_as_text: bool = False  # the template shows no `tool_calls`: past calls are written into the content

    @property
    def start(self) -> str:
        """The text of a call up to its name (for a wrapped call: after its opener)."""
        return (self.pad if self.opener and not self.array else "") + NAME_START

    def head(self, name: str) -> str:
        """The text of a call (after its opener) up to its arguments."""
        return f'{self.start}{name}", "{self.key}": '

    @property
    def tail(self) -> str:
        """The text of a call after its arguments (`ID_SLOT` stands for one character of an id)."""
        end = f', "id": "{ID_SLOT * ID_LENGTH}"}}' if self.call_id else "}"
        if self.array or not self.opener:
            return end
        return end + self.pad + self.closer

    @property
    def bare_format(self) -> CallFormat:
        """The unwrapped call at the answer's start, as a format of its own."""
        return CallFormat(own=self.own, opener="", closer="", key=self.key, several=False, name=self.name,
                          pad="", anchored=True, loose=True)

    def describe(self) -> str:
        """One line for `specquant info`."""
        if self.name == "generic":
            return "generic: the template has no call format we know; tools are taught by our own prompt"
        example = call_text("f", {}, self).replace("\n", "\\n").replace(ID_SLOT, "a")
        return f"{self.name}: {example}"


GENERIC = CallFormat(own=False, name="generic")
HERMES = CallFormat(own=True, bare=True)
LLAMA3 = CallFormat(own=True, opener="", closer="", key="parameters", several=False, name="llama3", pad="",
                    anchored=True)
MISTRAL = CallFormat(own=True, opener="[TOOL_CALLS]", closer="", name="mistral", pad="", array=True, call_id=True,
                     anchored=True)
GRANITE = CallFormat(own=True, opener="<|tool_call|>", closer="", name="granite", pad="", array=True, anchored=True)
PHI4 = CallFormat(own=True, opener="<|tool_call|>", closer="<|/tool_call|>", name="phi4", pad="", several=False,
                  anchored=True)
FORMATS = (HERMES, LLAMA3, MISTRAL, GRANITE, PHI4, GENERIC)


def detect(template: str | None) -> CallFormat:
    """The call format a chat template teaches (the markers each family's template writes), else GENERIC."""
    if not template:
        return GENERIC
    if "[TOOL_CALLS]" in template:
        return MISTRAL
    if "<|tool_call|>" in template and "<|start_of_role|>" in template:
        return GRANITE if "tool_calls" in template else replace(GRANITE, calls_as_text=True)
    if "<|tool|>" in template and "<|assistant|>" in template:
        # Phi-4-mini: llama.cpp's template renders `tools` itself; the model's own reads them from the system
        # message's `tools` field.
        return PHI4 if "tools is defined" in template else replace(PHI4, own=False, tools_in_system=True)
    if "tools" not in template:
        return GENERIC
    if OPENER in template:  # SmolLM3's template teaches the form but shows past calls only as their text
        return HERMES if "tool_calls" in template else replace(HERMES, calls_as_text=True)
    if '"parameters": ' in template or "<|python_tag|>" in template:
        return LLAMA3
    return GENERIC


def call_text(name: str, arguments: object, f: CallFormat = GENERIC, call_id: str = "") -> str:
    """One call as the model writes it (arguments as a JSON text or an object)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    tail = f.tail.replace(ID_SLOT * ID_LENGTH, short_id(call_id or name))
    call = f"{f.head(name)}{args}{tail}"
    return f"{f.opener}[{call}]" if f.array else f"{f.opener}{call}"


def short_id(call_id: str) -> str:
    """A call id as Mistral's templates require it: 9 letters or digits, the same for the same id."""
    digest = hashlib.sha256(call_id.encode()).digest()
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return "".join(alphabet[b % len(alphabet)] for b in digest[:ID_LENGTH])
