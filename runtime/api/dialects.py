"""The API's dialects: each parses its request into one `ChatCall`, shapes a whole answer from the Engine's
Chunks, and shapes a stream as server-sent events (its opening events, events per Chunk, its end, and an error
that ends it early). The server answers every dialect the same way (runtime.api.answers); only these objects
know which endpoint they are. Chat and text completions are here; Anthropic's messages are in
runtime.api.anthropic_messages, OpenAI's responses in runtime.api.openai_responses.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from runtime.api import completions, responses
from runtime.api.requests import ChatCall, parse_chat
from runtime.api.responses import ApiError, usage_chunk
from runtime.engine.answer import Chunk
from runtime.engine.options import ChatOptions

Event = dict[str, str]  # one server-sent event: "data" (JSON text) and, where the dialect names events, "event"
DONE: Event = {"data": "[DONE]"}  # how OpenAI's chat and text streams end


def data(piece: dict[str, Any]) -> Event:
    """An unnamed event (OpenAI's chat and text completions)."""
    return {"data": json.dumps(piece)}


def named(piece: dict[str, Any]) -> Event:
    """An event named by its piece's `type` (Anthropic's messages, OpenAI's responses)."""
    return {"event": piece["type"], "data": json.dumps(piece)}


class StreamShape(Protocol):
    """One stream's events; it keeps the stream's id and whatever it must remember between Chunks."""

    def start(self, prompt_tokens: int | None) -> list[Event]:
        """The events that open the stream, sent as soon as it is accepted (`prompt_tokens`: the prompt's
        length, when the first Chunk has come already)."""
        ...

    def piece(self, chunk: Chunk) -> list[Event]:
        """The events for `chunk` (none when it carries nothing to send)."""
        ...

    def end(self, last: Chunk) -> list[Event]:
        """The finishing events, with the answer's facts."""
        ...

    def failure(self, error: ApiError) -> list[Event]:
        """The events that end a stream an error cut short (the status line has gone already)."""
        ...


class Dialect(Protocol):
    prompt: str  # the request's field that a prompt too long for the context is blamed on
    ping: Event | None  # the keep-alive event of its streams; None: an SSE comment (": keep-alive")

    def parse(self, body: Any, base: ChatOptions, n_ctx: int) -> ChatCall: ...

    def whole(self, model: str, call: ChatCall, chunks: list[Chunk]) -> dict[str, Any]:
        """The whole answer, from its Chunks (the last has done=True)."""
        ...

    def stream(self, model: str, call: ChatCall) -> StreamShape: ...


def _logprobs(call: ChatCall, chunks: list[Chunk]) -> list[Any] | None:
    return [lp for c in chunks for lp in c.logprobs] if call.options.logprobs is not None else None


class Chat:
    """`POST /v1/chat/completions`: `chat.completion`, or `chat.completion.chunk`s."""

    prompt = "messages"
    ping = None

    def parse(self, body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
        return parse_chat(body, base, n_ctx)

    def whole(self, model: str, call: ChatCall, chunks: list[Chunk]) -> dict[str, Any]:
        text = "".join(c.text for c in chunks)
        calls = [d for c in chunks for d in c.calls]
        thought = "".join(c.thinking for c in chunks)
        return responses.completion(
            responses.new_id("chatcmpl-"), model, text, chunks[-1], None, calls, _logprobs(call, chunks), thought
        )

    def stream(self, model: str, call: ChatCall) -> ChatStream:
        return ChatStream(model, call)


class ChatStream:
    """A streamed chat completion: the role first, then each Chunk's text, tool-call pieces and logprobs."""

    def __init__(self, model: str, call: ChatCall) -> None:
        self.id, self.created, self.model = responses.new_id("chatcmpl-"), int(time.time()), model
        self.logprobs = call.options.logprobs is not None
        self.include_usage = call.include_usage
        self.called = False  # a call was made: the answer finishes with "tool_calls"

    def start(self, prompt_tokens: int | None) -> list[Event]:
        return [data(responses.stream_chunk(self.id, self.model, self.created, {"role": "assistant", "content": ""}))]

    def piece(self, chunk: Chunk) -> list[Event]:
        delta: dict[str, Any] = {}
        if chunk.thinking:  # llama-server's and DeepSeek's delta for a thought
            delta["reasoning_content"] = chunk.thinking
        if chunk.text:
            delta["content"] = chunk.text
        pieces = responses.call_deltas(chunk.calls)
        if pieces:
            delta["tool_calls"] = pieces
            self.called = True
        lps = chunk.logprobs if self.logprobs and chunk.logprobs else None
        if not delta and not lps:
            return []
        return [data(responses.stream_chunk(self.id, self.model, self.created, delta, None, lps))]

    def end(self, last: Chunk) -> list[Event]:
        finish = responses.stream_chunk(self.id, self.model, self.created, {}, last, None, self.called)
        usage = [data(usage_chunk(finish, last))] if self.include_usage else []  # one more chunk: no choices
        return [data(finish), *usage, DONE]

    def failure(self, error: ApiError) -> list[Event]:
        return [data(error.body()), DONE]


class Text:
    """`POST /v1/completions`: `text_completion`, whole or in pieces."""

    prompt = "prompt"
    ping = None

    def parse(self, body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
        return completions.parse_completion(body, base, n_ctx)

    def whole(self, model: str, call: ChatCall, chunks: list[Chunk]) -> dict[str, Any]:
        text = "".join(c.text for c in chunks)
        logprobs = _logprobs(call, chunks)
        lp = None if logprobs is None else completions.text_logprobs(logprobs, len(call.messages[0]["content"]))
        return completions.text_completion(responses.new_id("cmpl-"), model, None, text, chunks[-1], lp)

    def stream(self, model: str, call: ChatCall) -> CompletionStream:
        return CompletionStream(model, call)


class CompletionStream:
    """A streamed text completion: each Chunk's text and logprobs (their offsets counted from the prompt's
    start, as OpenAI does)."""

    def __init__(self, model: str, call: ChatCall) -> None:
        self.id, self.created, self.model = responses.new_id("cmpl-"), int(time.time()), model
        self.logprobs = call.options.logprobs is not None
        self.include_usage = call.include_usage
        self.offset = len(call.messages[0]["content"])

    def start(self, prompt_tokens: int | None) -> list[Event]:
        return []

    def piece(self, chunk: Chunk) -> list[Event]:
        lps = None
        if self.logprobs and chunk.logprobs:
            lps = completions.text_logprobs(chunk.logprobs, self.offset)
            self.offset += sum(len(c.text) for c in chunk.logprobs)
        if not chunk.text and not lps:
            return []
        return [data(completions.text_completion(self.id, self.model, self.created, chunk.text, None, lps))]

    def end(self, last: Chunk) -> list[Event]:
        finish = completions.text_completion(self.id, self.model, self.created, "", last, streamed=True)
        usage = [data(usage_chunk(finish, last))] if self.include_usage else []
        return [data(finish), *usage, DONE]

    def failure(self, error: ApiError) -> list[Event]:
        return [data(error.body()), DONE]


CHAT: Dialect = Chat()
TEXT: Dialect = Text()
