"""Anthropic's Messages API as a dialect (runtime.api.dialects): `POST /v1/messages` answers a `message` whole,
or streams its events (`message_start`, a `ping`, per content block `content_block_start`, `_delta` and `_stop`,
then `message_delta` with the stop reason and usage, and `message_stop`); `POST /v1/messages/count_tokens`
answers `{"input_tokens"}`. The request is read in runtime.api.anthropic_request; errors take Anthropic's
shape in runtime.api.error_shapes.

A tool call's block streams its input as `input_json_delta`s as the model writes it, where its opener was the
model's own token, else as one delta once the call is complete; a call that fails after its block opened ends
the stream with an `error` event, its block never stopped (runtime.api.blocks; docs/api.md, "Tool calls"). A
thinking model's thought is a `thinking` block before the answer (`thinking_delta`s, then a `signature_delta`,
as Anthropic streams it).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from runtime.api.anthropic_request import parse_count, parse_messages
from runtime.api.blocks import BlockStream, Kind, layout
from runtime.api.dialects import Event, named
from runtime.api.error_shapes import anthropic_body
from runtime.api.requests import ChatCall
from runtime.api.responses import ApiError, api_facts, new_id
from runtime.engine.answer import Chunk
from runtime.engine.options import ChatOptions
from runtime.engine.tools import CallDelta

STOP_REASONS = {"max_tokens": "max_tokens", "length": "model_context_window_exceeded"}
PING = named({"type": "ping"})  # Anthropic's keep-alive event


def tool_use(call: CallDelta, whole: bool = True) -> dict[str, Any]:
    """A call as a `tool_use` block (its input empty where it is yet to stream); its id in Anthropic's form."""
    call_id = "toolu_" + (call.id or "").removeprefix("call_")
    given = json.loads(call.arguments) if whole else {}
    return {"type": "tool_use", "id": call_id, "name": call.name or "", "input": given}


def thinking(thought: str) -> dict[str, Any]:
    """A `thinking` block: signed once its thought is whole, empty as a stream opens it."""
    return {"type": "thinking", "thinking": thought, "signature": signature(thought) if thought else ""}


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


def anthropic_usage(last: Chunk) -> dict[str, int]:
    return {"input_tokens": last.stats.prompt_tokens, "output_tokens": last.stats.tokens}


class Messages:
    """`POST /v1/messages`."""

    prompt = "messages"
    ping = PING

    def parse(self, body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
        return parse_messages(body, base, n_ctx)

    def whole(self, model: str, call: ChatCall, chunks: list[Chunk]) -> dict[str, Any]:
        content = layout(chunks, thinking, lambda text: {"type": "text", "text": text}, tool_use)
        last = chunks[-1]
        reason, sequence = stop_reason(last, any(b["type"] == "tool_use" for b in content), call.options.stop)
        return {
            "id": new_id("msg_"), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence, "usage": anthropic_usage(last),
            "specquant": api_facts(last),
        }  # fmt: skip

    def stream(self, model: str, call: ChatCall) -> MessageStream:
        return MessageStream(model, call)


class MessageStream(BlockStream):
    """A streamed message: its blocks (runtime.api.blocks) as `content_block_start`, `_delta`s and `_stop`."""

    def __init__(self, model: str, call: ChatCall) -> None:
        super().__init__()
        self.id, self.model, self.stops = new_id("msg_"), model, call.options.stop

    def start(self, prompt_tokens: int | None) -> list[Event]:
        # Sent before the prompt is read, its length may not be known yet: message_delta's usage tells it.
        message = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens or 0, "output_tokens": 0},
        }  # fmt: skip
        return [named({"type": "message_start", "message": message}), dict(PING)]

    def opened(self, kind: Kind) -> list[Event]:
        if kind == "call":
            assert self.tool_call is not None
            block = tool_use(self.tool_call, whole=False)
        else:
            block = thinking("") if kind == "thought" else {"type": "text", "text": ""}
        return [named({"type": "content_block_start", "index": self.index, "content_block": block})]

    def added(self, kind: Kind, text: str) -> list[Event]:
        key = {"thought": "thinking", "text": "text", "call": "partial_json"}[kind]
        name = {"thought": "thinking_delta", "text": "text_delta", "call": "input_json_delta"}[kind]
        return [self._delta({"type": name, key: text})]

    def closed(self, kind: Kind) -> list[Event]:
        """A block's end; a thought's with its signature first."""
        events = []
        if kind == "thought":
            events.append(self._delta({"type": "signature_delta", "signature": signature(self.said)}))
        return [*events, named({"type": "content_block_stop", "index": self.index})]

    def end(self, last: Chunk) -> list[Event]:
        events = self.close_all()
        reason, sequence = stop_reason(last, self.tool_call is not None, self.stops)
        delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                 "usage": anthropic_usage(last), "specquant": api_facts(last)}
        return [*events, named(delta), named({"type": "message_stop"})]

    def failure(self, error: ApiError) -> list[Event]:
        return [named(anthropic_body(error))]

    def _delta(self, delta: dict[str, Any]) -> Event:
        return named({"type": "content_block_delta", "index": self.index, "delta": delta})


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
