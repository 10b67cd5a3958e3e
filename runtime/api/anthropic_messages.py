"""Anthropic's Messages API as a dialect (runtime.api.dialects): `POST /v1/messages` answers a `message` whole,
or streams its events (`message_start`, a `ping`, per content block `content_block_start`, `_delta` and `_stop`,
then `message_delta` with the stop reason and usage, and `message_stop`); `POST /v1/messages/count_tokens`
answers `{"input_tokens"}`. The request is read in runtime.api.anthropic_request; errors take Anthropic's
shape in runtime.api.error_shapes.

A tool call streams as one `input_json_delta` with its whole input, sent once the call is complete, for the
reason chat completions sends each call whole (docs/api.md, "Tool calls"). A thinking model's thought is a
`thinking` block before the answer (`thinking_delta`s, then a `signature_delta`, as Anthropic streams it).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from runtime.api.anthropic_request import parse_count, parse_messages
from runtime.api.dialects import Event, named
from runtime.api.error_shapes import anthropic_body
from runtime.api.requests import ChatCall
from runtime.api.responses import ApiError, api_facts
from runtime.engine.answer import Chunk
from runtime.engine.options import ChatOptions
from runtime.engine.tools import CallDelta

STOP_REASONS = {"max_tokens": "max_tokens", "length": "model_context_window_exceeded"}
PING = named({"type": "ping"})  # Anthropic's keep-alive event


def new_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def tool_use(call: CallDelta) -> dict[str, Any]:
    """A call as a `tool_use` block; its id in Anthropic's form (`toolu_…`)."""
    call_id = "toolu_" + (call.id or "").removeprefix("call_")
    return {"type": "tool_use", "id": call_id, "name": call.name or "", "input": json.loads(call.arguments)}


def stop_reason(last: Chunk, called: bool, stops: tuple[str, ...]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence). Which stop sequence ended the answer is known only when there was one:
    the engine reports that one was reached, not which."""
    reason = last.stats.stop_reason or ""
    if reason == "stop":
        return "stop_sequence", stops[0] if len(stops) == 1 else None
    if reason in STOP_REASONS:
        return STOP_REASONS[reason], None
    return ("tool_use" if called else "end_turn"), None


def signature(thought: str) -> str:
    """A thinking block's `signature`, which Anthropic's SDK expects and clients send back with the block.
    Nothing here is secret or checked: a digest of the thought, so the same thought has the same signature."""
    return "sq-" + hashlib.sha256(thought.encode("utf-8", errors="surrogatepass")).hexdigest()


def usage(last: Chunk) -> dict[str, int]:
    return {"input_tokens": last.stats.prompt_tokens, "output_tokens": last.stats.tokens}


class Messages:
    """`POST /v1/messages`."""

    prompt = "messages"
    ping = PING

    def parse(self, body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
        return parse_messages(body, base, n_ctx)

    def whole(self, model: str, call: ChatCall, chunks: list[Chunk]) -> dict[str, Any]:
        text = "".join(c.text for c in chunks)
        calls = [tool_use(d) for c in chunks for d in c.calls]
        content = ([{"type": "text", "text": text}] if text or not calls else []) + calls
        thought = "".join(c.thinking for c in chunks)
        if thought:
            content.insert(0, {"type": "thinking", "thinking": thought, "signature": signature(thought)})
        last = chunks[-1]
        reason, sequence = stop_reason(last, bool(calls), call.options.stop)
        return {
            "id": new_id(), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence, "usage": usage(last), "specquant": api_facts(last),
        }  # fmt: skip

    def stream(self, model: str, call: ChatCall) -> MessageStream:
        return MessageStream(model, call)


class MessageStream:
    """A streamed message: a text block opened at the first text and closed before a call's block; each call a
    block of its own; an answer with neither still gets one empty text block, as a whole one does."""

    def __init__(self, model: str, call: ChatCall) -> None:
        self.id, self.model, self.stops = new_id(), model, call.options.stop
        self.blocks = 0  # blocks opened so far
        self.text_open = False
        self.thought: list[str] | None = None  # the open thinking block's text so far
        self.called = False

    def start(self, prompt_tokens: int | None) -> list[Event]:
        # Sent before the prompt is read, its length may not be known yet: message_delta's usage tells it.
        message = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens or 0, "output_tokens": 0},
        }  # fmt: skip
        return [named({"type": "message_start", "message": message}), dict(PING)]

    def piece(self, chunk: Chunk) -> list[Event]:
        events = []
        if chunk.thinking:
            if self.thought is None:
                events.append(self._open({"type": "thinking", "thinking": "", "signature": ""}))
                self.thought = []
            self.thought.append(chunk.thinking)
            delta = {"type": "thinking_delta", "thinking": chunk.thinking}
            events.append(named({"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}))
        if (chunk.text or chunk.calls or chunk.done) and self.thought is not None:
            events += self._close_thought()
        if chunk.text:
            if not self.text_open:
                events.append(self._open({"type": "text", "text": ""}))
                self.text_open = True
            delta = {"type": "text_delta", "text": chunk.text}
            events.append(named({"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}))
        for call in chunk.calls:
            events += self._close_text()
            block = tool_use(call)
            events.append(self._open(block | {"input": {}}))
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
            events.append(named({"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}))
            events.append(named({"type": "content_block_stop", "index": self.blocks - 1}))
            self.called = True
        return events

    def end(self, last: Chunk) -> list[Event]:
        events = self._close_text()
        if not self.blocks:
            events = [self._open({"type": "text", "text": ""}), named({"type": "content_block_stop", "index": 0})]
        reason, sequence = stop_reason(last, self.called, self.stops)
        delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                 "usage": usage(last), "specquant": api_facts(last)}
        return [*events, named(delta), named({"type": "message_stop"})]

    def failure(self, error: ApiError) -> list[Event]:
        return [named(anthropic_body(error))]

    def _open(self, block: dict[str, Any]) -> Event:
        self.blocks += 1
        return named({"type": "content_block_start", "index": self.blocks - 1, "content_block": block})

    def _close_thought(self) -> list[Event]:
        """The thinking block's signature and its end: the answer begins."""
        delta = {"type": "signature_delta", "signature": signature("".join(self.thought or ()))}
        self.thought = None
        return [named({"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}),
                named({"type": "content_block_stop", "index": self.blocks - 1})]

    def _close_text(self) -> list[Event]:
        if not self.text_open:
            return []
        self.text_open = False
        return [named({"type": "content_block_stop", "index": self.blocks - 1})]


class CountTokens:
    """`POST /v1/messages/count_tokens`: the prompt's tokens, counted by building it (a one-token answer)."""

    prompt = "messages"
    ping = None

    def parse(self, body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
        return parse_count(body, base, n_ctx)

    def whole(self, model: str, call: ChatCall, chunks: list[Chunk]) -> dict[str, Any]:
        return {"input_tokens": chunks[-1].stats.prompt_tokens}

    def stream(self, model: str, call: ChatCall) -> MessageStream:
        raise AssertionError("count_tokens never streams")  # parse_count leaves stream false


MESSAGES = Messages()
COUNT_TOKENS = CountTokens()
