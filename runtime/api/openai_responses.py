"""OpenAI's Responses API as a dialect (runtime.api.dialects): `POST /v1/responses` answers a `response` whole,
or streams its events (`response.created`, `response.in_progress`; per output item `response.output_item.added`,
for a message `response.content_part.added`, `response.output_text.delta`s and their `.done`s, for a function
call `response.function_call_arguments.delta` and `.done`; `response.output_item.done`; then
`response.completed`, or `response.incomplete` when the token limit cut the answer). The request is read in
runtime.api.responses_request. Each event has its `sequence_number`, as OpenAI's do.

A function call streams as one arguments delta with its whole arguments, sent once the call is complete, for
the reason chat completions sends each call whole (docs/api.md, "Tool calls"). A thinking model's thought is a
`reasoning` item before the answer (`response.reasoning_text.delta`s and `.done`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from runtime.api.dialects import Event, named
from runtime.api.requests import ChatCall
from runtime.api.responses import ApiError, api_facts
from runtime.api.responses_request import ResponsesCall, parse_responses
from runtime.engine.answer import Chunk
from runtime.engine.options import ChatOptions
from runtime.engine.tools import CallDelta

CUT = ("max_tokens", "length")  # stop reasons of an answer the token limit (or the context) cut short


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    content = [part] if status == "completed" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, thought: str, status: str = "completed") -> dict[str, Any]:
    """A thought as a `reasoning` item: its text as `reasoning_text` content, no summary."""
    content = [{"type": "reasoning_text", "text": thought}] if status == "completed" else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def call_item(call: CallDelta, request: ChatCall) -> dict[str, Any]:
    """A call as a `function_call` item; one of a namespace tool's functions names its namespace too."""
    item = {"type": "function_call", "id": new_id("fc"), "call_id": call.id, "name": call.name,
            "arguments": call.arguments, "status": "completed"}
    namespace = request.namespaces.get(call.name or "") if isinstance(request, ResponsesCall) else None
    return item | {"namespace": namespace} if namespace else item


def response(
    response_id: str, created: int, model: str, call: ChatCall, output: list[dict[str, Any]], last: Chunk | None
) -> dict[str, Any]:
    """The `response` object: in progress (no `last` yet), completed, or incomplete when the limit cut it."""
    echo = call.echo if isinstance(call, ResponsesCall) else {}
    out: dict[str, Any] = {
        "id": response_id, "object": "response", "created_at": created, "model": model, "output": output,
        "status": "in_progress", "error": None, "incomplete_details": None, "previous_response_id": None,
        "usage": None, **echo,
    }  # fmt: skip
    if last is not None:
        s = last.stats
        cut = s.stop_reason in CUT
        out["status"] = "incomplete" if cut else "completed"
        out["incomplete_details"] = {"reason": "max_output_tokens"} if cut else None
        out["usage"] = {
            "input_tokens": s.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},  # not told: PRIVATE_FACTS
            "output_tokens": s.tokens, "output_tokens_details": {"reasoning_tokens": s.thinking_tokens},
            "total_tokens": s.prompt_tokens + s.tokens,
        }  # fmt: skip
        out["specquant"] = api_facts(last)
    return out


class Responses:
    """`POST /v1/responses`."""

    prompt = "input"
    ping = None

    def parse(self, body: Any, base: ChatOptions, n_ctx: int) -> ChatCall:
        return parse_responses(body, base, n_ctx)

    def whole(self, model: str, call: ChatCall, chunks: list[Chunk]) -> dict[str, Any]:
        text = "".join(c.text for c in chunks)
        calls = [call_item(d, call) for c in chunks for d in c.calls]
        output = ([message_item(new_id("msg"), text)] if text or not calls else []) + calls
        thought = "".join(c.thinking for c in chunks)
        if thought:
            output.insert(0, reasoning_item(new_id("rs"), thought))
        return response(new_id("resp"), int(time.time()), model, call, output, chunks[-1])

    def stream(self, model: str, call: ChatCall) -> ResponseStream:
        return ResponseStream(model, call)


class ResponseStream:
    """A streamed response: a message item opened at the first text and closed before a call's item; each call
    an item of its own; an answer with neither still gets one empty message, as a whole one does."""

    def __init__(self, model: str, call: ChatCall) -> None:
        self.id, self.created, self.model, self.call = new_id("resp"), int(time.time()), model, call
        self.sequence = 0
        self.output: list[dict[str, Any]] = []  # the items done
        self.message: str | None = None  # the open message item's id
        self.text = ""
        self.reasoning: str | None = None  # the open reasoning item's id
        self.thought = ""

    def start(self, prompt_tokens: int | None) -> list[Event]:
        head = response(self.id, self.created, self.model, self.call, [], None)
        return [self._event("response.created", response=head), self._event("response.in_progress", response=head)]

    def piece(self, chunk: Chunk) -> list[Event]:
        events = []
        if chunk.thinking:
            if self.reasoning is None:
                self.reasoning, self.thought = new_id("rs"), ""
                item = reasoning_item(self.reasoning, "", "in_progress")
                events.append(self._event("response.output_item.added", output_index=len(self.output), item=item))
            self.thought += chunk.thinking
            events.append(self._event("response.reasoning_text.delta", item_id=self.reasoning,
                                      output_index=len(self.output), content_index=0, delta=chunk.thinking))
        if chunk.text or chunk.calls or chunk.done:
            events += self._close_reasoning()
        if chunk.text:
            if self.message is None:
                events += self._open_message()
            self.text += chunk.text
            events.append(self._event("response.output_text.delta", **self._at(), delta=chunk.text, logprobs=[]))
        for call in chunk.calls:
            events += self._close_message()
            item, index = call_item(call, self.call), len(self.output)
            at, arguments = {"item_id": item["id"], "output_index": index}, item["arguments"]
            added = item | {"arguments": "", "status": "in_progress"}
            events += [
                self._event("response.output_item.added", output_index=index, item=added),
                self._event("response.function_call_arguments.delta", **at, delta=arguments),
                self._event("response.function_call_arguments.done", **at, name=item["name"], arguments=arguments),
                self._event("response.output_item.done", output_index=index, item=item),
            ]
            self.output.append(item)
        return events

    def end(self, last: Chunk) -> list[Event]:
        events = [] if self.output or self.message else self._open_message()
        events += self._close_message()
        done = response(self.id, self.created, self.model, self.call, self.output, last)
        return [*events, self._event(f"response.{done['status']}", response=done)]

    def failure(self, error: ApiError) -> list[Event]:
        return [self._event("error", code=error.code or error.kind, message=error.message, param=error.param)]

    def _event(self, kind: str, **fields: Any) -> Event:
        self.sequence += 1
        return named({"type": kind, "sequence_number": self.sequence - 1, **fields})

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.message, "output_index": len(self.output), "content_index": 0}

    def _open_message(self) -> list[Event]:
        self.message, self.text = new_id("msg"), ""
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            self._event("response.output_item.added", output_index=len(self.output),
                        item=message_item(self.message, "", "in_progress")),
            self._event("response.content_part.added", **self._at(), part=part),
        ]

    def _close_reasoning(self) -> list[Event]:
        if self.reasoning is None:
            return []
        item = reasoning_item(self.reasoning, self.thought)
        at = {"item_id": self.reasoning, "output_index": len(self.output)}
        events = [
            self._event("response.reasoning_text.done", **at, content_index=0, text=self.thought),
            self._event("response.output_item.done", output_index=len(self.output), item=item),
        ]
        self.output.append(item)
        self.reasoning = None
        return events

    def _close_message(self) -> list[Event]:
        if self.message is None:
            return []
        item = message_item(self.message, self.text)
        events = [
            self._event("response.output_text.done", **self._at(), text=self.text, logprobs=[]),
            self._event("response.content_part.done", **self._at(), part=item["content"][0]),
            self._event("response.output_item.done", output_index=len(self.output), item=item),
        ]
        self.output.append(item)
        self.message = None
        return events


RESPONSES = Responses()
