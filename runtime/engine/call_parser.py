"""A streamed answer split into the text to show and the tool calls it makes (OpenAI's `delta.tool_calls`).

The grammar (runtime.engine.tools) fixes the calls' form, so the parser reads exactly that form; text that
does not follow it stays content. Where the vocabulary has the format's opener as a token of its own, only
that token opens a call: the answer's text stream shows it as `OPENER_MARK` (`CallParser.marks`), and the
opener's spelling, which a model may copy from a document, a message or a tool's result, is text. With a
`check` (runtime.engine.call_check), a complete call that fails it goes out as its text, not as a call. A
streamed answer's call that its opener token began streams its arguments as they come, its name checked first;
one that then fails (its check, or a cut) ends with a `CallDelta.problem`, never as a call.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.engine.call_formats import (
    GENERIC,
    ID_SLOT,
    LOOSE_LEAD,
    LOOSE_NAME,
    NAME_START,
    OPENER_MARK,
    CallFormat,
    call_text,
)

_LOOSE_TAIL = re.compile(r"[ \t\n]{0,20}\}([ \t\n]{0,20}\})?")
Check = Callable[[str, str], "str | None"]  # (name, arguments) -> why the call may not go out, or None
NameCheck = Callable[[str], "str | None"]  # name -> why no call of it may go out, or None


@dataclass(frozen=True)
class CallDelta:
    """A tool call, or a piece of one, in OpenAI's `delta.tool_calls` shape. Whole: its id, name and arguments
    in one piece, `done`. Streamed: a first piece with its id and name, then its arguments as they are written,
    the last `done` once the call is complete and passed its check; or, when it failed (its check, or the answer
    cut inside it), a last piece that says why (`problem`): what went out of it is no call."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    done: bool = True  # the call is complete (and checked) with this piece
    problem: str | None = None


class CallParser:
    """Feeds on the answer's text; returns the content to show and the tool calls completed so far.

    The grammar fixes the calls' form, so this reads exactly that form; text that does not follow it (no
    grammar: `choice: none`) stays content. A call goes out once it is complete: an answer cut at the token
    limit inside a call (`final` before its end) drops that call, so no client can take a half-written call,
    or its arguments repaired into valid JSON, for one the model made.

    `opener_token`: the opener's token in the model's vocabulary (None: the vocabulary spells it). The answer's
    text stream shows that token as `OPENER_MARK` (`marks`), and only the mark opens a call: the opener's
    spelling is text. `check`: a complete call that fails it goes out as its text (`call_text`), in its place
    among the content; without one every complete call goes out (the tool loop checks its calls itself).
    `named` (with a `check`; a streamed answer): a call the opener's token began, of a tool `named` passes,
    goes out in pieces as its arguments are written. It can no longer become text: if it fails `check`, or the
    answer ends inside it, its last piece is a `problem` and the parser reads nothing more (the answer failed).
    """

    def __init__(self, syntax: CallFormat = GENERIC, calls_only: bool = False, opener_token: int | None = None,
                 check: Check | None = None, named: NameCheck | None = None) -> None:
        self.syntax = syntax
        self.marks = {opener_token: OPENER_MARK} if opener_token is not None and syntax.opener else {}
        self.check = check
        self.named = named if check is not None else None
        self.out: list[CallDelta] = []  # the pieces of calls this feed sends
        self.failed = False  # a streamed call failed: the answer ends there
        self.sent = 0  # calls sent out (the index of the next): a call that fails the check is text
        self.shown = False  # some content went out
        # tool_choice required or a function: the answer is calls alone, so what a cut leaves of a call's opener
        # is its wrapper, not content (under auto it may be the model's own text).
        self.calls_only = calls_only
        self.shape = syntax if syntax.anchored else None  # anchored: where the answer's first call starts
        self.head = _head(syntax)
        self.buffer = ""
        self.calls = 0
        self.text = False  # an anchored answer began as text, so it is all content
        self.started = False  # the start (a bare call or not) is decided
        self._begin_call()
        self.in_call = False

    def feed(self, text: str, final: bool = False) -> tuple[str, list[CallDelta]]:
        if self.failed:
            return "", []
        self.buffer += text
        if not self.started and not self._start(final):
            return "", []
        self.out = []
        content = self._anchored(final) if self.shape is not None else self._wrapped(final)
        self.shown = self.shown or bool(content)
        # A mark is no text: where one is left in content (never under the grammar), it reads as its spelling.
        return content.replace(OPENER_MARK, self.syntax.opener), self.out

    def _opener(self, shape: CallFormat) -> str:
        """What opens a call of `shape` in the text: the mark of the opener's token, or its spelling."""
        return OPENER_MARK if self.marks and shape.opener else shape.opener

    def _checked(self, delta: CallDelta, content: str) -> str:
        """Send the complete call if it passes the check; the content, with the call's text after it if not (a
        streamed call that fails ends the answer instead)."""
        problem = self.check(delta.name or "", delta.arguments) if self.check is not None else None
        if problem is None:
            self.sent += 1
            rest = CallDelta(delta.index, arguments=delta.arguments[self.streamed :])  # a streamed call's end
            self.out.append(rest if self.streaming else delta)
            return content
        if self.streaming:
            self._fail(problem)
            return content
        text = call_text(delta.name or "", delta.arguments, self.shape or self.syntax, delta.id or "")
        return f"{content}\n{text}" if content or self.shown else text

    def _start(self, final: bool) -> bool:
        """Decide, once the answer's start is known, whether it is a bare call (Hermes's untagged form)."""
        if self.syntax.anchored or not self.syntax.bare or self.calls_only:
            self.started = True
            return True
        if re.match(LOOSE_LEAD, self.buffer):
            self.shape, self.head = self.syntax.bare_format, _head(self.syntax.bare_format)
        elif _may_lead(self.buffer) and not final:
            return False  # may still become a call
        self.started = True
        return True

    # --- a call after the model's text, each in its wrapper (Hermes) ---
    def _wrapped(self, final: bool) -> str:
        content = ""
        while True:
            if not self.in_call:
                found, content = self._content(content, final)
                if not found:
                    break
                self._begin_call()
            delta = self._call(final)
            if delta is None:
                break
            content = self._checked(delta, content)
            self.in_call = False
        if final:  # cut off inside a call (or before its name): nothing to call
            self._drop()
        return content

    def _content(self, content: str, final: bool) -> tuple[bool, str]:
        """Move text before a call into `content`; whether a call starts at the buffer's start now."""
        opener = self._opener(self.syntax)
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
    def _anchored(self, final: bool) -> str:
        shape = self.shape
        assert shape is not None
        refused = ""  # calls that failed the check, as text
        while not self.text:
            if not self.in_call:
                if self.calls and not shape.array:
                    self._skip(shape.closer)
                    self._skip(self._opener(shape))
                    if not self.buffer.startswith(shape.start):
                        break  # nothing follows a call but the end
                else:
                    state = self._block_start(final)
                    if state is None:
                        break
                    if not state:
                        self.text = True
                        break
                self._begin_call()
            delta = self._call(final)
            if delta is None:
                break
            refused = self._checked(delta, refused)
            self.in_call = False
        if self.text:
            content, self.buffer = self.buffer, ""
            return refused + content
        if final:  # after the calls only the end (or a call cut off): nothing is content
            self._drop()
        return refused

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
        rest, opener = self.buffer, self._opener(shape)
        if opener and rest.startswith(opener):
            rest = rest[len(opener) :]
        elif opener and opener.startswith(rest) and rest and not final:
            return None
        elif opener and self.marks:  # the vocabulary has the opener's token, and the answer did not start with it
            return None if not rest and not final else False
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
    def _begin_call(self) -> None:
        self.in_call, self.id = True, f"call_{uuid.uuid4().hex[:24]}"
        self.name: str | None = None  # its name, once its head is read
        self.streaming: bool | None = None  # whether its arguments stream (None: not decided before they begin)
        self.streamed = 0  # characters of its arguments sent
        self.scan = (0, False, False)  # its arguments' scan: depth, in a string, after a backslash

    def _drop(self) -> None:
        """The answer ended: what is left of a call is none (a streamed one ends failed)."""
        if self.in_call and self.streaming:
            self._fail(f"the answer ended inside its call of {self.name} (its token limit or a stop sequence)")
        self.in_call, self.buffer = False, ""

    def _fail(self, problem: str) -> None:
        self.out.append(CallDelta(self.sent, problem=problem, done=False))
        self.failed, self.in_call, self.buffer = True, False, ""

    def _stream(self) -> None:
        """Send what is new of the current call's arguments, if they stream: decided at their first character,
        a call the opener's token began, of a tool `named` passes, with an object for arguments."""
        if self.streaming is None and self.buffer:
            shape = self.shape or self.syntax
            self.streaming = bool(self.named and self.marks and shape.opener and self.buffer.startswith("{")
                                  and self.named(self.name or "") is None)
            if self.streaming:
                self.out.append(CallDelta(self.sent, self.id, self.name, done=False))
        if not self.streaming:
            return
        (depth, quoted, escaped), at = self.scan, self.streamed
        while at < len(self.buffer) and not (depth == 0 and at > 0):  # up to the arguments' closing brace
            c, at = self.buffer[at], at + 1
            if escaped or quoted:
                escaped, quoted = not escaped and c == "\\", quoted and (escaped or c != '"')
            else:
                quoted, depth = c == '"', depth + (c in "{[") - (c in "}]")
        self.scan = (depth, quoted, escaped)
        if at > self.streamed:
            self.out.append(CallDelta(self.sent, arguments=self.buffer[self.streamed : at], done=False))
            self.streamed = at

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
            self._stream()
            return None
        end, after = found
        delta = CallDelta(self.sent, self.id, self.name, self.buffer[:end])
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


def _head(syntax: CallFormat) -> re.Pattern[str]:
    """A call's text up to its arguments, with the name as group 1."""
    if syntax.loose:
        return re.compile(LOOSE_LEAD + LOOSE_NAME.format(name="(?P<name>[A-Za-z0-9_-]{1,64})", key=syntax.key))
    start = syntax.start if not syntax.array else NAME_START
    return re.compile(re.escape(start) + r'(?P<name>[A-Za-z0-9_-]{1,64})", "' + re.escape(syntax.key) + '": ')


def _may_lead(text: str) -> bool:
    """Whether `text` may still grow into a bare call's start (`LOOSE_LEAD`)."""
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


def _visible(syntax: CallFormat) -> str:
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


def assemble_calls(deltas: Sequence[CallDelta]) -> list[dict[str, Any]]:
    """Whole calls in OpenAI's `message.tool_calls` shape from their streamed pieces."""
    calls: dict[int, dict[str, Any]] = {}
    failed = {d.index for d in deltas if d.problem is not None}  # streamed pieces of no call
    for d in deltas:
        if d.index in failed:
            continue
        new = {"id": d.id, "type": "function", "function": {"name": d.name, "arguments": ""}}
        call = calls.setdefault(d.index, new)
        call["function"]["arguments"] += d.arguments
    return [calls[i] for i in sorted(calls)]
