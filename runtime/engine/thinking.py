"""Thinking models: thoughts apart from the answer. Qwen3, SmolLM3, DeepSeek-R1's distills and Phi-4-reasoning
write `<think>...</think>` before their answer; their chat templates say so (they drop or re-render earlier
turns' thoughts), and some open the thought in the generation prompt itself.

The split is on the text stream, after detokenizing (the decode loop and its speculation never see it):
`ThoughtSplitter` turns streamed text into thought and answer pieces, holding back only what may still be a
marker. The budget closes a thought through the token stream (`runtime.decode.drafts.budget_close`), so the
model reads its own `</think>` and answers after it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from runtime.errors import UserError

# (open, close) markers, in the order a template is searched for them.
MARKERS: tuple[tuple[str, str], ...] = (("<think>", "</think>"),)
# OpenAI's reasoning_effort as a thinking budget in tokens; None: the default budget (`default_budget`), 0 off.
EFFORT_BUDGETS: dict[str, int | None] = {"none": 0, "minimal": 128, "low": 512, "medium": 2048, "high": None}


@dataclass(frozen=True)
class ThinkSyntax:
    """How a model's template marks thoughts, and what the template does with them."""

    open: str = "<think>"
    close: str = "</think>"
    switchable: bool = False  # the template reads `enable_thinking` (Qwen3, SmolLM3): thinking on/off per chat
    reads_reasoning: bool = False  # the template reads an assistant message's `reasoning_content`


def syntax_for(template: str | None) -> ThinkSyntax | None:
    """The thought markers a chat template knows, or None for a model that does not think."""
    if not template:
        return None
    for open_, close in MARKERS:
        if close in template:
            return ThinkSyntax(open_, close, "enable_thinking" in template, "reasoning_content" in template)
    return None


def opens_thought(prompt_text: str, syntax: ThinkSyntax) -> bool:
    """Whether the rendered prompt already opened a thought (its generation prompt ends in `<think>`), so the
    answer's first token is thinking."""
    tail = prompt_text.rstrip()
    return tail.endswith(syntax.open)


def budget_for(effort: str | int | None) -> int | None:
    """A budget from the API's `reasoning_effort` (low, medium, high, minimal, none) or a token count."""
    if effort is None or (isinstance(effort, int) and not isinstance(effort, bool)):
        if effort is not None and effort < 0:
            raise UserError(f"thinking budget {effort} must be 0 (no thinking) or more tokens")
        return effort
    if isinstance(effort, str) and effort in EFFORT_BUDGETS:
        return EFFORT_BUDGETS[effort]
    raise UserError(f"unknown reasoning_effort {effort!r}: choose {', '.join(EFFORT_BUDGETS)} or a token count")


def default_thought_budget(room: int) -> int:
    """The thought's budget when none is asked: three quarters of the tokens the answer may use (the lesser
    of max_tokens and the context left), so a model that never closes its thought still gets to answer."""
    return max(1, room * 3 // 4)


def template_messages(messages: list[dict[str, Any]], syntax: ThinkSyntax | None) -> list[dict[str, Any]]:
    """The chat as the template should see it: earlier turns' thoughts passed as `reasoning_content` where
    the template reads it (it decides what to keep), dropped otherwise."""
    if syntax is not None and syntax.reads_reasoning:
        return messages
    if not any("reasoning_content" in m for m in messages):
        return messages
    return [{k: v for k, v in m.items() if k != "reasoning_content"} for m in messages]


class Split(NamedTuple):
    """What a piece of streamed text became: thought and answer text, each with its per-character flags."""

    thought: str = ""
    thought_flags: tuple[bool, ...] = ()
    answer: str = ""
    answer_flags: tuple[bool, ...] = ()


_START, _THINKING, _AFTER, _ANSWER = "start", "thinking", "after", "answer"


class ThoughtSplitter:
    """Streamed text in, thought and answer out. Whitespace around a thought and before the answer is dropped
    (llama.cpp's server trims `reasoning_content` the same way); a marker split across pieces is held until
    it is known. The same text cut anywhere gives the same thought and answer."""

    def __init__(self, syntax: ThinkSyntax, opened: bool = False) -> None:
        self.syntax = syntax
        self.state = _THINKING if opened else _START
        self.held = ""
        self.flags: tuple[bool, ...] = ()
        self.thought_begun = False  # a thought's leading whitespace is dropped until it has begun

    @property
    def thinking(self) -> bool:
        """Whether text arriving now is (or may still be) thought."""
        return self.state == _THINKING or (self.state == _START and bool(self.held))

    @property
    def closed(self) -> bool:
        """Whether a thought was closed (or none was opened): what follows is answer."""
        return self.state in (_AFTER, _ANSWER)

    def feed(self, text: str, flags: tuple[bool, ...] | None = None) -> Split:
        """The thought and answer text safe to show now."""
        self.held += text
        self.flags += flags if flags is not None else (False,) * len(text)
        return self._advance(final=False)

    def finish(self) -> Split:
        """What is left at the end of the answer: held text, as whatever it was inside."""
        return self._advance(final=True)

    def _take(self, n: int) -> tuple[str, tuple[bool, ...]]:
        text, flags = self.held[:n], self.flags[:n]
        self.held, self.flags = self.held[n:], self.flags[n:]
        return text, flags

    def _advance(self, final: bool) -> Split:
        thought, t_flags, answer, a_flags = "", (), "", ()
        while self.held:
            if self.state == _START:
                lead = len(self.held) - len(self.held.lstrip())
                rest = self.held[lead:]
                if rest.startswith(self.syntax.open):
                    self._take(lead + len(self.syntax.open))
                    self.state = _THINKING
                    continue
                if not final and self.syntax.open.startswith(rest):  # may still open (or is all whitespace)
                    break
                self.state = _ANSWER
            elif self.state == _THINKING:
                if not self.thought_begun:
                    lead = len(self.held) - len(self.held.lstrip())
                    self._take(lead)
                    if not self.held:
                        break
                    self.thought_begun = True
                at = self.held.find(self.syntax.close)
                if at >= 0:
                    body = self.held[:at].rstrip()
                    text, flags = self._take(len(body))
                    thought, t_flags = thought + text, t_flags + flags
                    self._take(at - len(body) + len(self.syntax.close))
                    self.state = _AFTER
                    continue
                keep = 0 if final else _held_back(self.held, self.syntax.close)
                # Trailing whitespace waits: it is dropped if the close follows (or the answer ends).
                body = self.held[: len(self.held) - keep].rstrip()
                text, flags = self._take(len(body))
                thought, t_flags = thought + text, t_flags + flags
                if final:
                    self._take(len(self.held))
                break
            elif self.state == _AFTER:
                lead = len(self.held) - len(self.held.lstrip())
                self._take(lead)
                if self.held:
                    self.state = _ANSWER
            else:
                text, flags = self._take(len(self.held))
                answer, a_flags = answer + text, a_flags + flags
        return Split(thought, t_flags, answer, a_flags)


def _held_back(text: str, close: str) -> int:
    """How many characters at the end of `text` may be the start of `close`."""
    for n in range(min(len(close) - 1, len(text)), 0, -1):
        if close.startswith(text[-n:]):
            return n
    return 0


def split_text(text: str, syntax: ThinkSyntax, opened: bool = False) -> tuple[str, str]:
    """A whole answer's (thought, answer): a stored answer's text, or a test's reference."""
    splitter = ThoughtSplitter(syntax, opened)
    first, last = splitter.feed(text), splitter.finish()
    return first.thought + last.thought, first.answer + last.answer


@dataclass(frozen=True)
class ThoughtPlan:
    """One answer's thinking: the markers, whether the prompt opened the thought, the budget in tokens and the
    close that the budget forces (its tokens)."""

    syntax: ThinkSyntax
    opened: bool
    budget: int
    close: tuple[int, ...]
