"""An answer's prompt tokens: the chat through the GGUF's own chat template, fitted to the context by dropping
its oldest turns (or refused whole), or a completion's raw text."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from runtime.decode.grammar import markup_spellings
from runtime.decode.llama_backend import LlamaBackend
from runtime.engine import thinking
from runtime.engine.markup import chat_tokens
from runtime.engine.options import Message
from runtime.errors import Cancelled, ContextTooLong, UserError

# Renders a chat (with a template's tools section, or None) as prompt tokens for one parent.
Render = Callable[..., list[int]]


class ChatTemplates:
    """Renders chats through each model's own chat template (llama-cpp-python's Jinja), compiled once."""

    def __init__(self) -> None:
        self._formatters: dict[str, Any] = {}

    def render(
        self, parent: LlamaBackend, messages: Sequence[Message], tools: list[dict[str, Any]] | None = None,
        think: bool | None = None,
    ) -> list[int]:
        """The chat as prompt tokens; `tools` for a template with a tools section (runtime.engine.tools.prepare_tools),
        `think` as the template's `enable_thinking` where it reads one (None: the template's default)."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = parent.metadata().get("tokenizer.chat_template")
        syntax = thinking.syntax_for(template)
        messages = thinking.template_messages(list(messages), syntax)
        extra = {"enable_thinking": think} if think is not None and syntax is not None and syntax.switchable else {}
        if not template:
            def render(chat: list[Message], shown: list[dict[str, Any]] | None) -> str:
                return "".join(f"{m['role']}: {m['content']}\n" for m in chat) + "assistant: "
        else:
            formatter = self._formatters.get(template)
            if formatter is None:  # compiling a template takes milliseconds: once per model
                bos = parent.detokenize([parent.bos], special=True) if parent.bos >= 0 else ""
                eos = parent.detokenize([parent.eos], special=True) if parent.eos >= 0 else ""
                formatter = self._formatters[template] = Jinja2ChatFormatter(template, eos, bos)

            def render(chat: list[Message], shown: list[dict[str, Any]] | None) -> str:
                try:
                    return formatter(messages=chat, tools=shown, **extra).prompt
                except Exception as e:  # a template's own raise_exception, or a Jinja error
                    raise UserError(f"the model's chat template rejected this chat: {e}") from None

        # Only the template's own markup is special: `<|im_end|>` in what a message or a tool says stays text.
        text = functools.partial(parent.tokenize, add_bos=False, special=False)
        return chat_tokens(messages, render, text, markup_spellings(parent.path), tools)


def raw_prompt(parent: LlamaBackend, text: str, reserve: int) -> list[int]:
    """A completion's prompt: the text as it is (special tokens read as text), with the model's BOS."""
    tokens = parent.tokenize(text, add_bos=True, special=False)
    if not tokens:
        raise UserError("the prompt is empty")
    if len(tokens) > parent.n_ctx - reserve:
        raise too_long(len(tokens), parent, reserve)
    return tokens


def fit_context(
    render: Render, parent: LlamaBackend, messages: list[Message], reserve: int,
    cancel: threading.Event | None = None, tools: list[dict[str, Any]] | None = None, trim: bool = True,
    think: bool | None = None,
) -> tuple[list[int], int]:
    """Drop the oldest turns (never the system prompt, never the last message) until the prompt fits;
    without `trim`, a chat that does not fit is refused (ContextTooLong) whole.

    Linear in the chat's length, so a flood of messages cannot hold the engine: each turn is tokenized
    once, the turns to drop are found by running totals, and the chat is rendered again only to confirm
    (the template's own tokens per turn are estimated from the first render). Stop is honoured between
    turns."""
    budget = parent.n_ctx - reserve
    # `think` only where asked: a render that knows no thinking switch is called as before
    render = functools.partial(render, tools=tools, **({} if think is None else {"think": think}))
    tokens = render(parent, messages)
    if len(tokens) <= budget:
        return tokens, 0
    if not trim:
        fix = "shorten the chat, allow dropping its oldest turns (the API's specquant.trim)"
        raise too_long(len(tokens), parent, reserve, fix)
    first = 1 if messages and messages[0]["role"] == "system" else 0
    sizes = []
    for m in messages:
        if cancel is not None and cancel.is_set():
            raise Cancelled("stopped while fitting the chat into the context")
        sizes.append(len(parent.tokenize(m["content"], add_bos=False, special=False)))
    per_turn = max(0.0, (len(tokens) - sum(sizes)) / len(messages))  # the template's tokens around a turn
    excess, dropped = len(tokens) - budget, 0
    while excess > 0 and len(messages) - first - dropped > 1:
        excess -= sizes[first + dropped] + per_turn
        dropped += 1
    fits = _fitted(render, parent, messages, first, dropped, budget, cancel)
    while fits is not None and dropped > 0:  # the estimate dropped a turn too many: keep it after all
        fewer = _fitted(render, parent, messages, first, dropped - 1, budget, cancel)
        if fewer is None:
            break
        fits, dropped = fewer, dropped - 1
    while fits is None:  # the template's turns were longer than estimated: one more, rarely needed
        if len(messages) - first - dropped <= 1:
            raise too_long(len(render(parent, messages[:first] + messages[first + dropped :])), parent, reserve)
        dropped += 1
        fits = _fitted(render, parent, messages, first, dropped, budget, cancel)
    return fits, dropped


def _fitted(
    render: Render, parent: LlamaBackend, messages: list[Message], first: int, dropped: int, budget: int,
    cancel: threading.Event | None,
) -> list[int] | None:
    """The prompt without the `dropped` oldest turns after the first `first`, if it fits the budget."""
    if cancel is not None and cancel.is_set():
        raise Cancelled("stopped while fitting the chat into the context")
    tokens = render(parent, messages[:first] + messages[first + dropped :])
    return tokens if len(tokens) <= budget else None


def too_long(n_tokens: int, parent: LlamaBackend, reserve: int, fix: str = "shorten it") -> ContextTooLong:
    return ContextTooLong(
        f"the prompt is {n_tokens} tokens; the context holds {parent.n_ctx} with {reserve} kept for the answer: "
        f"{fix} or raise the context size"
    )


def routed_text(messages: Sequence[Message]) -> str:
    """What the router judges: the last message when it is the user's or a tool's result (the answer follows
    it), else the last user message (a chat ending with an assistant's or a system message), else the last."""
    if messages[-1]["role"] in ("user", "tool"):
        return messages[-1]["content"]
    users = [m for m in messages if m["role"] == "user"]
    return (users[-1] if users else messages[-1])["content"]
